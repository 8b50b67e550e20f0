"""gpu-status on ``pull_request_target``: opened, reopened, synchronize, labeled.

When the approved pull request closes, its approval of the head ends ("Approval ended");
a later pull request at the same commit needs its own. Otherwise only the head's own
approval state changes the status: an ``opened``, ``reopened`` or
``synchronize`` of *another* pull request at an approved head posts nothing (the approval
names its pull request), a final result stays, and a refused label posts "Not approved"
only when there is no approval, run or result to overwrite.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_ci.errors import UsageError
from gpu_ci.github.approval import (
    approval_link,
    approval_status,
    comment_pull,
    current,
    ended_text,
    pull_of,
    queued_text,
    trusted_statuses,
)
from gpu_ci.github.commit_status import FINAL, Status, clip, latest_of, short
from gpu_ci.github.event import NEW_HEAD, is_gate_label, label_of
from gpu_ci.github.status.config import Outcome, StatusConfig


def waiting(
    config: StatusConfig, sha: str, action: str, before: str = "", target_url: str = ""
) -> Status:
    """The "waiting for approval" status of a new head.

    It revokes older approvals."""
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
    """The status after the gate decided on the label: approved or refused.

    An approval's link names the GPU workflow file it covers (``workflow``)."""
    if run:
        if not labeled_by:
            raise UsageError(
                "input 'labeled-by' is empty although 'gate-run' is true: pass "
                "the gate's labeled-by output."
            )
        link = approval_link(target_url, (config.workflow,)) if target_url else ""
        return Status(sha, "pending", clip(queued_text(labeled_by, sha)), link)
    return Status(
        sha, "pending", clip(f"Not approved: {reason or 'the gate refused.'}"), target_url
    )


@dataclass(frozen=True)
class GateOutputs:
    """gpu-gate's outputs for this event, as gpu-status's inputs pass them."""

    run: bool | None = None
    """The gate's ``run``; None when the gate did not run in this job."""
    reason: str = ""
    labeled_by: str = ""


def for_pull_event(
    config: StatusConfig,
    action: str,
    payload: Mapping[str, Any],
    gate: GateOutputs,
    server_url: str,
    repository: str,
    listed: Sequence[Mapping[str, Any]] = (),
) -> Outcome:
    """The status a pull request event posts, if any.

    ``listed``: the head's statuses, newest first (for opened, reopened, synchronize and a
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
    if action == "closed":
        return _closed(config, listed, sha, number, link)
    if pr.get("state") == "closed":
        return Outcome(None, f"pull request #{number} is closed.")
    if action in NEW_HEAD:
        kept = _head_keeps(config, listed, sha, number)
        if kept is not None:
            return kept
    if action in NEW_HEAD and gate.run:
        # trusted-authors: the gate ran this head without a label (the author's own commit);
        # the approval names the author, whose pull_request run it then binds, as a label's
        return Outcome(
            after_gate(config, sha, True, gate.reason, gate.labeled_by, link),
            "a trusted author's own head.",
        )
    if action in ("opened", "reopened", "ready_for_review"):
        return Outcome(waiting(config, sha, action, target_url=link), "new pull request head.")
    if action == "synchronize":
        before = str(payload.get("before") or "")
        return Outcome(waiting(config, sha, action, before, link), "new commits pushed.")
    if action == "labeled":
        return _labeled(config, payload, listed, sha, gate, link)
    return Outcome(None, f"'{action}' does not change the status.")


def _closed(
    config: StatusConfig, listed: Sequence[Mapping[str, Any]], sha: str, number: int, link: str
) -> Outcome:
    """The approved pull request closed: its approval of the head ends.

    A final result stays (the approval already ended with it); an approval of another
    pull request, or none, leaves the head alone."""
    latest = latest_of(listed, config.context)
    if latest is None or latest.get("state") in FINAL:
        return Outcome(None, f"pull request #{number} closed; no approval of it is open.")
    found = current(config, listed, sha)
    if found is None or found.number != number:
        return Outcome(None, f"#{number} closed; {short(sha)} holds no approval of it.")
    return Outcome(
        Status(sha, "pending", clip(ended_text(number)), link),
        f"pull request #{number} closed: its approval of {short(sha)} ends.",
    )


def _head_keeps(
    config: StatusConfig, listed: Sequence[Mapping[str, Any]], sha: str, number: int
) -> Outcome | None:
    """Why a new head event leaves the status alone, or None."""
    latest = latest_of(listed, config.context)
    if latest is not None and latest.get("state") in FINAL:
        # A result is about the commit, not the pull request: another pull request
        # (anyone's) opened at this commit, or a push back to it, must not reset it.
        return Outcome(
            None,
            f"{short(sha)} already has a final '{config.context}' result ({latest.get('state')}).",
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
    return None


def _labeled(
    config: StatusConfig,
    payload: Mapping[str, Any],
    listed: Sequence[Mapping[str, Any]],
    sha: str,
    gate: GateOutputs,
    link: str,
) -> Outcome:
    """A label was applied: post the gate's decision, unless a refusal would reset more."""
    name = label_of(payload)
    if not is_gate_label(name, config.label):
        return Outcome(None, f"the label '{name}' is not the gate label.")
    if gate.run is None:
        raise UsageError(
            "a gate-label event needs the gate's decision: run gpu-gate in "
            "the same job and pass its run, reason and labeled-by outputs "
            "as gate-run, gate-reason and labeled-by."
        )
    latest = latest_of(listed, config.context)
    if (
        not gate.run
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
            f"the gate refused ({gate.reason or 'no reason given'}); "
            f"{short(sha)}'s approval or result in '{config.context}' stays.",
        )
    return Outcome(
        after_gate(config, sha, gate.run, gate.reason, gate.labeled_by, link),
        "the gate decided on the label.",
    )
