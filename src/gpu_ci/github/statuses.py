"""The "GPU CI" commit status as a state machine: an event plus what is known → a status.

A skipped GPU job counts as success, so a label-gated GPU job cannot be a required check on
its own. A commit status can: this module decides which status the pull request's head
shows after each event, as pure functions of plain data (webhook payloads, the gate's
outputs, the jobs and statuses GitHub lists). ``commands/gpu_status.py`` fetches and posts.

The states, on the head commit::

    opened / reopened / synchronize        -> pending  "Waiting for approval: ..."
    labeled, the gate approves             -> pending  "Approved by @x for abc123: GPU run queued"
    labeled, the gate refuses              -> pending  "Not approved: <the gate's reason>"
    workflow_run requested (approval's run) -> pending "Approved by @x: GPU run in progress",
                                              linking <run>/attempts/<n> (the record)
    workflow_run completed (that run)      -> success / failure / error, with the same link
    gpu-watchdog cancelled the run         -> error    "No GPU runner picked this up in N min"
    gpu-watchdog re-ran a lost run         -> pending  "GPU run retried after the runner was
                                              lost (attempt 2)", linking <run>/attempts/2
    issue_comment, the gate approves       -> pending  "Approved by @x on #n for abc123 by
                                              comment: GPU run in progress", linking this run
    issue_comment, the GPU job ended       -> success / failure / error, with the same link

Trust: the ``pull_request`` workflow of a fork runs the fork's copy of the workflow file, so
its jobs, names and conclusions are controlled by the pull request's author, and so is the
workflow's *name* (``workflow_run: workflows: [CUDA CI]`` matches names, any fork can declare
one). A result is therefore posted only under these rules (issue 26); the status then means:
a maintainer approved exactly this commit, and the GPU run that approval started passed.

1. **The file.** Only runs whose ``path`` is the configured GPU workflow file count
   (``workflow`` input); a run of any other file posts nothing, whatever its name.
2. **Trusted runs** are runs of an allowed event (``push``, ``schedule``,
   ``workflow_dispatch``, ``merge_group``) whose ``head_repository`` is this repository; a
   null ``head_repository`` (a deleted fork) is *not* this repository.
3. **A pull request's run is bound to the approval.** The approval is the newest
   "Approved by @x for <sha>: GPU run queued." status of the head not revoked by a newer
   "waiting" (its ``target_url`` names the pull request, its ``created_at`` the time). A
   run is that approval's run when its event is ``pull_request``, its attempt is 1 (a re-run
   reuses the gate's old outputs: approve again) or gpu-watchdog's "retried" status for
   exactly that run and attempt lies above the approval (rule 7), its triggering actor is
   the approver (a retried attempt: its first actor is, and the retry's is a trusted
   creator, the watchdog's account), it
   was created in the window ``[approval - APPROVAL_LAG, approval + CLOCK_SLACK]`` (the label
   event creates the run first; the privileged job posts the approval after it), no older
   approval of the commit was posted after it was created (it is that one's run), and, when
   GitHub lists its pull requests, the approved one is among them.
4. **Recorded when requested, accepted only for that run.** ``requested`` posts "in
   progress" with ``target_url`` = ``<run>/attempts/<n>`` only when the newest status is the
   approval itself (the first bound run claims it). ``completed`` posts a result only when
   the newest status is the approval (the ``requested`` event came before the approval was
   posted) or an "in progress" written above it for a bound run; a run whose GPU job was
   skipped only over the approval or its own record. A final result (or anything else on
   top) is never replaced, except by the run of a newer approval, which is posted above it.
5. **Order by ids, not arrival.** Trusted runs never overwrite a status written for a newer
   run (greater id, attempt). ``requested`` and ``completed`` of one run may be handled at
   once: after posting "in progress", the command reads the statuses again and
   :func:`settle` restores the run's own result if it lies just below.
6. **Only the head's own approval state changes it** (pull_request_target events): an
   ``opened``/``reopened``/``synchronize`` of *another* pull request at an approved head
   posts nothing (the approval names its pull request), a final result stays, and a refused
   label posts "Not approved" only when there is no approval, run or result to overwrite.
7. **A retried attempt is accepted only as the watchdog's retry** (issue 32). gpu-watchdog
   re-runs a run lost to infrastructure after checking the head's approval and the budget,
   and posts "GPU run retried ... (attempt N)" linking ``<run>/attempts/N``. Attempt N of a
   bound run then posts its result only on ``completed`` and only over that very record; an
   attempt nobody retried (a re-run by hand) posts nothing, whoever started it.
8. **A comment approval** (issue 31) runs in the ``issue_comment`` workflow of the default
   branch, whose runs carry the default branch's commit, not the pull request's: there the
   status job (after the gate, ``statuses: write``, no pull request code) posts the record
   "Approved by @x on #n for <sha> by comment: GPU run in progress." on the gate's ``sha``,
   linking *this* run and attempt (from the runner's environment, not an input), and the
   result job after the GPU job posts its result only while that record, for this run and
   attempt and that commit, is the newest status: a second comment, a label, a push or a
   newer run's record on top stays. The record is also a newer approval, so a
   ``pull_request`` run never binds to a label approval below it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gpu_ci.errors import UsageError
from gpu_ci.github.jobs import named_gpu_jobs, parse_time, queue_seconds

#: GitHub rejects longer descriptions with 422 "description is too long (maximum is 140
#: characters)".
DESCRIPTION_LIMIT = 140
#: GitHub's REST documentation states no limit for ``context``. We chose 255, the width of
#: GitHub's other short name fields, and refuse longer ones up front rather than fail at
#: the POST after the decision (an assumption, stated in the README).
CONTEXT_LIMIT = 255
PR_EVENTS = ("pull_request", "pull_request_target")
#: Events whose commit is already in the repository (the gate's own list): their runs of
#: this repository need no approval.
TRUSTED_EVENTS = ("push", "schedule", "workflow_dispatch", "merge_group")
#: How long before the approval status its run may have been created: the label event
#: creates the run, then the privileged job (queued, bootstrapped) posts the approval.
APPROVAL_LAG = timedelta(minutes=30)
#: Tolerance for a run created just after the approval status (one GitHub event, two clocks).
CLOCK_SLACK = timedelta(seconds=60)
DEFAULT_WORKFLOW = ".github/workflows/cuda-ci.yml"
#: Who writes our statuses: the inert workflows' GITHUB_TOKEN (input ``trusted-creators``
#: names an App's bot instead, where the workflows post with an App token).
DEFAULT_CREATORS = ("github-actions[bot]",)
FAILED = ("failure", "timed_out", "startup_failure", "action_required", "stale")

_APPROVER = re.compile(r"[Aa]pproved by @([A-Za-z0-9][A-Za-z0-9-]*(?:\[bot\])?)")
#: The approval itself, as :func:`after_gate` writes it.
_APPROVAL = re.compile(
    r"Approved by @([A-Za-z0-9][A-Za-z0-9-]*(?:\[bot\])?) for "
    r"[0-9a-f]{12}: GPU run queued\."
)
_RUN_URL = re.compile(r"/actions/runs/(\d+)(?:/attempts/(\d+))?/?$")
_PULL_URL = re.compile(r"/pull/(\d+)(?:/|$)")
IN_PROGRESS = "GPU run in progress"
#: How gpu-watchdog's status for a run it re-ran begins (``watchdog._rerun`` writes it).
RETRIED_PREFIX = "GPU run retried after the "
#: A comment approval's record, as :func:`comment_approved` writes it (rule 8).
_COMMENT_RECORD = re.compile(
    r"Approved by @([A-Za-z0-9][A-Za-z0-9-]*(?:\[bot\])?) on #(\d+) for "
    r"([0-9a-f]{12}) by comment: GPU run in progress\."
)
#: ``needs.<job>.result`` of the comment workflow's GPU job.
JOB_RESULTS = ("success", "failure", "cancelled", "skipped")
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
    workflow: str = DEFAULT_WORKFLOW
    """The GPU workflow's file, ``.github/workflows/<name>`` (``workflow_run.path``)."""
    creators: tuple[str, ...] = DEFAULT_CREATORS
    """The logins whose statuses in ``context`` count: any other status writer (a CI app a
    pull request can steer) could plant an "Approved by" or a result."""


