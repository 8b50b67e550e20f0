"""``test-merge``: run GitHub's merge commit of the approved head, or refuse.

GitHub prepares ``refs/pull/N/merge`` (the pull request's ``merge_commit_sha``) after each
push to the head or the base, asynchronously. A merge commit is what was approved only when
its parents are exactly the base's current commit and the approved head: a commit prepared
for an older head would run code nobody approved, one for an older base tests a stale
main. Anything else refuses, and says whether to wait or to resolve a conflict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gpu_ci.github.gate.checks import Decision

#: What to do when GitHub has not recomputed the merge commit yet.
_WAIT = (
    "GitHub prepares it a few seconds after each push: re-run this workflow's gate job "
    "(the approval stays valid while the head does not move)."
)


def merge_sha_of(pull: Mapping[str, Any]) -> str:
    """The merge commit GitHub offers now, or empty.

    Empty while GitHub computes it, or on a conflict."""
    if pull.get("mergeable") is not True:
        return ""
    return str(pull.get("merge_commit_sha") or "")


def _parents_refusal(merge_commit: Mapping[str, Any], head: str, base: tuple[str, str]) -> str:
    """Why the merge commit does not join base and approved head.

    '' when its parents are (base now, approved head). ``base`` is the base branch's
    (ref, sha) as the pull request says now."""
    base_ref, base_sha = base
    parents = [str(p.get("sha") or "") for p in merge_commit.get("parents") or []]
    if len(parents) != 2 or parents[1] != head:
        for_head = parents[1][:12] if len(parents) == 2 else f"{len(parents)} parents"
        return f"merges {for_head}, not the approved head {head[:12]}"
    if parents[0] != base_sha:
        return (
            f"merges {base_ref} at {parents[0][:12]}, but {base_ref} is at "
            f"{base_sha[:12] or '?'} now"
        )
    return ""


def decide_merge(
    decision: Decision, pull: Mapping[str, Any], merge_commit: Mapping[str, Any] | None
) -> Decision:
    """Swap the approved head for its merge commit, or refuse.

    Its parents must prove it is the one.

    ``pull`` is the pull request read after the approval was decided; ``merge_commit`` is
    ``GET /repos/{o}/{r}/commits/{merge_commit_sha}`` (None when :func:`merge_sha_of` gave
    nothing to read). The decision must be a run of a pull request's head."""
    head = decision.sha
    number = decision.pr_number
    base = pull.get("base") or {}
    base_sha = str(base.get("sha") or "")
    base_ref = str(base.get("ref") or "the base branch")
    refused = replace(decision, run=False, head_sha=head)
    if pull.get("mergeable") is False:
        return replace(
            refused,
            reason=(
                f"test-merge is true and #{number} conflicts with {base_ref}: GitHub cannot "
                f"prepare a merge commit. Merge {base_ref} into the branch or rebase it, then "
                "approve the new head."
            ),
        )
    merge_sha = merge_sha_of(pull)
    if not merge_sha or merge_commit is None:
        return replace(
            refused,
            reason=(
                f"test-merge is true and GitHub has not computed whether #{number} merges "
                f"cleanly into {base_ref} yet: {_WAIT}"
            ),
        )
    why = _parents_refusal(merge_commit, head, (base_ref, base_sha))
    if why:
        return replace(
            refused,
            reason=f"test-merge is true and GitHub's merge commit {merge_sha[:12]} of "
            f"#{number} {why}: {_WAIT}",
        )
    return replace(
        decision,
        sha=merge_sha,
        head_sha=head,
        reason=(
            f"{decision.reason[:-1]}; the GPU job tests its merge into {base_ref} at "
            f"{base_sha[:12]} ({merge_sha[:12]})."
        ),
    )
