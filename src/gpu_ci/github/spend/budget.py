"""The GPU budget, as pure functions of plain data: what a budget is, what each GPU job (see
:class:`gpu_ci.github.jobs.GpuMatcher`) cost, the ledger of runs already counted, and the
gate's verdict.

Everything here is computed from GitHub's documented JSON (workflow runs, jobs, the billing
usage report) and the dated price table (:mod:`gpu_ci.pricing`); the fetch layer is
:mod:`gpu_ci.github.spend`. Money is ``Decimal``. Days and months are UTC, as GitHub bills.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from gpu_ci.errors import UsageError
from gpu_ci.github.approval import Reads, approval_config
from gpu_ci.github.jobs import GpuMatcher, parse_time
from gpu_ci.pricing import Budget as Budget  # re-exported: the budget type of this wing
from gpu_ci.pricing import Price, PriceError, PriceTable, billed_minutes, parse_price

#: A packaged price table checked longer ago than this is refused for SKU prices: GitHub
#: may have changed them since (write the price as an amount, or upgrade gpu-ci-actions).
TABLE_MAX_AGE = timedelta(days=366)

BUDGET_ON_UNKNOWN = ("refuse", "run")


_BUDGET = re.compile(
    r"\s*(?P<dollar>\$)?\s*(?P<num>-?[0-9]*\.?[0-9]+)\s*(?P<unit>usd|\$|dollars?|min|mins|"
    r"minutes?|m|h|hours?)?\s*",
    re.IGNORECASE,
)


def parse_budget(text: str) -> Budget:
    """``$50``, ``50 USD``, ``3000 minutes``, ``50 h``. A bare number is refused: dollars and
    minutes differ by a factor of ~20 at GPU prices, and a guess would be wrong silently."""
    how = (
        "write an amount with its unit: '$50' or '50 USD' for money, '3000 minutes' or "
        "'50 hours' for GPU time"
    )
    match = _BUDGET.fullmatch(text or "")
    if not match:
        raise UsageError(f"input 'monthly-budget' is {text!r}: {how}.")
    amount = Decimal(match.group("num"))
    unit = (match.group("unit") or "").lower()
    if amount < 0:
        raise UsageError(f"input 'monthly-budget' is negative ({text!r}): {how}.")
    if match.group("dollar") or unit in ("usd", "$", "dollar", "dollars"):
        if match.group("dollar") and unit and unit not in ("usd", "$", "dollar", "dollars"):
            raise UsageError(f"input 'monthly-budget' mixes $ and {unit} ({text!r}): {how}.")
        return Budget(amount, "usd")
    if not unit:
        raise UsageError(f"input 'monthly-budget' has no unit ({text!r}): {how}.")
    if unit.startswith("h"):
        return Budget(amount * 60, "minutes")
    return Budget(amount, "minutes")


#: Why a budget in USD is refused without ``gpu-price``.
NEEDS_PRICE = (
    "input 'monthly-budget' is an amount of money, so 'gpu-price' is needed: a per-minute "
    "amount (gpu-price: 0.052) or a GitHub-hosted GPU SKU (gpu-price: linux_4_core_gpu)."
)


def require_price(plan: Budget, price: Price | None) -> None:
    """Refuse a budget in USD without ``gpu-price``: minutes cannot become money."""
    if plan.unit == "usd" and price is None:
        raise UsageError(NEEDS_PRICE)


def parse_gpu_price(text: str, table: PriceTable, today: date) -> Price:
    """``gpu-price`` for the budget: an amount or a SKU; a SKU needs a table that is not
    older than the run (``TABLE_MAX_AGE``) and a price valid today."""
    try:
        price = parse_price(text, table)
    except PriceError as exc:
        raise UsageError(f"input 'gpu-price': {exc}") from None
    if price.sku is not None:
        if today - table.checked > TABLE_MAX_AGE:
            raise UsageError(
                f"input 'gpu-price' names {price.sku}, but the price table was last checked on "
                f"{table.checked} ({(today - table.checked).days} days before this run): "
                "GitHub may have changed the price. Write the current per-minute amount from "
                "GitHub's pricing page (e.g. gpu-price: 0.052) or upgrade gpu-ci-actions."
            )
        if table.price_on(price.sku, today) is None:
            raise UsageError(
                f"input 'gpu-price': the price table has no {price.sku} price "
                f"valid on {today}: write the per-minute amount instead."
            )
    return price


def parse_reserve(text: str) -> int:
    value = (text or "").strip()
    if not value.isdigit() or int(value) < 1:
        raise UsageError(
            f"input 'reserve-minutes' is {text!r}: write the GPU job's "
            "timeout-minutes, a whole number of at least 1."
        )
    return int(value)


# -- what each job cost -------------------------------------------------------------------


@dataclass(frozen=True)
class Month:
    year: int
    month: int

    @classmethod
    def of(cls, day: date) -> Month:
        return cls(day.year, day.month)

    @classmethod
    def parse(cls, text: str) -> Month:
        match = re.fullmatch(r"\s*(\d{4})-(\d{1,2})\s*", text or "")
        if not match or not 1 <= int(match.group(2)) <= 12:
            raise UsageError(f"input 'month' is {text!r}: write YYYY-MM, e.g. 2026-11.")
        return cls(int(match.group(1)), int(match.group(2)))

    @property
    def first(self) -> date:
        return date(self.year, self.month, 1)

    @property
    def last(self) -> date:
        nxt = date(self.year + self.month // 12, self.month % 12 + 1, 1)
        return nxt - timedelta(days=1)

    def __contains__(self, day: object) -> bool:
        return isinstance(day, date) and (day.year, day.month) == (self.year, self.month)

    def __str__(self) -> str:
        return f"{self.year:04d}-{self.month:02d}"


@dataclass(frozen=True)
class JobCost:
    """One GPU job's share of the month."""

    run_id: int
    attempt: int
    job_id: int
    job: str
    workflow: str
    event: str
    pull_request: str
    """``#123`` or empty."""
    approver: str
    """Who triggered the run: for a labelled pull request, the user who applied the label."""
    runner: str
    """The GPU labels or runner group the job asked for."""
    day: str
    """ISO date (UTC) the job started, which decides its price."""
    minutes: int
    usd: str
    """Decimal as text ('' when the budget is in minutes and no price is known)."""
    state: str
    """``completed`` (billed minutes) or ``reserved`` (queued or running: its reservation)."""
    kind: str = ""
    """The ``gpu-runner-kinds`` kind the job ran on, whose price it was counted at."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobCost:
        ints = ("run_id", "attempt", "job_id", "minutes")
        # raises on anything but a number; Decimal also reads NaN and Infinity, which would
        # make every budget comparison raise or pass
        if data["usd"] and not Decimal(str(data["usd"])).is_finite():
            raise ValueError(f"usd {data['usd']!r} is not a finite number")
        values: dict[str, Any] = {
            k: int(data[k]) if k in ints else str(data[k] if k != "kind" else data.get(k, ""))
            for k in cls.__dataclass_fields__
        }
        return cls(**values)

    @property
    def cost(self) -> Decimal:
        return Decimal(self.usd) if self.usd else Decimal(0)


@dataclass(frozen=True)
class Costing:
    """How a month's GPU jobs are told apart and priced."""

    matcher: GpuMatcher
    price: Price | None
    table: PriceTable
    reserve_minutes: int
    month: Month
    now: datetime