@dataclass(frozen=True)
class Outcome:
    """A status to post, or None with the reason nothing is posted."""

    status: Status | None
    note: str
    need_siblings: bool = False
    """Ask again with ``siblings``: the other runs of the workflow for this commit."""


def same_context(value: Any, context: str) -> bool:
    """Whether a status's ``context`` is ``context``: GitHub does not tell contexts apart by
    case (a status posted as ``gpu ci`` replaces ``GPU CI``'s in the combined status and
    satisfies a required check of that name), so neither do we."""
    return isinstance(value, str) and value.casefold() == context.casefold()


def validate_context(value: str) -> str:
    context = value.strip()
    if not context:
        raise UsageError(
            "input 'context' is empty: name the commit status, e.g. 'GPU CI' "
            "(the name a branch protection rule requires)."
        )
    if len(context) > CONTEXT_LIMIT:
        raise UsageError(
            f"input 'context' is {len(context)} characters long; GitHub accepts "
            f"at most {CONTEXT_LIMIT}: shorten it."
        )
    if "\n" in context or "\r" in context:
        raise UsageError("input 'context' spans several lines: give one line.")
    return context


def workflow_path(value: str) -> str:
    """``cuda-ci.yml`` or ``.github/workflows/cuda-ci.yml`` → the path GitHub reports."""
    name = value.strip()
    if not name:
        raise UsageError(
            "input 'workflow' is empty: name the GPU workflow's file, e.g. "
            "'cuda-ci.yml' (workflow_run matches names, which any fork can "
            "declare; the file path it cannot)."
        )
    if "/" not in name:
        name = f".github/workflows/{name}"
    if not name.startswith(".github/workflows/") or not name.endswith((".yml", ".yaml")):
        raise UsageError(
            f"input 'workflow' is '{value}': give the GPU workflow's file name "
            "(e.g. 'cuda-ci.yml') or its path under .github/workflows/."
        )
    return name


