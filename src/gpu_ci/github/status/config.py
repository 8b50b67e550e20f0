"""gpu-status's inputs, and the outcome each event family returns.

The commit status is a required check a skipped GPU job cannot be. The event families
(``pull_request``, ``workflow_run``, ``issue_comment``) decide, from plain data, which
status the pull request's head shows next. ``commands/gpu_status.py`` fetches and posts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpu_ci.errors import UsageError
from gpu_ci.github.approval import WORKFLOWS_DIR, is_workflow_file
from gpu_ci.github.commit_status import DEFAULT_CREATORS, Status, validate_context
from gpu_ci.values import required

DEFAULT_WORKFLOW = ".github/workflows/cuda-ci.yml"
FAILED = ("failure", "timed_out", "startup_failure", "action_required", "stale")
#: ``needs.<job>.result`` of the comment workflow's GPU job.
JOB_RESULTS = ("success", "failure", "cancelled", "skipped")


@dataclass(frozen=True)
class StatusConfig:
    """gpu-status's checked inputs."""

    context: str
    label: str
    min_permission: str
    gpu_jobs: tuple[str, ...]
    workflow: str = DEFAULT_WORKFLOW
    """The GPU workflow's file, ``.github/workflows/<name>`` (``workflow_run.path``)."""
    creators: tuple[str, ...] = DEFAULT_CREATORS
    """The logins whose statuses in ``context`` count.

    Any other status writer (a CI app a pull request can steer) could plant an
    "Approved by" or a result."""
    relays: tuple[str, ...] = ()
    """``relay-bot``: the account whose label relays a comment approval (its run counts)."""


@dataclass(frozen=True)
class Outcome:
    """A status to post, or None with the reason nothing is posted."""

    status: Status | None
    note: str
    need_siblings: bool = False
    """Ask again with ``siblings``: the other runs of the workflow for this commit."""
    rerun_of: tuple[str, int] | None = None
    """Ask again with ``rerun``: (who pressed "Re-run", the approved pull request's number)."""


def workflow_path(value: str) -> str:
    """``cuda-ci.yml`` or ``.github/workflows/cuda-ci.yml`` → the path GitHub reports."""
    name = required(
        "workflow",
        value,
        "name the GPU workflow's file, e.g. 'cuda-ci.yml' (workflow_run matches names, "
        "which any fork can declare; the file path it cannot).",
    )
    if "/" not in name:
        name = f".github/workflows/{name}"
    file = name[len(WORKFLOWS_DIR) :] if name.startswith(WORKFLOWS_DIR) else ""
    if not is_workflow_file(file):
        raise UsageError(
            f"input 'workflow' is '{value}': give the GPU workflow's file name "
            "(e.g. 'cuda-ci.yml', no comma) or its path directly under .github/workflows/."
        )
    return name


def make_config(
    context: str,
    label: str,
    min_permission: str,
    gpu_jobs: Sequence[str],
    workflow: str = DEFAULT_WORKFLOW,
    creators: Sequence[str] = DEFAULT_CREATORS,
    relays: Sequence[str] = (),
) -> StatusConfig:
    """The checked config; a :class:`UsageError` says which input is wrong."""
    required("label", label, "name the label that approves a GPU run.")
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
        tuple(r for r in relays if r),
    )
