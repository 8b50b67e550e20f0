"""gpu-gate's decision once the API answers a check asked for are in.

The role rule, the head rule, the shared pull request rules (open, draft, ``paths``), for
a label, a comment command, a trusted author's push and a ``push`` with ``paths``. The
comment and commit rules themselves live in :mod:`gpu_ci.github.comment`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpu_ci.github import comment
from gpu_ci.github.approval import HOW_COMMENT, HOW_LABEL, HOW_TRUSTED_AUTHOR
from gpu_ci.github.gate.checks import (
    CommentCheck,
    Decision,
    PullCheck,
    PushCheck,
    RelayCheck,
    TrustedCheck,
)
from gpu_ci.github.gate.config import ROLE_RANK, GateConfig
from gpu_ci.github.gate.paths import COMPARE_FILES_MAX, PULL_FILES_MAX, match_paths
from gpu_ci.github.roles import role_of as role_of  # the gate's name for it

#: The key the shell adds to a permission answer when ``approvers`` lists its login.
ALLOWED_BY = "allowed_by"


def qualifies(permission_answer: Mapping[str, Any], config: GateConfig) -> bool:
    """Whether the account may approve: ``min-permission`` or listed in ``approvers``."""
    role, _ = role_of(permission_answer)
    if ROLE_RANK[role] >= ROLE_RANK[config.min_permission]:
        return True
    return bool(permission_answer.get(ALLOWED_BY))


def _who(login: str, permission_answer: Mapping[str, Any]) -> str:
    """How a reason names an approver: their role, or the approvers entry that lists them."""
    role, _ = role_of(permission_answer)
    listed = permission_answer.get(ALLOWED_BY)
    return f"{login} ({role}; approvers: {listed})" if listed else f"{login} ({role})"


def _needs(config: GateConfig, what: str) -> str:
    """What ``what`` needs, in a refusal by role."""
    listed = f", or to be listed in approvers ({', '.join(config.approvers)})"
    return f"{what} needs '{config.min_permission}' or higher" + (
        listed if config.approvers else ""
    )


def _base(
    check: PullCheck | TrustedCheck, who: str, role: str, current: str, approval: str
) -> Decision:
    """The refused decision a label's or a trusted author's approval starts from.

    One place says which fields an approval fills."""
    return Decision(
        run=False,
        reason="",
        event=check.event,
        sha=check.head_sha,
        pr_number=str(check.number),
        label=check.label if isinstance(check, PullCheck) else "",
        labeled_by=who,
        permission=role,
        head_at_label=check.head_sha,
        current_head=current,
        fork=check.fork,
        approval=approval,
    )


def _pull_decision(check: PullCheck, role: str, current: str = "") -> Decision:
    """A label approval's starting decision."""
    return _base(check, check.labeller, role, current, HOW_LABEL)


def refuse_role(
    check: PullCheck, config: GateConfig, permission_answer: Mapping[str, Any]
) -> Decision | None:
    """The role rule alone: a refusal needs no further API call."""
    base = _pull_decision(check, role_of(permission_answer)[0])
    what = f"applying '{config.label}'"
    return _role_refusal(base, check.labeller, config, permission_answer, what)


def _head_sha(pull: Mapping[str, Any]) -> str:
    """The pull request's head commit now ('' when unknown)."""
    return str((pull.get("head") or {}).get("sha") or "")


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
    base = _pull_decision(check, role_of(permission_answer)[0], _head_sha(pull))
    again = f"apply '{config.label}' again"
    moved = _moved(check, pull, config)
    if config.require_fresh_head and moved:
        return replace(
            base,
            reason=(
                f"{moved} after '{config.label}' was applied: review the new commits and "
                "apply the label again."
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
            f"{_who(check.labeller, permission_answer)} applied '{config.label}' to "
            f"#{check.number}{fork} at "
            f"{check.head_sha[:12]}."
        ),
    )


def _is_open(pull: Mapping[str, Any], config: GateConfig) -> bool:
    return pull.get("state") == "open" and not (config.skip_draft and pull.get("draft"))