def make_config(
    context: str,
    label: str,
    min_permission: str,
    gpu_jobs: Sequence[str],
    workflow: str = DEFAULT_WORKFLOW,
    creators: Sequence[str] = DEFAULT_CREATORS,
) -> StatusConfig:
    if not label.strip():
        raise UsageError("input 'label' is empty: name the label that approves a GPU run.")
    if not gpu_jobs:
        raise UsageError(
            "input 'gpu-jobs' is empty: name the GPU job(s) of the GPU workflow "
            "(the job's name as the Actions page shows it, e.g. 'tests')."
        )
    return StatusConfig(
        validate_context(context),
        label.strip(),
        min_permission.strip() or "write",
        tuple(gpu_jobs),
        workflow_path(workflow),
        tuple(creators) or DEFAULT_CREATORS,
    )


def trusted_statuses(config: StatusConfig, statuses: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The statuses of ``context`` written by the trusted creators (newest first); another
    writer's status in our context is as if it were not there (a null creator too)."""
    return [
        s
        for s in statuses
        if same_context(s.get("context"), config.context)
        and str((s.get("creator") or {}).get("login") or "") in config.creators
    ]


def clip(text: str, limit: int = DESCRIPTION_LIMIT) -> str:
    """One line of at most ``limit`` characters (GitHub refuses longer descriptions)."""
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 1].rstrip() + "…"


def short(sha: str) -> str:
    return sha[:12]


# -- pull_request_target: opened, reopened, synchronize, labeled ----------------------------


def waiting(
    config: StatusConfig, sha: str, action: str, before: str = "", target_url: str = ""
) -> Status:
    who = f"someone with {config.min_permission} access or higher"
    if action == "synchronize":
        text = (
            f"Waiting for approval of the new head {short(sha)}: approvals do not carry "
            f"over pushes; {who} applies '{config.label}'."
        )
        if before:
            text = (
                f"New push (was {short(before)}): waiting for approval; {who} applies "
                f"'{config.label}'."
            )
    else:
        text = f"Waiting for approval: {who} applies the '{config.label}' label."
    return Status(sha, "pending", clip(text), target_url)


def after_gate(
    config: StatusConfig, sha: str, run: bool, reason: str, labeled_by: str, target_url: str = ""
) -> Status:
    """The label was applied: the gate (run in the privileged workflow) approved or refused."""
    if run:
        if not labeled_by:
            raise UsageError(
                "input 'labeled-by' is empty although 'gate-run' is true: pass "
                "the gate's labeled-by output."
            )
        text = f"Approved by @{labeled_by} for {short(sha)}: GPU run queued."
        return Status(sha, "pending", clip(text), target_url)
    return Status(
        sha, "pending", clip(f"Not approved: {reason or 'the gate refused.'}"), target_url
    )


