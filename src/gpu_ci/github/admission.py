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
2. **Otherwise what a maintainer approved** (:mod:`gpu_ci.github.approval`). A pull
   request's job (its workflow is the merge commit's: whatever the pull request says) runs
   only when all of these hold, checked in this order:

   a. its event is ``pull_request`` (a ``pull_request_review`` or any other event of the
      same head is not the approval's run), of an activity that starts an approved run:
      ``labeled`` or a trusted author's new head (the approver's ``assigned``, ``edited``
      or ``review_requested`` run, which a fork's copy of the workflow can listen to, is
      not the approval's run);
   b. its workflow file is one the admin allows on this runner (the allowed workflows
      above), and one the approval itself covers (its record names the files);
   c. its head carries a current approval, written by a trusted creator (default
      ``github-actions[bot]``), of *this* pull request (another pull request at the same
      commit needs its own); a new-head run (``opened``, ``synchronize``...) counts only
      when the approver is the pull request's author (a trusted author's own head);
   d. that pull request is open, and its head is still that commit;
   e. its run is one the approval started: the run recorded above the approval, or, before
      gpu-status recorded one, a ``pull_request`` run of the approver (or a relay bot that
      applied the label for them) created with the approval;
   f. who started this attempt: for attempt 1 the approver or a relay bot; for a re-run,
      gpu-watchdog (its retry record of that attempt is on the head) or someone with the
      re-run role (default ``write``) while the pull request is open at the approved head
      (:func:`gpu_ci.github.approval.rerun_refusal`, which gpu-status applies too).

   REST calls: the head's newest 100 statuses, the pull request, and only when needed the
   run (nothing recorded yet) and the re-runner's permission.

Anything else, and any API error, refuses: the hook fails closed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_ci.github import approval
from gpu_ci.github.commit_status import DEFAULT_CONTEXT, DEFAULT_CREATORS, short
from gpu_ci.github.event import NEW_HEAD
from gpu_ci.github.roles import ROLE_RANK, role_of

#: Events only someone with write access can cause, whose workflow definition is the ref's.
TRUSTED_EVENTS = ("push", "schedule", "workflow_dispatch")
STATUS_PAGE = 100
#: The ``pull_request`` activities whose run an approval starts: the gate label (applied by
#: the maintainer or a relay bot) and a trusted author's new head.
APPROVING_ACTIONS = ("labeled", *NEW_HEAD)


@dataclass(frozen=True)
class AdmissionConfig:
    """What the runner admin allows (environment variables of the runner, see README)."""

    workflows: tuple[str, ...]
    """The GPU workflow files, e.g. ``.github/workflows/cuda-ci.yml``.

    Admitted from the default branch, and the only files an approval covers here."""
    context: str = DEFAULT_CONTEXT
    creators: tuple[str, ...] = DEFAULT_CREATORS
    """Who writes the approval statuses, and gpu-watchdog's account for its retries."""
    events: tuple[str, ...] = TRUSTED_EVENTS
    relays: tuple[str, ...] = ()
    """Bots whose label relays a comment approval: their run counts as the approver's."""
    rerun_role: str = "write"
    """The least role whose "Re-run" of the approval's run is admitted."""
    gate_labels: tuple[str, ...] = ()
    """The labels that approve (the gate's, the relay's); empty: any ``labeled`` run."""


@dataclass(frozen=True)
class Job:
    """The job the runner is about to run."""

    repository: str
    event: str
    workflow_path: str
    workflow_ref: str
    head_sha: str
    """The pull request's head (from the payload), or "" for events without one."""
    number: int | None = None
    """The pull request's number (from the payload)."""
    run_id: int = 0
    attempt: int = 1
    triggering_actor: str = ""
    """Who started this attempt (``GITHUB_TRIGGERING_ACTOR``)."""
    action: str = ""
    """The payload's activity type (``labeled``, ``assigned``...); a re-run keeps it."""
    label: str = ""
    """The label a ``labeled`` event applied (from the payload)."""
    author: str = ""
    """Who opened the pull request (``pull_request.user.login`` of the payload)."""


@dataclass(frozen=True)
class Verdict:
    admit: bool
    reason: str


@dataclass(frozen=True)
class Settings:
    """The admin's variables, as text (see the README)."""

    workflows: str
    context: str = ""
    creators: str = ""
    events: str = ""
    relays: str = ""
    rerun_role: str = ""
    gate_labels: str = ""


