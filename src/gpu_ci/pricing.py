"""What a GPU minute costs: GitHub-hosted GPU runner SKUs from a dated, sourced table, or a
price the user names, and GitHub's billing rule (each job rounded up to whole minutes).

Shared by the budget guard (github wing, via the gate) and ``gpu-monitor``'s idle cost (cuda
wing, via its command): it lives at the root so that neither wing imports the other. Money
is ``Decimal``: sums of many small per-minute prices must not drift. Standard library only
(the table is JSON), so it costs nothing on the GPU runner's cold start.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import date
from decimal import Decimal, InvalidOperation
from pathlib import Path

TABLE_PATH = Path(__file__).with_name("data") / "runner-prices.json"


class _Dated:
    """A table row valid from one day until another (None: still valid)."""

    valid_from: date
    valid_until: date | None

    def valid_on(self, day: date) -> bool:
        return self.valid_from <= day and (self.valid_until is None or day <= self.valid_until)


@dataclass(frozen=True)
class SkuPrice(_Dated):
    sku: str
    usd_per_minute: Decimal
    valid_from: date
    """``date.min`` for a row valid since the SKU's launch (not recorded)."""
    valid_until: date | None
    source: str


@dataclass(frozen=True)
class PriceTable:
    prices: tuple[SkuPrice, ...]
    checked: date
    """The day the table was last compared with GitHub's documentation."""

    @property
    def skus(self) -> tuple[str, ...]:
        return tuple(sorted({p.sku for p in self.prices}))

    def price_on(self, sku: str, day: date) -> SkuPrice | None:
        key = normalise_sku(sku)
        for price in self.prices:
            if price.sku == key and price.valid_on(day):
                return price
        return None


def load_table(path: Path = TABLE_PATH) -> PriceTable:
    doc = json.loads(path.read_text(encoding="utf-8"))
    prices = tuple(
        SkuPrice(
            str(row["sku"]),
            Decimal(str(row["usd_per_minute"])),
            date.fromisoformat(row["valid_from"]) if row.get("valid_from") else date.min,
            date.fromisoformat(row["valid_until"]) if row.get("valid_until") else None,
            str(row["source"]),
        )
        for row in doc["prices"]
    )
    return PriceTable(prices, date.fromisoformat(doc["checked"]))


_SKU_WORDS = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True)
class Budget:
    """An amount of money or of GPU minutes, as budgets are written."""

    amount: Decimal
    unit: str
    """``usd`` or ``minutes``."""

    def describe(self, value: Decimal | None = None) -> str:
        """``value`` (else the amount) as the budget's unit reads."""
        v = self.amount if value is None else value
        return f"${v:.2f}" if self.unit == "usd" else f"{int(v)} min"


def normalise_sku(text: str) -> str:
    """One spelling of a SKU: lower case, words joined by ``_``.

    ``linux_4_core_gpu``, ``actions_linux_4_core_gpu``, ``Actions Linux 4-core GPU`` and
    ``Linux 4-core GPU`` all name one SKU; the ``actions`` product prefix goes."""
    words = [w for w in _SKU_WORDS.split(text.lower()) if w]
    if words[:1] == ["actions"]:
        words = words[1:]
    return "_".join(words)


def billed_minutes(seconds: float) -> int:
    """The minutes GitHub bills for a job that ran ``seconds``.

    GitHub rounds each job's run time up to the whole minute; a job that ran at all is at
    least one minute (never free)."""
    if seconds <= 0:
        return 0
    return max(1, math.ceil(seconds / 60))


def job_cost(usd_per_minute: Decimal, paid_minutes: int, gpus: int, *, per_gpu: bool) -> Decimal:
    """What a job cost: a runner's price x its paid minutes, or -- on a shared multi-GPU
    host where each job leases its own GPUs (gpu-lease) -- a GPU's price x paid minutes x
    the GPUs the job was given, so two jobs on one 8-GPU host are not each charged the
    whole host."""
    return usd_per_minute * paid_minutes * (gpus if per_gpu else 1)


