"""gpu-status on ``workflow_run``: the GPU run's record and its result.

A fork's ``pull_request`` workflow runs the fork's copy of the file: its jobs, names and
conclusions are the author's, and so is the workflow's *name*. A result is therefore
posted only under these rules; the status then means that a maintainer approved exactly
this commit, and the GPU run that approval started passed.

1. **The file.** Only runs whose ``path`` is the configured GPU workflow file count; a run
   of any other file posts nothing, whatever its name.
2. **Trusted runs** are runs of an allowed event (``push``, ``schedule``,
   ``workflow_dispatch``, ``merge_group``) whose ``head_repository`` is this repository; a
   null ``head_repository`` (a deleted fork) is *not* this repository.
3. **A pull request's run is bound to the approval**
   (:func:`gpu_ci.github.approval.result_binding`).
4. **Recorded when requested, accepted only for that run.** ``requested`` posts "in
   progress" linking ``<run>/attempts/<n>`` only when the newest status is the approval
   itself (the first bound run claims it). ``completed`` posts a result only when the
   newest status is the approval or an "in progress" written above it for a bound run; a
   run whose GPU job was skipped only over the approval or its own record. A final result
   is never replaced, except by the run of a newer approval, posted above it.
5. **Order by ids, not arrival.** Trusted runs never overwrite a status written for a
   newer run (greater id, attempt). After posting "in progress", the command reads the
   statuses again and :func:`settle` restores the run's own result if it lies just below.
6. **A retried attempt** posts its result only on ``completed`` and only over
   gpu-watchdog's retry record of that very attempt.
7. **A re-run by hand** (rule 7 of :mod:`gpu_ci.github.approval`) of the approval's
   recorded run counts when whoever pressed "Re-run" has ``min-permission`` and the pull
   request is still open at the approved head (two calls:
   :func:`gpu_ci.github.approval.rerun_refusal` decides, as in the admission hook). It
   posts "in progress" and its result over its run's own newest record (an earlier
   attempt's, or its own "in progress"); a re-run by gpu-watchdog's account without its
   retry record posts nothing.
8. **Covered files.** A pull request's run posts only when the approval covers its file
   (rule 6 of :mod:`gpu_ci.github.approval`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpu_ci.github.approval import (
    IN_PROGRESS,
    Approval,
    above,
    approval_status,
    attempt_of,
    current,
    key_of,
    not_covered,
    rerun_refusal,
    result_binding,
    run_key,
    run_link,
    trusted_statuses,
)
from gpu_ci.github.commit_status import (
    FINAL,
    WATCHDOG_PREFIX,
    Status,
    clip,
    latest_of,
    short,
)
from gpu_ci.github.event import TRUSTED_EVENTS
from gpu_ci.github.jobs import named_gpu_jobs, queue_seconds
from gpu_ci.github.status.config import FAILED, Outcome, StatusConfig


def minutes(seconds: float) -> str:
    """A wait as the status says it: seconds under 90, else minutes."""
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def _trusted(run: Mapping[str, Any], repository: str) -> bool:
    """Whether the run's workflow and code are this repository's own.

    Whether the run's workflow file and code come from the base repository itself.

    That is an allowed event, and a head repository that *is* this one (null, a deleted
    fork, is not)."""
    head_repo = str((run.get("head_repository") or {}).get("full_name") or "")
    return run.get("event") in TRUSTED_EVENTS and head_repo == repository


@dataclass(frozen=True)
class Asked:
    """Answers gpu-status reads only when an outcome asks for them."""

    siblings: Sequence[Mapping[str, Any]] | None = None
    """Runs listed for ``head_sha`` (:attr:`Outcome.need_siblings`): asked for only when
    the approver's run skipped the GPU job, as a run for another label may end first."""
    rerun: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None
    """The approved pull request and the re-runner's permission, as GitHub answers them
    (:attr:`Outcome.rerun_of`): asked for only for a re-run by hand."""


NOTHING_ASKED = Asked()


def for_workflow_run(
    config: StatusConfig,
    action: str,
    run: Mapping[str, Any],
    jobs: Sequence[Mapping[str, Any]] | None,
    statuses: Sequence[Mapping[str, Any]],
    repository: str,
    now: datetime,
    asked: Asked = NOTHING_ASKED,
) -> Outcome:
    """The status a ``workflow_run`` event posts, if any (the module's rules).

    ``asked``: the answers an earlier outcome asked for (:class:`Asked`)."""
    siblings, rerun = asked.siblings, asked.rerun
    statuses = trusted_statuses(config, statuses)
    sha = str(run.get("head_sha") or "")
    if len(sha) != 40:
        return Outcome(None, "the workflow_run event has no head_sha.")
    path = str(run.get("path") or "")
    if path != config.workflow:
        return Outcome(
            None,
            f"a run of '{path or '(no path)'}', not of the GPU workflow "
            f"'{config.workflow}' (names can be claimed by any fork; files not).",
        )
    if action not in ("requested", "in_progress", "completed"):
        return Outcome(None, f"'{action}' does not change the status.")
    trusted = _trusted(run, repository)
    checked = (
        _trusted_may_post(config, action, run, statuses)
        if trusted
        else _approved_may_post(config, action, run, statuses, rerun)
    )
    if isinstance(checked, Outcome):
        return checked
    approver = checked
    link = run_link(run)
    if action in ("requested", "in_progress"):
        text = (
            f"Approved by @{approver}: {IN_PROGRESS}."
            if approver
            else f"{IN_PROGRESS} on {short(sha)}."
        )
        return Outcome(Status(sha, "pending", clip(text), link), "run started.")
    return _result(config, run, jobs, statuses, (trusted, approver), now, siblings)


