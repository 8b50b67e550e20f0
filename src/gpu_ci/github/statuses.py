"""The "GPU CI" commit status as a state machine: an event plus what is known → a status.

A skipped GPU job counts as success, so a label-gated GPU job cannot be a required check on
its own. A commit status can: this module decides which status the pull request's head
shows after each event, as pure functions of plain data (webhook payloads, the gate's
outputs, the jobs and statuses GitHub lists). ``commands/gpu_status.py`` fetches and posts.

The states, on the head commit::

    opened / reopened / synchronize        -> pending  "Waiting for approval: ..."
    labeled, the gate approves             -> pending  "Approved by @x for abc123: GPU run queued"
    labeled, the gate refuses              -> pending  "Not approved: <the gate's reason>"
    workflow_run requested (approved sha)  -> pending  "Approved by @x: GPU run in progress" + link
    workflow_run completed (approved sha)  -> success / failure / error, with the run's link
    gpu-watchdog cancelled the run         -> error    "No GPU runner picked this up in N min"

Trust: the ``pull_request`` workflow of a fork runs the fork's copy of the workflow file, so
its jobs, names and conclusions are controlled by the pull request's author. A result of
such a run is therefore only posted for a commit that carries an approval status, which only
the privileged ``pull_request_target`` workflow (the base branch's file) writes. The status
then means: a maintainer approved exactly this commit, and a GPU run of it passed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpu_ci.errors import UsageError
from gpu_ci.github.jobs import named_gpu_jobs, queue_seconds

#: GitHub rejects longer descriptions with 422 "description is too long (maximum is 140
#: characters)".
DESCRIPTION_LIMIT = 140
#: GitHub's REST documentation states no limit for ``context``. We chose 255, the width of
#: GitHub's other short name fields, and refuse longer ones up front rather than fail at
#: the POST after the decision (an assumption, stated in the README).
CONTEXT_LIMIT = 255
PR_EVENTS = ("pull_request", "pull_request_target")
FAILED = ("failure", "timed_out", "startup_failure", "action_required", "stale")

_APPROVER = re.compile(r"[Aa]pproved by @([A-Za-z0-9][A-Za-z0-9-]*(?:\[bot\])?)")
WATCHDOG_PREFIX = "No GPU runner picked this up"
NEW_HEAD = ("opened", "reopened", "ready_for_review", "synchronize")
FINAL = ("success", "failure", "error")
#: The wordings of :func:`waiting`: posted after a push, they revoke older approvals.
_REVOKED = ("Waiting for approval", "New push (was ")


@dataclass(frozen=True)
class Status:
    """One ``POST /repos/{owner}/{repo}/statuses/{sha}``."""

    sha: str
    state: str
    description: str
    target_url: str = ""

    def body(self, context: str) -> dict[str, str]:
        out = {"state": self.state, "context": context, "description": self.description}
        if self.target_url:
            out["target_url"] = self.target_url
        return out


@dataclass(frozen=True)
class StatusConfig:
    context: str
    label: str
    min_permission: str
    gpu_jobs: tuple[str, ...]


@dataclass(frozen=True)
class Outcome:
    """A status to post, or None with the reason nothing is posted."""

    status: Status | None
    note: str
    need_siblings: bool = False
    """Ask again with ``siblings``: the other runs of the workflow for this commit."""


def validate_context(value: str) -> str:
    context = value.strip()
    if not context:
        raise UsageError("input 'context' is empty: name the commit status, e.g. 'GPU CI' "
                         "(the name a branch protection rule requires).")
    if len(context) > CONTEXT_LIMIT:
        raise UsageError(f"input 'context' is {len(context)} characters long; GitHub accepts "
                         f"at most {CONTEXT_LIMIT}: shorten it.")
    if "\n" in context or "\r" in context:
        raise UsageError("input 'context' spans several lines: give one line.")
    return context


def make_config(context: str, label: str, min_permission: str,
                gpu_jobs: Sequence[str]) -> StatusConfig:
    if not label.strip():
        raise UsageError("input 'label' is empty: name the label that approves a GPU run.")
    if not gpu_jobs:
        raise UsageError("input 'gpu-jobs' is empty: name the GPU job(s) of the GPU workflow "
                         "(the job's name as the Actions page shows it, e.g. 'tests').")
    return StatusConfig(validate_context(context), label.strip(),
                        min_permission.strip() or "write", tuple(gpu_jobs))


def clip(text: str, limit: int = DESCRIPTION_LIMIT) -> str:
    """One line of at most ``limit`` characters (GitHub refuses longer descriptions)."""
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 1].rstrip() + "…"


def short(sha: str) -> str:
    return sha[:12]


# -- pull_request_target: opened, reopened, synchronize, labeled ----------------------------


def waiting(config: StatusConfig, sha: str, action: str, before: str = "",
            target_url: str = "") -> Status:
    who = f"someone with {config.min_permission} access or higher"
    if action == "synchronize":
        text = (f"Waiting for approval of the new head {short(sha)}: approvals do not carry "
                f"over pushes; {who} applies '{config.label}'.")
        if before:
            text = (f"New push (was {short(before)}): waiting for approval; {who} applies "
                    f"'{config.label}'.")
    else:
        text = f"Waiting for approval: {who} applies the '{config.label}' label."
    return Status(sha, "pending", clip(text), target_url)


def after_gate(config: StatusConfig, sha: str, run: bool, reason: str, labeled_by: str,
               target_url: str = "") -> Status:
    """The label was applied: the gate (run in the privileged workflow) approved or refused."""
    if run:
        if not labeled_by:
            raise UsageError("input 'labeled-by' is empty although 'gate-run' is true: pass "
                             "the gate's labeled-by output.")
        text = f"Approved by @{labeled_by} for {short(sha)}: GPU run queued."
        return Status(sha, "pending", clip(text), target_url)
    return Status(sha, "pending", clip(f"Not approved: {reason or 'the gate refused.'}"),
                  target_url)


def for_pull_event(config: StatusConfig, action: str, payload: Mapping[str, Any],
                   gate_run: bool | None, gate_reason: str, labeled_by: str,
                   server_url: str, repository: str,
                   listed: Sequence[Mapping[str, Any]] = ()) -> Outcome:
    """``listed``: the head's statuses, newest first (for opened, reopened, synchronize)."""
    pr = payload.get("pull_request")
    if not isinstance(pr, dict):
        return Outcome(None, "the event has no pull_request object.")
    sha = str((pr.get("head") or {}).get("sha") or "")
    number = pr.get("number")
    if len(sha) != 40 or not isinstance(number, int):
        return Outcome(None, "the event lacks pull_request.number or pull_request.head.sha.")
    link = f"{server_url}/{repository}/pull/{number}/checks"
    if pr.get("state") == "closed":
        return Outcome(None, f"pull request #{number} is closed.")
    if action in NEW_HEAD:
        latest = latest_of(listed, config.context)
        if latest is not None and latest.get("state") in FINAL:
            # A result is about the commit, not the pull request: another pull request
            # (anyone's) opened at this commit, or a push back to it, must not reset it.
            return Outcome(None, f"{short(sha)} already has a final '{config.context}' "
                           f"result ({latest.get('state')}).")
    if action in ("opened", "reopened", "ready_for_review"):
        return Outcome(waiting(config, sha, action, target_url=link), "new pull request head.")
    if action == "synchronize":
        before = str(payload.get("before") or "")
        return Outcome(waiting(config, sha, action, before, link), "new commits pushed.")
    if action == "labeled":
        name = str((payload.get("label") or {}).get("name") or "")
        if name.casefold() != config.label.casefold():
            return Outcome(None, f"the label '{name}' is not the gate label.")
        if gate_run is None:
            raise UsageError("a gate-label event needs the gate's decision: run gpu-gate in "
                             "the same job and pass its run, reason and labeled-by outputs "
                             "as gate-run, gate-reason and labeled-by.")
        return Outcome(after_gate(config, sha, gate_run, gate_reason, labeled_by, link),
                       "the gate decided on the label.")
    return Outcome(None, f"'{action}' does not change the status.")