def _moved(check: PullCheck | TrustedCheck, pull: Mapping[str, Any], config: GateConfig) -> str:
    """How an open pull request's head moved since the event.

    '' when it did not move, or the pull request is not open."""
    current = _head_sha(pull)
    if current == check.head_sha or not _is_open(pull, config):
        return ""
    return f"the head moved from {check.head_sha[:12]} to {current[:12] or '?'}"


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
    if qualifies(answer, config):
        return None
    note = "" if exact else " (legacy permission field: maintain reads as write, triage as read)"
    return replace(
        base,
        permission=role,
        reason=f"{login} has the '{role}' role{note}; {_needs(config, what)}.",
    )


def decide_comment(
    check: CommentCheck,
    config: GateConfig,
    permission_answer: Mapping[str, Any],
    pull: Mapping[str, Any],
    changed_files: Sequence[str] | None,
) -> Decision:
    """A comment command: the commenter's role, then the stated SHA against the head now."""
    current = _head_sha(pull)
    base = _comment_base(check, permission_answer, pull)
    command = f"'{config.comment_command}'"
    refused = _role_refusal(
        base, check.commenter, config, permission_answer, f"a {command} comment"
    )
    if refused is not None:
        return refused
    tiers = "".join(f" {tier}" for tier in check.command.tiers)
    again = f"comment '{config.comment_command} <sha>{tiers}' again"
    why = _stated_sha_refusal(check, config, current, base.fork, again)
    if why:
        return replace(base, reason=why)
    base = replace(base, sha=current)
    base, refused_now = _pull_rules(base, check.number, config, pull, changed_files, again)
    if refused_now:
        return base
    fork = " from a fork" if base.fork else ""
    named = f" (tiers: {', '.join(base.tiers)})" if base.tiers else ""
    return replace(
        base,
        run=True,
        reason=(
            f"{_who(check.commenter, permission_answer)} commented {command} for #{check.number}"
            f"{fork} at {current[:12]}{named}."
        ),
    )


def _comment_base(
    check: CommentCheck, permission_answer: Mapping[str, Any], pull: Mapping[str, Any]
) -> Decision:
    """A comment command's refused starting decision."""
    head = (pull.get("head") or {}).get("repo") or {}
    base_repo = ((pull.get("base") or {}).get("repo") or {}).get("full_name")
    return Decision(
        run=False,
        reason="",
        event=check.event,
        pr_number=str(check.number),
        labeled_by=check.commenter,
        permission=role_of(permission_answer)[0],
        head_at_label=check.command.sha,
        current_head=_head_sha(pull),
        # unknown until the pull request is read (a refused commenter's is never read)
        fork=None
        if not pull
        else head.get("full_name") is None or head.get("full_name") != base_repo,
        approval=HOW_COMMENT,
        comment_url=check.url,
        tiers=check.command.tiers,
    )


def _stated_sha_refusal(
    check: CommentCheck, config: GateConfig, current: str, fork: bool | None, again: str
) -> str:
    """Why the commit a command names does not approve the head.

    '' when it does."""
    sha, tiers = check.command.sha, "".join(f" {tier}" for tier in check.command.tiers)
    if not sha:
        return (
            f"the command names no commit: state the head you reviewed, "
            f"'{config.comment_command} {current}{tiers}'."
        )
    if not comment.matches_head(sha, current):
        return (
            f"the comment names {sha[:12]}, but the head of #{check.number} is "
            f"{current[:12] or '?'}: review the head and {again} with its SHA."
        )
    if fork and len(sha) != 40:
        # a fork's author can grind a commit whose short SHA matches (2^28 tries for 7 digits)
        return (
            f"#{check.number} comes from a fork, so the comment must name the full 40-digit "
            f"SHA, not {sha}: review the head and comment "
            f"'{config.comment_command} {current}{tiers}'."
        )
    return ""


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
    return config.ways()


def refuse_unreadable(check: TrustedCheck, config: GateConfig, role: str, why: str) -> Decision:
    """A trusted author's head commit the API cannot show: it needs an approval."""
    return replace(
        _trusted_base(check, role, ""),
        reason=(
            f"the head commit {check.head_sha[:12]} cannot be read ({why}), so whose commit "
            f"it is is unknown: {_how_to_approve(config)}"
        ),
    )


