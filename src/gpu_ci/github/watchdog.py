"""gpu-watchdog: find GPU jobs no runner picked up, cancel their runs, keep their queue times;
re-run once a run whose GPU job was lost to infrastructure (:mod:`gpu_ci.github.infra`).

``timeout-minutes`` does not limit time in the queue: a self-hosted job waits up to 24 hours
when no runner with its labels comes. The watchdog runs on a schedule with the repository's
own token (``actions: write``), which needs no admin scope and works with scale-to-zero
pools (it looks at jobs, not at registered runners).

The selection is pure (:func:`stale_jobs`); :func:`sweep` makes the REST calls, at most::

    2 per workflow (queued and in-progress runs created before the cutoff), 1 more per
      further 100 runs (GitHub lists at most 1,000 of them: past that, "incomplete")
  + 1 per candidate run (its jobs, latest attempt), 1 more per further 100 jobs
  + 1 per stale job (re-read: a runner may have taken it since the listing)
  + 3 per cancelled run (cancel, the run re-read to see it cancelled, then the commit
      status when a context is set), + 2 when it is force-cancelled (force-cancel, re-read)
  + with retry-infra-failures above 0 (issue 32): 1 per workflow (its failed runs of the
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

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any
from urllib.parse import quote

from gpu_ci.errors import GpuCiError, UsageError
from gpu_ci.github import budget, infra, spend
from gpu_ci.github.client import ApiError, Rest, unanswered
from gpu_ci.github.idle import report_versions
from gpu_ci.github.jobs import (
    NO_RUNNER_YET,
    QUEUED,
    GpuMatcher,
    has_gpu_label,
    parse_time,
    queue_seconds,
)
from gpu_ci.github.statuses import (
    DEFAULT_CREATORS,
    PR_EVENTS,
    TRUSTED_EVENTS,
    Status,
    StatusConfig,
    approval_of,
    approval_status,
    clip,
    no_runner,
    pull_of,
    trusted_statuses,
)
from gpu_ci.pricing import PriceTable

#: The JSON file's schema name; bump the suffix on an incompatible change.
SCHEMA = "gpu-ci/queue-times/v1"
#: The infra-file's schema: GPU jobs lost to infrastructure, read by gpu-spend.
INFRA_SCHEMA = "gpu-ci/infra-failures/v1"


@dataclass(frozen=True)
class WatchdogConfig:
    workflows: tuple[str, ...]
    """Workflow file names (``cuda-ci.yml``) or ids; empty: every workflow of the repository."""
    labels: frozenset[str]
    """GPU runner labels, case-folded: a job with any of them is a GPU job."""
    max_queue_minutes: float
    cancel: bool
    context: str
    """Commit status context to set on cancelled runs; empty: none."""
    max_calls: int
    rate_reserve: int
    max_retries: int = 0
    """``retry-infra-failures``: re-runs of a run's failed jobs lost to infrastructure (0: off,
    and no failed run is examined)."""
    force_cancel_minutes: float | None = None
    """``force-cancel-minutes``: a run still not cancelled this long past max-queue-minutes is
    force-cancelled; None: never."""
    retry_window_hours: float = 24.0
    monitor_prefix: str = "gpu-monitor-"
    """Name prefix of gpu-monitor's report artifacts (empty: none read)."""
    creators: tuple[str, ...] = DEFAULT_CREATORS
    """``trusted-creators``: whose approvals in ``context`` a re-run's head check believes
    (gpu-status's own writer; with an App token, its bot)."""


def make_config(
    workflows: Sequence[str],
    labels: Sequence[str],
    max_queue_minutes: str,
    cancel: bool,
    context: str,
    max_calls: str,
    rate_reserve: str,
    retry_infra_failures: str = "0",
    force_cancel_minutes: str = "",
    retry_window_hours: str = "24",
    monitor_prefix: str = "gpu-monitor-",
    creators: Sequence[str] = (),
) -> WatchdogConfig:
    try:
        limit = float(max_queue_minutes)
    except ValueError:
        raise UsageError(
            f"input 'max-queue-minutes' must be a number of minutes; got {max_queue_minutes!r}."
        ) from None
    if not limit > 0:
        raise UsageError(f"input 'max-queue-minutes' must be above 0; got {max_queue_minutes!r}.")
    if not labels:
        raise UsageError(
            "input 'gpu-labels' is empty: name the GPU runner labels (e.g. 'gpu'); "
            "jobs with any of them are watched."
        )
    numbers = {}
    for name, raw, least in (("max-calls", max_calls, 4), ("rate-reserve", rate_reserve, 0)):
        if not raw.strip().isdigit() or int(raw) < least:
            raise UsageError(
                f"input '{name}' must be a whole number of at least {least}; got {raw!r}."
            )
        numbers[name] = int(raw)
    for flow in workflows:
        if "/" in flow or not re.fullmatch(r"[A-Za-z0-9._-]+", flow):
            raise UsageError(
                f"input 'workflows': {flow!r} is not a workflow file name (e.g. "
                "'cuda-ci.yml', without .github/workflows/) nor an id."
            )
    if context:
        from gpu_ci.github.statuses import validate_context

        context = validate_context(context)
    return WatchdogConfig(
        tuple(workflows),
        frozenset(label.casefold() for label in labels),
        limit,
        cancel,
        context,
        numbers["max-calls"],
        numbers["rate-reserve"],
        _whole(retry_infra_failures, "retry-infra-failures", 0, 10),
        (
            _minutes(force_cancel_minutes, "force-cancel-minutes", 35 * 24 * 60, "minutes")
            if force_cancel_minutes
            else None
        ),
        _minutes(retry_window_hours, "retry-window-hours", RETRY_WINDOW_MAX_HOURS, "hours"),
        monitor_prefix.strip(),
        tuple(creators) or DEFAULT_CREATORS,
    )


