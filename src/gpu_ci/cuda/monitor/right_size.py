"""Advise the smallest GPU or MIG profile that fits a job.

The advice follows the job's peak memory (with headroom) and how busy it kept the GPU.

The table is ``data/gpu-sizes.yaml`` (each row sourced; code reads its JSON rendering). The
rule, stated once:

* **needed** = peak memory × ``headroom`` (1.25: see the YAML for why); a row holds the job
  when its memory (as NVIDIA names it, counted as 10^9 bytes per GB, which is below what the
  driver reports, so the advice errs on the large side) is at least ``needed``;
* the job's **current** size is the board (or, for a MIG slice, the profile) NVML's device
  name and memory name, else just the memory NVML reports;
* the advice is the smallest row below the current size that holds the job: a MIG profile of
  the same board first (least memory, then fewest compute slices), else a smaller board;
  none when the job already runs on the smallest size that holds it, or when its peak memory
  is unknown (no samples);
* **activity** (mean utilisation, from NVML or a slice's GPM SM activity) only qualifies the
  advice: below 10 % "mostly idle", from 50 % "busy: a smaller size has fewer SMs and may run
  longer"; unknown stays unknown;
* the **cost at the suggested size** is the job's paid minutes × GPUs × the size's price,
  where the table names a GitHub SKU with a price that day; else unknown.

Pure: the command passes the figures and the prices; nothing here reads NVML or the clock.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).parent.parent.parent / "data"
SIZES_PATH = DATA / "gpu-sizes.yaml"
SIZES_JSON = SIZES_PATH.with_suffix(".json")
GB = 10**9
GIB = 2**30
IDLE_BELOW = 10.0
"""Mean utilisation (%) below which the advice says "mostly idle"."""
BUSY_FROM = 50.0
"""Mean utilisation (%) from which the advice warns that fewer SMs may run longer."""


@dataclass(frozen=True)
class Size:
    """One row: a whole board (``profile`` None) or a MIG profile of ``board``."""

    board: str
    name: str
    memory_gb: int
    source: str
    profile: str | None = None
    slices: int = 7
    sku: str | None = None
    match: str = ""
    """A whole board: a regular expression on NVML's device name."""

    @property
    def capacity(self) -> int:
        return self.memory_gb * GB

    @property
    def kind(self) -> str:
        return "gpu" if self.profile is None else "mig"


@dataclass(frozen=True)
class Sizes:
    boards: tuple[Size, ...]
    profiles: tuple[Size, ...]
    headroom: float
    prices: Mapping[str, Decimal]
    """Size name -> USD per minute (from its GitHub SKU on the report's day)."""

    def with_prices(self, prices: Mapping[str, Decimal]) -> Sizes:
        return Sizes(self.boards, self.profiles, self.headroom, dict(prices))


@lru_cache(maxsize=1)
def load_sizes(path: Path = SIZES_JSON) -> Sizes:
    doc = json.loads(path.read_text(encoding="utf-8"))
    boards = tuple(
        Size(
            str(b["id"]),
            str(b["name"]),
            int(b["memory_gb"]),
            str(b["source"]),
            sku=b.get("sku"),
            match=str(b["match"]),
        )
        for b in doc["boards"]
    )
    names = {b.board: b.name for b in boards}
    profiles = tuple(
        Size(
            str(p["board"]),
            f"{names[p['board']]} MIG {p['profile']}",
            int(p["memory_gb"]),
            str(p["source"]),
            profile=str(p["profile"]),
            slices=int(p["slices"]),
        )
        for p in doc["mig_profiles"]
    )
    return Sizes(boards, profiles, float(doc["headroom"]["factor"]), {})


