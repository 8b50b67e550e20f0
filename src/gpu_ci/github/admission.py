"""Admission on the runner: may this job use a GPU runner at all?

The gate is a job of the workflow it guards, so a pull request that edits that workflow
(removes the gate, adds a job on ``[self-hosted, gpu]``) is not stopped by it: the fork's own
copy of the workflow runs. Projects with self-hosted GPU runners close this hole on the runner
itself, before any step runs (JAX's ``validate_job.sh`` on ``ACTIONS_RUNNER_HOOK_JOB_STARTED``).
This module is that rule, as pure functions of what the runner knows about the job (its
default variables and the event payload at ``GITHUB_EVENT_PATH``) and of at most two REST
answers:

1. **A trusted definition.** The job's workflow file is one the runner admin allowed, from
   this repository, at the default branch (``GITHUB_WORKFLOW_REF`` ends in
   ``@refs/heads/<default branch>``), and the event is one only people with write access can
   cause (``push``, ``schedule``, ``workflow_dispatch``). One call: the repository's
   ``default_branch`` (the API's answer, not the payload's).
2. **Otherwise an approval of this exact commit.** A pull request's job (its workflow is the
   merge commit's: whatever the pull request says) runs only when the pull request's head
   carries the approval status the inert privileged workflow writes ("Approved by @x ...",
   in the approval context, default ``GPU CI``), written by a trusted creator (default
   ``github-actions[bot]``: a fork's token cannot write statuses to the base repository).
   One call: the newest 100 statuses of the head.

Anything else, and any API error, refuses: the hook fails closed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_ci.github.approval import admitting_approver
from gpu_ci.github.commit_status import DEFAULT_CONTEXT, DEFAULT_CREATORS

#: Events only someone with write access can cause, whose workflow definition is the ref's.
TRUSTED_EVENTS = ("push", "schedule", "workflow_dispatch")
STATUS_PAGE = 100


@dataclass(frozen=True)
class AdmissionConfig:
    """What the runner admin allows (environment variables of the runner, see README)."""

    workflows: tuple[str, ...]
    """Workflow files admitted from the default branch, e.g. ``.github/workflows/cuda-ci.yml``."""
    context: str = DEFAULT_CONTEXT
    creators: tuple[str, ...] = DEFAULT_CREATORS
    events: tuple[str, ...] = TRUSTED_EVENTS


@dataclass(frozen=True)
class Job:
    """The job the runner is about to run."""

    repository: str
    event: str
    workflow_path: str
    workflow_ref: str
    head_sha: str
    """The pull request's head (from the payload), or "" for events without one."""


@dataclass(frozen=True)
class Verdict:
    admit: bool
    reason: str


def parse_config(
    workflows: str, context: str = "", creators: str = "", events: str = ""
) -> AdmissionConfig | str:
    """The config from comma- or newline-separated lists.

    A string says what is wrong."""

    def items(text: str) -> tuple[str, ...]:
        return tuple(p.strip() for p in text.replace("\n", ",").split(",") if p.strip())

    files = tuple(w[2:] if w.startswith("./") else w for w in items(workflows))
    bad = [
        w
        for w in files
        if not w.startswith(".github/workflows/") or not w.endswith((".yml", ".yaml"))
    ]
    if bad:
        return (
            f"GPU_CI_ALLOWED_WORKFLOWS names {bad[0]!r}: give workflow files as "
            ".github/workflows/<file>.yml."
        )
    wanted = items(events) or TRUSTED_EVENTS
    unsafe = [e for e in wanted if e not in TRUSTED_EVENTS]
    if unsafe:
        return (
            f"GPU_CI_TRUSTED_EVENTS names {unsafe[0]!r}: only {', '.join(TRUSTED_EVENTS)} "
            "run a definition that a pull request cannot change."
        )
    return AdmissionConfig(
        files, context.strip() or DEFAULT_CONTEXT, items(creators) or DEFAULT_CREATORS, wanted
    )


def job_of(environ: Mapping[str, str], payload: Mapping[str, Any]) -> Job | str:
    """The job's facts from the runner's default variables.

    A string says what is missing. ``GITHUB_WORKFLOW_REF`` is
    ``owner/repo/.github/workflows/file.yml@ref``: the workflow definition that runs (for a
    pull request, ``refs/pull/N/merge``: the pull request's).
    """
    repository = environ.get("GITHUB_REPOSITORY", "").strip()
    event = environ.get("GITHUB_EVENT_NAME", "").strip()
    ref = environ.get("GITHUB_WORKFLOW_REF", "").strip()
    if repository.count("/") != 1 or not event or not ref:
        return (
            "GITHUB_REPOSITORY, GITHUB_EVENT_NAME and GITHUB_WORKFLOW_REF must be set "
            "(the runner sets them for job hooks)."
        )
    where, at, git_ref = ref.rpartition("@")
    prefix = repository + "/"
    if not at or not where.casefold().startswith(prefix.casefold()):
        return (
            f"GITHUB_WORKFLOW_REF {ref!r} is not a workflow of {repository} (a "
            "reusable workflow's caller is always the repository's own)."
        )
    pull = payload.get("pull_request")
    head = (pull.get("head") or {}) if isinstance(pull, Mapping) else {}
    sha = str(head.get("sha") or "") if isinstance(head, Mapping) else ""
    return Job(repository, event, where[len(prefix) :], git_ref, sha)


def needs_default_branch(job: Job, config: AdmissionConfig) -> bool:
    """Whether rule 1 can apply.

    Then the hook asks for the default branch (one call)."""
    return job.event in config.events and job.workflow_path in config.workflows


def by_definition(job: Job, config: AdmissionConfig, default_branch: str) -> Verdict | None:
    """Rule 1: admitted, or None to try rule 2."""
    if needs_default_branch(job, config) and job.workflow_ref == f"refs/heads/{default_branch}":
        return Verdict(
            True,
            f"{job.workflow_path} from the default branch ({default_branch}) on '{job.event}'.",
        )
    return None


def by_approval(
    job: Job, config: AdmissionConfig, statuses: Sequence[Mapping[str, Any]]
) -> Verdict:
    """Rule 2 over the head's statuses (newest first, as GitHub lists them)."""
    approver = admitting_approver(config.context, config.creators, statuses)
    if approver:
        return Verdict(
            True, f"{job.head_sha[:12]} was approved by @{approver} ('{config.context}' status)."
        )
    return Verdict(
        False,
        f"{job.head_sha[:12]} carries no approval in '{config.context}' "
        f"from {', '.join(config.creators)}: a maintainer approves the "
        "commit first (the label), then the GPU job may run.",
    )


def refusal(job: Job, config: AdmissionConfig) -> Verdict:
    """The verdict when neither rule can apply (no head to look up)."""
    allowed = ", ".join(config.workflows) or "none"
    return Verdict(
        False,
        (
            f"a '{job.event}' job of {job.workflow_path}@{job.workflow_ref}: GPU runners take jobs "
            f"of the allowed workflows ({allowed}) from the default branch on "
            f"{', '.join(config.events)}, or of a pull request whose head a maintainer approved."
        ),
    )