def _whole(raw: str, name: str, least: int, most: int) -> int:
    if not raw.strip().isdigit() or not least <= int(raw) <= most:
        raise UsageError(
            f"input '{name}' must be a whole number from {least} to {most}; got {raw!r}."
        )
    return int(raw)


#: GitHub re-runs a workflow run only within 30 days of its creation: an older failed run
#: cannot be retried, so a longer window only costs listing calls.
RETRY_WINDOW_MAX_HOURS = 30 * 24


def _minutes(raw: str, name: str, most: float, unit: str) -> float:
    """A finite number above 0 and at most ``most`` (workflow runs last at most 35 days;
    ``inf`` or ``1e8`` would overflow the date arithmetic into an internal error)."""
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= most:  # also false for nan and inf
        raise UsageError(
            f"input '{name}' must be a number of {unit} above 0 and at most {most:g}; got {raw!r}."
        )
    return value


# -- schedule ---------------------------------------------------------------------------------


def _field_values(text: str, low: int, high: int) -> list[int] | None:
    """Values of one cron field (``*``, ``*/n``, ``a-b``, ``a-b/n``, lists); None if unknown."""
    values: set[int] = set()
    for part in text.split(","):
        match = re.fullmatch(r"(\*|\d+(?:-\d+)?)(?:/(\d+))?", part.strip())
        if not match:
            return None
        span, step = match.group(1), int(match.group(2) or 1)
        if span == "*":
            start, stop = low, high
        elif "-" in span:
            start, stop = (int(x) for x in span.split("-"))
        else:
            start = stop = int(span)
            if match.group(2):
                stop = high
        if step < 1 or start < low or stop > high or start > stop:
            return None
        values.update(range(start, stop + 1, step))
    return sorted(values)


def cron_interval_minutes(cron: str) -> int | None:
    """The longest gap between two firings of a cron schedule, in minutes.

    Looks at the minute and hour fields (GitHub's schedules are UTC, five fields); a schedule
    restricted by day, month or weekday gives None (its gap is days, say so elsewhere).
    """
    fields = cron.split()
    if len(fields) != 5 or any(f != "*" for f in fields[2:]):
        return None
    mins = _field_values(fields[0], 0, 59)
    hours = _field_values(fields[1], 0, 23)
    if not mins or not hours:
        return None
    times = [h * 60 + m for h in hours for m in mins]
    gaps = [b - a for a, b in zip(times, times[1:])] + [times[0] + 24 * 60 - times[-1]]
    return max(gaps)


def schedule_warning(max_queue_minutes: float, interval: int | None) -> str:
    if interval is None or max_queue_minutes >= interval:
        return ""
    return (
        f"max-queue-minutes ({max_queue_minutes:g}) is below the schedule's interval "
        f"({interval} min): a job is cancelled only at the next sweep, so it can wait up "
        f"to {max_queue_minutes + interval:g} minutes. Run the watchdog more often or "
        "raise max-queue-minutes to the interval."
    )


# -- selection --------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobRecord:
    """One GPU job's queue time: a row of the JSON report."""

    run_id: int
    job_id: int
    name: str
    workflow: str
    event: str
    head_sha: str
    labels: tuple[str, ...]
    status: str
    created_at: str
    started_at: str | None
    queued_seconds: float | None
    html_url: str
    action: str = "observed"
    """observed, reported, cancelled, cancel-unconfirmed (accepted, not done when re-read),
    force-cancelled (still running force-cancel-minutes later: force-cancel done),
    started-before-cancel, left-running-siblings, cancel-failed, already-completed."""
    detail: str = ""


def record_of(run: Mapping[str, Any], job: Mapping[str, Any], now: datetime) -> JobRecord:
    queued = str(job.get("status")) in QUEUED
    return JobRecord(
        run_id=int(run.get("id") or job.get("run_id") or 0),
        job_id=int(job.get("id") or 0),
        name=str(job.get("name") or ""),
        workflow=str(run.get("path") or run.get("name") or ""),
        event=str(run.get("event") or ""),
        head_sha=str(run.get("head_sha") or ""),
        labels=tuple(str(x) for x in job.get("labels") or []),
        status=str(job.get("status") or ""),
        created_at=str(job.get("created_at") or ""),
        started_at=None if queued else job.get("started_at"),
        queued_seconds=queue_seconds(job, now),
        html_url=str(job.get("html_url") or ""),
    )


