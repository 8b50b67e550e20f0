"""Fetching the month's GPU spend: the thin layer between the REST API and :mod:`budget`.

Two sources. With a token that may read the organisation's billing, one call to the billing
usage report. Otherwise the workflow's own token (``actions: read``): the month's runs of
every workflow (a pull request can add a workflow file of its own, and its GPU jobs cost the
same), and the jobs of each run not yet in the ledger. The ledger (written by
``gpu-spend`` on a trusted event and uploaded as an artifact) keeps the cost of a decision
flat over the month: list the ledger artifact, download it, list the runs created since the
ledger was written, fetch the jobs of those runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

from gpu_ci.errors import GpuCiError
from gpu_ci.github.approval import Reads, approval_config, approved_run
from gpu_ci.github.client import ApiError, Rest
from gpu_ci.github.jobs import GpuMatcher, parse_time
from gpu_ci.github.jobs import now as clock
from gpu_ci.github.spend import budget
from gpu_ci.github.spend.billing import billing_spend
from gpu_ci.github.spend.ledger import Ledger, trusted_ledger
from gpu_ci.pricing import Price, PriceTable


@dataclass
class Collected:
    costs: list[budget.JobCost]
    runs: list[dict[str, Any]]
    ledger_used: str = ""
    """Why the ledger was (not) used, for the summary."""
    notes: list[str] = field(default_factory=list)
    windows: dict[int, tuple[float, float]] = field(default_factory=dict)
    """Job id -> (started, completed) in epoch seconds, for the jobs fetched (not those
    reused from a ledger): what :mod:`gpu_ci.github.spend.idle` matches gpu-monitor reports to."""
    reused: dict[str, int] = field(default_factory=dict)
    """Run id -> attempt of the runs whose costs came from the ledger (not listed again, or
    listed unchanged): a ledger written from this collection keeps them."""


#: "This endpoint will return up to 1,000 results for each search when using the following
#: parameters: actor, branch, check_suite_id, created, event, head_sha, status."
#: (actions/list-workflow-runs and list-workflow-runs-for-repo)
RUN_SEARCH_CAP = 1000


def list_runs(
    rest: Rest,
    repo: str,
    workflows: Sequence[str],
    since: date,
    until: date | None = None,
    status: str = "",
    notes: list[str] | None = None,
    now: datetime | None = None,
) -> list[dict[str, Any]]:
    """The runs created since ``since``, newest first, every page.

    Runs created on or after ``since`` (UTC), of the given workflow files (all workflows
    when none are given), newest first, every page; only those in ``status`` if given.

    A filtered listing stops at 1,000 results (:data:`RUN_SEARCH_CAP`) with no error, so a
    window whose ``total_count`` is above it is split in two by time (``created`` bounds to
    the second) until each half fits; a window of one second that still does not fit is
    listed as far as GitHub goes and said in ``notes`` ("incomplete"). One call per 100
    runs, plus one per split (the first page of the window that was too large).
    """
    first = datetime(since.year, since.month, since.day, tzinfo=timezone.utc)
    last = (
        None
        if until is None
        else datetime(until.year, until.month, until.day, 23, 59, 59, tzinfo=timezone.utc)
    )
    created = (
        f">={since.isoformat()}" if until is None else f"{since.isoformat()}..{until.isoformat()}"
    )
    runs: list[dict[str, Any]] = []
    seen: set[int] = set()
    paths = [f"/repos/{repo}/actions/workflows/{quote(w, safe='')}/runs" for w in workflows] or [
        f"/repos/{repo}/actions/runs"
    ]
    for path in paths:
        todo: list[tuple[str, datetime, datetime | None]] = [(created, first, last)]
        while todo:
            window, lo, hi = todo.pop()
            query = f"created={quote(window, safe='')}"
            if status:
                query += f"&status={quote(status, safe='')}"
            splittable = hi is None or hi > lo
            listed, total = _run_pages(rest, f"{path}?{query}", splittable)
            if total > len(listed) and splittable:
                todo += _halves(lo, hi, now)
                continue
            if total > len(listed) and notes is not None:
                notes.append(
                    f"incomplete: {path} lists {total} runs created {window} but "
                    f"GitHub returns at most {len(listed)} of one filtered listing; "
                    "the rest are not counted."
                )
            for run in listed:
                if run["id"] not in seen:
                    seen.add(run["id"])
                    runs.append(run)
    runs.sort(key=lambda r: (str(r.get("created_at") or ""), int(r["id"])), reverse=True)
    return runs


def _halves(
    lo: datetime, hi: datetime | None, now: datetime | None
) -> list[tuple[str, datetime, datetime | None]]:
    """A listing window split in two by time.

    Each half comes with its ``created`` query."""
    end = (
        hi
        if hi is not None
        else (now or clock(os.environ)).replace(microsecond=0) + timedelta(days=1)
    )
    mid = (lo + (end - lo) / 2).replace(microsecond=0)
    after = mid + timedelta(seconds=1)
    return [
        (f"{_second(lo)}..{_second(mid)}", lo, mid),
        (f"{_second(after)}..{_second(end)}", after, end),
    ]


def _second(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _run_pages(rest: Rest, url: str, splittable: bool) -> tuple[list[dict[str, Any]], int]:
    """A run listing's pages and its ``total_count``.

    A run listing's pages (by number) and its ``total_count``; stops after the first page
    when ``total_count`` is above the 1,000 GitHub will list and the caller can split the
    window (a one-second window is read as far as GitHub goes)."""
    items: list[dict[str, Any]] = []
    page = 1
    while True:
        answer = rest.get(f"{url}&per_page=100&page={page}")
        chunk = answer.get("workflow_runs")
        if not isinstance(chunk, list):
            raise GpuCiError(f"GitHub API answered GET {url} with unexpected JSON.")
        total = int(answer.get("total_count") or 0)
        items.extend(chunk)
        if splittable and page == 1 and total > RUN_SEARCH_CAP and len(chunk) == 100:
            return items, total
        if len(chunk) < 100 or len(items) >= total:
            return items, max(total, len(items))
        page += 1


def run_jobs(rest: Rest, repo: str, run_id: int) -> list[dict[str, Any]]:
    """Jobs of every attempt of a run (``filter=all``): re-runs count what they used."""
    return rest.get_pages(f"/repos/{repo}/actions/runs/{run_id}/jobs?filter=all", key="jobs")


#: Fork heads whose statuses one count reads, at most (one call each, the newest 100
#: statuses of the head): those of the newest runs with GPU jobs waiting for a runner.
APPROVAL_HEADS = 10

#: A fork run's waiting GPU jobs, for the approval check: (run, its jobs, its costs so far).
Waiting = tuple[Mapping[str, Any], Sequence[Mapping[str, Any]], Sequence[budget.JobCost]]


def approved_reservations(
    rest: Rest,
    repo: str,
    waiting: Sequence[Waiting],
    approvals: Reads,
    reserve: Callable[[Mapping[str, Any], Sequence[Mapping[str, Any]]], list[budget.JobCost]],
    notes: list[str],
) -> list[budget.JobCost]:
    """What fork runs that hold a maintainer's approval add: the reservations of their jobs
    waiting for a runner (``reserve``: the run's costs had it reserved), for at most
    :data:`APPROVAL_HEADS` heads, those of the newest runs, one call each.

    A fork can queue any number of jobs on any labels but cannot write a status to this
    repository (its ``pull_request`` token is read-only, and only the trusted creators'
    statuses count), so only an approved head's run moves a decision. Beyond the bound the
    older heads reserve nothing, and ``notes`` says so: reserving for heads nobody read
    would let an unapproved flood refuse every approval, while skipping them at worst
    leaves an approved run unreserved, as before it was read at all."""
    heads: dict[str, list[Waiting]] = {}
    for item in waiting:
        heads.setdefault(str(item[0].get("head_sha") or ""), []).append(item)
    order = sorted(
        heads,
        key=lambda sha: max(
            (str(run.get("created_at") or ""), int(run.get("id") or 0)) for run, _, _ in heads[sha]
        ),
        reverse=True,
    )
    out: list[budget.JobCost] = []
    for sha in order[:APPROVAL_HEADS]:
        try:
            listed = rest.get_pages(f"/repos/{repo}/commits/{sha}/statuses", limit=100)
        except ApiError as exc:
            if exc.status not in (404, 422):
                raise
            notes.append(f"the statuses of fork head {sha[:12]} cannot be read: none reserve")
            continue
        for run, jobs, counted in heads[sha]:
            if approved_run(approvals, run, listed):
                continue
            ids = {c.job_id for c in counted}
            out += [c for c in reserve(run, jobs) if c.job_id not in ids]
    skipped = order[APPROVAL_HEADS:]
    if skipped:
        runs = sum(len(heads[sha]) for sha in skipped)
        notes.append(
            f"{len(order)} fork heads have GPU jobs waiting for a runner: the newest "
            f"{APPROVAL_HEADS} were read for a maintainer's approval; the {len(skipped)} "
            f"older {'one' if len(skipped) == 1 else 'ones'} ({runs} run"
            f"{'' if runs == 1 else 's'}) reserve nothing (at most {APPROVAL_HEADS} heads are "
            "read per count)."
        )
    return out


#: "You can re-run a workflow ... up to 30 days after the initial run." A run created up
#: to this many days before the month (or before the ledger) may be re-run in it.
RERUN_DAYS = 30


def _active_since(run: Mapping[str, Any], first: date) -> bool:
    """The run was (re-)started or updated on or after ``first``: a re-run this month of a
    run created before it."""
    for key in ("run_started_at", "updated_at"):
        moment = parse_time(run.get(key))
        if moment is not None and moment.date() >= first:
            return True
    return False


@dataclass(frozen=True)
class Counting:
    """What a count of the month's GPU jobs needs, besides the API."""

    repo: str
    workflows: Sequence[str]
    matcher: GpuMatcher
    price: Price | None
    table: PriceTable
    reserve_minutes: int
    month: budget.Month
    now: datetime
    approvals: Reads | None = None
    """Where a fork run's approval is read; gpu-status's defaults when None."""

    def costs(
        self,
        run: Mapping[str, Any],
        jobs: Sequence[Mapping[str, Any]],
        reserves: bool | None = None,
    ) -> list[budget.JobCost]:
        """What each GPU job of ``run`` cost (:func:`budget.job_costs`)."""
        return budget.job_costs(run, jobs, self.costing, reserves)

    @classmethod
    def for_budget(
        cls,
        repo: str,
        cfg: budget.BudgetConfig,
        matcher: GpuMatcher,
        table: PriceTable,
        now: datetime,
    ) -> Counting:
        """The count a budget check makes: every workflow, this month."""
        month = budget.Month.of(now.date())
        return cls(
            repo, (), matcher, cfg.price, table, cfg.reserve_minutes, month, now, cfg.approvals
        )

    @property
    def costing(self) -> budget.Costing:
        """The pricing part of this count."""
        return budget.Costing(
            self.matcher, self.price, self.table, self.reserve_minutes, self.month, self.now
        )


def collect(
    rest: Rest,
    counting: Counting,
    ledger: Ledger | None = None,
    skip: tuple[int, int] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Collected:
    """Every GPU job of the month, re-runs included.

    Runs already in a usable ledger (same attempt, completed) are not fetched again;
    ``skip`` = (run id, attempt) of the gate's own run, whose GPU job is the one being
    decided (its reservation is added by the caller).

    Runs are listed by creation time, and a run may be re-run for :data:`RERUN_DAYS` days:
    the listing reaches back that far before the month (or, with a ledger, before the time
    it was written, as runs created earlier could not be re-run since). Of the runs created
    before the month's eve, only those started or updated this month have their jobs read:
    the listing grows by its pages, not by a call per run. A fork's run with GPU jobs waiting
    for a runner costs one more call per head (:func:`approved_reservations`)."""
    c = counting
    month = c.month
    use = ledger is not None and ledger.usable(c.repo, month, c.matcher, c.workflows)
    eve = month.first - timedelta(days=1)  # a run created on the last day may run into it
    since = _listed_since(month, ledger if use else None)
    notes: list[str] = []
    runs = list_runs(rest, c.repo, c.workflows, since, month.last, notes=notes, now=c.now)
    costs: list[budget.JobCost] = []
    windows: dict[int, tuple[float, float]] = {}
    counted_runs, reason = _from_ledger(ledger if use else None, runs, costs, windows)
    if ledger is not None and not use:
        reason = "ledger for another month, repository, workflows or GPU jobs: not used"
    fetched = 0
    waiting: list[Waiting] = []
    for run in runs:
        if str(run["id"]) in counted_runs:
            continue
        created = parse_time(run.get("created_at"))
        if created is not None and created.date() < eve and not _active_since(run, month.first):
            continue  # created before the month and not re-run in it: nothing this month
        jobs = run_jobs(rest, c.repo, int(run["id"]))
        fetched += 1
        if skip is not None and int(run["id"]) == skip[0]:
            jobs = [j for j in jobs if int(j.get("run_attempt") or 1) != skip[1]]
        counted = c.costs(run, jobs)
        costs.extend(counted)
        if budget.needs_approval(run, jobs, c.matcher):
            waiting.append((run, jobs, counted))
        windows.update(_spans(jobs))
    if waiting:
        costs += approved_reservations(
            rest,
            c.repo,
            waiting,
            c.approvals or approval_config(),
            lambda run, jobs: c.costs(run, jobs, True),
            notes,
        )
    if progress:
        progress(f"{len(runs)} runs listed since {since}, jobs fetched for {fetched}")
    return Collected(costs, runs, reason, notes, windows, counted_runs)


def _listed_since(month: budget.Month, ledger: Ledger | None) -> date:
    """The first creation day a count lists: re-runs reach back :data:`RERUN_DAYS`.

    With a usable ``ledger``, no further back than that before it was written."""
    since = month.first - timedelta(days=RERUN_DAYS)
    through = parse_time(ledger.through) if ledger is not None else None
    if through is not None:
        since = max(since, (through - timedelta(days=RERUN_DAYS)).date())
    return since


def _spans(jobs: Sequence[Mapping[str, Any]]) -> dict[int, tuple[float, float]]:
    """When each ended job ran: id -> (start, end) in epoch seconds."""
    out = {}
    for job in jobs:
        start = parse_time(job.get("started_at"))
        end = parse_time(job.get("completed_at"))
        if start is not None and end is not None:
            out[int(job["id"])] = (start.timestamp(), end.timestamp())
    return out


def _from_ledger(
    ledger: Ledger | None,
    runs: Sequence[Mapping[str, Any]],
    costs: list[budget.JobCost],
    windows: dict[int, tuple[float, float]],
) -> tuple[dict[str, int], str]:
    """The runs a usable ledger already counted, and why.

    Their costs and windows are added to ``costs`` and ``windows``."""
    if ledger is None:
        return {}, "no ledger: every run of the month counted"
    counted_runs: dict[str, int] = {}
    listed = {str(r["id"]): r for r in runs}
    for run_id, attempt in ledger.runs.items():
        run = listed.get(run_id)
        if run is None or ledger.counted(run):
            counted_runs[run_id] = attempt
    for c in ledger.jobs:
        if str(c.run_id) in counted_runs:
            costs.append(c)
            if str(c.job_id) in ledger.windows:
                windows[c.job_id] = ledger.windows[str(c.job_id)]
    return counted_runs, f"ledger through {ledger.through}: {len(counted_runs)} runs reused"


def month_spend(
    rest: Rest,
    repo: str,
    cfg: budget.BudgetConfig,
    matcher: GpuMatcher,
    table: PriceTable,
    now: datetime,
    *,
    default_branch: str,
    skip: tuple[int, int] | None,
) -> tuple[budget.Spend, str]:
    """This month's GPU spend before the run being decided.

    And a note on how it was read. :func:`billed_month_spend` reads it from the
    billing report instead."""
    counting = Counting.for_budget(repo, cfg, matcher, table, now)
    ledger, note = None, "ledger not configured (budget-ledger is empty)"
    if cfg.ledger_artifact:
        if default_branch:
            ledger, note = trusted_ledger(rest, repo, cfg.ledger_artifact, default_branch)
        else:
            note = "the event names no default branch: ledger not used"
    got = collect(rest, counting, ledger, skip)
    source = "GPU jobs of every workflow"
    said = [f"{note}; {got.ledger_used}" if ledger else note, *got.notes]
    return budget.total(got.costs, source), "; ".join(said)


def billed_month_spend(
    rest: Rest,
    billing_rest: Rest,
    counting: Counting,
    cfg: budget.BudgetConfig,
    skip: tuple[int, int] | None,
) -> tuple[budget.Spend, str]:
    """The billing report's spend, plus what this repository's running GPU jobs reserve.

    The report trails usage by hours and never shows a job before it ends."""
    c, month = counting, counting.month
    skus = [cfg.price.sku] if cfg.price is not None and cfg.price.sku else list(c.table.skus)
    spent = billing_spend(billing_rest, c.repo, month, skus, cfg.scope == "repository")
    running: list[budget.JobCost] = []
    notes: list[str] = []
    waiting: list[Waiting] = []
    for run in list_runs(
        rest,
        c.repo,
        (),
        month.first - timedelta(days=RERUN_DAYS),
        month.last,
        status="in_progress",
        notes=notes,
        now=c.now,
    ):
        jobs = run_jobs(rest, c.repo, int(run["id"]))
        if skip is not None and int(run["id"]) == skip[0]:
            jobs = [j for j in jobs if int(j.get("run_attempt") or 1) != skip[1]]
        counted = c.costs(run, jobs)
        running += [x for x in counted if x.state == "reserved"]
        if budget.needs_approval(run, jobs, c.matcher):
            waiting.append((run, jobs, counted))
    running += approved_reservations(
        rest, c.repo, waiting, cfg.approvals, lambda run, jobs: c.costs(run, jobs, True), notes
    )
    extra = budget.total(running, "")
    spent = budget.Spend(
        spent.minutes + extra.minutes,
        spent.usd + extra.usd,
        "billing usage report + GPU jobs running now",
        tuple(running),
        extra.minutes,
        extra.usd,
    )
    return spent, "; ".join(
        [
            f"billing usage report, SKUs {', '.join(skus)} ({cfg.scope}); "
            f"{len(running)} GPU jobs running now",
            *notes,
        ]
    )
