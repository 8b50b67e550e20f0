"""The budget's say in a gate decision: the month's spend against this run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from gpu_ci.errors import GpuCiError
from gpu_ci.github.client import Rest, describe_api_failure
from gpu_ci.github.jobs import GpuMatcher, PricedKind
from gpu_ci.github.spend import budget
from gpu_ci.github.spend.billing import BillingAccessError
from gpu_ci.github.spend.month import Counting, billed_month_spend, month_spend
from gpu_ci.pricing import Price, PriceTable


@dataclass(frozen=True)
class GateBudget:
    """The budget's say in a gate decision.

    Ready for the outputs and the summary."""

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


@dataclass(frozen=True)
class GateRun:
    """The run a gate decides: where, when, and which runner kinds it will use."""

    repo: str
    now: datetime
    default_branch: str = ""
    skip: tuple[int, int] | None = None
    """(run id, attempt) of the gate's own run: its jobs are this decision's reservation."""
    kinds: tuple[str, ...] | None = None
    """The runner kinds the approved tiers select; None: every kind."""


def gate_budget(
    rest: Rest,
    billing_rest: Rest | None,
    cfg: budget.BudgetConfig,
    matcher: GpuMatcher,
    table: PriceTable,
    run: GateRun,
) -> GateBudget:
    """The month's spend against this run's reservation.

    A billing-token the API refuses raises :class:`BillingAccessError`; any other failure
    to read the spend follows ``budget-on-unknown`` and names the number it could not get."""
    now = run.now
    reserving = tuple(k for k in matcher.kinds if run.kinds is None or k.name in run.kinds)
    what = (
        "the organization's billing usage report"
        if billing_rest is not None
        else "this month's GPU jobs of every workflow (actions: read)"
    )
    rows = _config_rows(cfg, matcher, table, reserving, now.date())
    try:
        counting = Counting.for_budget(run.repo, cfg, matcher, table, now)
        spent, note = _read_spend(lambda: _month(rest, billing_rest, cfg, counting, run), what)
    except BillingAccessError:
        raise
    except GpuCiError as exc:
        return _unknown(cfg, rows, what, exc)
    reserve, price_now = _reservation(cfg, reserving, matcher, table, now.date())
    verdict = budget.check(cfg.budget, spent, reserve, price_now)
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


def _config_rows(
    cfg: budget.BudgetConfig,
    matcher: GpuMatcher,
    table: PriceTable,
    reserving: tuple[PricedKind, ...],
    today: date,
) -> list[tuple[str, str]]:
    """The summary's rows on the budget itself: amount, prices, reservation, GPU jobs."""
    return [
        ("budget", cfg.budget.describe()),
        ("price", _price_row(cfg.price, today, table)),
        *(
            (f"price of kind {k.name}", _price_row(k.price or cfg.price, today, table))
            for k in reserving
        ),
        ("reservation", _reserving(cfg, matcher, reserving)),
        ("GPU jobs", matcher.describe()),
    ]


def _month(
    rest: Rest,
    billing_rest: Rest | None,
    cfg: budget.BudgetConfig,
    counting: Counting,
    run: GateRun,
) -> tuple[budget.Spend, str]:
    """The month's spend: from the billing report with a billing token, else counted."""
    if billing_rest is not None:
        return billed_month_spend(rest, billing_rest, counting, cfg, run.skip)
    c = counting
    return month_spend(
        rest,
        c.repo,
        cfg,
        c.matcher,
        c.table,
        c.now,
        default_branch=run.default_branch,
        skip=run.skip,
    )


def _reserving(
    cfg: budget.BudgetConfig, matcher: GpuMatcher, reserving: tuple[PricedKind, ...]
) -> str:
    """The summary's reservation row: per kind, and which kinds when tiers chose."""
    if not matcher.kinds:
        return f"{cfg.reserve_minutes} min"
    names = ", ".join(k.name for k in reserving) or "none"
    return f"{cfg.reserve_minutes} min per kind ({names})"


def _reservation(
    cfg: budget.BudgetConfig,
    reserving: tuple[PricedKind, ...],
    matcher: GpuMatcher,
    table: PriceTable,
    day: date,
) -> tuple[int, Decimal | None]:
    """(minutes, price per minute) this run reserves: one job per selected runner kind.

    Each kind reserves ``reserve-minutes`` at its own price; the price returned is their
    mean, so that minutes x price is the sum over the kinds."""
    if not matcher.kinds:
        return cfg.reserve_minutes, cfg.price.on(day, table) if cfg.price else None
    if not reserving:  # the tiers select no kind: no GPU job of a kind will run
        return 0, Decimal(0)
    rates = [(k.price or cfg.price) for k in reserving]
    known = [p.on(day, table) for p in rates if p is not None]
    if len(known) != len(rates) or any(r is None for r in known):
        return cfg.reserve_minutes * len(rates), None
    total = sum((r for r in known if r is not None), Decimal(0))
    return cfg.reserve_minutes * len(rates), total / len(rates)


def _read_spend(
    read: Callable[[], tuple[budget.Spend, str]], what: str
) -> tuple[budget.Spend, str]:
    """``read()``; any failure but ours becomes a :class:`GpuCiError` naming ``what``."""
    try:
        return read()
    except GpuCiError:
        raise
    except Exception as exc:  # ApiError, or an answer that is not what was asked
        raise describe_api_failure(exc, what) from None


def _unknown(
    cfg: budget.BudgetConfig, rows: list[tuple[str, str]], what: str, exc: GpuCiError
) -> GateBudget:
    """The verdict when the spend cannot be read: ``budget-on-unknown`` decides."""
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