def for_pull_event(
    config: StatusConfig,
    action: str,
    payload: Mapping[str, Any],
    gate_run: bool | None,
    gate_reason: str,
    labeled_by: str,
    server_url: str,
    repository: str,
    listed: Sequence[Mapping[str, Any]] = (),
) -> Outcome:
    """``listed``: the head's statuses, newest first (for opened, reopened, synchronize and a
    refused label)."""
    listed = trusted_statuses(config, listed)
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
    latest = latest_of(listed, config.context)
    if action in NEW_HEAD:
        if latest is not None and latest.get("state") in FINAL:
            # A result is about the commit, not the pull request: another pull request
            # (anyone's) opened at this commit, or a push back to it, must not reset it.
            return Outcome(
                None,
                f"{short(sha)} already has a final '{config.context}' "
                f"result ({latest.get('state')}).",
            )
        approved = approval_status(listed, config.context)
        other = pull_of(approved) if approved is not None else comment_pull(listed, config.context)
        if other is not None and other != number:
            # Anyone can open a pull request at a commit: only the approved pull request's
            # own new head (a push back to it, reopening it) revokes its approval.
            return Outcome(
                None,
                f"{short(sha)} carries an approval of #{other}; an event of "
                f"#{number} does not revoke it.",
            )
    if action in NEW_HEAD and gate_run:
        # trusted-authors: the gate ran this head without a label (the author's own commit);
        # the approval names the author, whose pull_request run it then binds, as a label's
        return Outcome(
            after_gate(config, sha, True, gate_reason, labeled_by, link),
            "a trusted author's own head.",
        )
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
            raise UsageError(
                "a gate-label event needs the gate's decision: run gpu-gate in "
                "the same job and pass its run, reason and labeled-by outputs "
                "as gate-run, gate-reason and labeled-by."
            )
        if (
            not gate_run
            and latest is not None
            and (
                latest.get("state") in FINAL
                or approval_status(listed, config.context) is not None
                or comment_pull(listed, config.context) is not None
            )
        ):
            # A refused label (a triage user's, say) must not reset a passed head or void
            # an approval whose run is in flight.
            return Outcome(
                None,
                f"the gate refused ({gate_reason or 'no reason given'}); "
                f"{short(sha)}'s approval or result in '{config.context}' stays.",
            )
        return Outcome(
            after_gate(config, sha, gate_run, gate_reason, labeled_by, link),
            "the gate decided on the label.",
        )
    return Outcome(None, f"'{action}' does not change the status.")


# -- workflow_run: requested, completed -------------------------------------------------------


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def approval_of(statuses: Sequence[Mapping[str, Any]], context: str) -> str:
    """The login of the latest approval of this commit among its statuses (newest first)."""
    for status in statuses:
        if not same_context(status.get("context"), context):
            continue
        text = str(status.get("description") or "")
        if text.startswith(_REVOKED):
            return ""  # a newer push (or reopening) of this very commit asks again
        # Anchored to our own wordings, so that a refusal quoting text cannot read as one.
        match = (
            _APPROVER.match(text)
            if text.startswith("Approved")
            else (_APPROVER.search(text) if text.startswith(("GPU tests ", "GPU run ")) else None)
        )
        if match:
            return match.group(1)
    return ""


def latest_of(statuses: Sequence[Mapping[str, Any]], context: str) -> Mapping[str, Any] | None:
    return next((s for s in statuses if same_context(s.get("context"), context)), None)


def approval_status(
    statuses: Sequence[Mapping[str, Any]], context: str
) -> Mapping[str, Any] | None:
    """The current approval of this commit (newest first): the newest "Approved by @x for
    <sha>: GPU run queued." not revoked by a newer "waiting" of the commit, nor replaced by
    a newer comment approval (rule 8: its run, not a ``pull_request`` run, reports)."""
    for status in statuses:
        if not same_context(status.get("context"), context):
            continue
        text = str(status.get("description") or "")
        if text.startswith(_REVOKED) or _COMMENT_RECORD.fullmatch(text):
            return None
        if _APPROVAL.fullmatch(text):
            return status
    return None


def comment_pull(statuses: Sequence[Mapping[str, Any]], context: str) -> int | None:
    """The pull request of the commit's current comment approval (newest first; a newer
    "waiting" or label approval ends it), None when there is none (rule 8)."""
    for status in statuses:
        if not same_context(status.get("context"), context):
            continue
        text = str(status.get("description") or "")
        if text.startswith(_REVOKED) or _APPROVAL.fullmatch(text):
            return None
        match = _COMMENT_RECORD.fullmatch(text)
        if match:
            return int(match.group(2))
    return None


def pull_of(status: Mapping[str, Any]) -> int | None:
    """The pull request an approval (or waiting) status links to, None when it names none."""
    match = _PULL_URL.search(str(status.get("target_url") or ""))
    return int(match.group(1)) if match else None


def run_key(target_url: str) -> tuple[int, int] | None:
    """(run id, attempt) of a status written for a run (its link), None for other links."""
    match = _RUN_URL.search(target_url)
    return (int(match.group(1)), int(match.group(2) or 1)) if match else None


def run_link(run: Mapping[str, Any]) -> str:
    """The link every status written for a run carries: it records the run id and attempt."""
    url = str(run.get("html_url") or "").rstrip("/")
    return f"{url}/attempts/{_attempt(run)}" if url else ""


