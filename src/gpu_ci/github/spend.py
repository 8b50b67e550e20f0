"""Fetching the month's GPU spend: the thin layer between the REST API and :mod:`budget`.

Two sources. With a token that may read the organisation's billing, one call to the billing
usage report. Otherwise the workflow's own token (``actions: read``): the month's runs of the
GPU workflow(s), and the jobs of each run not yet in the ledger. The ledger (written by
``gpu-spend`` on a trusted event and uploaded as an artifact) keeps the cost of a decision
flat over the month: list the ledger artifact, download it, list the runs created since the
ledger was written, fetch the jobs of those runs.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

from gpu_ci.errors import GpuCiError
from gpu_ci.github import budget, idle, statuses
from gpu_ci.github.client import ApiError, Rest, describe_api_failure
from gpu_ci.github.jobs import GpuMatcher, parse_time
from gpu_ci.pricing import Price, PriceTable

LEDGER_FILE = "gpu-spend-ledger.json"
MAX_LEDGER_BYTES = 32 * 1024 * 1024


@dataclass
class Collected:
    costs: list[budget.JobCost]
    runs: list[dict[str, Any]]
    ledger_used: str = ""
    """Why the ledger was (not) used, for the summary."""
    notes: list[str] = field(default_factory=list)
    windows: dict[int, tuple[float, float]] = field(default_factory=dict)
    """Job id -> (started, completed) in epoch seconds, for the jobs fetched (not those
    reused from a ledger): what :mod:`gpu_ci.github.idle` matches gpu-monitor reports to."""
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
) -> list[dict[str, Any]]:
    """Runs created on or after ``since`` (UTC), of the given workflow files (all workflows
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
                end = (
                    hi
                    if hi is not None
                    else datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=1)
                )
                mid = lo + (end - lo) / 2
                mid = mid.replace(microsecond=0)
                todo += [
                    (f"{_second(lo)}..{_second(mid)}", lo, mid),
                    (
                        f"{_second(mid + timedelta(seconds=1))}..{_second(end)}",
                        mid + timedelta(seconds=1),
                        end,
                    ),
                ]
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


