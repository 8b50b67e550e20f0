"""gpu-watchdog: find GPU jobs no runner picked up, cancel their runs, keep their queue times.

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
      status when a context is set)

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
from gpu_ci.github.client import ApiError, Rest, unanswered
from gpu_ci.github.jobs import NO_RUNNER_YET, QUEUED, has_gpu_label, parse_time, queue_seconds
from gpu_ci.github.statuses import Status, no_runner

#: The JSON file's schema name; bump the suffix on an incompatible change.
SCHEMA = "gpu-ci/queue-times/v1"


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


def make_config(
    workflows: Sequence[str],
    labels: Sequence[str],
    max_queue_minutes: str,
    cancel: bool,
    context: str,
    max_calls: str,
    rate_reserve: str,
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
    )


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

    @property
    def complete(self) -> bool:
        """Every queued and in-progress run listed, and every one examined."""
        return not self.stopped and not self.errors and not self.incomplete

    @property
    def cancelled(self) -> list[int]:
        return sorted({j.run_id for j in self.jobs if j.action == "cancelled"})

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
) -> Sweep:
    """One pass; never raises for API errors: each lands in ``Sweep.errors``."""
    result = Sweep(repository, config, now)
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
                url = f"{source}?status={state}&created={created}"
                try:
                    listed, total = _pages(rest, call, url, "workflow_runs")
                except BudgetExhausted:
                    raise
                except _FAILED as exc:
                    result.errors.append(_describe(exc, f"listing {state} runs ({source})"))
                    result.incomplete.append(f"{state} runs of {source} not listed")
                    continue
                if total > len(listed):
                    result.incomplete.append(
                        f"{source} has {total} {state} runs; GitHub lists at most "
                        f"{len(listed)} of one filtered listing (the newest): older ones "
                        "were not examined"
                    )
                for run in listed:
                    if run.get("status") != "completed":
                        runs.setdefault(int(run["id"]), run)
        for _run_id, run in sorted(runs.items()):
            run_created = parse_time(run.get("created_at"))
            if run_created is not None and run_created > cutoff:
                continue  # none of its jobs can have waited long enough yet
            _sweep_run(rest, call, result, run, server_url)
    except BudgetExhausted as exc:
        result.stopped = str(exc)
    return result


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
    try:
        jobs, _total = _pages(
            rest, call, f"/repos/{repository}/actions/runs/{run_id}/jobs?filter=latest", "jobs"
        )
    except BudgetExhausted:
        raise
    except _FAILED as exc:
        result.errors.append(_describe(exc, f"listing the jobs of run {run_id}"))
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
        by_id[record.job_id] = _with(
            record, "cancelled", f"queued {waited / 60:.0f} min: run cancelled"
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
