"""gpu-monitor's numbers: from a recording, the job's steps and a price.

Nothing here touches NVML, the network or the clock. The command passes the sample file's
text, the steps it fetched and "now", so every number is checked in tests against a
scripted time series. Rules, stated once:

* **busy** follows nvml.h's definition of utilisation, the "percent of time over the past
  sample period during which one or more kernels was executing": busy time = Σ utilisation ×
  Δt, where Δt is the time since the same device's previous *recorded* sample (the first
  one stands for one nominal ``interval``), so a sampler that falls behind is not
  under-counted; where the sampler read the driver's sample buffer
  (``nvmlDeviceGetSamples``), which covers the whole interval, its busy seconds are used;
* a counter the GPU does not support (``null`` in the file) is **unknown**, never 0: a GPU
  without any utilisation reading has unknown busy time, so the idle fraction and idle cost
  are unknown, and a check that needs the counter says it could not be evaluated (a
  failure only with ``Limits.unknown_fails``);
* energy is the driver's energy counter's increase (``nvmlDeviceGetTotalEnergyConsumption``)
  where it was recorded, else the sum of power × Δt; p95 is the nearest-rank percentile;
* a MIG slice (a GPU entry with ``slice``) has its own memory, processes and (from GPM)
  utilisation; the board's power is recorded apart (``board_power_mw``) and reported as
  board-wide, never as the slice's energy; events of another GPU instance are not the job's;
* a GPU is **throttled** for the time its violation counters (``nvmlDeviceGetViolationStatus``:
  time held below application clocks, by reason) grew, where the driver has them; else in a
  sample when a clocks-event reason other than idle, application clocks, sync boost or
  display clock is set, for that sample's Δt;
* **memory used** is allocated memory (``nvmlMemory_v2_t``); the driver's reservation is
  reported apart (v1 drivers: reserved + allocated, as v1 counts it);
* **paid** minutes follow GitHub's rule (the job's time, rounded up to whole minutes, at
  least one); GPU-minutes paid = paid minutes × GPUs watched; **used** = busy time;
  idle fraction = 1 − used / paid; cost = the runner's price × paid minutes, or with a
  per-GPU price (a shared host's leased GPUs) the GPU's price × GPU-minutes paid; idle cost
  = cost × idle fraction (per leased GPU, never the whole host's).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from gpu_ci.cuda.monitor import right_size as rs
from gpu_ci.cuda.monitor.findings import findings
from gpu_ci.cuda.monitor.recording import (
    ACTIVITY,
    MIB,
    GpuInfo,
    GpuSample,
    Recording,
    gpus_unwatched,
    unwatched,
)
from gpu_ci.cuda.monitor.results import (
    Cost,
    GpuUsage,
    Limits,
    Phase,
    PhaseUsage,
    Pricing,
    ProcessUse,
    Report,
)
from gpu_ci.pricing import billed_minutes, job_cost

"""2: ``activity`` (GPM), ``io`` (PCIe/NVLink bytes), ``health`` (ECC and remapped-row deltas),
``foreign`` processes; a version-1 report stays readable (:func:`read_report`)."""
"""Findings in the summary, the log's annotations and the ``findings`` output: a GPU that
raises an ECC event every second must not push the summary past GitHub's 1 MiB per step
(a larger one is dropped whole). Errors sort first, so none is cut before a warning."""

#: nvmlClocksEventReason bits that mean "slowed down" (not idle or configured clocks).
THROTTLE_REASONS = {
    0x4: "power cap (software)",
    0x8: "hardware slowdown",
    0x20: "thermal (software)",
    0x40: "thermal (hardware)",
    0x80: "power brake (hardware)",
    0x200: "board limit",
    0x400: "reliability",
}

#: Violation counters (nvmlPerfPolicyType_t) as the sample file names them, and the reason
#: each reads as (nvml.h's translations: POWER -> SW_POWER_CAP, THERMAL -> SW_THERM_SLOWDOWN).
VIOLATION_REASONS = {
    "power": "power cap (software)",
    "thermal": "thermal (software)",
    "board_limit": "board limit",
    "reliability": "reliability",
}


# -- the computation --------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def p95(values: Sequence[float]) -> float:
    """Nearest-rank 95th percentile (a value that occurred, never an interpolation)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)])