def _attempt(run: Mapping[str, Any]) -> int:
    try:
        return int(run.get("run_attempt") or 1)
    except (TypeError, ValueError):
        return 1


def _key_of(run: Mapping[str, Any]) -> tuple[int, int] | None:
    try:
        return int(run.get("id") or 0), _attempt(run)
    except (TypeError, ValueError):
        return None


def _trusted(run: Mapping[str, Any], repository: str) -> bool:
    """A run whose workflow file and code come from the base repository itself: an allowed
    event, and a head repository that *is* this one (null, a deleted fork, is not)."""
    head_repo = str((run.get("head_repository") or {}).get("full_name") or "")
    return run.get("event") in TRUSTED_EVENTS and head_repo == repository


def _binds(
    run: Mapping[str, Any],
    approval: Mapping[str, Any],
    approver: str,
    earlier: Sequence[Mapping[str, Any]] = (),
    retried: bool = False,
    retriers: Sequence[str] = (),
) -> str:
    """Empty when ``run`` is the run ``approval`` started (rule 3), else why not.
    ``earlier``: the commit's older approvals; a run belongs to the first approval posted
    after it was created (a label applied twice: the first run is not the second's).
    ``retried``: gpu-watchdog's retry record of this very attempt is above the approval;
    ``retriers``: the accounts whose re-run that can be (rule 7)."""
    attempt = _attempt(run)
    trigger = str((run.get("triggering_actor") or run.get("actor") or {}).get("login") or "")
    # a re-run keeps the run's first actor; the approver must have started the run itself
    first = str((run.get("actor") or {}).get("login") or "")
    actor = first if attempt != 1 else trigger
    if run.get("event") != "pull_request":
        return f"a '{run.get('event')}' run of a pull request is not the approval's run."
    if not approver or actor != approver:
        return f"run triggered by @{actor}, not by the approver @{approver}."
    if attempt != 1 and not retried:
        return (
            f"attempt {attempt} is no re-run gpu-watchdog recorded on the head, and a re-run "
            "reuses the gate's old decision (head, budget): approve again to run the GPU "
            "tests again."
        )
    if attempt != 1 and trigger not in retriers:
        return (
            f"attempt {attempt} was started by @{trigger}, not by gpu-watchdog's account "
            f"({', '.join(retriers)}), although its retry record names it."
        )
    created = parse_time(run.get("created_at"))
    approved = parse_time(approval.get("created_at"))
    if created is None or approved is None:
        return "the run or the approval has no creation time: cannot bind them."
    if not approved - APPROVAL_LAG <= created <= approved + CLOCK_SLACK:
        return (
            f"run created at {run.get('created_at')}, not by the approval posted at "
            f"{approval.get('created_at')}."
        )
    for older in earlier:
        at = parse_time(older.get("created_at"))
        if at is None or created <= at + CLOCK_SLACK:
            return (
                f"run created at {run.get('created_at')} belongs to the earlier approval "
                f"posted at {older.get('created_at')}, not to the newest one."
            )
    number = pull_of(approval)
    listed = [p.get("number") for p in run.get("pull_requests") or [] if isinstance(p, dict)]
    if number is not None and listed and number not in listed:
        return f"the run is for pull request {listed}, the approval for #{number}."
    return ""