# -- workflow_run: requested, completed -------------------------------------------------------


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def approval_of(statuses: Sequence[Mapping[str, Any]], context: str) -> str:
    """The login of the latest approval of this commit among its statuses (newest first)."""
    for status in statuses:
        if status.get("context") != context:
            continue
        text = str(status.get("description") or "")
        if text.startswith(_REVOKED):
            return ""  # a newer push (or reopening) of this very commit asks again
        # Anchored to our own wordings, so that a refusal quoting text cannot read as one.
        match = _APPROVER.match(text) if text.startswith("Approved") else (
            _APPROVER.search(text) if text.startswith(("GPU tests ", "GPU run ")) else None)
        if match:
            return match.group(1)
    return ""


def latest_of(statuses: Sequence[Mapping[str, Any]],
              context: str) -> Mapping[str, Any] | None:
    return next((s for s in statuses if s.get("context") == context), None)


def _trusted(run: Mapping[str, Any], repository: str) -> bool:
    """A run whose workflow file and code come from the base repository itself."""
    head_repo = str((run.get("head_repository") or {}).get("full_name") or "")
    return run.get("event") not in PR_EVENTS and head_repo in ("", repository)


def for_workflow_run(config: StatusConfig, action: str, run: Mapping[str, Any],
                     jobs: Sequence[Mapping[str, Any]] | None,
                     statuses: Sequence[Mapping[str, Any]], repository: str,
                     now: datetime,
                     siblings: Sequence[Mapping[str, Any]] | None = None) -> Outcome:
    """``siblings``: runs listed for ``head_sha`` (asked for only when the approver's run
    skipped the GPU job: a run for another label may end before the approved one)."""
    sha = str(run.get("head_sha") or "")
    link = str(run.get("html_url") or "")
    if len(sha) != 40:
        return Outcome(None, "the workflow_run event has no head_sha.")
    approver = approval_of(statuses, config.context)
    trusted = _trusted(run, repository)
    actor = str((run.get("triggering_actor") or run.get("actor") or {}).get("login") or "")
    if not trusted and not approver:
        return Outcome(None, (
            f"{short(sha)} carries no approval in '{config.context}': the result of a "
            f"'{run.get('event')}' run is only posted for a commit a maintainer approved."))
    by = f" (approved by @{approver})" if approver else ""
    latest = latest_of(statuses, config.context)
    latest_text = str((latest or {}).get("description") or "")
    if action == "requested" or action == "in_progress":
        if not trusted and actor != approver:
            return Outcome(None, f"run triggered by @{actor}, not by the approver @{approver}.")
        if latest is not None and latest.get("state") != "pending":
            return Outcome(None, "the commit already has a final result.")
        text = (f"Approved by @{approver}: GPU run in progress." if approver
                else f"GPU run in progress on {short(sha)}.")
        return Outcome(Status(sha, "pending", clip(text), link), "run started.")
    if action != "completed":
        return Outcome(None, f"'{action}' does not change the status.")
    gpu = named_gpu_jobs(jobs or [], config.gpu_jobs)
    ran = [j for j in gpu if j.get("conclusion") not in (None, "skipped")]
    if ran and not trusted and actor != approver:
        # e.g. the contributor's own run of this commit, started before the approval and
        # ending after it: only the run the approval started speaks for the commit.
        return Outcome(None, f"run triggered by @{actor}, not by the approver @{approver}: "
                       "its result is not posted.")
    if not ran:
        if trusted or actor != approver:
            return Outcome(None, "the GPU job did not run in this run.")
        if latest is not None and latest.get("state") != "pending":
            return Outcome(None, "the commit already has a final result.")
        deferred = _defer_to_siblings(run, siblings)
        if deferred is not None:
            return deferred
        return Outcome(Status(sha, "failure", clip(
            f"Approved by @{approver}, but the GPU workflow's gate skipped the job (head "
            "moved, budget or role: see the run)."), link), "approved run skipped the GPU job.")
    waits = [w for w in (queue_seconds(j, now) for j in ran) if w is not None]
    waited = f"waited {minutes(max(waits))} for a runner" if waits else ""
    bad = [j for j in ran if j.get("conclusion") in FAILED]
    cancelled = [j for j in ran if j.get("conclusion") == "cancelled"]
    if bad:
        names = ", ".join(f"{j.get('name')}: {j.get('conclusion')}" for j in bad[:3])
        return Outcome(Status(sha, "failure", clip(
            f"GPU tests failed on {short(sha)}{by}: {names}."), link), "GPU job failed.")
    if cancelled:
        if latest_text.startswith(WATCHDOG_PREFIX):
            return Outcome(None, "gpu-watchdog cancelled the run; its status stays.")
        deferred = _defer_to_siblings(run, siblings)  # e.g. concurrency: a newer run took over
        if deferred is not None:
            return deferred
        return Outcome(Status(sha, "error", clip(
            f"GPU run cancelled on {short(sha)}{by}: approve again to rerun."), link),
            "GPU job cancelled.")
    suffix = f"; {waited}" if waited else ""
    return Outcome(Status(sha, "success", clip(
        f"GPU tests passed on {short(sha)}{by}{suffix}."), link), "GPU job passed.")


def _defer_to_siblings(run: Mapping[str, Any],
                       siblings: Sequence[Mapping[str, Any]] | None) -> Outcome | None:
    """None when no other run of the same workflow for the commit is still going."""
    if siblings is None:
        return Outcome(None, "", need_siblings=True)
    active = [r for r in siblings if r.get("id") != run.get("id")
              and r.get("workflow_id") == run.get("workflow_id")
              and r.get("status") != "completed"]
    if active:
        return Outcome(None, f"run {active[0].get('id')} of the same workflow for this "
                       "commit is still going: its result decides.")
    return None


def no_runner(sha: str, waited_seconds: float, labels: Sequence[str], link: str) -> Status:
    """The watchdog cancelled a run whose GPU job no runner picked up."""
    return Status(sha, "error", clip(
        f"{WATCHDOG_PREFIX} in {waited_seconds / 60:.0f} minutes (labels "
        f"{', '.join(labels)}): run cancelled; approve again to retry."), link)