def parse_config(settings: Settings) -> AdmissionConfig | str:
    """The config from comma- or newline-separated lists.

    A string says what is wrong."""
    workflows, context, creators, events = (
        settings.workflows,
        settings.context,
        settings.creators,
        settings.events,
    )

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
    role = settings.rerun_role.strip().lower() or "write"
    if role not in ROLE_RANK or ROLE_RANK[role] < ROLE_RANK["triage"]:
        return (
            f"GPU_CI_RERUN_PERMISSION is {settings.rerun_role!r}: give one of triage, write, "
            "maintain, admin (the least role whose re-run of an approved run is admitted)."
        )
    return AdmissionConfig(
        files,
        context.strip() or DEFAULT_CONTEXT,
        items(creators) or DEFAULT_CREATORS,
        wanted,
        items(settings.relays),
        role,
        tuple(label.casefold() for label in items(settings.gate_labels)),
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
    number = pull.get("number") if isinstance(pull, Mapping) else None
    user = (pull.get("user") or {}) if isinstance(pull, Mapping) else {}
    author = str(user.get("login") or "") if isinstance(user, Mapping) else ""
    run_id, attempt = environ.get("GITHUB_RUN_ID", ""), environ.get("GITHUB_RUN_ATTEMPT", "1")
    if sha and not (run_id.isdigit() and attempt.isdigit()):
        return "GITHUB_RUN_ID and GITHUB_RUN_ATTEMPT must be set (the runner sets them)."
    return Job(
        repository,
        event,
        where[len(prefix) :],
        git_ref,
        sha,
        number if isinstance(number, int) else None,
        int(run_id or 0),
        int(attempt or 1),
        (environ.get("GITHUB_TRIGGERING_ACTOR") or environ.get("GITHUB_ACTOR") or "").strip(),
        str(payload.get("action") or ""),
        _label_name(payload),
        author,
    )


def _label_name(payload: Mapping[str, Any]) -> str:
    """The name of the label a ``labeled`` payload carries, or ""."""
    label = payload.get("label")
    return str(label.get("name") or "") if isinstance(label, Mapping) else ""


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


def _refuse(rule: str, why: str, todo: str) -> Verdict:
    return Verdict(False, f"rule '{rule}': {why} {todo}")


def before_approval(job: Job, config: AdmissionConfig) -> Verdict | None:
    """Rules 2a and 2b, which need no call: a refusal, or None to go on."""
    if job.event != "pull_request":
        return _refuse(
            "pull_request only",
            f"a '{job.event}' job at the head {short(job.head_sha)} is not a run an approval "
            "started.",
            "An approval runs the GPU workflow on 'pull_request'; a maintainer applies the "
            "label to start it.",
        )
    if job.action not in APPROVING_ACTIONS:
        return _refuse(
            "approving activity",
            f"a '{job.action}' event of the pull request does not start an approved run "
            f"(only {', '.join(APPROVING_ACTIONS)} do).",
            "The maintainer's label starts the approved run; a maintainer re-runs that run.",
        )
    if (
        job.action == "labeled"
        and config.gate_labels
        and job.label.casefold() not in config.gate_labels
    ):
        return _refuse(
            "approving label",
            f"the run was started by the label {job.label!r}, not by a label that approves "
            f"({', '.join(config.gate_labels)}).",
            "A maintainer applies the gate label; any other label starts no GPU run.",
        )
    if job.workflow_path not in config.workflows:
        return _refuse(
            "covered workflow",
            f"{job.workflow_path} is not a GPU workflow file that approvals cover on this "
            f"runner ({', '.join(config.workflows) or 'none'}).",
            "A pull request cannot add one: the runner admin lists it in "
            "GPU_CI_ALLOWED_WORKFLOWS once it is on the default branch.",
        )
    return None


def by_approval(
    job: Job,
    config: AdmissionConfig,
    statuses: Sequence[Mapping[str, Any]],
) -> approval.Approval | Verdict:
    """Rule 2c: the approval of the job's pull request, or the refusal.

    ``statuses``: the head's, newest first."""
    if job.number is None:
        return _refuse(
            "its own pull request",
            "the event names no pull request number.",
            "Only a pull request's own run carries its approval.",
        )
    found = approval.current(config, statuses, job.head_sha, job.repository)
    number = f"#{job.number}"
    if found is None:
        return _refuse(
            "approved head",
            f"{short(job.head_sha)} carries no current approval in '{config.context}' from "
            f"{', '.join(config.creators)} (a new push or a closed pull request ends one).",
            f"A maintainer approves {number} at this head (the label), then the GPU job may run.",
        )
    if found.number != job.number:
        return _refuse(
            "its own pull request",
            f"{short(job.head_sha)} was approved for #{found.number}, not for {number}.",
            f"Another pull request at the same commit needs its own approval: a maintainer "
            f"approves {number}.",
        )
    why = approval.not_covered(found, job.workflow_path)
    if why:
        return _refuse(
            "covered workflow",
            why,
            "A pull request cannot widen an approval: the maintainer approves again once "
            "gpu-status's 'workflow' names the file.",
        )
    if job.action in NEW_HEAD and job.author.casefold() != found.approver.casefold():
        return _refuse(
            "approving activity",
            f"a '{job.action}' run is an approved run only for a trusted author's own head; "
            f"{number} is @{job.author or '?'}'s and @{found.approver} approved it by label.",
            "The maintainer's label starts the approved run; a maintainer re-runs that run.",
        )
    return found


def pull_refusal(job: Job, pull: Mapping[str, Any]) -> Verdict | None:
    """Rule 2d: a refusal, or None when the pull request is open at the job's head.

    ``pull``: GitHub's record of the job's pull request."""
    found = approval.Approval(job.repository, job.number, job.head_sha, "", "", "", {})
    why = approval.open_at_head(found, pull)
    if why:
        return _refuse(
            "open at that head", why, f"A maintainer approves #{job.number}'s current head."
        )
    return None


def run_refusal(
    job: Job,
    config: AdmissionConfig,
    found: approval.Approval,
    run: Mapping[str, Any] | None,
    statuses: Sequence[Mapping[str, Any]],
) -> Verdict | None:
    """Rule 2e: a refusal, or None when the job's run is one ``found`` started.

    ``run``: GitHub's record of the job's run, needed only when no run is recorded."""
    if found.runs:
        why = approval.claimed_by(found, job.run_id)
    elif run is None:
        raise ValueError("no run is recorded: pass GitHub's record of the job's run")
    else:
        why = (
            f"the run is of {run.get('path')} at {short(str(run.get('head_sha') or ''))}, the "
            f"job of {job.workflow_path} at {short(job.head_sha)}."
            if (run.get("path"), run.get("head_sha")) != (job.workflow_path, job.head_sha)
            else approval.starts(
                found, run, approval.trusted_statuses(config, statuses), config.relays
            )
        )
    if why:
        return _refuse(
            "the approval's run",
            why,
            "An approval starts one run; a maintainer re-runs it or approves again.",
        )
    return None


def actor_refusal(
    job: Job,
    config: AdmissionConfig,
    found: approval.Approval,
    statuses: Sequence[Mapping[str, Any]],
) -> Verdict | None:
    """Rule 2f without a call: a refusal, the admission, or None to ask the role."""
    who = job.triggering_actor
    if job.attempt == 1:
        if who in (found.approver, *config.relays):
            return Verdict(True, _admitted(job, found, f"started by @{who}"))
        return _refuse(
            "who started it",
            f"attempt 1 was started by @{who}, not by the approver @{found.approver}.",
            "The approver's label starts the approved run.",
        )
    key = (job.run_id, job.attempt)
    if who in config.creators and approval.retry_recorded(config, statuses, found, key):
        return Verdict(True, _admitted(job, found, f"gpu-watchdog's retry (@{who})"))
    return None


def by_role(
    job: Job,
    config: AdmissionConfig,
    found: approval.Approval,
    facts: tuple[Mapping[str, Any], Any],
) -> Verdict:
    """Rule 2f for a re-run by hand: ``facts`` are the pull request and the permission answer.

    :func:`gpu_ci.github.approval.rerun_refusal` decides, as it does for gpu-status."""
    pull, answer = facts
    permission = answer if isinstance(answer, Mapping) else {}
    why = approval.rerun_refusal(
        found, job.run_id, job.triggering_actor, (pull, permission), config.rerun_role
    )
    if why:
        return _refuse(
            "who started it",
            f"attempt {job.attempt}: {why}",
            "A maintainer re-runs the approved run.",
        )
    role, _exact = role_of(permission)
    return Verdict(True, _admitted(job, found, f"a re-run by @{job.triggering_actor} ({role})"))


def _admitted(job: Job, found: approval.Approval, how: str) -> str:
    return (
        f"run {job.run_id} attempt {job.attempt} of {job.workflow_path} is the run "
        f"@{found.approver} approved for #{found.number} at {short(job.head_sha)} ({how})."
    )


def refusal(job: Job, config: AdmissionConfig) -> Verdict:
    """The verdict when neither rule can apply (no head to look up)."""
    allowed = ", ".join(config.workflows) or "none"
    return Verdict(
        False,
        (
            f"a '{job.event}' job of {job.workflow_path}@{job.workflow_ref}: GPU runners take jobs "
            f"of the allowed workflows ({allowed}) from the default branch on "
            f"{', '.join(config.events)}, or the pull request run a maintainer approved."
        ),
    )
