"""The gpu-gate decision, as pure functions of the event payload and API answers.

The shell (``commands/gpu_gate.py``) calls :func:`triage` on the event; a final
:class:`Decision` needs no API call. Otherwise it fetches exactly what the returned check
asks for (the labeller's role and the pull request: two REST calls; changed files only
when ``paths`` is set) and calls :func:`decide_pull` or :func:`decide_push`. A comment
command (:class:`CommentCheck`) needs the same two calls and :func:`decide_comment`; a
trusted author's push (:class:`TrustedCheck`) those plus the head commit, and
:func:`decide_trusted`. The comment and commit rules themselves live in
:mod:`gpu_ci.github.comment`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Union

from gpu_ci.errors import GpuCiError, UsageError
from gpu_ci.github import comment
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
#: Pull request actions that run a trusted author's head without an approval.
TRUSTED_ACTIONS = ("opened", "synchronize", "reopened", "ready_for_review")


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
    comment_command: str = ""
    """Empty: comment commands are off."""
    tiers: tuple[str, ...] = ()
    trusted_authors: str = ""
    """The least role of a pull request's author whose own pushes run unapproved; empty: off."""
    trusted_authors_verified: bool = False


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
    comment_command: str = "",
    tiers: Sequence[str] = (),
    trusted_authors: str = "",
    trusted_authors_verified: bool = False,
) -> GateConfig:
    perm = _role_input("min-permission", min_permission)
    trusted = trusted_authors.strip().lower()
    trusted = "" if trusted in ("", "false", "none", "off") else trusted
    if trusted:
        trusted = _role_input("trusted-authors", trusted)
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
        comment_command=comment.parse_command_setting(comment_command),
        tiers=comment.parse_tiers(tiers),
        trusted_authors=trusted,
        trusted_authors_verified=trusted_authors_verified,
    )


def _role_input(name: str, value: str) -> str:
    role = value.strip().lower()
    if role not in MIN_PERMISSIONS:
        off = " (or empty to turn trusted authors off)" if name == "trusted-authors" else ""
        raise UsageError(
            f"input '{name}' must be one of {', '.join(MIN_PERMISSIONS)}{off}; got {value!r}."
        )
    return role


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
    approval: str = ""
    """How the run was approved: label, comment, trusted-author, or empty (no approval, or an
    event in run-on)."""
    tiers: tuple[str, ...] = ()
    comment_url: str = ""

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


@dataclass(frozen=True)
class CommentCheck:
    """A comment command on a pull request: needs the commenter's role and the pull request."""

    event: str
    number: int
    commenter: str
    command: comment.Command
    url: str


@dataclass(frozen=True)
class TrustedCheck:
    """A push to (or the opening of) a pull request with ``trusted-authors`` set: needs the
    author's role, the pull request and its head commit."""

    event: str
    number: int
    author: str
    head_sha: str
    fork: bool


Triage = Union[Decision, PullCheck, PushCheck, CommentCheck, TrustedCheck]


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
        if action in TRUSTED_ACTIONS and config.trusted_authors:
            author = str(((payload.get("pull_request") or {}).get("user") or {}).get("login") or "")
            if not author:
                raise _event_error("has no pull_request.user.login")
            return TrustedCheck(base.event, number, author, head_sha, fork)
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
    if event_name == "issue_comment" and config.comment_command:
        return triage_comment(payload, config)
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


def triage_comment(payload: Mapping[str, Any], config: GateConfig) -> Decision | CommentCheck:
    """An ``issue_comment`` event: only a new command on a pull request goes further."""
    action = str(payload.get("action") or "")
    issue = payload.get("issue") or {}
    number = issue.get("number") if isinstance(issue, dict) else None
    note = payload.get("comment") or {}
    base = Decision(
        run=False,
        reason="",
        event=f"issue_comment.{action}",
        pr_number=str(number or ""),
        approval="comment",
        comment_url=str(note.get("html_url") or ""),
    )
    if not isinstance(issue, dict) or not issue.get("pull_request"):
        return replace(
            base, reason=f"#{number} is an issue, not a pull request: its comments run nothing."
        )
    if not isinstance(number, int) or not isinstance(note, dict):
        raise _event_error("lacks issue.number or the comment object")
    command = comment.parse_command(
        str(note.get("body") or ""), config.comment_command, config.tiers
    )
    if action != "created":
        what = "edited" if action == "edited" else action or "changed"
        return replace(
            base,
            reason=(
                f"the comment was {what}: only a new comment approves (what was approved must "
                f"be what was written), so post a new '{config.comment_command} <sha>'."
            ),
        )
    if command is None:
        return replace(
            base,
            reason=f"the comment's first line is not a '{config.comment_command}' command.",
        )
    commenter = str((note.get("user") or {}).get("login") or "")
    if not commenter:
        raise _event_error("has no comment.user.login")
    if command.problem:
        return replace(base, labeled_by=commenter, reason=command.problem)
    return CommentCheck(base.event, number, commenter, command, base.comment_url)


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


