"""The gpu-gate decision, as pure functions of the event payload and API answers.

The shell (``commands/gpu_gate.py``) calls :func:`triage` on the event; a final
:class:`Decision` needs no API call. Otherwise it fetches exactly what the returned check
asks for (the labeller's role and the pull request: two REST calls; changed files only
when ``paths`` is set) and calls :func:`decide_pull` or :func:`decide_push`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Union

from gpu_ci.errors import GpuCiError, UsageError
from gpu_ci.github.event import subject_of
from gpu_ci.github.paths import COMPARE_FILES_MAX, PULL_FILES_MAX, match_paths

#: Repository roles in increasing order of trust.
ROLE_RANK = {"none": 0, "read": 1, "triage": 2, "write": 3, "maintain": 4, "admin": 5}
MIN_PERMISSIONS = ("triage", "write", "maintain", "admin")
PR_EVENTS = ("pull_request", "pull_request_target")
#: Events that may run without a label: their commit is one the repository already holds
#: (a push, the default branch, a merge queue's merge group). Any other event (a review, a
#: comment, ...) can be triggered by anyone who can see the repository.
RUN_ON_EVENTS = ("push", "schedule", "workflow_dispatch", "merge_group")
NULL_SHA = "0" * 40


@dataclass(frozen=True)
class GateConfig:
    label: str
    min_permission: str
    run_on: frozenset[str]
    require_fresh_head: bool
    paths: tuple[str, ...]
    skip_draft: bool
    gpu_runs_on: str
    """Compact JSON; empty when the workflow names its GPU runners itself."""
    cpu_runs_on: str
    require_approved_review: bool = False


def runs_on_json(name: str, value: str) -> str:
    """A plain runner label becomes a JSON string; JSON is validated and compacted."""
    text = value.strip()
    if not text:
        raise UsageError(f"input '{name}' is empty: give a runner label or a JSON value.")
    if text[0] in '[{"':
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"input '{name}' looks like JSON but does not parse ({exc.msg} at column "
                f"{exc.colno}): {text!r}."
            ) from None
        if not isinstance(parsed, (str, list, dict)):
            raise UsageError(f"input '{name}' must be a label, a list or an object: {text!r}.")
        return json.dumps(parsed, separators=(",", ":"))
    return json.dumps(text)


def parse_run_on(items: Sequence[str]) -> frozenset[str]:
    """``run-on``: only events whose commit needs no approval; anything else is refused."""
    events = {item.strip().lower() for item in items if item.strip()}
    label_path = sorted(events & set(PR_EVENTS))
    if label_path:
        raise UsageError(
            f"input 'run-on' lists {', '.join(label_path)}: pull requests always take the "
            "label path (a maintainer applies the gate label); remove it from run-on."
        )
    unknown = sorted(events - set(RUN_ON_EVENTS))
    if unknown:
        raise UsageError(
            f"input 'run-on' lists {', '.join(repr(e) for e in unknown)}: only "
            f"{', '.join(RUN_ON_EVENTS)} may run without a label (other events, such as "
            "reviews or comments, can be triggered by anyone)."
        )
    return frozenset(events)


def make_config(
    label: str,
    min_permission: str,
    run_on: Sequence[str],
    require_fresh_head: bool,
    paths: Sequence[str],
    skip_draft: bool,
    gpu_runs_on: str,
    cpu_runs_on: str,
    require_approved_review: bool = False,
) -> GateConfig:
    perm = min_permission.strip().lower()
    if perm not in MIN_PERMISSIONS:
        raise UsageError(
            f"input 'min-permission' must be one of {', '.join(MIN_PERMISSIONS)}; got "
            f"{min_permission!r}."
        )
    if not label.strip():
        raise UsageError("input 'label' is empty: name the label that approves a GPU run.")
    return GateConfig(
        label=label.strip(),
        min_permission=perm,
        run_on=parse_run_on(run_on),
        require_fresh_head=require_fresh_head,
        paths=tuple(paths),
        skip_draft=skip_draft,
        # no default: a default naming self-hosted labels would send jobs to whatever
        # runner happens to carry them
        gpu_runs_on=runs_on_json("gpu-runs-on", gpu_runs_on) if gpu_runs_on.strip() else "",
        cpu_runs_on=runs_on_json("cpu-runs-on", cpu_runs_on),
        require_approved_review=require_approved_review,
    )


@dataclass(frozen=True)
class Decision:
    run: bool
    reason: str
    event: str
    sha: str = ""
    pr_number: str = ""
    label: str = ""
    labeled_by: str = ""
    permission: str = ""
    head_at_label: str = ""
    current_head: str = ""
    fork: bool | None = None
    paths_matched: str = ""

    def runs_on(self, config: GateConfig) -> str:
        return config.gpu_runs_on if self.run else config.cpu_runs_on


@dataclass(frozen=True)
class PullCheck:
    """A gate-label event: needs the labeller's role and the pull request's current state."""

    event: str
    number: int
    labeller: str
    head_sha: str
    fork: bool
    label: str


@dataclass(frozen=True)
class PushCheck:
    """A ``push`` with ``paths`` set: needs the files changed between ``before`` and ``after``."""

    before: str
    after: str
    sha: str


Triage = Union[Decision, PullCheck, PushCheck]


def _event_error(what: str) -> GpuCiError:
    return GpuCiError(f"the event payload at GITHUB_EVENT_PATH {what}.", title="malformed event")


def _pull_fields(payload: Mapping[str, Any]) -> tuple[int, str, bool]:
    subject = subject_of(payload)
    if not subject.pull_request:
        raise _event_error("has no pull_request object")
    if subject.number is None or len(subject.head_sha) != 40:
        raise _event_error("lacks pull_request.number or pull_request.head.sha")
    return subject.number, subject.head_sha, subject.fork


def triage(
    event_name: str, payload: Mapping[str, Any], config: GateConfig, github_sha: str
) -> Triage:
    """Rules 1-4 as far as the payload alone decides them."""
    if event_name in PR_EVENTS:
        number, head_sha, fork = _pull_fields(payload)
        action = str(payload.get("action") or "")
        base = Decision(
            run=False,
            reason="",
            event=f"{event_name}.{action}",
            pr_number=str(number),
            head_at_label=head_sha,
            fork=fork,
            sha=head_sha,
        )
        if action != "labeled":
            return replace(
                base,
                reason=(
                    f"'{action}' events never run the GPU job: a maintainer approves a commit by "
                    f"applying the '{config.label}' label (new commits need a new approval)."
                ),
            )
        label = str((payload.get("label") or {}).get("name") or "")
        if label.casefold() != config.label.casefold():
            return replace(
                base,
                label=label,
                reason=(f"the label applied was '{label}', not the gate label '{config.label}'."),
            )
        sender = str((payload.get("sender") or {}).get("login") or "")
        if not sender:
            raise _event_error("has no sender.login for the labeled event")
        return PullCheck(
            event=base.event,
            number=number,
            labeller=sender,
            head_sha=head_sha,
            fork=fork,
            label=label,
        )
    if event_name in config.run_on:
        sha = github_sha or str(payload.get("after") or "")
        if event_name == "push" and payload.get("after") == NULL_SHA:
            return Decision(
                run=False,
                event=event_name,
                sha="",
                reason=("the push deleted a branch: there is no commit to test."),
            )
        if event_name == "push" and config.paths:
            before = str(payload.get("before") or "")
            after = str(payload.get("after") or sha)
            if before and before != NULL_SHA and after:
                return PushCheck(before=before, after=after, sha=sha)
            return Decision(
                run=True,
                event=event_name,
                sha=sha,
                paths_matched="new branch",
                reason="push of a new branch: paths count as matching.",
            )
        return Decision(
            run=True,
            event=event_name,
            sha=sha,
            reason=f"'{event_name}' is listed in run-on: no label needed.",
        )
    return Decision(
        run=False,
        event=event_name,
        sha=github_sha,
        reason=(
            f"'{event_name}' is neither a labelled pull request nor listed in run-on "
            f"({', '.join(sorted(config.run_on)) or 'empty'})."
        ),
    )


def role_of(permission_answer: Mapping[str, Any]) -> tuple[str, bool]:
    """(role, exact) from ``GET .../collaborators/{user}/permission``.

    ``role_name`` is exact; a custom role or an older server without it falls back to the
    legacy ``permission`` field, which reports maintain as write and triage as read.
    """
    role = str(permission_answer.get("role_name") or "").lower()
    if role in ROLE_RANK:
        return role, True
    legacy = str(permission_answer.get("permission") or "none").lower()
    return (legacy if legacy in ROLE_RANK else "none"), False


def _pull_decision(check: PullCheck, role: str, current: str = "") -> Decision:
    return Decision(
        run=False,
        reason="",
        event=check.event,
        sha=check.head_sha,
        pr_number=str(check.number),
        label=check.label,
        labeled_by=check.labeller,
        permission=role,
        head_at_label=check.head_sha,
        current_head=current,
        fork=check.fork,
    )


def refuse_role(
    check: PullCheck, config: GateConfig, permission_answer: Mapping[str, Any]
) -> Decision | None:
    """The role rule alone: a refusal needs no further API call."""
    role, exact = role_of(permission_answer)
    if ROLE_RANK[role] >= ROLE_RANK[config.min_permission]:
        return None
    note = "" if exact else " (legacy permission field: maintain reads as write, triage as read)"
    return replace(
        _pull_decision(check, role),
        reason=(
            f"{check.labeller} has the '{role}' role{note}; applying '{config.label}' needs "
            f"'{config.min_permission}' or higher."
        ),
    )


def decide_pull(
    check: PullCheck,
    config: GateConfig,
    permission_answer: Mapping[str, Any],
    pull: Mapping[str, Any],
    changed_files: Sequence[str] | None,
) -> Decision:
    refused = refuse_role(check, config, permission_answer)
    if refused is not None:
        return refused
    role, _ = role_of(permission_answer)
    current = str((pull.get("head") or {}).get("sha") or "")
    base = _pull_decision(check, role, current)
    state = str(pull.get("state") or "")
    if state != "open":
        return replace(base, reason=f"pull request #{check.number} is {state or 'not open'}.")
    if config.skip_draft and pull.get("draft"):
        return replace(
            base,
            reason=(
                f"pull request #{check.number} is a draft and skip-draft is true: mark it ready "
                f"for review and apply '{config.label}' again."
            ),
        )
    if config.require_fresh_head and current != check.head_sha:
        return replace(
            base,
            reason=(
                f"the head moved from {check.head_sha[:12]} to {current[:12] or '?'} after "
                f"'{config.label}' was applied: review the new commits and apply the label again."
            ),
        )
    if config.paths:
        assert changed_files is not None, "paths set: the shell must fetch the PR's files"
        match = match_paths(config.paths, changed_files, PULL_FILES_MAX)
        if match.capped:
            base = replace(
                base,
                paths_matched=(
                    f"unknown: GitHub lists at most {PULL_FILES_MAX} files of a pull request and "
                    "none of those matches; running rather than skipping"
                ),
            )
        elif not match.matched:
            return replace(
                base,
                paths_matched="no",
                reason=(f"none of the {len(changed_files)} changed files matches paths."),
            )
        else:
            base = replace(base, paths_matched=str(match.first_file))
    fork = " from a fork" if check.fork else ""
    return replace(
        base,
        run=True,
        reason=(
            f"{check.labeller} ({role}) applied '{config.label}' to #{check.number}{fork} at "
            f"{check.head_sha[:12]}."
        ),
    )


def approvers_of(reviews: Sequence[Mapping[str, Any]], head_sha: str) -> list[str]:
    """Logins whose latest deciding review approves exactly ``head_sha``, in review order.

    ``GET /pulls/{n}/reviews`` lists reviews oldest first. A reviewer's latest APPROVED,
    CHANGES_REQUESTED or DISMISSED review is their verdict (COMMENTED and PENDING change
    nothing); an approval counts only for the commit it was given on.
    """
    latest: dict[str, Mapping[str, Any]] = {}
    for review in reviews:
        state = str(review.get("state") or "").upper()
        login = str((review.get("user") or {}).get("login") or "")
        if login and state in ("APPROVED", "CHANGES_REQUESTED", "DISMISSED"):
            latest.pop(login, None)
            latest[login] = review
    return [
        login
        for login, review in latest.items()
        if str(review.get("state")).upper() == "APPROVED" and review.get("commit_id") == head_sha
    ]


def decide_review(
    decision: Decision, config: GateConfig, approver: str | None, role: str
) -> Decision:
    """``require-approved-review``: a run also needs an approval of the head it runs."""
    if not decision.run or not config.require_approved_review:
        return decision
    head = decision.sha  # the commit that runs (the head when require-fresh-head is true)
    if approver is None:
        return replace(
            decision,
            run=False,
            reason=(
                f"require-approved-review is true and no review by someone with the "
                f"'{config.min_permission}' role or higher approves the head {head[:12]}: "
                f"approve that commit, then apply '{config.label}' again."
            ),
        )
    return replace(
        decision, reason=(f"{decision.reason[:-1]}; {approver} ({role}) approved that commit.")
    )


def decide_push(check: PushCheck, config: GateConfig, changed_files: Sequence[str]) -> Decision:
    match = match_paths(config.paths, changed_files, COMPARE_FILES_MAX)
    if match.capped:
        return Decision(
            run=True,
            event="push",
            sha=check.sha,
            paths_matched="unknown (compare lists at most 300 files)",
            reason=f"none of the first {COMPARE_FILES_MAX} files changed by the "
            "push matches paths, but GitHub's compare lists no more than "
            f"{COMPARE_FILES_MAX}: the rest cannot be read, so the GPU job runs.",
        )
    if match.matched:
        return Decision(
            run=True,
            event="push",
            sha=check.sha,
            paths_matched=str(match.first_file),
            reason=f"push touches {match.first_file}, which matches paths.",
        )
    return Decision(
        run=False,
        event="push",
        sha=check.sha,
        paths_matched="no",
        reason=f"none of the {len(changed_files)} files changed by the push matches paths.",
    )