def _trusted_may_post(
    config: StatusConfig, action: str, run: Mapping[str, Any], statuses: Sequence[Mapping[str, Any]]
) -> Outcome | str:
    """A trusted run's check (rule 5): "" to go on, or the Outcome that posts nothing."""
    latest = latest_of(statuses, config.context)
    mine = key_of(run)
    latest_key = run_key(str((latest or {}).get("target_url") or ""))
    if latest_key is not None and mine is not None and latest_key > mine:
        return Outcome(
            None, f"run {latest_key[0]} (attempt {latest_key[1]}) is newer: its status stays."
        )
    if (
        action != "completed"
        and latest is not None
        and latest.get("state") in FINAL
        and latest_key == mine
    ):
        return Outcome(None, "this run's result is already posted.")
    return ""


def _approved_may_post(
    config: StatusConfig,
    action: str,
    run: Mapping[str, Any],
    statuses: Sequence[Mapping[str, Any]],
    rerun: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None,
) -> Outcome | str:
    """A pull request run's check (rules 3, 4, 6-8): its approver, or the Outcome."""
    sha = str(run.get("head_sha") or "")
    approval = approval_status(statuses, config.context)
    found = current(config, statuses, sha)
    if approval is None or found is None:
        return Outcome(
            None,
            (
                f"{short(sha)} carries no approval in '{config.context}': the result of a "
                f"'{run.get('event')}' run "
                f"{'from ' + _head_repo(run) if _head_repo(run) else 'of a deleted fork'} "
                "is only posted for the run a maintainer's approval started."
            ),
        )
    binding = result_binding(config, statuses, run, approval, key_of(run))
    why = not_covered(found, str(run.get("path") or "")) or binding.why
    if why:
        return Outcome(None, why + " Its result is not posted.")
    latest = latest_of(statuses, config.context)
    if binding.by_hand:
        return _by_hand_may_post(config, action, run, (found, binding.by_hand, latest), rerun)
    recorded = _recorded_above(statuses, config.context, approval)
    if binding.retry is not None and (action != "completed" or latest is not binding.retry):
        return Outcome(
            None,
            f"attempt {attempt_of(run)}, gpu-watchdog's retry: only its result is posted, "
            f"over the retry record; '{(latest or {}).get('description')}' stays.",
        )
    if (
        binding.retry is None
        and latest is not approval
        and (action != "completed" or recorded is None)
    ):
        return Outcome(
            None,
            "the head's newest status is not this approval's: "
            f"'{(latest or {}).get('description')}' stays.",
        )
    return binding.approver


def _by_hand_may_post(
    config: StatusConfig,
    action: str,
    run: Mapping[str, Any],
    found: tuple[Approval, str, Mapping[str, Any] | None],
    rerun: tuple[Mapping[str, Any], Mapping[str, Any]] | None,
) -> Outcome | str:
    """A re-run by hand (rule 7): its approver, the Outcome that asks, or the refusal.

    ``found``: the approval, who pressed "Re-run" and the head's newest status."""
    approval, by, latest = found
    if approval.number is None:
        return Outcome(None, "the approval names no pull request: its re-run is not posted.")
    if rerun is None:
        return Outcome(None, "", rerun_of=(by, approval.number))
    mine = key_of(run)
    why = rerun_refusal(approval, mine[0] if mine else 0, by, rerun, config.min_permission)
    if why:
        return Outcome(None, f"attempt {attempt_of(run)}: {why} Its result is not posted.")
    newest = run_key(str((latest or {}).get("target_url") or ""))
    ours = (
        newest is not None
        and mine is not None
        and newest[0] == mine[0]
        and (
            newest[1] < mine[1]
            or (
                action == "completed"
                and newest == mine
                and (latest or {}).get("state") == "pending"
            )
        )
    )
    if not ours:
        return Outcome(
            None,
            f"a re-run posts over its run's own newest record; "
            f"'{(latest or {}).get('description')}' stays.",
        )
    return approval.approver


