"""The refusal before any cloud call: the dearest candidate for max-minutes vs budget left.

The reservation is ``max-minutes`` at the dearest candidate's hourly price: the VM's hard
timer ends it by then, so no launch of this run can cost more. gpu-gate's ``budget-left`` is
the budget *before* this run's reservation, so the reservation is counted here once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from gpu_ci.pricing import Budget

_LEFT = re.compile(
    r"\s*(?P<dollar>\$)?\s*(?P<num>-?[0-9]*\.?[0-9]+)\s*(?P<unit>usd|min|mins|minutes?)?\s*",
    re.IGNORECASE,
)


#: gpu-gate's budget-left, in USD or minutes (one type for every budget).
BudgetLeft = Budget


def parse_budget_left(text: str) -> BudgetLeft | str:
    """The budget left, or an error message. A bare number is USD (gpu-gate's
    output); ``$12.50`` and ``120 minutes`` name their unit."""
    match = _LEFT.fullmatch(text)
    if not match or (match.group("dollar") and (match.group("unit") or "usd").lower() != "usd"):
        return (
            f"input 'budget-left' is {text!r}: pass gpu-gate's budget-left output (USD, e.g. "
            "12.50), '$12.50', or '120 minutes' for a budget in minutes."
        )
    unit = (match.group("unit") or "usd").lower()
    return BudgetLeft(Decimal(match.group("num")), "usd" if unit == "usd" else "minutes")


@dataclass(frozen=True)
class Reservation:
    """What this run may cost at most, and whether that is allowed."""

    instance_type: str
    usd_per_hour: Decimal
    max_minutes: int
    refusal: str
    """Empty when within the budget; else the sentence the start job fails with."""

    @property
    def usd(self) -> Decimal:
        return self.usd_per_hour * self.max_minutes / 60


def reserve(
    left: BudgetLeft | None, max_minutes: int, prices: Mapping[str, Decimal]
) -> Reservation:
    """The dearest candidate's reservation, refused when it exceeds ``left``."""
    dearest = max(prices, key=lambda t: (prices[t], t))
    held = Reservation(dearest, prices[dearest], max_minutes, "")
    if left is None:
        return held
    if left.unit == "usd":
        need, word = held.usd, f"{max_minutes} min x ${prices[dearest]}/h ({dearest})"
    else:
        need, word = Decimal(max_minutes), f"max-minutes {max_minutes}"
    if need <= left.amount:
        return held
    reason = (
        f"this run's GPU VM may cost {left.describe(need)} ({word}), more than the "
        f"{left.describe()} left of the budget: nothing was launched. Lower max-minutes, "
        "drop the dearest instance type, or raise the budget."
    )
    return Reservation(dearest, prices[dearest], max_minutes, reason)


def parse_instance_prices(text: str) -> dict[str, Decimal] | str:
    """``g5.xlarge=1.006, g4dn.xlarge=0.526/h`` (USD per hour), or an error message."""
    prices: dict[str, Decimal] = {}
    for part in re.split(r"[,\n]", text):
        if not part.strip():
            continue
        match = re.fullmatch(
            r"\s*([a-z0-9-]+\.[a-z0-9-]+)\s*=\s*\$?([0-9]*\.?[0-9]+)(/h)?\s*", part
        )
        if not match or Decimal(match.group(2)) <= 0:
            return (
                f"input 'instance-prices' has {part.strip()!r}: write type=USD per hour, "
                "e.g. g5.xlarge=1.006."
            )
        prices[match.group(1)] = Decimal(match.group(2))
    return prices


def candidate_prices(
    instance_types: list[str],
    given: Mapping[str, Decimal],
    table: Callable[[str], Decimal | None],
    region: str,
) -> dict[str, Decimal] | str:
    """Each type's hourly price in the user's order: ``given`` first, else ``table``; an
    error message naming every type with neither."""
    prices = {t: given.get(t) or table(t) for t in instance_types}
    missing = [t for t, p in prices.items() if p is None]
    if missing:
        return (
            f"no price for {', '.join(missing)} in {region}: the packaged table lacks it. "
            "Pass instance-prices (e.g. g5.xlarge=1.006, USD per hour on demand)."
        )
    return {t: p for t, p in prices.items() if p is not None}
