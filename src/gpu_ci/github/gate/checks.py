"""gpu-gate's first step: what the event payload alone decides.

:func:`triage` returns a final :class:`Decision`, or the check that says which API answers
the decision needs (:mod:`gpu_ci.github.gate.decide` takes them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Union

from gpu_ci.errors import GpuCiError
from gpu_ci.github import comment
from gpu_ci.github.approval import HOW_COMMENT
from gpu_ci.github.event import NEW_HEAD, PR_EVENTS, is_gate_label, label_of, subject_of
from gpu_ci.github.gate.config import GateConfig

NULL_SHA = "0" * 40
#: Pull request actions that run a trusted author's head without an approval.
TRUSTED_ACTIONS = NEW_HEAD


@dataclass(frozen=True)
class Decision:
    """The gate's answer, and every output the action writes."""

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
    head_sha: str = ""
    """With test-merge: the approved head whose merge commit is ``sha``."""
    relayed: str = ""
    """The label a comment command was relayed as (an ``issue_comment`` event never runs)."""

    def runs_on(self, config: GateConfig) -> str:
        """The runner labels the GPU job gets: the GPU runners, or the CPU ones."""
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
class RelayCheck:
    """The relay bot's label: needs the pull request and a command for its head.

    The gate re-reads the pull request's comments for a valid command naming the head, by
    someone with the role (read at decision time): the label alone approves nothing."""

    event: str
    number: int
    bot: str
    head_sha: str
    fork: bool
    label: str


@dataclass(frozen=True)
class TrustedCheck:
    """A trusted author's push to (or opening of) a pull request.

    Needs the author's role, the pull request and its head commit."""

    event: str
    number: int
    author: str
    head_sha: str
    fork: bool


Triage = Union[Decision, PullCheck, PushCheck, CommentCheck, TrustedCheck, RelayCheck]


def _event_error(what: str) -> GpuCiError:
    """The error for a payload that lacks ``what``."""
    return GpuCiError(f"the event payload at GITHUB_EVENT_PATH {what}.", title="malformed event")


def _pull_fields(payload: Mapping[str, Any]) -> tuple[int, str, bool]:
    """(number, head sha, from a fork) of the payload's pull request."""
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
        return _triage_pull(event_name, payload, config)
    if event_name == "issue_comment" and config.comment_command:
        return triage_comment(payload, config)
    if event_name in config.run_on:
        return _triage_run_on(event_name, payload, config, github_sha)
    return Decision(
        run=False,
        event=event_name,
        sha=github_sha,
        reason=(
            f"'{event_name}' is neither a labelled pull request nor listed in run-on "
            f"({', '.join(sorted(config.run_on)) or 'empty'})."
        ),
    )


def _triage_pull(event_name: str, payload: Mapping[str, Any], config: GateConfig) -> Triage:
    """A pull request event: the gate label goes on, a trusted author's push too."""
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
                f"'{action}' events never run the GPU job: {config.ways()[:-1]} (new commits "
                "need a new approval)."
            ),
        )
    return _triage_label(base, payload, config, (number, head_sha, fork))


def _triage_label(
    base: Decision,
    payload: Mapping[str, Any],
    config: GateConfig,
    pull: tuple[int, str, bool],
) -> Triage:
    """A ``labeled`` event: the gate label, the relay's label, or another one."""
    number, head_sha, fork = pull
    label = label_of(payload)
    sender = str((payload.get("sender") or {}).get("login") or "")
    if not sender:
        raise _event_error("has no sender.login for the labeled event")
    relay = config.relay_label_name if config.comment_command else ""
    if relay and is_gate_label(label, relay) and sender.casefold() == config.relay_bot.casefold():
        return RelayCheck(base.event, number, sender, head_sha, fork, label)
    if relay and is_gate_label(label, relay) and not is_gate_label(label, config.label):
        return replace(
            base,
            label=label,
            labeled_by=sender,
            reason=(
                f"'{label}' is the comment relay's label: it counts only when "
                f"{config.relay_bot} applies it for a command; {config.ways()}"
            ),
        )
    if not config.label:
        return replace(
            base,
            label=label,
            reason=f"labels approve nothing here (input 'label' is none): {config.ways()}",
        )
    if not is_gate_label(label, config.label):
        return replace(
            base,
            label=label,
            reason=f"the label applied was '{label}', not the gate label '{config.label}'.",
        )
    return PullCheck(
        event=base.event,
        number=number,
        labeller=sender,
        head_sha=head_sha,
        fork=fork,
        label=label,
    )


def _triage_run_on(
    event_name: str, payload: Mapping[str, Any], config: GateConfig, github_sha: str
) -> Decision | PushCheck:
    """An event listed in ``run-on``: it runs, unless a push deleted its branch."""
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
        approval=HOW_COMMENT,
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