def queue_times(
    repository: str, run: Mapping[str, Any], gpu_jobs: Sequence[Mapping[str, Any]], now: datetime
) -> dict[str, Any]:
    """The ``queue-times/v1`` document of one completed workflow run's GPU jobs (gpu-status's
    ``report-file``): the same schema as the watchdog's sweep (:meth:`Sweep.as_json`)."""
    records = [record_of(run, job, now) for job in gpu_jobs]
    waits = [r.queued_seconds for r in records if r.queued_seconds is not None]
    return {
        "schema": SCHEMA,
        "source": "gpu-status",
        "repository": repository,
        "generated_at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "max_queued_seconds": max(waits) if waits else None,
        "complete": True,
        "jobs": [asdict(r) for r in records],
        "errors": [],
    }


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


# -- the sweep --------------------------------------------------------------------------------


class BudgetExhausted(Exception):
    pass


@dataclass
class Sweep:
    """What one sweep saw and did; rendered as summary, outputs and the JSON file."""

    repository: str
    config: WatchdogConfig
    now: datetime
    jobs: list[JobRecord] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    statuses: list[Status] = field(default_factory=list)
    calls: int = 0
    stopped: str = ""
    """Why the sweep stopped early (budget, rate limit); empty when it finished."""
    incomplete: list[str] = field(default_factory=list)
    """What the sweep could not list (GitHub's 1,000-result cap, a failed listing)."""
    retries: list[RetryRecord] = field(default_factory=list)
    """Every failed run with a failed GPU job examined for a re-run, and what was done."""
    infra: list[InfraRecord] = field(default_factory=list)
    """GPU jobs lost to infrastructure (the ``infra-file`` record, for gpu-spend)."""
    guard: RetryBudget | None = None
    """The budget guard for re-runs (None: no budget set)."""
    reserved_minutes: int = 0
    """What the re-runs of this sweep already reserve: the next one counts them."""
    month_spent: budget.Spend | None = None
    """The month's GPU spend, read once a sweep (for the first re-run the budget checks)."""

    @property
    def complete(self) -> bool:
        """Every queued and in-progress run listed, and every one examined."""
        return not self.stopped and not self.errors and not self.incomplete

    @property
    def cancelled(self) -> list[int]:
        return sorted({j.run_id for j in self.jobs if j.action in ("cancelled", "force-cancelled")})

    @property
    def retried(self) -> list[int]:
        return sorted({r.run_id for r in self.retries if r.action == "retried"})

    @property
    def stale(self) -> list[JobRecord]:
        return [j for j in self.jobs if j.action != "observed"]

    def as_json(self) -> dict[str, Any]:
        waits = [j.queued_seconds for j in self.jobs if j.queued_seconds is not None]
        return {
            "schema": SCHEMA,
            "source": "gpu-watchdog",
            "repository": self.repository,
            "generated_at": self.now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "max_queue_minutes": self.config.max_queue_minutes,
            "labels": sorted(self.config.labels),
            "rest_calls": self.calls,
            "complete": self.complete,
            "max_queued_seconds": max(waits) if waits else None,
            "jobs": [asdict(j) for j in self.jobs],
            "errors": list(self.errors),
        }


class _Caller:
    """Counts calls against the budget and the rate-limit reserve before making each one."""

    def __init__(self, rest: Rest, sweep: Sweep) -> None:
        self.rest, self.sweep = rest, sweep

    def __call__(self, fn: Callable[[], Any]) -> Any:
        sweep, config = self.sweep, self.sweep.config
        if sweep.calls >= config.max_calls:
            raise BudgetExhausted(f"the budget of {config.max_calls} REST calls is spent")
        remaining = getattr(self.rest, "rate_remaining", None)
        if remaining is not None and remaining < config.rate_reserve:
            raise BudgetExhausted(
                f"X-RateLimit-Remaining is {remaining}, below rate-reserve {config.rate_reserve}"
            )
        sweep.calls += 1
        return fn()


#: What a failed call can raise: the client's :class:`ApiError`, or its own
#: :class:`GpuCiError` for an answer that is not the JSON asked for.
_FAILED = (ApiError, GpuCiError)


def _http_status(exc: Exception) -> int | None:
    return exc.status if isinstance(exc, ApiError) else None


def _describe(exc: Exception, what: str) -> str:
    if not isinstance(exc, ApiError):
        return f"{what}: {exc}"
    if exc.status is None:
        return unanswered(what, exc.kind, exc.reason)
    hint = ""
    if exc.status in (401, 403):
        hint = (
            " — the job needs 'permissions: actions: write' to cancel (actions: read to "
            "list) and 'statuses: write' for the status"
        )
    return f"{what}: HTTP {exc.status}{': ' + exc.message if exc.message else ''}{hint}"


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
    call = _Caller(rest, result)
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
                for run in _listed_runs(rest, call, result, source, state, created):
                    if run.get("status") != "completed":
                        runs.setdefault(int(run["id"]), run)
        for _run_id, run in sorted(runs.items()):
            run_created = parse_time(run.get("created_at"))
            if run_created is not None and run_created > cutoff:
                continue  # none of its jobs can have waited long enough yet
            _sweep_run(rest, call, result, run, server_url)
        if config.max_retries > 0:
            _retry_sweep(rest, call, result, sources)
    except BudgetExhausted as exc:
        result.stopped = str(exc)
    return result