def _base(
    *,
    event: str,
    number: int,
    head_sha: str,
    who: str,
    role: str,
    current: str,
    fork: bool,
    approval: str,
    label: str = "",
) -> Decision:
    """The refused decision every approval path starts from (label, comment's pull request and
    trusted author alike): one place says which fields an approval fills."""
    return Decision(
        run=False,
        reason="",
        event=event,
        sha=head_sha,
        pr_number=str(number),
        label=label,
        labeled_by=who,
        permission=role,
        head_at_label=head_sha,
        current_head=current,
        fork=fork,
        approval=approval,
    )


def _pull_decision(check: PullCheck, role: str, current: str = "") -> Decision:
    return _base(
        event=check.event,
        number=check.number,
        head_sha=check.head_sha,
        who=check.labeller,
        role=role,
        current=current,
        fork=check.fork,
        approval="label",
        label=check.label,
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
    again = f"apply '{config.label}' again"
    if config.require_fresh_head and current != check.head_sha and _is_open(pull, config):
        return replace(
            base,
            reason=(
                f"the head moved from {check.head_sha[:12]} to {current[:12] or '?'} after "
                f"'{config.label}' was applied: review the new commits and apply the label again."
            ),
        )
    base, refused_now = _pull_rules(base, check.number, config, pull, changed_files, again)
    if refused_now:
        return base
    fork = " from a fork" if check.fork else ""
    return replace(
        base,
        run=True,
        reason=(
            f"{check.labeller} ({role}) applied '{config.label}' to #{check.number}{fork} at "
            f"{check.head_sha[:12]}."
        ),
    )


def _is_open(pull: Mapping[str, Any], config: GateConfig) -> bool:
    return pull.get("state") == "open" and not (config.skip_draft and pull.get("draft"))


def _pull_rules(
    base: Decision,
    number: int,
    config: GateConfig,
    pull: Mapping[str, Any],
    changed_files: Sequence[str] | None,
    again: str,
) -> tuple[Decision, bool]:
    """The rules every approval path shares: open, not a skipped draft, ``paths``.
    Returns the decision so far and whether it is a refusal."""
    state = str(pull.get("state") or "")
    if state != "open":
        return replace(base, reason=f"pull request #{number} is {state or 'not open'}."), True
    if config.skip_draft and pull.get("draft"):
        reason = (
            f"pull request #{number} is a draft and skip-draft is true: mark it ready "
            f"for review and {again}."
        )
        return replace(base, reason=reason), True
    if not config.paths:
        return base, False
    assert changed_files is not None, "paths set: the shell must fetch the PR's files"
    match = match_paths(config.paths, changed_files, PULL_FILES_MAX)
    if match.capped:
        return replace(
            base,
            paths_matched=(
                f"unknown: GitHub lists at most {PULL_FILES_MAX} files of a pull request and "
                "none of those matches; running rather than skipping"
            ),
        ), False
    if not match.matched:
        reason = f"none of the {len(changed_files)} changed files matches paths."
        return replace(base, paths_matched="no", reason=reason), True
    return replace(base, paths_matched=str(match.first_file)), False


def _role_refusal(
    base: Decision, login: str, config: GateConfig, answer: Mapping[str, Any], what: str
) -> Decision | None:
    role, exact = role_of(answer)
    if ROLE_RANK[role] >= ROLE_RANK[config.min_permission]:
        return None
    note = "" if exact else " (legacy permission field: maintain reads as write, triage as read)"
    return replace(
        base,
        permission=role,
        reason=(
            f"{login} has the '{role}' role{note}; {what} needs '{config.min_permission}' or "
            "higher."
        ),
    )


def decide_comment(
    check: CommentCheck,
    config: GateConfig,
    permission_answer: Mapping[str, Any],
    pull: Mapping[str, Any],
    changed_files: Sequence[str] | None,
) -> Decision:
    """A comment command: the commenter's role, then the stated SHA against the head now."""
    current = str((pull.get("head") or {}).get("sha") or "")
    head = (pull.get("head") or {}).get("repo") or {}
    base_repo = ((pull.get("base") or {}).get("repo") or {}).get("full_name")
    base = Decision(
        run=False,
        reason="",
        event=check.event,
        pr_number=str(check.number),
        labeled_by=check.commenter,
        permission=role_of(permission_answer)[0],
        head_at_label=check.command.sha,
        current_head=current,
        fork=head.get("full_name") is None or head.get("full_name") != base_repo,
        approval="comment",
        comment_url=check.url,
        tiers=check.command.tiers,
    )
    command = f"'{config.comment_command}'"
    refused = _role_refusal(
        base, check.commenter, config, permission_answer, f"a {command} comment"
    )
    if refused is not None:
        return refused
    again = f"comment '{config.comment_command} <sha>' again"
    if not check.command.sha:
        return replace(
            base,
            reason=(
                f"the command names no commit: state the head you reviewed, "
                f"'{config.comment_command} {current}'."
            ),
        )
    if not comment.matches_head(check.command.sha, current):
        return replace(
            base,
            reason=(
                f"the comment names {check.command.sha[:12]}, but the head of #{check.number} is "
                f"{current[:12] or '?'}: review the head and {again} with its SHA."
            ),
        )
    if base.fork and len(check.command.sha) != 40:
        # a fork's author can grind a commit whose short SHA matches (2^28 tries for 7 digits)
        return replace(
            base,
            reason=(
                f"#{check.number} comes from a fork, so the comment must name the full 40-digit "
                f"SHA, not {check.command.sha}: review the head and comment "
                f"'{config.comment_command} {current}'."
            ),
        )
    base = replace(base, sha=current)
    base, refused_now = _pull_rules(base, check.number, config, pull, changed_files, again)
    if refused_now:
        return base
    fork = " from a fork" if base.fork else ""
    tiers = f" (tiers: {', '.join(base.tiers)})" if base.tiers else ""
    return replace(
        base,
        run=True,
        reason=(
            f"{check.commenter} ({base.permission}) commented {command} for #{check.number}"
            f"{fork} at {current[:12]}{tiers}."
        ),
    )


def refuse_trusted(
    check: TrustedCheck, config: GateConfig, permission_answer: Mapping[str, Any]
) -> Decision | None:
    """The author's role alone: below ``trusted-authors``, the push needs an approval."""
    role, _ = role_of(permission_answer)
    if ROLE_RANK[role] >= ROLE_RANK[config.trusted_authors]:
        return None
    return replace(
        _trusted_base(check, role, ""),
        reason=(
            f"the author {check.author} has the '{role}' role, below trusted-authors "
            f"('{config.trusted_authors}'): {_how_to_approve(config)}"
        ),
    )


def _how_to_approve(config: GateConfig) -> str:
    way = f"a maintainer applies '{config.label}'"
    if config.comment_command:
        way += f" or comments '{config.comment_command} <sha>'"
    return way + "."


def _trusted_base(check: TrustedCheck, role: str, current: str) -> Decision:
    return _base(
        event=check.event,
        number=check.number,
        head_sha=check.head_sha,
        who=check.author,
        role=role,
        current=current,
        fork=check.fork,
        approval="trusted-author",
    )


def decide_trusted(
    check: TrustedCheck,
    config: GateConfig,
    permission_answer: Mapping[str, Any],
    pull: Mapping[str, Any],
    head_commit: Mapping[str, Any],
    changed_files: Sequence[str] | None,
) -> Decision:
    """A trusted author's push: their role, the head unmoved, the head commit theirs."""
    refused = refuse_trusted(check, config, permission_answer)
    if refused is not None:
        return refused
    role, _ = role_of(permission_answer)
    current = str((pull.get("head") or {}).get("sha") or "")
    base = _trusted_base(check, role, current)
    if current != check.head_sha and _is_open(pull, config):
        return replace(
            base,
            reason=(
                f"the head moved from {check.head_sha[:12]} to {current[:12] or '?'}: the run "
                "of the newer push decides."
            ),
        )
    why = comment.foreign_head(pull, check.author) or comment.untrusted_push(
        head_commit, check.author, config.trusted_authors_verified
    )
    if why:
        return replace(base, reason=f"{why} ({_how_to_approve(config)})")
    base, refused_now = _pull_rules(base, check.number, config, pull, changed_files, "push again")
    if refused_now:
        return base
    signed = " verified" if config.trusted_authors_verified else ""
    return replace(
        base,
        run=True,
        reason=(
            f"{check.author} ({role}) is a trusted author and the{signed} head "
            f"{check.head_sha[:12]} of #{check.number} is their own commit."
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
        again = {
            "comment": f"post the '{config.comment_command}' command again",
            "trusted-author": "re-run this workflow",
        }.get(decision.approval, f"apply '{config.label}' again")
        return replace(
            decision,
            run=False,
            reason=(
                f"require-approved-review is true and no review by someone with the "
                f"'{config.min_permission}' role or higher approves the head {head[:12]}: "
                f"approve that commit, then {again}."
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