def _second(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _run_pages(rest: Rest, url: str, splittable: bool) -> tuple[list[dict[str, Any]], int]:
    """A run listing's pages (by number) and its ``total_count``; stops after the first page
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
    approvals: statuses.StatusConfig,
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
            if statuses.approved_run(approvals, run, listed):
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


#: The events whose runs may write the ledger: a pull request's run is none of them.
LEDGER_EVENTS = ("schedule", "push", "workflow_dispatch")
#: Newest same-name artifacts whose run is read to check its event, at most.
LEDGER_RUN_CHECKS = 3
#: Newest successful default-branch runs per event whose artifacts are looked through when
#: pull requests' uploads push the trusted ledger off the first listing page.
LEDGER_FALLBACK_RUNS = 10
#: The most REST calls finding the ledger may take: 1 listing, LEDGER_RUN_CHECKS runs read,
#: one run listing per event, LEDGER_FALLBACK_RUNS runs' artifacts, 1 download.
LEDGER_MAX_CALLS = 1 + LEDGER_RUN_CHECKS + len(LEDGER_EVENTS) + LEDGER_FALLBACK_RUNS + 1


def _trusted_run(run: Mapping[str, Any], default_branch: str) -> bool:
    return (
        run.get("event") in LEDGER_EVENTS
        and run.get("head_branch") == default_branch
        and budget.run_reserves(run)
    )


def trusted_ledger(
    rest: Rest, repo: str, name: str, default_branch: str
) -> tuple[budget.Ledger | None, str]:
    """The newest unexpired artifact ``name`` made by a run of this repository itself, on its
    default branch, of a trusted event (:data:`LEDGER_EVENTS`), and its ledger; at most
    :data:`LEDGER_MAX_CALLS` REST calls however many same-name artifacts pull requests
    upload (a ledger a pull request wrote could claim a lower spend).

    First the newest 100 artifacts of that name: those whose ``workflow_run`` is on the
    default branch with equal repository ids, newest first, up to :data:`LEDGER_RUN_CHECKS`
    of them, have their run read for its event. When none passes and the listing holds more
    than one page (pull requests' uploads may hide the trusted one), the newest successful
    default-branch runs of each trusted event are listed instead and their own artifacts of
    that name looked through, newest run first."""
    listing = rest.get(f"/repos/{repo}/actions/artifacts?name={quote(name, safe='')}&per_page=100")
    arts = [
        a
        for a in listing.get("artifacts") or []
        if a.get("name") == name
        and not a.get("expired")
        and (a.get("workflow_run") or {}).get("head_branch") == default_branch
        and isinstance((a.get("workflow_run") or {}).get("id"), int)
        and budget.same_repository(
            (a.get("workflow_run") or {}).get("repository_id"),
            (a.get("workflow_run") or {}).get("head_repository_id"),
        )
    ]
    arts.sort(key=lambda a: (str(a.get("created_at") or ""), int(a["id"])), reverse=True)
    for art in arts[:LEDGER_RUN_CHECKS]:
        run_id = int(art["workflow_run"]["id"])
        try:
            run = rest.get(f"/repos/{repo}/actions/runs/{run_id}")
        except ApiError as exc:
            if exc.status != 404:
                raise
            continue  # the run is gone: its artifact cannot be shown to be trusted
        if _trusted_run(run, default_branch):
            return _read_ledger(rest, repo, name, art)
    if int(listing.get("total_count") or 0) <= 100 and not arts[LEDGER_RUN_CHECKS:]:
        return None, (
            f"no artifact '{name}' from a {'/'.join(LEDGER_EVENTS)} run of the default "
            f"branch ({default_branch})"
        )
    art = _ledger_of_trusted_runs(rest, repo, name, default_branch)
    if art is None:
        return None, (
            f"no artifact '{name}' among the newest {LEDGER_FALLBACK_RUNS} successful "
            f"{'/'.join(LEDGER_EVENTS)} runs of the default branch ({default_branch})"
        )
    return _read_ledger(rest, repo, name, art)


def _ledger_of_trusted_runs(
    rest: Rest, repo: str, name: str, default_branch: str
) -> dict[str, Any] | None:
    runs: list[dict[str, Any]] = []
    for event in LEDGER_EVENTS:
        answer = rest.get(
            f"/repos/{repo}/actions/runs?branch={quote(default_branch, safe='')}"
            f"&event={event}&status=success&per_page={LEDGER_FALLBACK_RUNS}"
        )
        runs += [r for r in answer.get("workflow_runs") or [] if _trusted_run(r, default_branch)]
    runs.sort(key=lambda r: (str(r.get("created_at") or ""), int(r["id"])), reverse=True)
    for run in runs[:LEDGER_FALLBACK_RUNS]:
        answer = rest.get(
            f"/repos/{repo}/actions/runs/{int(run['id'])}/artifacts"
            f"?name={quote(name, safe='')}&per_page=10"
        )
        for art in answer.get("artifacts") or []:
            if art.get("name") == name and not art.get("expired"):
                return dict(art)
    return None


def _read_ledger(
    rest: Rest, repo: str, name: str, art: Mapping[str, Any]
) -> tuple[budget.Ledger | None, str]:
    blob = rest.download(f"/repos/{repo}/actions/artifacts/{art['id']}/zip", MAX_LEDGER_BYTES)
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as archive:
            info = archive.getinfo(LEDGER_FILE)
            if info.file_size > MAX_LEDGER_BYTES:
                return None, f"artifact '{name}' holds an oversized ledger"
            data = idle.load_json(archive.read(info))
    except (zipfile.BadZipFile, KeyError, ValueError) as exc:
        return None, f"artifact '{name}' #{art['id']} holds no readable {LEDGER_FILE} ({exc})"
    ledger = budget.Ledger.from_json(data) if isinstance(data, dict) else None
    if ledger is None:
        return None, f"artifact '{name}' #{art['id']} is not a ledger of this version"
    return ledger, f"ledger artifact #{art['id']} written {ledger.through}"


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


def collect(
    rest: Rest,
    repo: str,
    workflows: Sequence[str],
    matcher: GpuMatcher,
    price: Price | None,
    table: PriceTable,
    reserve_minutes: int,
    month: budget.Month,
    now: datetime,
    ledger: budget.Ledger | None = None,
    skip: tuple[int, int] | None = None,
    progress: Callable[[str], None] | None = None,
    approvals: statuses.StatusConfig | None = None,
) -> Collected:
    """Every GPU job of the month, re-runs included. Runs already in a usable ledger (same
    attempt, completed) are not fetched again; ``skip`` = (run id, attempt) of the gate's own
    run, whose GPU job is the one being decided (its reservation is added by the caller).

    Runs are listed by creation time, and a run may be re-run for :data:`RERUN_DAYS` days:
    the listing reaches back that far before the month (or, with a ledger, before the time
    it was written, as runs created earlier could not be re-run since). Of the runs created
    before the month's eve, only those started or updated this month have their jobs read:
    the listing grows by its pages, not by a call per run. A fork's run with GPU jobs waiting
    for a runner costs one more call per head (:func:`approved_reservations`, ``approvals``:
    where to read them, gpu-status's defaults when None)."""
    use = ledger is not None and ledger.usable(repo, month, matcher, workflows)
    reason = (
        "no ledger: every run of the month counted"
        if ledger is None
        else (
            "ledger for another month, repository, workflows or GPU jobs: not used"
            if not use
            else ""
        )
    )
    eve = month.first - timedelta(days=1)  # a run created on the last day may run into it
    since = month.first - timedelta(days=RERUN_DAYS)
    through = parse_time(ledger.through) if use and ledger is not None else None
    if through is not None:
        since = max(since, (through - timedelta(days=RERUN_DAYS)).date())
    notes: list[str] = []
    runs = list_runs(rest, repo, workflows, since, month.last, notes=notes)
    costs: list[budget.JobCost] = []
    counted_runs: dict[str, int] = {}
    if use and ledger is not None:
        listed = {str(r["id"]): r for r in runs}
        for run_id, attempt in ledger.runs.items():
            run = listed.get(run_id)
            if run is None or ledger.counted(run):
                counted_runs[run_id] = attempt
    windows: dict[int, tuple[float, float]] = {}
    if use and ledger is not None:
        for c in ledger.jobs:
            if str(c.run_id) in counted_runs:
                costs.append(c)
                if str(c.job_id) in ledger.windows:
                    windows[c.job_id] = ledger.windows[str(c.job_id)]
        reason = f"ledger through {ledger.through}: {len(counted_runs)} runs reused"
    fetched = 0
    waiting: list[Waiting] = []

    def cost(
        run: Mapping[str, Any], jobs: Sequence[Mapping[str, Any]], reserves: bool | None = None
    ) -> list[budget.JobCost]:
        return budget.job_costs(
            run, jobs, matcher, price, table, reserve_minutes, month, now, reserves
        )

    for run in runs:
        if str(run["id"]) in counted_runs:
            continue
        created = parse_time(run.get("created_at"))
        if created is not None and created.date() < eve and not _active_since(run, month.first):
            continue  # created before the month and not re-run in it: nothing this month
        jobs = run_jobs(rest, repo, int(run["id"]))
        fetched += 1
        if skip is not None and int(run["id"]) == skip[0]:
            jobs = [j for j in jobs if int(j.get("run_attempt") or 1) != skip[1]]
        counted = cost(run, jobs)
        costs.extend(counted)
        if budget.needs_approval(run, jobs, matcher):
            waiting.append((run, jobs, counted))
        for job in jobs:
            start = parse_time(job.get("started_at"))
            end = parse_time(job.get("completed_at"))
            if start is not None and end is not None:
                windows[int(job["id"])] = (start.timestamp(), end.timestamp())
    if waiting:
        costs += approved_reservations(
            rest,
            repo,
            waiting,
            approvals or statuses.approval_config(),
            lambda run, jobs: cost(run, jobs, True),
            notes,
        )
    if progress:
        progress(f"{len(runs)} runs listed since {since}, jobs fetched for {fetched}")
    return Collected(costs, runs, reason, notes, windows, counted_runs)


def billing_items(rest: Rest, org: str, month: budget.Month) -> list[dict[str, Any]]:
    """The organisation's billing usage report for the month (enhanced billing platform)."""
    answer = rest.get(
        f"/organizations/{quote(org, safe='')}/settings/billing/usage"
        f"?year={month.year}&month={month.month}"
    )
    items = answer.get("usageItems")
    if not isinstance(items, list):
        raise GpuCiError("the billing usage API answered without usageItems.")
    return items


def billing_error(status: int, org: str) -> str:
    """What a 403/404 from the billing usage API means, and the fix."""
    if status == 404:
        return (
            f"the billing usage API has no organization report for '{org}' (it exists "
            "for organizations only): '{org}' is a personal account (whose report is "
            "/users/{org}/settings/billing/usage, which gpu-spend does not read), or the "
            "token cannot see the organization. "
            "Use an organization's billing-token, or leave billing-token empty to count "
            "the workflow's runs."
        ).replace("{org}", org)
    return (
        f"the billing-token may not read the billing of '{org}': it must belong to an "
        "administrator of the organization and, as a fine-grained token, have the "
        "organization permission 'Administration: read'. Leave billing-token empty to "
        "count the workflow's runs with actions: read instead."
    )


class BillingAccessError(GpuCiError):
    """The billing usage API refused the billing-token (403) or has no such report (404):
    a configuration to fix, not an outage to ride out."""


def billing_spend(
    billing_rest: Rest, repo: str, month: budget.Month, skus: Sequence[str], per_repository: bool
) -> budget.Spend:
    org = repo.split("/")[0]
    try:
        items = billing_items(billing_rest, org, month)
    except ApiError as exc:
        if exc.status in (403, 404):
            raise BillingAccessError(
                billing_error(exc.status, org), title="billing usage API"
            ) from None
        raise
    return budget.billing_spend(items, skus, repo if per_repository else None, month)


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
    billing_rest: Rest | None = None,
) -> tuple[budget.Spend, str]:
    """This month's GPU spend before the run being decided, and a note on how it was read."""
    month = budget.Month.of(now.date())
    if billing_rest is not None:
        skus = [cfg.price.sku] if cfg.price is not None and cfg.price.sku else list(table.skus)
        spent = billing_spend(billing_rest, repo, month, skus, cfg.scope == "repository")
        # The report trails usage by hours and never shows a job before it ends: add what
        # this repository's GPU jobs running now reserve.
        running: list[budget.JobCost] = []
        notes: list[str] = []
        waiting: list[Waiting] = []
        for run in list_runs(
            rest,
            repo,
            cfg.workflows,
            month.first - timedelta(days=RERUN_DAYS),
            month.last,
            status="in_progress",
            notes=notes,
        ):
            jobs = run_jobs(rest, repo, int(run["id"]))
            if skip is not None and int(run["id"]) == skip[0]:
                jobs = [j for j in jobs if int(j.get("run_attempt") or 1) != skip[1]]
            counted = budget.job_costs(
                run, jobs, matcher, cfg.price, table, cfg.reserve_minutes, month, now
            )
            running += [c for c in counted if c.state == "reserved"]
            if budget.needs_approval(run, jobs, matcher):
                waiting.append((run, jobs, counted))
        running += approved_reservations(
            rest,
            repo,
            waiting,
            cfg.approvals,
            lambda run, jobs: budget.job_costs(
                run, jobs, matcher, cfg.price, table, cfg.reserve_minutes, month, now, True
            ),
            notes,
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
    ledger, note = None, "ledger not configured (budget-ledger is empty)"
    if cfg.ledger_artifact:
        if default_branch:
            ledger, note = trusted_ledger(rest, repo, cfg.ledger_artifact, default_branch)
        else:
            note = "the event names no default branch: ledger not used"
    got = collect(
        rest,
        repo,
        cfg.workflows,
        matcher,
        cfg.price,
        table,
        cfg.reserve_minutes,
        month,
        now,
        ledger,
        skip,
        approvals=cfg.approvals,
    )
    source = "GPU jobs of " + (", ".join(cfg.workflows) or "every workflow")
    said = [f"{note}; {got.ledger_used}" if ledger else note, *got.notes]
    return budget.total(got.costs, source), "; ".join(said)


@dataclass(frozen=True)
class GateBudget:
    """The budget's say in a gate decision, ready for outputs and the summary."""

    ok: bool
    reason: str
    """Why the run is refused ('' when ok)."""
    rows: tuple[tuple[str, str], ...]
    spent: str = ""
    left: str = ""
    warning: str = ""


def _amount(value: Any, unit: str) -> str:
    return f"{value:.2f}" if unit == "usd" else str(int(value))


def _price_row(price: Price | None, day: date, table: PriceTable) -> str:
    if price is None:
        return "(minutes budget)"
    rate = price.on(day, table)
    return price.describe() + (f" (${rate}/min on {day})" if price.sku and rate else "")


def gate_budget(
    rest: Rest,
    billing_rest: Rest | None,
    cfg: budget.BudgetConfig,
    matcher: GpuMatcher,
    table: PriceTable,
    now: datetime,
    repo: str,
    default_branch: str,
    skip: tuple[int, int] | None,
) -> GateBudget:
    """Read the month's spend and check this run's reservation against the budget. A
    billing-token the API refuses raises :class:`BillingAccessError`; any other failure to
    read the spend follows ``budget-on-unknown`` and names the number it could not get."""
    what = (
        "the organization's billing usage report"
        if billing_rest is not None
        else f"this month's GPU jobs of {', '.join(cfg.workflows) or 'every workflow'} "
        "(actions: read)"
    )
    rows = [
        ("budget", cfg.budget.describe()),
        ("price", _price_row(cfg.price, now.date(), table)),
        ("reservation", f"{cfg.reserve_minutes} min"),
        ("GPU jobs", matcher.describe()),
    ]
    try:
        try:
            spent, note = month_spend(
                rest,
                repo,
                cfg,
                matcher,
                table,
                now,
                default_branch=default_branch,
                skip=skip,
                billing_rest=billing_rest,
            )
        except GpuCiError:
            raise
        except Exception as exc:  # ApiError, or an answer that is not what was asked
            raise describe_api_failure(exc, what) from None
    except BillingAccessError:
        raise
    except GpuCiError as exc:
        rows.append(("spend", f"unknown: {exc.message}"))
        if cfg.on_unknown == "run":
            rows.append(("budget verdict", "not checked (budget-on-unknown: run)"))
            return GateBudget(
                True,
                "",
                tuple(rows),
                warning=(f"could not read {what}; budget-on-unknown is run: {exc.message}"),
            )
        rows.append(("budget verdict", "refused (budget-on-unknown: refuse)"))
        return GateBudget(
            False,
            (
                f"the GPU budget could not be checked: {what} could not be read "
                f"({exc.message}); budget-on-unknown is refuse."
            ),
            tuple(rows),
        )
    price_now = cfg.price.on(now.date(), table) if cfg.price else None
    verdict = budget.check(cfg.budget, spent, cfg.reserve_minutes, price_now)
    rows += [
        ("spent this month", cfg.budget.describe(verdict.spent)),
        ("of which still running (reserved)", f"{spent.reserved_minutes} min"),
        ("this run reserves", cfg.budget.describe(verdict.reservation)),
        ("left before this run", cfg.budget.describe(verdict.left)),
        ("source", spent.source),
        ("ledger", note),
        ("budget verdict", "within" if verdict.ok else "**over: refused**"),
    ]
    unit = cfg.budget.unit
    return GateBudget(
        verdict.ok,
        "" if verdict.ok else verdict.reason,
        tuple(rows),
        _amount(verdict.spent, unit),
        _amount(verdict.left, unit),
    )