def throttle_names(bits: int) -> list[str]:
    return [name for bit, name in THROTTLE_REASONS.items() if bits & bit]


def _money(value: Decimal) -> Decimal:
    return value.quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP)


@dataclass(frozen=True)
class _Span:
    """Usage figures of a set of samples.

    Busy time, utilisation, peak memory and energy of a set of samples, each standing for its
    recorded ``dt``: one GPU's whole recording (the GPU table) or every GPU's samples within a step
    (the phase table). Both tables state the rules of this module's docstring; computing them in one
    place keeps the two tables from drifting apart.
    """

    busy_s: float | None
    utils: tuple[float, ...]
    """The utilisation of each sample that has one (unsupported readings are left out)."""
    peak: GpuSample | None
    """The first sample with the most memory used; None when there are no samples."""
    powers_w: tuple[float, ...]
    energy_wh: float | None
    board_energy_wh: float | None

    @classmethod
    def of(cls, samples: Sequence[GpuSample]) -> _Span:
        busy = [s.busy_s for s in samples if s.util_busy_s is not None or s.util is not None]
        return cls(
            busy_s=sum(busy) if busy else None,
            utils=tuple(float(s.util) for s in samples if s.util is not None),
            peak=max(samples, key=lambda s: s.mem_used, default=None),
            powers_w=tuple(s.power_mw / 1000 for s in samples if s.power_mw is not None),
            energy_wh=_energy_wh(samples, "power_mw"),
            board_energy_wh=_energy_wh(samples, "board_power_mw"),
        )

    @property
    def util_mean(self) -> float | None:
        return _mean(self.utils) if self.utils else None

    @property
    def peak_memory(self) -> int:
        return self.peak.mem_used if self.peak else 0


def _energy_wh(samples: Sequence[GpuSample], power: str) -> float | None:
    """Energy drawn over a set of samples.

    The energy counter's increase where a sample has one, else power × dt; None when neither was
    read (unsupported: unknown, never 0). A device with a counter starts it at its first sample,
    which therefore adds nothing.
    """
    joules: list[float] = []
    for s in samples:
        if power == "power_mw" and s.energy_mj is not None:
            joules.append((s.energy_delta_mj or 0) / 1000)
        elif getattr(s, power) is not None:
            joules.append(getattr(s, power) / 1000 * s.dt)
    return sum(joules) / 3600 if joules else None


def _grown(values: Sequence[int]) -> int | None:
    """How much a counter grew over its readings: the sum of the steps up (a step down is
    a wrap or a driver reload and adds nothing); None with fewer than two readings."""
    if len(values) < 2:
        return None
    return sum(max(0, b - a) for a, b in zip(values, values[1:]))


def _activity(mine: Sequence[GpuSample]) -> dict[str, float | None]:
    """The mean of each GPM ratio, weighted by time.

    Each GPM ratio's mean over the samples that have it, weighted by their Δt.
    """
    out: dict[str, float | None] = {}
    for name in ACTIVITY:
        got = [(v, s.dt) for s in mine for k, v in s.activity if k == name and v is not None]
        seen = any(k == name for s in mine for k, _v in s.activity)
        if got:
            weight = sum(dt for _v, dt in got)
            out[name] = (
                sum(v * dt for v, dt in got) / weight if weight else _mean([v for v, _ in got])
            )
        elif seen:
            out[name] = None
    return out