def _listed_runs(
    rest: Rest, call: _Caller, result: Sweep, source: str, state: str, created: str
) -> list[Any]:
    """Every run of ``source`` in ``state`` created as ``created`` says; a listing that fails
    is an error and an incomplete sweep, one cut short at GitHub's cap of a filtered listing
    an incomplete sweep (never silently fewer runs)."""
    url = f"{source}?status={state}&created={created}"
    try:
        listed, total = _pages(rest, call, url, "workflow_runs")
    except BudgetExhausted:
        raise
    except _FAILED as exc:
        result.errors.append(_describe(exc, f"listing {state} runs ({source})"))
        result.incomplete.append(f"{state} runs of {source} not listed")
        return []
    if total > len(listed):
        result.incomplete.append(
            f"{source} has {total} {state} runs; GitHub lists at most {len(listed)} of one "
            "filtered listing (the newest): older ones were not examined"
        )
    return listed


def _run_jobs(rest: Rest, call: _Caller, result: Sweep, run_id: int, what: str) -> list[Any] | None:
    """Every job of the run's latest attempt; None (and an error in the sweep) when the
    listing fails."""
    url = f"/repos/{result.repository}/actions/runs/{run_id}/jobs?filter=latest"
    try:
        jobs, _total = _pages(rest, call, url, "jobs")
    except BudgetExhausted:
        raise
    except _FAILED as exc:
        result.errors.append(_describe(exc, what))
        return None
    return jobs


def _pages(rest: Rest, call: _Caller, url: str, key: str) -> tuple[list[Any], int]:
    """Every page of a listing (100 a page, by number), each page one call of the budget;
    and the listing's ``total_count`` (above the items when GitHub stops short of it, as a
    filtered run listing does at 1,000)."""
    items: list[Any] = []
    page = 1
    while True:
        answer = call(partial(rest.get, f"{url}&per_page=100&page={page}"))
        chunk = answer.get(key)
        if not isinstance(chunk, list):
            raise GpuCiError(f"GitHub API answered GET {url} with unexpected JSON.")
        items.extend(chunk)
        total = int(answer.get("total_count") or 0)
        if len(chunk) < 100 or len(items) >= total:
            return items, max(total, len(items))
        page += 1