def for_workflow_run(
    config: StatusConfig,
    action: str,
    run: Mapping[str, Any],
    jobs: Sequence[Mapping[str, Any]] | None,
    statuses: Sequence[Mapping[str, Any]],
    repository: str,
    now: datetime,
    siblings: Sequence[Mapping[str, Any]] | None = None,
) -> Outcome:
    """``siblings``: runs listed for ``head_sha`` (asked for only when the approver's run
    skipped the GPU job: a run for another label may end before the approved one).

    The rules are the module docstring's 1-5."""
    statuses = trusted_statuses(config, statuses)
    sha = str(run.get("head_sha") or "")
    link = run_link(run)
    if len(sha) != 40:
        return Outcome(None, "the workflow_run event has no head_sha.")
    path = str(run.get("path") or "")
    if path != config.workflow:
        return Outcome(
            None,
            f"a run of '{path or '(no path)'}', not of the GPU workflow "
            f"'{config.workflow}' (names can be claimed by any fork; files not).",
        )
    if action not in ("requested", "in_progress", "completed"):
        return Outcome(None, f"'{action}' does not change the status.")
    trusted = _trusted(run, repository)
    latest = latest_of(statuses, config.context)
    mine = _key_of(run)
    latest_key = run_key(str((latest or {}).get("target_url") or ""))
    approver = ""
    if trusted:
        if latest_key is not None and mine is not None and latest_key > mine:
            return Outcome(
                None, f"run {latest_key[0]} (attempt {latest_key[1]}) is newer: its status stays."
            )
        if (
            action != "completed"
            and latest is not None
            and latest.get("state") in FINAL
            and latest_key == mine
        ):
            return Outcome(None, "this run's result is already posted.")
    else:
        approval = approval_status(statuses, config.context)
        if approval is None:
            return Outcome(
                None,
                (
                    f"{short(sha)} carries no approval in '{config.context}': the result of a "
                    f"'{run.get('event')}' run "
                    f"{'from ' + _head_repo(run) if _head_repo(run) else 'of a deleted fork'} "
                    "is only posted for the run a maintainer's approval started."
                ),
            )
        approver, retry, why = _binding(config, statuses, run, approval, mine)
        if why:
            return Outcome(None, why + " Its result is not posted.")
        recorded = _recorded_above(statuses, config.context, approval)
        if retry is not None and (action != "completed" or latest is not retry):
            return Outcome(
                None,
                f"attempt {_attempt(run)}, gpu-watchdog's retry: only its result is posted, "
                f"over the retry record; '{(latest or {}).get('description')}' stays.",
            )
        if retry is None and latest is not approval and (action != "completed" or recorded is None):
            return Outcome(
                None,
                "the head's newest status is not this approval's: "
                f"'{(latest or {}).get('description')}' stays.",
            )
    by = f" (approved by @{approver})" if approver else ""
    if action in ("requested", "in_progress"):
        text = (
            f"Approved by @{approver}: {IN_PROGRESS}."
            if approver
            else f"{IN_PROGRESS} on {short(sha)}."
        )
        return Outcome(Status(sha, "pending", clip(text), link), "run started.")
    gpu = named_gpu_jobs(jobs or [], config.gpu_jobs)
    ran = [j for j in gpu if j.get("conclusion") not in (None, "skipped")]
    latest_text = str((latest or {}).get("description") or "")
    if not ran:
        if trusted:
            return Outcome(None, "the GPU job did not run in this run.")
        if latest is not None and latest.get("state") != "pending":
            return Outcome(None, "the commit already has a final result.")
        if latest is not None and latest_key not in (None, mine):
            return Outcome(
                None,
                f"run {latest_key[0]} holds the approval's record; this run skipped the GPU job.",
            )
        deferred = _defer_to_siblings(run, siblings)
        if deferred is not None:
            return deferred
        return Outcome(
            Status(
                sha,
                "failure",
                clip(
                    f"Approved by @{approver}, but the GPU workflow's gate skipped the job (head "
                    "moved, budget or role: see the run)."
                ),
                link,
            ),
            "approved run skipped the GPU job.",
        )
    waits = [w for w in (queue_seconds(j, now) for j in ran) if w is not None]
    waited = f"waited {minutes(max(waits))} for a runner" if waits else ""
    bad = [j for j in ran if j.get("conclusion") in FAILED]
    cancelled = [j for j in ran if j.get("conclusion") == "cancelled"]
    if bad:
        names = ", ".join(f"{j.get('name')}: {j.get('conclusion')}" for j in bad[:3])
        return Outcome(
            Status(sha, "failure", clip(f"GPU tests failed on {short(sha)}{by}: {names}."), link),
            "GPU job failed.",
        )
    if cancelled:
        if latest_text.startswith(WATCHDOG_PREFIX):
            return Outcome(None, "gpu-watchdog cancelled the run; its status stays.")
        deferred = _defer_to_siblings(run, siblings)  # e.g. concurrency: a newer run took over
        if deferred is not None:
            return deferred
        return Outcome(
            Status(
                sha,
                "error",
                clip(f"GPU run cancelled on {short(sha)}{by}: approve again to rerun."),
                link,
            ),
            "GPU job cancelled.",
        )
    suffix = f"; {waited}" if waited else ""
    return Outcome(
        Status(sha, "success", clip(f"GPU tests passed on {short(sha)}{by}{suffix}."), link),
        "GPU job passed.",
    )


def _head_repo(run: Mapping[str, Any]) -> str:
    return str((run.get("head_repository") or {}).get("full_name") or "")


def _earlier_approvals(
    statuses: Sequence[Mapping[str, Any]], context: str, approval: Mapping[str, Any]
) -> list[Mapping[str, Any]]:
    """The approvals of ``context`` listed below ``approval`` (revoked ones included)."""
    ours = [s for s in statuses if same_context(s.get("context"), context)]
    below = ours[next((i for i, s in enumerate(ours) if s is approval), len(ours)) + 1 :]
    return [s for s in below if _APPROVAL.fullmatch(str(s.get("description") or ""))]