def _io_health(
    mine: Sequence[GpuSample], board: bool = False
) -> tuple[dict[str, int | None], dict[str, int | None]]:
    """Traffic and error-counter growth across the job.

    Bytes moved (PCIe, NVLink) and ECC / remapped-row growth across the job; with ``board``, a MIG
    slice's record of its whole board's counters.
    """
    pre = "board_" if board else ""
    pcie = [v for v in (getattr(s, pre + "pcie_bytes") for s in mine) if v is not None]
    nvl = [v for v in (getattr(s, pre + "nvlink_kib") for s in mine) if v is not None]
    ecc = [v for v in (getattr(s, pre + "ecc") for s in mine) if v is not None]
    remap = [v for v in (getattr(s, pre + "remap") for s in mine) if v is not None]

    def kib(v: int | None) -> int | None:
        return None if v is None else v * 1024

    io = {
        "pcie_tx": _grown([p[0] for p in pcie]),
        "pcie_rx": _grown([p[1] for p in pcie]),
        "nvlink_tx": kib(_grown([n[0] for n in nvl])),
        "nvlink_rx": kib(_grown([n[1] for n in nvl])),
    }
    rows = [r[0] + r[1] for r in remap]
    health = {
        "ecc_corrected": _grown([e[0] for e in ecc]),
        "ecc_uncorrected": _grown([e[1] for e in ecc]),
        "rows_remapped": _grown(rows),
        "remap_pending": remap[-1][2] if remap else None,
        "remap_failure": remap[-1][3] if remap else None,
    }
    return io, health


def _usage(gpu: GpuInfo, rec: Recording) -> GpuUsage:
    mine = [s for s in rec.samples if s.key == gpu.key]
    span = _Span.of(mine)
    peak = span.peak
    peak_process = ""
    if peak is not None and peak.procs:
        pid, used, name = max(peak.procs, key=lambda p: p[1])
        peak_process = f"{name} (pid {pid}, {used / MIB:.0f} MiB)"
    procs: dict[int, ProcessUse] = {}
    for s in mine:
        for pid, used, name in s.procs:
            old = procs.get(pid)
            if old is None or used > old.peak_memory:
                procs[pid] = ProcessUse(pid, name, used)
    reasons: dict[str, float] = {}
    read = [s for s in mine if s.throttle is not None]
    throttled: float | None = 0.0 if read else None  # never read: unknown, not "0:00"
    for s in read:
        names = throttle_names(s.throttle or 0)
        if names:
            throttled = (throttled or 0.0) + s.dt
        for name in names:
            reasons[name] = reasons.get(name, 0.0) + s.dt
    counted = [s for s in mine if s.violation_ns]
    if len(counted) >= 2:  # the driver's counters: exact, between readings too
        first, last = dict(counted[0].violation_ns), dict(counted[-1].violation_ns)
        grew = {k: max(0, last[k] - first[k]) / 1e9 for k in last if k in first}
        reasons = {
            VIOLATION_REASONS[k]: v for k, v in grew.items() if k in VIOLATION_REASONS and v > 0
        }
        throttled = grew["total"] if "total" in grew else sum(reasons.values())
    temps = [s.temp for s in mine if s.temp is not None]
    reserved = [s.mem_reserved for s in mine if s.mem_reserved is not None]
    lost = next(
        (e for e in rec.errors if e.get("gpu") == gpu.index and not e.get("gap")), None
    )  # the board: GPU_IS_LOST ends its samples; another error is a gap
    io, health = _io_health(mine)
    board_io, board_health = _io_health(mine, board=True) if gpu.slot is not None else (None, None)
    mem_utils = [float(s.mem_util) for s in mine if s.mem_util is not None]
    return GpuUsage(
        gpu=gpu,
        samples=len(mine),
        busy_s=span.busy_s,
        util_mean=span.util_mean,
        util_p95=p95(span.utils) if span.utils else None,
        util_max=max(span.utils) if span.utils else None,
        mem_util_mean=_mean(mem_utils) if mem_utils else None,
        peak_memory=span.peak_memory,
        peak_process=peak_process,
        peak_at_s=(peak.ts - rec.started) if peak else None,
        energy_wh=span.energy_wh,
        power_max_w=max(span.powers_w) if span.powers_w else None,
        temp_max=max(temps) if temps else None,
        throttled_s=throttled,
        throttle_reasons=reasons,
        processes=tuple(sorted(procs.values(), key=lambda p: -p.peak_memory)),
        lost_at_s=(float(lost["ts"]) - rec.started) if lost else None,
        board_energy_wh=span.board_energy_wh,
        memory_reserved=max(reserved) if reserved else None,
        activity=_activity(mine),
        io=io,
        health=health,
        foreign_processes=tuple(sorted({pid for s in mine for pid in s.foreign})),
        processes_unknown_s=sum(s.dt for s in mine if s.procs_unknown),
        board_io=board_io,
        board_health=board_health,
    )