def job_costs(
    run: Mapping[str, Any],
    jobs: Iterable[Mapping[str, Any]],
    costing: Costing,
    reserves: bool | None = None,
) -> list[JobCost]:
    """The GPU jobs of one run (every attempt: re-runs and cancelled jobs count what they
    used), each rounded up to whole minutes and priced on the day it started. A job still
    queued or running counts ``reserve_minutes`` (or what it used so far, when more).

    ``reserves``: whether the run's jobs waiting for a runner reserve; None is
    :func:`run_reserves` (this repository's own run). The caller passes True for a fork's
    run that holds a maintainer's current approval (``spend`` reads the head's statuses)."""
    c = costing
    matcher, price, table, month, now = c.matcher, c.price, c.table, c.month, c.now
    out = []
    pr = pull_request_of(run)
    approver = _approver(run)
    workflow = workflow_name(run)
    if reserves is None:
        reserves = run_reserves(run)
    for job in jobs:
        waiting = _waiting(job)
        if waiting and not reserves:
            continue  # a queued job of a run no maintainer approved: it costs nothing yet
        if not _is_gpu(job, matcher, waiting):
            continue
        billed = _billed(job, now, c.reserve_minutes)
        if billed is None:
            continue
        started, minutes, state = billed
        day = started.date()
        if day not in month or minutes == 0:
            continue
        kind = matcher.kind_of(job)
        job_price = matcher.price_for(job, price)  # a runner kind's own price
        rate = job_price.on(day, table) if job_price is not None else None
        labels = sorted(str(x) for x in job.get("labels") or [])
        out.append(
            JobCost(
                run_id=int(run["id"]),
                attempt=int(job.get("run_attempt") or 1),
                job_id=int(job["id"]),
                job=str(job.get("name") or ""),
                workflow=workflow,
                event=str(run.get("event") or ""),
                pull_request=pr,
                approver=approver,
                runner=str(job.get("runner_group_name") or "") or ",".join(labels),
                day=day.isoformat(),
                minutes=minutes,
                usd="" if rate is None else str(rate * minutes),
                state=state,
                kind=kind.name if kind else "",
            )
        )
    return out