def _trusted_base(check: TrustedCheck, role: str, current: str) -> Decision:
    """A trusted author's starting decision."""
    return _base(check, check.author, role, current, HOW_TRUSTED_AUTHOR)


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
    base = _trusted_base(check, role, _head_sha(pull))
    moved = _moved(check, pull, config)
    if moved:
        return replace(base, reason=f"{moved}: the run of the newer push decides.")
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


@dataclass(frozen=True)
class Candidate:
    """A comment whose first line is a command naming a given head."""

    login: str
    command: comment.Command
    url: str


def relay_candidates(
    comments: Sequence[Mapping[str, Any]], config: GateConfig, head: str, fork: bool
) -> list[Candidate]:
    """The unedited commands naming ``head`` among a pull request's comments, newest first.

    ``comments`` as ``GET /issues/{n}/comments`` lists them (oldest first). An edited
    comment's text is not what its author wrote when the relay ran, so it is skipped."""
    out = []
    for note in reversed(comments):
        if note.get("updated_at") != note.get("created_at"):
            continue
        login = str((note.get("user") or {}).get("login") or "")
        body = str(note.get("body") or "")
        command = comment.parse_command(body, config.comment_command, config.tiers)
        if not login or command is None or command.problem:
            continue
        if not comment.matches_head(command.sha, head) or (fork and len(command.sha) != 40):
            continue
        out.append(Candidate(login, command, str(note.get("html_url") or "")))
    return out


def decide_relay(
    check: RelayCheck,
    config: GateConfig,
    pull: Mapping[str, Any],
    candidates: Sequence[tuple[Candidate, Mapping[str, Any]]],
    changed_files: Sequence[str] | None,
) -> Decision:
    """The relay bot's label: the newest command for its head by someone with the role.

    ``candidates``: :func:`relay_candidates` with each commenter's role answer."""
    for found, answer in candidates:
        if not qualifies(answer, config):
            continue
        step = CommentCheck(check.event, check.number, found.login, found.command, found.url)
        decision = decide_comment(step, config, answer, pull, changed_files)
        relayed = f" (relayed by {check.bot} as '{check.label}')"
        reason = decision.reason[:-1] + relayed + "." if decision.run else decision.reason
        return replace(decision, label=check.label, reason=reason)
    current = _head_sha(pull)
    return Decision(
        run=False,
        event=check.event,
        pr_number=str(check.number),
        label=check.label,
        labeled_by=check.bot,
        head_at_label=check.head_sha,
        current_head=current,
        fork=check.fork,
        approval=HOW_COMMENT,
        reason=(
            f"{check.bot} applied '{check.label}', but no unedited comment on #{check.number} "
            f"by someone with the '{config.min_permission}' role or higher names the head "
            f"{check.head_sha[:12]}: the relay's label approves nothing by itself; comment "
            f"'{config.comment_command} {check.head_sha}' to approve it."
        ),
    )


def relayed(decision: Decision, label: str, bot: str) -> Decision:
    """A valid command, relayed as ``label``: the ``labeled`` run re-reads it and decides."""
    return replace(
        decision,
        run=False,
        relayed=label,
        reason=(
            f"{decision.reason[:-1]}; relayed as '{label}' by {bot}: the pull_request "
            "'labeled' run re-reads the command and runs the GPU job."
        ),
    )


def relay_unset(decision: Decision, label: str) -> str:
    """Why a command approves nothing without ``relay-token``, and what to set up."""
    return (
        f"{decision.reason[:-1]}, but relay-token is empty, so it approves nothing: the "
        f"comment workflow relays a command as the label '{label}', applied with a GitHub "
        "App installation token (actions/create-github-app-token) or a fine-grained PAT "
        "with pull-requests: write, passed as relay-token (a label applied with "
        "GITHUB_TOKEN starts no workflow)."
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
        tiers = "".join(f" {tier}" for tier in decision.tiers)
        again = {
            "comment": f"post the '{config.comment_command} <sha>{tiers}' command again",
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