def _retry_record(
    statuses: Sequence[Mapping[str, Any]],
    context: str,
    approval: Mapping[str, Any],
    key: tuple[int, int] | None,
    attempt: int,
) -> Mapping[str, Any] | None:
    """gpu-watchdog's "retried" status of run attempt ``key`` written above ``approval`` (so
    after the approval, and the watchdog checked that it was current), else None (rule 7)."""
    if attempt == 1 or key is None:
        return None
    for status in statuses:
        if not same_context(status.get("context"), context):
            continue
        if status is approval:
            return None
        text = str(status.get("description") or "")
        url = str(status.get("target_url") or "")
        if (
            status.get("state") == "pending"
            and text.startswith(RETRIED_PREFIX)
            and run_key(url) == key
        ):
            return status
    return None


def _recorded_above(
    statuses: Sequence[Mapping[str, Any]], context: str, approval: Mapping[str, Any]
) -> Mapping[str, Any] | None:
    """The newest status of ``context`` when it is an "in progress" record of a run written
    above ``approval`` (so for a run bound to it), else None."""
    for status in statuses:
        if not same_context(status.get("context"), context):
            continue
        if status is approval:
            return None
        url = str(status.get("target_url") or "")
        text = str(status.get("description") or "")
        if status.get("state") == "pending" and run_key(url) and IN_PROGRESS in text:
            return status
        return None
    return None


def settle(
    config: StatusConfig, run: Mapping[str, Any], statuses: Sequence[Mapping[str, Any]]
) -> Status | None:
    """After posting "in progress" for ``run``: ``statuses`` read again (newest first). When
    this run's own final result lies just below our record (``completed`` was handled
    first), the result to post again on top; else None (rule 5)."""
    mine = _key_of(run)
    ours = trusted_statuses(config, statuses)
    for upper, lower in zip(ours, ours[1:]):
        if run_key(str(upper.get("target_url") or "")) != mine or upper.get("state") != "pending":
            continue
        if lower.get("state") in FINAL and run_key(str(lower.get("target_url") or "")) == mine:
            return Status(
                str(run.get("head_sha") or ""),
                str(lower["state"]),
                str(lower.get("description") or ""),
                str(lower.get("target_url") or ""),
            )
        return None
    return None


def _defer_to_siblings(
    run: Mapping[str, Any], siblings: Sequence[Mapping[str, Any]] | None
) -> Outcome | None:
    """None when no other run of the same workflow for the commit is still going."""
    if siblings is None:
        return Outcome(None, "", need_siblings=True)
    active = [
        r
        for r in siblings
        if r.get("id") != run.get("id")
        and r.get("workflow_id") == run.get("workflow_id")
        and r.get("status") != "completed"
    ]
    if active:
        return Outcome(
            None,
            f"run {active[0].get('id')} of the same workflow for this "
            "commit is still going: its result decides.",
        )
    return None


def no_runner(sha: str, waited_seconds: float, labels: Sequence[str], link: str) -> Status:
    """The watchdog cancelled a run whose GPU job no runner picked up."""
    return Status(
        sha,
        "error",
        clip(
            f"{WATCHDOG_PREFIX} in {waited_seconds / 60:.0f} minutes (labels "
            f"{', '.join(labels)}): run cancelled; approve again to retry."
        ),
        link,
    )


# -- issue_comment: the comment workflow's status and result jobs (rule 8) ---------------------


def comment_run_link(server_url: str, repository: str, run_id: str, attempt: str) -> str:
    """This run's link, from the runner's ``GITHUB_RUN_ID`` and ``GITHUB_RUN_ATTEMPT``: the
    record then names the run that posted it, whatever the inputs say."""
    if not run_id.isdigit() or not (attempt or "1").isdigit():
        raise UsageError(
            f"GITHUB_RUN_ID '{run_id}' / GITHUB_RUN_ATTEMPT '{attempt}' are not run numbers: "
            "gpu-status binds a comment's status to the run it runs in (run it in Actions)."
        )
    return f"{server_url}/{repository}/actions/runs/{int(run_id)}/attempts/{int(attempt or 1)}"


def comment_approved(
    config: StatusConfig, sha: str, number: int, gate_run: bool, approver: str, link: str
) -> Outcome:
    """The status job after the gate: the record of a comment's approval, on its commit."""
    if not gate_run:
        return Outcome(None, "the gate did not approve the comment: no status for it.")
    if not re.fullmatch(r"[0-9a-f]{40}", sha) or number < 1 or not approver:
        raise UsageError(
            "a comment approval needs the gate's outputs: pass its sha (40 hex digits), "
            "pr-number and labeled-by as the inputs sha, pr-number and labeled-by."
        )
    text = f"Approved by @{approver} on #{number} for {short(sha)} by comment: {IN_PROGRESS}."
    return Outcome(Status(sha, "pending", clip(text), link), "a comment approved the commit.")