def _approver(run: Mapping[str, Any]) -> str:
    """Who started the run's first attempt, as gpu-status binds runs.

    A re-run's triggering_actor is its starter (gpu-watchdog's account): then the actor."""
    first = int(run.get("run_attempt") or 1) == 1
    who = (run.get("triggering_actor") if first else None) or run.get("actor") or {}
    return str(who.get("login") or "")


def _billed(
    job: Mapping[str, Any], now: datetime, reserve_minutes: int
) -> tuple[datetime, int, str] | None:
    """When a job's billing starts, its minutes and their state; None: nothing billed."""
    status = str(job.get("status") or "")
    started = parse_time(job.get("started_at")) or parse_time(job.get("created_at"))
    if started is None:
        return None
    if status == "completed":
        if job.get("conclusion") == "skipped" or not job.get("runner_name"):
            return None  # never picked up by a runner: nothing billed
        done = parse_time(job.get("completed_at")) or started
        return started, billed_minutes((done - started).total_seconds()), "completed"
    # queued or running: the reservation, or what it used so far when more
    if job.get("runner_name"):
        used = billed_minutes((now - started).total_seconds())
    else:
        used, started = 0, now  # not started: it will be billed from now on
    return started, max(reserve_minutes, used), "reserved"


def _waiting(job: Mapping[str, Any]) -> bool:
    """Not completed and not picked up by a runner: it has cost nothing yet."""
    return str(job.get("status") or "") != "completed" and not job.get("runner_name")


def _is_gpu(job: Mapping[str, Any], matcher: GpuMatcher, waiting: bool) -> bool:
    return matcher.matches(job) or (waiting and _asks_for_group_only(job, matcher))


def needs_approval(
    run: Mapping[str, Any], jobs: Iterable[Mapping[str, Any]], matcher: GpuMatcher
) -> bool:
    """Whether a fork's run waits for a GPU runner unreserved.

    Whether ``run`` is a fork's ``pull_request`` run (not :func:`run_reserves`) with a GPU
    job waiting for a runner: its waiting jobs reserve only when the run holds its head's
    current approval (:func:`gpu_ci.github.approval.approved_run`), which costs a read of
    the head's statuses. Any other event of a fork's run is never an approval's run."""
    if run_reserves(run) or run.get("event") != "pull_request":
        return False
    if len(str(run.get("head_sha") or "")) != 40:
        return False
    return any(_waiting(j) and _is_gpu(j, matcher, True) for j in jobs)


def run_reserves(run: Mapping[str, Any]) -> bool:
    """Whether the run's queued GPU jobs reserve budget: its workflow file is this
    repository's own (``head_repository.id`` equals ``repository.id``, both present).

    That holds for the trusted events (push, schedule, workflow_dispatch), for
    ``pull_request_target`` (the base branch's file, whose GPU job queues only when the gate
    said run) and for a pull request from a branch of this repository (its author may write
    to it). A fork's ``pull_request`` run is its own workflow file, which may queue any
    number of jobs on labels no runner has: they reserve nothing until a runner picks one
    up (then it is spend, counted as such), unless the run holds a maintainer's current
    approval of its head (:func:`needs_approval`, read by ``spend``). A run with either id
    absent (the schema makes both optional; a deleted fork's ``head_repository`` is null)
    is not trusted."""
    return same_repository(
        (run.get("repository") or {}).get("id"), (run.get("head_repository") or {}).get("id")
    )


def workflow_name(run: Mapping[str, Any]) -> str:
    """A run's workflow as the report's breakdowns key it: its file's name."""
    return str(run.get("path") or run.get("name") or "").rsplit("/", 1)[-1]


def same_repository(base: Any, head: Any) -> bool:
    """Both repository ids present and equal: an absent id (the schema makes a run's and an
    artifact's ids optional) cannot show that the run is this repository's own."""
    return isinstance(base, int) and isinstance(head, int) and base == head


#: The labels of GitHub's hosted images: a job that asks for one never runs in a group of
#: self-hosted or scale-set runners.
HOSTED_IMAGE = re.compile(r"(?:ubuntu|windows|macos)-[a-z0-9.-]+", re.IGNORECASE)


