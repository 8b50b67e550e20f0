"""gpu-watchdog's queue sweep, which cancels GPU jobs no runner takes.

It keeps every GPU job's queue time, and runs the infrastructure re-runs
(:mod:`gpu_ci.github.watchdog.retry`) in the same pass, under the same call budget.

The selection is pure (:func:`stale_jobs`); :func:`sweep` makes the REST calls, at most::

    2 per workflow (queued and in-progress runs created before the cutoff), 1 more per
      further 100 runs (GitHub lists at most 1,000 of them: past that, "incomplete")
  + 1 per candidate run (its jobs, latest attempt), 1 more per further 100 jobs
  + 1 per stale job (re-read: a runner may have taken it since the listing)
  + 3 per cancelled run (cancel, the run re-read to see it cancelled, then the commit
      status when a context is set), + 2 when it is force-cancelled (force-cancel, re-read)
  + with retry-infra-failures above 0: 1 per workflow (its failed runs of the
      window), 1 per failed run with a failed GPU job (its jobs), 1 per failed job with no
      failed step (its annotations), 1 + 1 per GPU job a monitor report could decide (the
      run's artifacts, a download), and per re-run 2 for a pull request's head, the budget's
      month once a sweep (gpu-gate's count), then 3 (re-run, the new attempt, the status)

and never more than ``max-calls``; it stops early, with a summary that says "incomplete"
and the ``complete`` output false, when the budget or the rate limit
(``X-RateLimit-Remaining`` below ``rate-reserve``) says so. Retries with ``Retry-After`` and
secondary rate limits are PyGithub's (see :mod:`gpu_ci.github.client`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any
from urllib.parse import quote

from gpu_ci.github.client import Rest
from gpu_ci.github.commit_status import no_runner
from gpu_ci.github.jobs import (
    NO_RUNNER_YET,
    has_gpu_label,
    parse_time,
)
from gpu_ci.github.watchdog.calls import (
    FAILED,
    Caller,
    describe,
    http_status,
    listed_runs,
    run_jobs,
)
from gpu_ci.github.watchdog.config import WatchdogConfig
from gpu_ci.github.watchdog.result import BudgetExhausted, JobRecord, RetryBudget, Sweep, record_of
from gpu_ci.github.watchdog.retry import retry_sweep


def stale_jobs(
    run: Mapping[str, Any], jobs: Sequence[Mapping[str, Any]], config: WatchdogConfig, now: datetime
) -> tuple[list[JobRecord], list[JobRecord]]:
    """(every GPU job of the run, those still queued longer than max-queue-minutes).

    Queued for a runner, that is: a job ``waiting`` for an environment's reviewers or
    ``pending`` in a concurrency group is seen but never stale (no runner would help)."""
    cutoff = now - timedelta(minutes=config.max_queue_minutes)
    seen, stale = [], []
    for job in jobs:
        if not has_gpu_label(job, config.labels):
            continue
        record = record_of(run, job, now)
        seen.append(record)
        created = parse_time(job.get("created_at"))
        if record.status in NO_RUNNER_YET and created is not None and created <= cutoff:
            stale.append(record)
    return seen, stale


def sweep(
    rest: Rest,
    repository: str,
    config: WatchdogConfig,
    now: datetime,
    server_url: str = "https://github.com",
    guard: RetryBudget | None = None,
) -> Sweep:
    """One pass; never raises for API errors: each lands in ``Sweep.errors``. ``guard``: the
    budget re-runs must fit (None: no budget set)."""
    result = Sweep(repository, config, now, guard=guard)
    call = Caller(rest, result)
    base = f"/repos/{repository}/actions"
    cutoff = now - timedelta(minutes=config.max_queue_minutes)
    created = quote("<=" + cutoff.strftime("%Y-%m-%dT%H:%M:%SZ"), safe="")
    sources = [f"{base}/workflows/{quote(w, safe='')}/runs" for w in config.workflows] or [
        f"{base}/runs"
    ]
    try:
        runs: dict[int, Mapping[str, Any]] = {}
        for source in sources:
            for state in ("queued", "in_progress"):
                for run in listed_runs(rest, call, result, source, state, created):
                    if run.get("status") != "completed":
                        runs.setdefault(int(run["id"]), run)
        for _run_id, run in sorted(runs.items()):
            run_created = parse_time(run.get("created_at"))
            if run_created is not None and run_created > cutoff:
                continue  # none of its jobs can have waited long enough yet
            _sweep_run(rest, call, result, run, server_url)
        if config.max_retries > 0:
            retry_sweep(rest, call, result, sources)
    except BudgetExhausted as exc:
        result.stopped = str(exc)
    return result


def _sweep_run(
    rest: Rest, call: Caller, result: Sweep, run: Mapping[str, Any], server_url: str
) -> None:
    config, repository = result.config, result.repository
    run_id = int(run["id"])
    jobs = run_jobs(rest, call, result, run_id, f"listing the jobs of run {run_id}")
    if jobs is None:
        return
    seen, stale = stale_jobs(run, jobs, config, result.now)
    still: list[JobRecord] = []
    by_id = {j.job_id: j for j in seen}
    try:
        for record in stale:
            try:
                fresh = call(partial(rest.get, f"/repos/{repository}/actions/jobs/{record.job_id}"))
            except BudgetExhausted:
                raise
            except FAILED as exc:
                by_id[record.job_id] = _with(
                    record, "cancel-failed", describe(exc, f"re-reading job {record.job_id}")
                )
                result.errors.append(by_id[record.job_id].detail)
                continue
            now_record = record_of(run, fresh, result.now)
            if now_record.status not in NO_RUNNER_YET:
                by_id[record.job_id] = _with(
                    now_record,
                    "started-before-cancel",
                    f"a runner took it before the cancel ({now_record.status}): left alone",
                )
                continue
            still.append(now_record)
            by_id[record.job_id] = now_record
        if still:
            running = [j for j in jobs if j.get("status") == "in_progress"]
            if not config.cancel:
                for record in still:
                    by_id[record.job_id] = _with(record, "reported", "cancel: false")
            elif running:
                for record in still:
                    by_id[record.job_id] = _with(
                        record,
                        "left-running-siblings",
                        (
                            f"{len(running)} other job(s) of the run are running; cancelling "
                            "the run would stop them"
                        ),
                    )
            else:
                _cancel(rest, call, result, run, still, by_id, server_url)
    finally:
        result.jobs.extend(by_id.values())


def _force_due(config: WatchdogConfig, waited_s: float) -> bool:
    """A run still not cancelled ``force-cancel-minutes`` past max-queue-minutes: the sweeps
    since the first cancel were ignored."""
    if config.force_cancel_minutes is None:
        return False
    return waited_s >= (config.max_queue_minutes + config.force_cancel_minutes) * 60


def _force_cancel(rest: Rest, call: Caller, result: Sweep, run_id: int) -> Mapping[str, Any]:
    """POST force-cancel, then re-read the run: the answer says whether it is completed now."""
    base = f"/repos/{result.repository}/actions/runs/{run_id}"
    try:
        call(partial(rest.post, f"{base}/force-cancel"))
        again: Mapping[str, Any] = call(partial(rest.get, base))
    except BudgetExhausted:
        raise
    except FAILED as exc:
        detail = describe(exc, f"force-cancelling run {run_id}")
        result.errors.append(detail)
        return {"status": f"unknown ({detail})"}
    return again


def _with(record: JobRecord, action: str, detail: str) -> JobRecord:
    return replace(record, action=action, detail=detail)


def _cancel(
    rest: Rest,
    call: Caller,
    result: Sweep,
    run: Mapping[str, Any],
    still: list[JobRecord],
    by_id: dict[int, JobRecord],
    server_url: str,
) -> None:
    repository, config = result.repository, result.config
    run_id = int(run["id"])
    waited = max(j.queued_seconds or 0.0 for j in still)
    try:
        call(partial(rest.post, f"/repos/{repository}/actions/runs/{run_id}/cancel"))
    except BudgetExhausted:
        raise
    except FAILED as exc:
        action = "already-completed" if http_status(exc) == 409 else "cancel-failed"
        detail = describe(exc, f"cancelling run {run_id}")
        _mark(still, by_id, action, detail)
        if action == "cancel-failed":
            result.errors.append(detail)
        return
    # GitHub answers 202 and cancels later, or never (a run that ignores cancel): re-read
    # the run, and call it cancelled (and say so on the commit) only when it is.
    try:
        after = call(partial(rest.get, f"/repos/{repository}/actions/runs/{run_id}"))
    except BudgetExhausted:
        raise
    except FAILED as exc:
        after = {"status": f"unknown ({describe(exc, f're-reading run {run_id}')})"}
    forced = after.get("status") != "completed" and _force_due(config, waited)
    if forced:
        after = _force_cancel(rest, call, result, run_id)
    if after.get("status") != "completed":
        _mark(
            still,
            by_id,
            "cancel-unconfirmed",
            f"GitHub accepted the cancel but the run is still {after.get('status')}: "
            "the next sweep looks again",
        )
        return
    if forced:
        _mark(
            still,
            by_id,
            "force-cancelled",
            f"queued {waited / 60:.0f} min; still running {config.force_cancel_minutes:g} "
            "min past max-queue-minutes, so cancel was ignored: force-cancelled",
        )
    else:
        _mark(still, by_id, "cancelled", f"queued {waited / 60:.0f} min: run cancelled")
    if not config.context or run.get("event") == "issue_comment":
        # A comment's run (cancelled like a label's) runs from the default branch: its
        # head_sha is that branch's commit, not the approved one, so it gets no status.
        return
    _post_no_runner(rest, call, result, run, still, server_url)


def _mark(still: list[JobRecord], by_id: dict[int, JobRecord], action: str, detail: str) -> None:
    """Record ``action`` and its ``detail`` for each job of a run."""
    for record in still:
        by_id[record.job_id] = _with(record, action, detail)


def _post_no_runner(
    rest: Rest,
    call: Caller,
    result: Sweep,
    run: Mapping[str, Any],
    still: list[JobRecord],
    server_url: str,
) -> None:
    """Post the run's commit status: no GPU runner took its jobs."""
    repository, context = result.repository, result.config.context
    run_id = int(run["id"])
    waited = max(j.queued_seconds or 0.0 for j in still)
    labels = sorted({label for j in still for label in j.labels})
    link = str(run.get("html_url") or f"{server_url}/{repository}/actions/runs/{run_id}")
    status = no_runner(str(run.get("head_sha") or ""), waited, labels, link)
    try:
        call(partial(rest.post, f"/repos/{repository}/statuses/{status.sha}", status.body(context)))
        result.statuses.append(status)
    except BudgetExhausted:
        raise
    except FAILED as exc:
        result.errors.append(describe(exc, f"setting the status of {status.sha[:12]}"))
