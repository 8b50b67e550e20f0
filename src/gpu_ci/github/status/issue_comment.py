"""gpu-status on ``issue_comment``: a comment approval's record and its result.

A comment approval runs in the ``issue_comment`` workflow of the default branch, whose
runs carry the default branch's commit, not the pull request's. There the status job
(after the gate, ``statuses: write``, no pull request code) posts the record on the
gate's ``sha``, linking *this* run and attempt (from the runner's environment, not an
input). The result job posts its result only while that record, for this run, attempt
and commit, is the newest status: a second comment, a label, a push or a newer run's
record on top stays.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from gpu_ci.errors import UsageError
from gpu_ci.github.approval import comment_record, comment_text, run_key, trusted_statuses
from gpu_ci.github.commit_status import Status, clip, latest_of, short
from gpu_ci.github.status.config import Outcome, StatusConfig


def comment_run_link(server_url: str, repository: str, run_id: str, attempt: str) -> str:
    """This run's link, from the runner's ``GITHUB_RUN_ID`` and ``GITHUB_RUN_ATTEMPT``.

    The record then names the run that posted it, whatever the inputs say."""
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
    text = comment_text(approver, number, sha)
    return Outcome(Status(sha, "pending", clip(text), link), "a comment approved the commit.")


def comment_result(
    config: StatusConfig, sha: str, gpu_result: str, link: str, listed: Sequence[Mapping[str, Any]]
) -> Outcome:
    """The result job after the GPU job: ``gpu_result`` over this run's own record only.

    ``gpu_result`` is ``needs.<job>.result``; ``link`` names this run and attempt. Nothing
    newer than the record is ever replaced."""
    latest = latest_of(trusted_statuses(config, listed), config.context)
    text = str((latest or {}).get("description") or "")
    record = comment_record(latest)
    if (
        latest is None
        or record is None
        or latest.get("state") != "pending"
        or run_key(str(latest.get("target_url") or "")) != run_key(link)
        or record[2] != short(sha)
    ):
        return Outcome(
            None,
            f"{short(sha)}'s newest '{config.context}' status is not this run's comment "
            f"approval ('{text or 'none'}' stays: a newer approval, push or result).",
        )
    approver = record[0]
    by = f" (approved by @{approver} by comment)"
    if gpu_result == "success":
        state, said = "success", f"GPU tests passed on {short(sha)}{by}."
    elif gpu_result == "failure":
        state, said = "failure", f"GPU tests failed on {short(sha)}{by}: the GPU job failed."
    elif gpu_result == "cancelled":
        state, said = "error", f"GPU run cancelled on {short(sha)}{by}: comment again to rerun."
    else:
        state, said = "failure", f"Approved by @{approver}, but the GPU job was skipped."
    return Outcome(Status(sha, state, clip(said), link), f"the GPU job's result: {gpu_result}.")