def comment_result(
    config: StatusConfig, sha: str, gpu_result: str, link: str, listed: Sequence[Mapping[str, Any]]
) -> Outcome:
    """The result job after the GPU job: ``gpu_result`` (``needs.<job>.result``) posted over
    this run's own record only (``link``: this run and attempt), never over anything newer."""
    latest = latest_of(trusted_statuses(config, listed), config.context)
    text = str((latest or {}).get("description") or "")
    match = _COMMENT_RECORD.fullmatch(text)
    if (
        latest is None
        or match is None
        or latest.get("state") != "pending"
        or run_key(str(latest.get("target_url") or "")) != run_key(link)
        or match.group(3) != short(sha)
    ):
        return Outcome(
            None,
            f"{short(sha)}'s newest '{config.context}' status is not this run's comment "
            f"approval ('{text or 'none'}' stays: a newer approval, push or result).",
        )
    by = f" (approved by @{match.group(1)} by comment)"
    if gpu_result == "success":
        state, said = "success", f"GPU tests passed on {short(sha)}{by}."
    elif gpu_result == "failure":
        state, said = "failure", f"GPU tests failed on {short(sha)}{by}: the GPU job failed."
    elif gpu_result == "cancelled":
        state, said = "error", f"GPU run cancelled on {short(sha)}{by}: comment again to rerun."
    else:
        state, said = "failure", f"Approved by @{match.group(1)}, but the GPU job was skipped."
    return Outcome(Status(sha, state, clip(said), link), f"the GPU job's result: {gpu_result}.")


# -- the budget's question: does this fork run hold a maintainer's approval? ------------------

#: gpu-status's default ``context`` (what the budget reads where no other is configured).
DEFAULT_CONTEXT = "GPU CI"


def approval_config(
    context: str = DEFAULT_CONTEXT, creators: Sequence[str] = DEFAULT_CREATORS
) -> StatusConfig:
    """The part of a :class:`StatusConfig` that reading an approval needs (context and
    trusted creators): what the budget and the watchdog read statuses with."""
    return StatusConfig(context, "", "", (), creators=tuple(creators) or DEFAULT_CREATORS)


def _binding(
    config: StatusConfig,
    statuses: Sequence[Mapping[str, Any]],
    run: Mapping[str, Any],
    approval: Mapping[str, Any],
    mine: Any,
) -> tuple[str, Mapping[str, Any] | None, str]:
    """(approver, the watchdog's retry record for this attempt or None, why ``run`` does not
    bind to ``approval`` or empty): one reading for gpu-status's result and the budget's
    approved fork runs."""
    match = _APPROVAL.fullmatch(str(approval.get("description") or ""))
    approver = match.group(1) if match else ""
    retry = _retry_record(statuses, config.context, approval, mine, _attempt(run))
    why = _binds(
        run,
        approval,
        approver,
        _earlier_approvals(statuses, config.context, approval),
        retry is not None,
        config.creators,
    )
    return approver, retry, why


def approved_run(
    config: StatusConfig, run: Mapping[str, Any], statuses: Sequence[Mapping[str, Any]]
) -> str:
    """Empty when ``run`` is the run its head's current approval started and still holds it,
    else why not (the budget's rule for a fork's run: only then do its jobs waiting for a
    runner reserve).

    ``statuses``: the head's, newest first; only the trusted creators' count. The approval
    is :func:`approval_status`'s, the run must bind to it (rule 3, rule 7 for a retried
    attempt), and the head's newest status is the approval itself (its run not yet
    recorded) or a record of this very run and attempt (rule 4: the first bound run claims
    the approval, so a second run a maintainer's other label started holds nothing)."""
    trusted = trusted_statuses(config, statuses)
    approval = approval_status(trusted, config.context)
    if approval is None:
        return (
            f"{short(str(run.get('head_sha') or ''))} carries no current approval in "
            f"'{config.context}' from {', '.join(config.creators)}."
        )
    mine = _key_of(run)
    _approver, retry, why = _binding(config, trusted, run, approval, mine)
    if why:
        return why
    latest = latest_of(trusted, config.context)
    if latest is approval or run_key(str((latest or {}).get("target_url") or "")) == mine:
        return ""
    return (
        f"the approval's newest status '{(latest or {}).get('description')}' is another "
        "run's: this run does not hold the approval."
    )
