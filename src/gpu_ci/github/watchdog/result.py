"""The records a watchdog sweep keeps: queued jobs, re-runs, jobs lost to infrastructure.

They become the summary, the outputs, the queue-times JSON and the ``infra-file``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from gpu_ci.github.commit_status import Status
from gpu_ci.github.jobs import (
    QUEUED,
    GpuMatcher,
    queue_seconds,
)
from gpu_ci.github.spend import budget
from gpu_ci.github.watchdog import infra
from gpu_ci.github.watchdog.config import WatchdogConfig
from gpu_ci.pricing import PriceTable

#: The JSON file's schema name; bump the suffix on an incompatible change.
SCHEMA = "gpu-ci/queue-times/v1"
#: The infra-file's schema: GPU jobs lost to infrastructure, read by gpu-spend.
INFRA_SCHEMA = "gpu-ci/infra-failures/v1"


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


class BudgetExhausted(Exception):
    pass


@dataclass
class Sweep:
    """What one sweep saw and did.

    It becomes the summary, the outputs and the JSON file."""

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
    reserved_usd: Decimal | None = Decimal(0)
    """Those minutes at each re-run job's price (None: a job without a price)."""
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


@dataclass(frozen=True)
class RetryBudget:
    """The budget guard for re-runs: gpu-gate's budget inputs, checked with
    :func:`gpu_ci.github.spend.budget.check` against the month's spend (read once a sweep by
    :func:`gpu_ci.github.spend.month.month_spend`); each re-run reserves ``reserve_minutes`` per
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