@dataclass(frozen=True)
class Advice:
    peak_memory: int | None
    """Bytes; None: unknown (no samples)."""
    needed: int | None
    current: str
    """The size the job ran on (a table row's name, else NVML's device name)."""
    current_memory: int
    activity: float | None
    """Mean utilisation, %; None: unknown."""
    suggestion: Size | None
    reason: str
    """Why there is (or is not) a suggestion, in words."""
    usd_per_minute: Decimal | None = None
    cost_usd: Decimal | None = None
    """The job's paid minutes × GPUs at the suggested size's price; None: no price."""

    def line(self) -> str:
        """One sentence for the summary (and gpu-spend's month)."""
        peak = "unknown" if self.peak_memory is None else f"{self.peak_memory / GIB:.1f} GiB"
        act = "activity unknown" if self.activity is None else f"{self.activity:.0f} % busy"
        head = f"peak {peak} of {self.current_memory / GIB:.0f} GiB on {self.current}, {act}"
        if self.suggestion is None:
            return f"{head}: {self.reason}"
        cost = (
            ""
            if self.cost_usd is None
            else f"; at its price this job would have cost "
            f"${self.cost_usd.quantize(Decimal('0.01'), ROUND_HALF_UP)}"
        )
        return f"{head}: {self.reason}{cost}"


def _current(
    name: str, memory_total: int, profile: str | None, sizes: Sizes
) -> tuple[Size | None, Size | None]:
    """The table rows the job ran on.

    The board row and (a MIG slice) the profile row the job ran on, where known.
    """
    boards = [b for b in sizes.boards if re.search(b.match, name, re.IGNORECASE)]
    if profile is not None:
        by_name = [p for p in sizes.profiles if p.profile and p.profile in name]
        fits = [p for p in by_name if any(p.board == b.board for b in boards)]
        found = fits or by_name
        row = found[0] if found else None
        board = next((b for b in sizes.boards if row and b.board == row.board), None)
        return board, row
    if not boards:
        return None, None
    return min(boards, key=lambda b: abs(b.capacity - memory_total)), None


def _qualifier(activity: float | None) -> str:
    if activity is None:
        return " (activity unknown)"
    if activity < IDLE_BELOW:
        return " (the GPU was mostly idle)"
    if activity >= BUSY_FROM:
        return (
            f" (but the GPU was busy {activity:.0f} % of the time: a smaller size has "
            "fewer SMs and may run longer)"
        )
    return ""


def advise(
    name: str,
    memory_total: int,
    peak_memory: int | None,
    activity: float | None,
    sizes: Sizes,
    *,
    mig_slice: bool = False,
    paid_minutes: int = 0,
    gpus: int = 1,
) -> Advice:
    """Advise the smallest GPU or MIG profile that fits the job.

    The advice for a job whose largest GPU (NVML ``name``, ``memory_total`` bytes) peaked at
    ``peak_memory`` bytes (see the module's docstring for the rule).
    """
    board, profile = _current(name, memory_total, name if mig_slice else None, sizes)
    here = profile or board
    current = here.name if here is not None else name
    if peak_memory is None:
        return Advice(
            None,
            None,
            current,
            memory_total,
            activity,
            None,
            "no advice: peak memory is unknown (no samples)",
        )
    needed = int(peak_memory * sizes.headroom)
    below = here.memory_gb if here is not None else memory_total / GB
    advice = functools.partial(Advice, peak_memory, needed, current, memory_total, activity)
    pick = _smallest_fit(sizes, board, needed, below)
    if pick is None:
        return advice(
            None,
            f"no smaller size in the table holds {needed / GIB:.1f} GiB (peak × "
            f"{sizes.headroom:g}): already the smallest that fits",
        )
    price = sizes.prices.get(pick.name)
    cost = (
        None
        if price is None
        else (price * paid_minutes * gpus).quantize(Decimal("0.0001"), ROUND_HALF_UP)
    )
    kind = "slice" if pick.kind == "mig" else "GPU"
    reason = f"{pick.name} ({kind}, {pick.memory_gb} GB) would do" + _qualifier(activity)
    return advice(pick, reason, price, cost)


def _smallest_fit(sizes: Sizes, board: Size | None, needed: int, below: float) -> Size | None:
    """The smallest size holding ``needed`` bytes under ``below`` GB: a slice of this board
    first, else another board."""

    def fits(rows: Sequence[Size]) -> list[Size]:
        return sorted(
            (r for r in rows if r.capacity >= needed and r.memory_gb < below),
            key=lambda r: (r.memory_gb, r.slices),
        )

    same = fits([p for p in sizes.profiles if board is not None and p.board == board.board])
    choices = same or fits(sizes.boards)
    return choices[0] if choices else None