@dataclass(frozen=True)
class Price:
    """A per-minute price: fixed (``gpu-price: 0.5``) or a SKU looked up per day."""

    usd_per_minute: Decimal | None = None
    sku: str | None = None

    def on(self, day: date, table: PriceTable) -> Decimal | None:
        if self.usd_per_minute is not None:
            return self.usd_per_minute
        found = table.price_on(self.sku or "", day)
        return found.usd_per_minute if found else None

    def describe(self) -> str:
        if self.usd_per_minute is not None:
            return f"${self.usd_per_minute}/min"
        return f"the {self.sku} rate"


@dataclass(frozen=True)
class DearestPrice(Price):
    """The highest of several prices, day by day.

    A job that may have run on any of several runners is priced as the dearest: the
    budget's safe error."""

    of: tuple[Price, ...] = ()

    def on(self, day: date, table: PriceTable) -> Decimal | None:
        rates = [p.on(day, table) for p in self.of]
        return max((r for r in rates if r is not None), default=None)

    def describe(self) -> str:
        return "the dearest of " + ", ".join(p.describe() for p in self.of)


class PriceError(ValueError):
    """A price the user wrote that cannot be used.

    The message says what to write."""


def parse_price(text: str, table: PriceTable, *, per: str = "minute") -> Price:
    """``0.052``, ``$0.052``, ``0.052/min``, ``3.12/h`` (``per`` says what a bare number is:
    ``minute`` or ``hour``), or a SKU name from the table."""
    value = text.strip()
    if not value:
        raise PriceError(
            "the price is empty: write a per-minute amount such as 0.052, or "
            f"a GitHub-hosted GPU SKU ({', '.join(table.skus)})."
        )
    match = re.fullmatch(
        r"\$?\s*([0-9]*\.?[0-9]+)\s*(?:/\s*(min|minute|h|hr|hour))?", value, re.IGNORECASE
    )
    if match:
        try:
            amount = Decimal(match.group(1))
        except InvalidOperation:  # pragma: no cover - the pattern admits only numbers
            raise PriceError(f"{value!r} is not a number.") from None
        unit = (match.group(2) or per).lower()
        if unit.startswith("h"):
            amount = amount / 60
        if amount <= 0:
            raise PriceError(f"{value!r}: a GPU minute is never free; write a price above 0.")
        return Price(usd_per_minute=amount)
    if value.startswith("-"):
        raise PriceError(f"{value!r}: a price cannot be negative.")
    sku = normalise_sku(value)
    if sku not in table.skus:
        raise PriceError(
            f"{value!r} is neither an amount (0.052, 0.052/min, 3.12/h) nor a "
            f"known GitHub-hosted GPU SKU ({', '.join(table.skus)})."
        )
    return Price(sku=sku)


@dataclass(frozen=True)
class InstancePrice(_Dated):
    """A cloud instance type's on-demand price in one region, from the table."""

    provider: str
    region: str
    instance_type: str
    usd_per_hour: Decimal
    valid_from: date
    valid_until: date | None
    source: str


def load_instance_prices(path: Path = TABLE_PATH) -> tuple[InstancePrice, ...]:
    """The table's cloud rows (gpu-cloud-runner's prices): one file for every price."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    return tuple(
        InstancePrice(
            str(row["provider"]),
            str(row["region"]),
            str(row["instance_type"]),
            Decimal(str(row["usd_per_hour"])),
            date.fromisoformat(row["valid_from"]) if row.get("valid_from") else date.min,
            date.fromisoformat(row["valid_until"]) if row.get("valid_until") else None,
            str(row["source"]),
        )
        for row in doc.get("cloud", ())
    )


def instance_price(
    prices: tuple[InstancePrice, ...], provider: str, region: str, instance_type: str, day: date
) -> Decimal | None:
    """A type's on-demand USD per hour in a region on a day."""
    for row in prices:
        same = (row.provider, row.region, row.instance_type) == (provider, region, instance_type)
        if same and row.valid_on(day):
            return row.usd_per_hour
    return None