def _asks_for_group_only(job: Mapping[str, Any], matcher: GpuMatcher) -> bool:
    """A waiting job that a group-only ``gpu-runs-on`` may run: counted as a GPU job.

    A job not yet picked up has no ``runner_group_name``, so with a group-only
    ``gpu-runs-on`` the group cannot be matched until a runner takes it. A waiting job that
    asks for no labels (``runs-on: {group: x}``) or for one label that names no hosted image
    (an ARC scale set's name, ``runs-on: arc-gpu``) is counted, so that concurrent gates do
    not overcommit. It may be another group's or a CPU scale set's: reserving too much,
    while it waits, is the safe error."""
    if not matcher.group or matcher.labels:
        return False
    labels = [str(x) for x in job.get("labels") or []]
    return not labels or (len(labels) == 1 and not HOSTED_IMAGE.fullmatch(labels[0]))


def pull_request_of(run: Mapping[str, Any]) -> str:
    """The pull request a run belongs to, as ``#123``.

    ``#123`` from the run's ``pull_requests``; for a fork's pull request, which GitHub
    lists there never, ``owner/repo:branch`` from ``head_repository`` and ``head_branch``
    (``(deleted fork):branch`` when the fork is gone), so that fork pull requests are not
    one row; empty for a run of this repository that is no pull request."""
    prs = run.get("pull_requests") or []
    if prs and isinstance(prs[0], dict):
        return f"#{prs[0]['number']}"
    if not str(run.get("event") or "").startswith("pull_request"):
        return ""
    head = run.get("head_repository")
    base_id = (run.get("repository") or {}).get("id")
    branch = str(run.get("head_branch") or "")
    if head is None and "head_repository" in run:
        return f"(deleted fork):{branch}"
    if isinstance(head, dict) and head.get("id") != base_id:
        return f"{head.get('full_name') or head.get('id')}:{branch}"
    return ""


# -- totals and the verdict ----------------------------------------------------------------


@dataclass(frozen=True)
class Spend:
    minutes: int
    usd: Decimal
    source: str
    """Where the numbers come from, for the summary."""
    jobs: tuple[JobCost, ...] = ()
    reserved_minutes: int = 0
    reserved_usd: Decimal = Decimal(0)


def total(costs: Sequence[JobCost], source: str) -> Spend:
    return Spend(
        sum(c.minutes for c in costs),
        sum((c.cost for c in costs), Decimal(0)),
        source,
        tuple(costs),
        sum(c.minutes for c in costs if c.state == "reserved"),
        sum((c.cost for c in costs if c.state == "reserved"), Decimal(0)),
    )


def billing_spend(
    items: Iterable[Mapping[str, Any]], skus: Iterable[str], repository: str | None, month: Month
) -> Spend:
    """GPU minutes and cost from GitHub's billing usage report.

    GPU minutes and net cost in GitHub's billing usage report, for the given SKUs
    (any spelling the API uses) and, for a per-repository budget, one repository."""
    from gpu_ci.pricing import normalise_sku

    wanted = {normalise_sku(s) for s in skus}
    repo_name = (repository or "").split("/")[-1].lower()
    minutes, usd = Decimal(0), Decimal(0)
    for item in items:
        if normalise_sku(str(item.get("sku") or "")) not in wanted:
            continue
        if str(item.get("date") or "")[:7] != str(month):
            continue
        if repository and str(item.get("repositoryName") or "").split("/")[-1].lower() != repo_name:
            continue
        if str(item.get("unitType") or "minutes").lower().startswith("minute"):
            minutes += Decimal(str(item.get("quantity") or 0))
        usd += Decimal(str(item.get("netAmount", item.get("grossAmount")) or 0))
    return Spend(int(minutes), usd, "billing usage API")


@dataclass(frozen=True)
class Verdict:
    ok: bool
    spent: Decimal
    left: Decimal
    reservation: Decimal
    reason: str


def check(budget: Budget, spend: Spend, reserve_minutes: int, price_now: Decimal | None) -> Verdict:
    """Refuse when month-to-date spend + this run's reservation exceeds the budget."""
    if budget.unit == "usd":
        if price_now is None:
            raise UsageError(NEEDS_PRICE)
        spent, reservation = spend.usd, price_now * reserve_minutes
    else:
        spent, reservation = Decimal(spend.minutes), Decimal(reserve_minutes)
    left = budget.amount - spent
    ok = spent + reservation <= budget.amount
    word = "within" if ok else "over"
    reason = (
        f"GPU spend this month is {budget.describe(spent)} of {budget.describe()} "
        f"({spend.source}); this run reserves {budget.describe(reservation)} "
        f"({reserve_minutes} min): {word} the budget."
    )
    return Verdict(ok, spent, left, reservation, reason)