def _phase(phase: Phase, rec: Recording) -> PhaseUsage:
    # A sample at ts covers (ts - interval, ts]: it belongs to the phase holding its end.
    inside = [s for s in rec.samples if phase.start < s.ts <= phase.end]
    span = _Span.of(inside)
    return PhaseUsage(
        phase.name,
        phase.start - rec.started,
        max(0.0, phase.end - phase.start),
        len({s.ts for s in inside}),
        span.busy_s,
        span.util_mean,
        span.peak_memory,
        span.energy_wh,
    )


def _phases(
    rec: Recording, end: float, steps: Sequence[Phase] | None
) -> tuple[tuple[PhaseUsage, ...], str]:
    """The job's steps as phases, or one start-to-report phase without them."""
    if not steps:
        return (_phase(Phase("start → report", rec.started - 1e-6, end), rec),), "monitor"
    # Steps before the start step were paid too: listed, with nothing measured.
    phases = tuple(
        _phase(
            p
            if p.end >= rec.started
            else Phase(f"{p.name} (before gpu-monitor started)", p.start, p.end),
            rec,
        )
        for p in steps
        if p.start < end
    )
    return phases, "steps"


def compute(
    rec: Recording,
    *,
    end: float,
    steps: Sequence[Phase] | None = None,
    job_started: float | None = None,
    pricing: Pricing | None = None,
    limits: Limits | None = None,
    sizes: rs.Sizes | None = None,
) -> Report:
    """Everything the summary, outputs, JSON and push say, from plain data."""
    limits = limits or Limits()
    pricing = pricing or Pricing(None, "")
    gpus = tuple(_usage(g, rec) for g in rec.gpus)
    phases, phases_from = _phases(rec, end, steps)
    window_start = job_started if job_started is not None else rec.started
    window = max(0.0, end - window_start)
    paid = billed_minutes(window)
    gpu_paid = float(paid * len(rec.gpus))
    busy = [g.busy_s for g in gpus]
    used = None if any(b is None for b in busy) else sum(b or 0.0 for b in busy) / 60
    # time nobody watched is not idle: the share (and its cost) is unknown then
    watched_all = unwatched(rec, end) is None and not gpus_unwatched(rec, end)
    idle = (
        None
        if used is None or not watched_all
        else (max(0.0, 1.0 - used / gpu_paid) if gpu_paid else 0.0)
    )
    price = pricing.usd_per_minute
    cost = (
        _money(job_cost(price, paid, len(rec.gpus), per_gpu=pricing.per_gpu))
        if price is not None
        else None
    )
    idle_cost = (
        _money(cost * Decimal(str(round(idle, 6))))
        if cost is not None and idle is not None
        else None
    )
    report_cost = Cost(
        window,
        "job" if job_started is not None else "monitor",
        paid,
        gpu_paid,
        None if used is None else round(used, 4),
        None if idle is None else round(idle, 4),
        price,
        pricing.source,
        cost,
        idle_cost,
        pricing.per_gpu,
    )
    report = Report(rec, end, gpus, phases, phases_from, report_cost)
    advice = right_size(gpus, paid, sizes) if sizes is not None else None
    return Report(
        rec, end, gpus, phases, phases_from, report_cost, tuple(findings(report, limits)), advice
    )


def right_size(gpus: Sequence[GpuUsage], paid_minutes: int, sizes: rs.Sizes) -> rs.Advice | None:
    """The advice for the job's largest need: the GPU with the most memory used (each of the
    job's GPUs would move to that size). Activity is the GPUs' mean utilisation, unknown
    when any GPU's is; peak memory is unknown for a GPU without samples."""
    if not gpus:
        return None
    top = max(gpus, key=lambda g: (g.peak_memory, g.samples))
    utils = [g.util_mean for g in gpus]
    activity = None if any(u is None for u in utils) else sum(u or 0.0 for u in utils) / len(utils)
    return rs.advise(
        top.gpu.name,
        top.gpu.memory_total,
        top.peak_memory if top.samples else None,
        activity,
        sizes,
        mig_slice=top.gpu.slot is not None,
        paid_minutes=paid_minutes,
        gpus=len(gpus),
    )