def _sweep_run(
    rest: Rest, call: _Caller, result: Sweep, run: Mapping[str, Any], server_url: str
) -> None:
    config, repository = result.config, result.repository
    run_id = int(run["id"])
    jobs = _run_jobs(rest, call, result, run_id, f"listing the jobs of run {run_id}")
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
            except _FAILED as exc:
                by_id[record.job_id] = _with(
                    record, "cancel-failed", _describe(exc, f"re-reading job {record.job_id}")
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


def _force_cancel(rest: Rest, call: _Caller, result: Sweep, run_id: int) -> Mapping[str, Any]:
    """POST force-cancel, then re-read the run: the answer says whether it is completed now."""
    base = f"/repos/{result.repository}/actions/runs/{run_id}"
    try:
        call(partial(rest.post, f"{base}/force-cancel"))
        again: Mapping[str, Any] = call(partial(rest.get, base))
    except BudgetExhausted:
        raise
    except _FAILED as exc:
        detail = _describe(exc, f"force-cancelling run {run_id}")
        result.errors.append(detail)
        return {"status": f"unknown ({detail})"}
    return again


def _with(record: JobRecord, action: str, detail: str) -> JobRecord:
    return replace(record, action=action, detail=detail)


def _cancel(
    rest: Rest,
    call: _Caller,
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
    except _FAILED as exc:
        action = "already-completed" if _http_status(exc) == 409 else "cancel-failed"
        detail = _describe(exc, f"cancelling run {run_id}")
        for record in still:
            by_id[record.job_id] = _with(record, action, detail)
        if action == "cancel-failed":
            result.errors.append(detail)
        return
    # GitHub answers 202 and cancels later, or never (a run that ignores cancel): re-read
    # the run, and call it cancelled (and say so on the commit) only when it is.
    try:
        after = call(partial(rest.get, f"/repos/{repository}/actions/runs/{run_id}"))
    except BudgetExhausted:
        raise
    except _FAILED as exc:
        after = {"status": f"unknown ({_describe(exc, f're-reading run {run_id}')})"}
    forced = after.get("status") != "completed" and _force_due(config, waited)
    if forced:
        after = _force_cancel(rest, call, result, run_id)
    if after.get("status") != "completed":
        for record in still:
            by_id[record.job_id] = _with(
                record,
                "cancel-unconfirmed",
                (
                    f"GitHub accepted the cancel but the run is still {after.get('status')}: "
                    "the next sweep looks again"
                ),
            )
        return
    for record in still:
        by_id[record.job_id] = (
            _with(
                record,
                "force-cancelled",
                f"queued {waited / 60:.0f} min; still running {config.force_cancel_minutes:g} "
                "min past max-queue-minutes, so cancel was ignored: force-cancelled",
            )
            if forced
            else _with(record, "cancelled", f"queued {waited / 60:.0f} min: run cancelled")
        )
    if not config.context or run.get("event") == "issue_comment":
        # A comment's run (cancelled like a label's) runs from the default branch: its
        # head_sha is that branch's commit, not the approved one, so it gets no status.
        return
    labels = sorted({label for j in still for label in j.labels})
    link = str(run.get("html_url") or f"{server_url}/{repository}/actions/runs/{run_id}")
    status = no_runner(str(run.get("head_sha") or ""), waited, labels, link)
    try:
        call(
            partial(
                rest.post, f"/repos/{repository}/statuses/{status.sha}", status.body(config.context)
            )
        )
        result.statuses.append(status)
    except BudgetExhausted:
        raise
    except _FAILED as exc:
        result.errors.append(_describe(exc, f"setting the status of {status.sha[:12]}"))


# -- re-running GPU jobs lost to infrastructure (issue 32) -------------------------------------


@dataclass(frozen=True)
class RetryBudget:
    """The budget guard for re-runs: gpu-gate's budget inputs, checked with
    :func:`gpu_ci.github.budget.check` against the month's spend (read once a sweep by
    :func:`gpu_ci.github.spend.month_spend`); each re-run reserves ``reserve_minutes`` per
    GPU job it re-runs, and the re-runs of one sweep add up."""

    config: budget.BudgetConfig
    matcher: GpuMatcher
    table: PriceTable
    default_branch: str = ""


@dataclass(frozen=True)
class RetryRecord:
    """One failed run with a failed GPU job: re-run or not, and why."""

    run_id: int
    attempt: int
    head_sha: str
    workflow: str
    action: str
    """retried, retry-unconfirmed, not-retried, retry-failed."""
    code: str
    """retry, test, unknown, retries-spent, stale-head, over-budget, budget-unknown, error."""
    reason: str
    links: tuple[str, ...] = ()
    """The attempts' pages: the failed one, and the re-run's when there is one."""
    verdicts: tuple[infra.Verdict, ...] = ()


@dataclass(frozen=True)
class InfraRecord:
    """A GPU job lost to infrastructure, for gpu-spend's minutes lost by pool."""

    run_id: int
    attempt: int
    job_id: int
    job: str
    pool: str
    labels: tuple[str, ...]
    runner_name: str
    started_at: str
    minutes: float
    evidence: tuple[str, ...]
    retried: bool


def infra_json(result: Sweep) -> dict[str, Any]:
    """The ``infra-file``: every GPU job this sweep found lost to infrastructure, and the
    minutes lost per pool (gpu-spend joins the job ids with the minutes it counts itself)."""
    pools: dict[str, dict[str, Any]] = {}
    for rec in result.infra:
        row = pools.setdefault(rec.pool, {"pool": rec.pool, "jobs": 0, "minutes": 0.0})
        row["jobs"] += 1
        row["minutes"] = round(row["minutes"] + rec.minutes, 2)
    return {
        "schema": INFRA_SCHEMA,
        "source": "gpu-watchdog",
        "repository": result.repository,
        "generated_at": result.now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "complete": result.complete,
        "failures": [
            {**asdict(r), "labels": list(r.labels), "evidence": list(r.evidence)}
            for r in result.infra
        ],
        "by_pool": sorted(pools.values(), key=lambda r: (-r["minutes"], r["pool"])),
        "retries": [
            {
                "run_id": r.run_id,
                "attempt": r.attempt,
                "action": r.action,
                "code": r.code,
                "reason": r.reason,
                "links": list(r.links),
                "verdicts": [v.to_json() for v in r.verdicts],
            }
            for r in result.retries
        ],
    }


def _retry_sweep(rest: Rest, call: _Caller, result: Sweep, sources: Sequence[str]) -> None:
    """Failed runs created within retry-window-hours: classify their failed jobs, re-run the
    runs lost to infrastructure (see :func:`_retry_run`)."""
    since = result.now - timedelta(hours=result.config.retry_window_hours)
    created = quote(">=" + since.strftime("%Y-%m-%dT%H:%M:%SZ"), safe="")
    runs: dict[int, Mapping[str, Any]] = {}
    for source in sources:
        for run in _listed_runs(rest, call, result, source, "failure", created):
            if run.get("status") == "completed":
                runs.setdefault(int(run["id"]), run)
    for _run_id, run in sorted(runs.items()):
        _retry_run(rest, call, result, run)


def _retry_run(rest: Rest, call: _Caller, result: Sweep, run: Mapping[str, Any]) -> None:
    config = result.config
    run_id, attempt = int(run["id"]), int(run.get("run_attempt") or 1)
    jobs = _run_jobs(rest, call, result, run_id, f"listing the jobs of failed run {run_id}")
    if jobs is None:
        return
    failed = [j for j in jobs if infra.failed(j)]
    gpu_ids = {
        int(j["id"]) for j in failed if has_gpu_label(j, config.labels) or cloud_runner_job(j)
    }
    if not gpu_ids:
        return  # no GPU job failed: not the watchdog's business
    verdicts = tuple(_verdicts(rest, call, result, run, failed, gpu_ids))
    decision = infra.retry_decision(run, verdicts, gpu_ids, config.max_retries)
    code, reason = decision.code, decision.reason
    if decision.retry:
        code, reason = _may_retry(rest, call, result, run, jobs, gpu_ids) or (code, reason)
    link = _attempt_link(run, attempt)
    record = RetryRecord(
        run_id,
        attempt,
        str(run.get("head_sha") or ""),
        str(run.get("path") or ""),
        "not-retried",
        code,
        reason,
        (link,),
        verdicts,
    )
    if code == "retry":
        every = any(cloud_runner_job(j) for j in failed if int(j["id"]) in gpu_ids)
        record = _rerun(rest, call, result, run, record, every=every)
    result.retries.append(record)
    by_id = {int(j["id"]): j for j in failed}
    for verdict in verdicts:
        if verdict.infrastructure and verdict.job_id in gpu_ids:
            result.infra.append(
                _infra_record(run, by_id[verdict.job_id], verdict, record.action == "retried")
            )


def _attempt_link(run: Mapping[str, Any], attempt: int) -> str:
    url = str(run.get("html_url") or "").rstrip("/")
    return f"{url}/attempts/{attempt}" if url else ""


def _infra_record(
    run: Mapping[str, Any], job: Mapping[str, Any], verdict: infra.Verdict, retried: bool
) -> InfraRecord:
    return InfraRecord(
        int(run["id"]),
        int(job.get("run_attempt") or run.get("run_attempt") or 1),
        verdict.job_id,
        verdict.job,
        infra.pool_of(job),
        tuple(str(x) for x in job.get("labels") or []),
        str(job.get("runner_name") or ""),
        str(job.get("started_at") or ""),
        round(infra.minutes_of(job), 2),
        tuple(e.code for e in verdict.evidence),
        retried,
    )


def _verdicts(
    rest: Rest,
    call: _Caller,
    result: Sweep,
    run: Mapping[str, Any],
    failed: Sequence[Mapping[str, Any]],
    gpu_ids: set[int],
) -> list[infra.Verdict]:
    """One verdict per failed job: steps first (free), the check run's annotations only when
    no step failed (a failed step is a test failure whatever they say), gpu-monitor's
    report only for a GPU job whose verdict it could change."""
    evidence: dict[int, list[infra.Evidence]] = {}
    for job in failed:
        found = infra.step_evidence(job)
        if not any(e.code == "failed-step" for e in found):
            found += _annotations(rest, call, result, job)
        evidence[int(job["id"])] = found
    wanting = [
        j
        for j in failed
        if int(j["id"]) in gpu_ids and infra.needs_report(j, evidence[int(j["id"])])
    ]
    if wanting and result.config.monitor_prefix:
        for job_id, found in _reports(rest, call, result, run, wanting).items():
            evidence[job_id] += found
    return [infra.classify(j, evidence[int(j["id"])]) for j in failed]


def _annotations(
    rest: Rest, call: _Caller, result: Sweep, job: Mapping[str, Any]
) -> list[infra.Evidence]:
    check_run = str(job.get("check_run_url") or "").rstrip("/").rsplit("/", 1)[-1]
    if not check_run.isdigit():
        return []
    path = f"/repos/{result.repository}/check-runs/{check_run}/annotations"
    try:
        notes = call(partial(rest.get_pages, path, limit=100))
    except BudgetExhausted:
        raise
    except _FAILED as exc:
        result.notes.append(_describe(exc, f"reading the annotations of job {job.get('id')}"))
        return []
    return infra.annotation_evidence([n for n in notes if isinstance(n, Mapping)])


def _reports(
    rest: Rest,
    call: _Caller,
    result: Sweep,
    run: Mapping[str, Any],
    wanting: Sequence[Mapping[str, Any]],
) -> dict[int, list[infra.Evidence]]:
    """gpu-monitor's reports of the run: one artifact listing, then at most one download per
    job that wants one (newest artifacts first), each matched to a job by its time window."""
    from gpu_ci.github.idle import MAX_REPORT_BYTES

    repository, prefix = result.repository, result.config.monitor_prefix
    url = f"/repos/{repository}/actions/runs/{int(run['id'])}/artifacts?per_page=100"
    try:
        listed = call(partial(rest.get, url)).get("artifacts") or []
    except BudgetExhausted:
        raise
    except _FAILED as exc:
        result.notes.append(_describe(exc, f"listing the artifacts of run {run.get('id')}"))
        return {}
    arts = [
        a
        for a in listed
        if str(a.get("name") or "").startswith(prefix)
        and not a.get("expired")
        and int(a.get("size_in_bytes") or 0) <= MAX_REPORT_BYTES
    ]
    arts.sort(key=lambda a: (str(a.get("created_at") or ""), int(a["id"])), reverse=True)
    out: dict[int, list[infra.Evidence]] = {}
    for art in arts[: len(wanting)]:
        path = f"/repos/{repository}/actions/artifacts/{int(art['id'])}/zip"
        try:
            blob = call(partial(rest.download, path, MAX_REPORT_BYTES))
        except BudgetExhausted:
            raise
        except _FAILED as exc:
            result.notes.append(_describe(exc, f"downloading artifact {art.get('name')}"))
            continue
        report, why = read_monitor_report(blob)
        if report is None:
            result.notes.append(f"artifact '{art.get('name')}': {why}")
            continue
        try:  # the artifact is PR code's to write: whatever it holds, a note, never a crash
            found = [
                (int(job["id"]), infra.monitor_evidence(report, str(art.get("name"))))
                for job in wanting
                if infra.report_is_for(report, job)
            ]
        except Exception as exc:  # noqa: BLE001 - one unreadable artifact must not end the sweep
            result.notes.append(f"artifact '{art.get('name')}': unreadable report ({exc!r})")
            continue
        for job_id, evidence in found:
            out.setdefault(job_id, []).extend(evidence)
    return out


def read_monitor_report(blob: bytes) -> tuple[dict[str, Any] | None, str]:
    """gpu-monitor's ``report.json`` (or the zip's only JSON file) as a dict, or why not."""
    import io
    import zipfile
    import zlib

    from gpu_ci.github.idle import MAX_REPORT_BYTES, load_json

    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as archive:
            members = [i for i in archive.infolist() if i.filename.endswith(".json")]
            pick = [i for i in members if i.filename.rsplit("/", 1)[-1] == "report.json"]
            if len(pick) != 1 and len(members) != 1:
                return None, "no report.json (nor a single .json file) in it"
            info = (pick or members)[0]
            if info.file_size > MAX_REPORT_BYTES:
                return None, f"{info.filename} is over {MAX_REPORT_BYTES} bytes"
            data = load_json(archive.read(info))
    except (zipfile.BadZipFile, ValueError, OSError, RuntimeError, EOFError, zlib.error) as exc:
        return None, f"not a readable zip of JSON ({exc})"
    versions = report_versions()
    if not isinstance(data, dict) or data.get("schema_version") not in versions:
        return None, f"not a gpu-monitor report (schema_version {' or '.join(map(str, versions))})"
    return data, ""


def _may_retry(
    rest: Rest,
    call: _Caller,
    result: Sweep,
    run: Mapping[str, Any],
    jobs: Sequence[Mapping[str, Any]],
    gpu_ids: set[int],
) -> tuple[str, str] | None:
    """Why the head or the budget refuses the re-run; None when both allow it."""
    try:
        stale = _stale_head(rest, call, result, run)
    except BudgetExhausted:
        raise
    except _FAILED as exc:
        detail = _describe(exc, f"checking the head of run {run.get('id')}")
        result.errors.append(detail)
        return "error", detail
    if stale:
        return "stale-head", stale
    return _over_budget(rest, result, len(gpu_ids))


def _stale_head(rest: Rest, call: _Caller, result: Sweep, run: Mapping[str, Any]) -> str:
    """A pull request's run is re-run only while its head is still the approved one: the
    head commit carries a current approval (``context``) and is still the pull request's
    head. A trusted event's commit is in the repository already: nothing to check. Any other
    event (a comment approval's ``issue_comment`` run) runs from the default branch: its
    ``head_sha`` is that branch's commit, not the approved one, so it is never re-run."""
    event = str(run.get("event") or "")
    if event not in PR_EVENTS and event not in TRUSTED_EVENTS:
        return (
            f"a '{event}' run runs from the default branch (its head_sha is not the approved "
            "commit): the watchdog cannot tell that its approval is current, approve again"
        )
    if event not in PR_EVENTS:
        return ""
    repository, context = result.repository, result.config.context
    sha = str(run.get("head_sha") or "")
    listed = [p.get("number") for p in run.get("pull_requests") or [] if isinstance(p, dict)]
    number = listed[0] if listed else None
    if not context:
        return (
            "no context: approvals cannot be read, so a pull request's run is never re-run "
            "(set context to gpu-status's)"
        )
    statuses = call(
        partial(rest.get_pages, f"/repos/{repository}/commits/{sha}/statuses", limit=100)
    )
    approval = approval_status(
        trusted_statuses(
            StatusConfig(context, "", "", (), creators=result.config.creators), statuses
        ),
        context,
    )
    if approval is None:
        return f"the head {sha[:12]} has no current approval ('{context}'): approve again"
    # The approval's own run only (gpu-status binds no other): any run of an approved
    # head may use GPU runners, a fork's own run of its edited workflow too.
    approver = approval_of([approval], context)
    actor = str((run.get("actor") or {}).get("login") or "")
    if not approver or actor != approver:
        return (
            f"run {run.get('id')} was started by @{actor}, not by the approver "
            f"@{approver}: only the approval's run is re-run"
        )
    number = pull_of(approval) or number
    if number is None:
        return "the run names no pull request: cannot tell whether its head is still approved"
    pull = call(partial(rest.get, f"/repos/{repository}/pulls/{int(number)}"))
    head = str((pull.get("head") or {}).get("sha") or "")
    if pull.get("state") != "open" or head != sha:
        return (
            f"the pull request #{number} is {pull.get('state')} at {head[:12]}, not at the "
            f"approved head {sha[:12]}"
        )
    return ""


def _over_budget(rest: Rest, result: Sweep, gpu_jobs: int) -> tuple[str, str] | None:
    """gpu-gate's budget rule for the re-run's reservation (``reserve-minutes`` per GPU job
    it re-runs, plus what this sweep's earlier re-runs reserve)."""
    guard = result.guard
    if guard is None:
        return None
    cfg = guard.config
    reserve = cfg.reserve_minutes * gpu_jobs
    spent = result.month_spent
    if spent is None:
        before = getattr(rest, "calls", None)
        try:
            spent, _note = spend.month_spend(
                rest,
                result.repository,
                cfg,
                guard.matcher,
                guard.table,
                result.now,
                default_branch=guard.default_branch,
                skip=None,
            )
        except Exception as exc:  # ApiError, or an answer that is not what was asked
            if cfg.on_unknown == "run":
                result.notes.append(f"budget not checked (budget-on-unknown: run): {exc}")
                return None
            return "budget-unknown", f"the month's GPU spend could not be read: {exc}"
        finally:
            after = getattr(rest, "calls", None)
            if isinstance(before, int) and isinstance(after, int):
                result.calls += after - before
        result.month_spent = spent
    price = cfg.price.on(result.now.date(), guard.table) if cfg.price else None
    verdict = budget.check(cfg.budget, spent, result.reserved_minutes + reserve, price)
    if not verdict.ok:
        earlier = result.reserved_minutes
        what = f"with this sweep's earlier re-runs ({earlier} min): " if earlier else ""
        return "over-budget", what + verdict.reason
    result.reserved_minutes += reserve
    return None


#: The label prefix of gpu-cloud-runner's just-in-time runners (one label per VM).
CLOUD_RUNNER_PREFIX = "gpu-ci-"


def cloud_runner_job(job: Mapping[str, Any]) -> bool:
    """Whether the job asked for a gpu-cloud-runner VM (its one label carries our prefix)."""
    return any(str(label).startswith(CLOUD_RUNNER_PREFIX) for label in job.get("labels") or [])


def _rerun(
    rest: Rest,
    call: _Caller,
    result: Sweep,
    run: Mapping[str, Any],
    record: RetryRecord,
    *,
    every: bool = False,
) -> RetryRecord:
    """POST rerun-failed-jobs (``every``: rerun), read the new attempt back, say so.

    A GPU job on a cloud runner needs its start job again, which succeeded and so is no
    failed job: then the whole run is re-run, and the new attempt starts its own VM."""
    repository, run_id = result.repository, record.run_id
    base = f"/repos/{repository}/actions/runs/{run_id}"
    try:
        call(partial(rest.post, f"{base}/{'rerun' if every else 'rerun-failed-jobs'}"))
    except BudgetExhausted:
        raise
    except _FAILED as exc:
        detail = _describe(exc, f"re-running the failed jobs of run {run_id}")
        result.errors.append(detail)
        return replace(record, action="retry-failed", code="error", reason=detail)
    new = record.attempt + 1
    try:
        again = call(partial(rest.get, f"{base}/attempts/{new}"))
    except BudgetExhausted:
        raise
    except _FAILED as exc:
        return replace(
            record,
            action="retry-unconfirmed",
            reason=_describe(exc, f"reading attempt {new} of run {run_id}"),
        )
    links = (*record.links, _attempt_link(run, new))
    done = replace(record, action="retried", links=links, reason=f"{record.reason}: re-run")
    verdict = next(v for v in record.verdicts if v.infrastructure)
    what = "GPU" if any(e.code == "gpu-lost" for e in verdict.evidence) else "runner"
    if result.config.context:
        status = Status(
            record.head_sha,
            "pending",
            clip(
                f"GPU run retried after the {what} was lost (attempt {new}); attempt "
                f"{record.attempt}: {verdict.reason}"
            ),
            str(again.get("html_url") or "").rstrip("/") + f"/attempts/{new}",
        )
        try:
            call(
                partial(
                    rest.post,
                    f"/repos/{repository}/statuses/{status.sha}",
                    status.body(result.config.context),
                )
            )
            result.statuses.append(status)
        except BudgetExhausted:
            raise
        except _FAILED as exc:
            result.errors.append(_describe(exc, f"setting the status of {status.sha[:12]}"))
    return done