# -- the gate's budget inputs --------------------------------------------------------------

SCOPES = ("repository", "organization")

#: Why the budget counts every workflow's GPU jobs, for the deprecated ``gpu-workflows``.
EVERY_WORKFLOW = (
    "input 'gpu-workflows' is deprecated and no longer narrows the count: the budget "
    "counts the GPU jobs (gpu-runs-on's labels or runner group) of every workflow of the "
    "repository, because a pull request can add a workflow file of its own. Remove the input."
)


@dataclass(frozen=True)
class BudgetConfig:
    budget: Budget
    price: Price | None
    reserve_minutes: int
    on_unknown: str
    scope: str
    ledger_artifact: str
    approvals: Reads = field(default_factory=approval_config)
    """Where a fork run's approval is read (gpu-status's ``context`` and
    ``trusted-creators``; their defaults unless the caller knows better)."""


@dataclass(frozen=True)
class BudgetInputs:
    """The budget inputs as the workflow wrote them."""

    monthly_budget: str
    gpu_price: str
    reserve_minutes: str
    on_unknown: str
    scope: str
    workflows: Sequence[str] = ()
    ledger_artifact: str = ""


def make_budget_config(inputs: BudgetInputs, table: PriceTable, today: date) -> BudgetConfig | None:
    """The checked budget inputs, or None without a budget.

    ``None`` when no budget is set (every other budget input is then ignored). Every
    mistake is a :class:`UsageError` that says what to write.

    ``workflows`` (the deprecated ``gpu-workflows``) is checked for its spelling only: the
    budget counts the GPU jobs of every workflow (:data:`EVERY_WORKFLOW`)."""
    i = inputs
    if not i.monthly_budget.strip():
        return None
    parsed = parse_budget(i.monthly_budget)
    price = parse_gpu_price(i.gpu_price, table, today) if i.gpu_price.strip() else None
    require_price(parsed, price)
    unknown = i.on_unknown.strip().lower()
    if unknown not in BUDGET_ON_UNKNOWN:
        raise UsageError(f"input 'budget-on-unknown' must be refuse or run; got {i.on_unknown!r}.")
    where = i.scope.strip().lower()
    if where not in SCOPES:
        raise UsageError(
            f"input 'budget-scope' must be repository or organization; got {i.scope!r}."
        )
    for wf in inputs.workflows:
        if "/" in wf.strip("/") or not wf.endswith((".yml", ".yaml")):
            raise UsageError(
                f"input 'gpu-workflows': {wf!r} is not a workflow file name: "
                "write the file names under .github/workflows, e.g. cuda-ci.yml."
            )
    return BudgetConfig(
        parsed,
        price,
        parse_reserve(inputs.reserve_minutes),
        unknown,
        where,
        inputs.ledger_artifact.strip(),
    )


# -- showback ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    key: str
    minutes: int
    usd: Decimal
    jobs: int


BREAKDOWNS = {
    "workflow": "workflow",
    "pull request": "pull_request",
    "approver": "approver",
    "runner": "runner",
    "kind": "kind",
}
#: Breakdowns shown only when ``gpu-runner-kinds`` names kinds.
KIND_BREAKDOWNS = ("kind",)


def breakdown(costs: Iterable[JobCost], field_name: str) -> list[Row]:
    """Minutes, cost and job count per value of one field.

    The biggest come first."""
    acc: dict[str, list[Any]] = {}
    for c in costs:
        key = str(getattr(c, field_name)) or "(none)"
        if field_name == "pull_request" and not c.pull_request:
            key = f"({c.event or 'no pull request'})"
        row = acc.setdefault(key, [0, Decimal(0), 0])
        row[0] += c.minutes
        row[1] += c.cost
        row[2] += 1
    rows = [Row(k, v[0], v[1], v[2]) for k, v in acc.items()]
    return sorted(rows, key=lambda r: (-r.usd, -r.minutes, r.key))


def cumulative(
    costs: Iterable[JobCost], month: Month, last_day: date, unit: str
) -> list[tuple[date, Decimal]]:
    """Spend up to and including each day of the month.

    In USD or minutes, through ``last_day``."""
    per_day: dict[str, Decimal] = {}
    for c in costs:
        per_day[c.day] = per_day.get(c.day, Decimal(0)) + (
            c.cost if unit == "usd" else Decimal(c.minutes)
        )
    out, running = [], Decimal(0)
    day = month.first
    while day <= min(last_day, month.last):
        running += per_day.get(day.isoformat(), Decimal(0))
        out.append((day, running))
        day += timedelta(days=1)
    return out