def _result(
    config: StatusConfig,
    run: Mapping[str, Any],
    jobs: Sequence[Mapping[str, Any]] | None,
    statuses: Sequence[Mapping[str, Any]],
    who: tuple[bool, str],
    now: datetime,
    siblings: Sequence[Mapping[str, Any]] | None,
) -> Outcome:
    """The result a completed run posts: ``who`` is (trusted run, approver)."""
    trusted, approver = who
    sha, link = str(run.get("head_sha") or ""), run_link(run)
    by = f" (approved by @{approver})" if approver else ""
    latest = latest_of(statuses, config.context)
    gpu = named_gpu_jobs(jobs or [], config.gpu_jobs)
    ran = [j for j in gpu if j.get("conclusion") not in (None, "skipped")]
    if not ran:
        return _skipped(run, latest, trusted, approver, siblings)
    waits = [w for w in (queue_seconds(j, now) for j in ran) if w is not None]
    waited = f"waited {minutes(max(waits))} for a runner" if waits else ""
    bad = [j for j in ran if j.get("conclusion") in FAILED]
    cancelled = [j for j in ran if j.get("conclusion") == "cancelled"]
    if bad:
        names = ", ".join(f"{j.get('name')}: {j.get('conclusion')}" for j in bad[:3])
        return Outcome(
            Status(sha, "failure", clip(f"GPU tests failed on {short(sha)}{by}: {names}."), link),
            "GPU job failed.",
        )
    if cancelled:
        if str((latest or {}).get("description") or "").startswith(WATCHDOG_PREFIX):
            return Outcome(None, "gpu-watchdog cancelled the run; its status stays.")
        deferred = _defer_to_siblings(run, siblings)  # e.g. concurrency: a newer run took over
        if deferred is not None:
            return deferred
        return Outcome(
            Status(
                sha,
                "error",
                clip(f"GPU run cancelled on {short(sha)}{by}: approve again to rerun."),
                link,
            ),
            "GPU job cancelled.",
        )
    suffix = f"; {waited}" if waited else ""
    return Outcome(
        Status(sha, "success", clip(f"GPU tests passed on {short(sha)}{by}{suffix}."), link),
        "GPU job passed.",
    )


def _skipped(
    run: Mapping[str, Any],
    latest: Mapping[str, Any] | None,
    trusted: bool,
    approver: str,
    siblings: Sequence[Mapping[str, Any]] | None,
) -> Outcome:
    """A completed run whose GPU job did not run: a failure only for the approval's run."""
    if trusted:
        return Outcome(None, "the GPU job did not run in this run.")
    if latest is not None and latest.get("state") != "pending":
        return Outcome(None, "the commit already has a final result.")
    latest_key = run_key(str((latest or {}).get("target_url") or ""))
    if latest is not None and latest_key not in (None, key_of(run)):
        return Outcome(
            None,
            f"run {latest_key[0]} holds the approval's record; this run skipped the GPU job.",
        )
    deferred = _defer_to_siblings(run, siblings)
    if deferred is not None:
        return deferred
    return Outcome(
        Status(
            str(run.get("head_sha") or ""),
            "failure",
            clip(
                f"Approved by @{approver}, but the GPU workflow's gate skipped the job (head "
                "moved, budget or role: see the run)."
            ),
            run_link(run),
        ),
        "approved run skipped the GPU job.",
    )


def _head_repo(run: Mapping[str, Any]) -> str:
    return str((run.get("head_repository") or {}).get("full_name") or "")


def _recorded_above(
    statuses: Sequence[Mapping[str, Any]], context: str, approval: Mapping[str, Any]
) -> Mapping[str, Any] | None:
    """The newest status, when it records a run bound to ``approval``.

    The newest status when it is a run's "in progress" record above ``approval``.

    Such a record is written only for a run bound to the approval. None otherwise."""
    for status in above(statuses, context, approval):
        url = str(status.get("target_url") or "")
        text = str(status.get("description") or "")
        if status.get("state") == "pending" and run_key(url) and IN_PROGRESS in text:
            return status
        return None
    return None


def settle(
    config: StatusConfig, run: Mapping[str, Any], statuses: Sequence[Mapping[str, Any]]
) -> Status | None:
    """The run's own result to post again, or None.

    The run's own result to post again, when our "in progress" covered it (rule 5).

    ``statuses``: read again after posting "in progress" (newest first). When this run's
    own final result lies just below our record (``completed`` was handled first), that
    result goes on top again; else None."""
    mine = key_of(run)
    ours = trusted_statuses(config, statuses)
    for upper, lower in zip(ours, ours[1:]):
        if run_key(str(upper.get("target_url") or "")) != mine or upper.get("state") != "pending":
            continue
        if lower.get("state") in FINAL and run_key(str(lower.get("target_url") or "")) == mine:
            return Status(
                str(run.get("head_sha") or ""),
                str(lower["state"]),
                str(lower.get("description") or ""),
                str(lower.get("target_url") or ""),
            )
        return None
    return None


def _defer_to_siblings(
    run: Mapping[str, Any], siblings: Sequence[Mapping[str, Any]] | None
) -> Outcome | None:
    """Why another run of the workflow decides, or None.

    None when no other run of the workflow for the commit is going."""
    if siblings is None:
        return Outcome(None, "", need_siblings=True)
    active = [
        r
        for r in siblings
        if r.get("id") != run.get("id")
        and r.get("workflow_id") == run.get("workflow_id")
        and r.get("status") != "completed"
    ]
    if active:
        return Outcome(
            None,
            f"run {active[0].get('id')} of the same workflow for this "
            "commit is still going: its result decides.",
        )
    return None
