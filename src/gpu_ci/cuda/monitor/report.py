"""gpu-monitor's report: pure functions from the sampler's file (plus the job's steps and a
price) to numbers, findings, a Markdown summary, a chart, JSON and CSV.

Nothing here touches NVML, the network or the clock: the command passes the text of the
sample file, the steps it fetched and "now", so every number is checked in tests against a
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

import csv
import dataclasses
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

from gpu_ci.charts import Series, downsample, xychart
from gpu_ci.cuda.monitor import right_size as rs
from gpu_ci.markdown import markdown_table
from gpu_ci.pricing import billed_minutes, job_cost

SCHEMA_VERSION = 2
"""2: ``activity`` (GPM), ``io`` (PCIe/NVLink bytes), ``health`` (ECC and remapped-row deltas),
``foreign`` processes; a version-1 report stays readable (:func:`read_report`)."""
MAX_FINDINGS_SHOWN = 50
"""Findings in the summary, the log's annotations and the ``findings`` output: a GPU that
raises an ECC event every second must not push the summary past GitHub's 1 MiB per step
(a larger one is dropped whole). Errors sort first, so none is cut before a warning."""
MIB = 2**20

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

CATALOGUE_PATH = Path(__file__).resolve().parent.parent.parent / "data" / "xid-catalogue.json"


def catalogue() -> dict[str, Any]:
    """NVIDIA's Xid catalogue's rows gpu-monitor names, and the event types' actions
    (``data/xid-catalogue.json``, which cites its sources)."""
    return dict(json.loads(CATALOGUE_PATH.read_text(encoding="utf-8")))


_CATALOGUE = catalogue()
XID_MEANING = {int(k): str(v["meaning"]) for k, v in _CATALOGUE["xids"].items()}
"""What each catalogued Xid means; its action is ``XID_ACTION``."""
XID_ACTION = {int(k): str(v["action"]) for k, v in _CATALOGUE["xids"].items()}
XID_RESET = {int(k) for k, v in _CATALOGUE["xids"].items() if v["reset"]}
XID_NO_RESET = {int(k) for k, v in _CATALOGUE["xids"].items() if v["reset"] is False}
"""Xids whose bucket needs no reset; one in neither set is a workflow (its own text decides)."""
BUCKET_GUIDANCE = {str(k): str(v["guidance"]) for k, v in _CATALOGUE["buckets"].items()}
RECOVERY_ACTIONS = {
    int(k): str(v["name"]).removeprefix("NVML_GPU_RECOVERY_ACTION_")
    for k, v in _CATALOGUE["recovery_actions"].items()
}
"""nvml.h's nvmlDeviceGpuRecoveryAction_t, short names (the action an Xid 154 names)."""
RECOVERY_GUIDANCE = {int(k): str(v["guidance"]) for k, v in _CATALOGUE["recovery_actions"].items()}


def recovery_action_text(value: object) -> str:
    """The action the driver asked for (the event's NVML_FI_DEV_GET_GPU_RECOVERY_ACTION), or
    "unknown" where it was not read (a driver without the field, a sampler before it):
    never a list of the actions it might be."""
    if isinstance(value, int) and not isinstance(value, bool) and value in RECOVERY_ACTIONS:
        return f"recovery action {RECOVERY_ACTIONS[value]} ({RECOVERY_GUIDANCE[value]})"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"recovery action {value} (not in nvml.h's nvmlDeviceGpuRecoveryAction_t)"
    return (
        "recovery action unknown (the driver did not answer "
        "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION; 'nvidia-smi -q' shows it)"
    )


EVENT_ACTIONS: dict[str, dict[str, str]] = dict(_CATALOGUE["events"])

#: GPM activity ratios as the sample file names them, and as the summary shows them.
ACTIVITY = {"sm": "SM active", "occupancy": "SM occupancy", "tensor": "tensor", "dram": "DRAM"}


# -- the recording --------------------------------------------------------------------


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    uuid: str
    memory_total: int
    mig: bool | None = None
    slot: int | None = None
    """A MIG slice: its slot on the parent GPU ``index`` (None: a whole GPU)."""
    gi: int | None = None
    """The slice's GPU instance id (events carry it; another instance's are not ours)."""
    util_source: str | None = "nvml"
    """Where utilisation came from: ``nvml``, ``gpm`` (a MIG slice), or None (none)."""

    @property
    def key(self) -> tuple[int, int | None]:
        return (self.index, self.slot)


@dataclass(frozen=True)
class GpuSample:
    ts: float
    index: int
    util: float | None
    """None where NVML has no utilisation (a MIG-enabled GPU without GPM): unknown."""
    mem_util: int | None
    mem_used: int
    power_mw: int | None = None
    temp: int | None = None
    sm_mhz: int | None = None
    throttle: int | None = None
    procs: tuple[tuple[int, int, str], ...] = ()
    slot: int | None = None
    dt: float = 0.0
    """Seconds this sample stands for: since the same device's previous recorded sample (the
    first one: one nominal interval)."""
    util_busy_s: float | None = None
    """Busy seconds since the previous sample from the driver's sample buffer, if read."""
    energy_mj: int | None = None
    """The driver's energy counter (mJ since the driver loaded), where supported."""
    energy_delta_mj: int | None = None
    """The counter's increase since the same device's previous sample (None: no pair)."""
    board_power_mw: int | None = None
    """A MIG slice: the whole board's power (not the slice's)."""
    mem_reserved: int | None = None
    """Memory reserved by the driver (nvmlMemory_v2_t), apart from ``mem_used``."""
    violation_ns: tuple[tuple[str, int], ...] = ()
    """Cumulative violation-counter times (ns) by reason (nvmlDeviceGetViolationStatus)."""
    activity: tuple[tuple[str, float | None], ...] = ()
    """GPM ratios (percent) since the previous sample, by ``ACTIVITY`` name; () unread."""
    pcie_bytes: tuple[int, int] | None = None
    """The driver's PCIe [tx, rx] byte counters (field values; they may wrap)."""
    nvlink_kib: tuple[int, int] | None = None
    """The driver's NVLink [tx, rx] data counters, KiB, all links."""
    ecc: tuple[int, int] | None = None
    """Volatile ECC error counts [corrected, uncorrected] since boot."""
    remap: tuple[int, int, int, int] | None = None
    """Remapped rows [correctable, uncorrectable, pending, failure]."""
    board_pcie_bytes: tuple[int, int] | None = None
    """A MIG slice: the whole board's ``pcie_bytes`` (read through the parent handle)."""
    board_nvlink_kib: tuple[int, int] | None = None
    board_ecc: tuple[int, int] | None = None
    board_remap: tuple[int, int, int, int] | None = None
    foreign: tuple[int, ...] = ()
    """PIDs NVML listed that this PID namespace cannot resolve (host PIDs in a container)."""
    procs_unknown: bool = False
    """The driver did not list the processes (``procs`` null): ``procs`` is empty, unknown."""

    @property
    def key(self) -> tuple[int, int | None]:
        return (self.index, self.slot)

    @property
    def busy_s(self) -> float:
        """Busy seconds: the driver's sample buffer where it had one, else util x Δt."""
        return (
            self.util_busy_s if self.util_busy_s is not None else (self.util or 0.0) / 100 * self.dt
        )


@dataclass(frozen=True)
class Recording:
    started: float
    interval: float
    gpus: tuple[GpuInfo, ...]
    samples: tuple[GpuSample, ...]
    sample_times: tuple[float, ...]
    events: tuple[dict[str, Any], ...] = ()
    errors: tuple[dict[str, Any], ...] = ()
    stop: dict[str, Any] | None = None
    bad_lines: int = 0
    truncated_at: int | None = None
    """Set when the file was larger than the sampler writes and only this much was read."""


class RecordingError(ValueError):
    """The sample file cannot be read at all (no start line)."""


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _time(value: Any) -> float:
    """A timestamp or duration: a finite number (``nan`` or ``1e999`` make the line bad)."""
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(f"not a finite number: {value!r}")
    return out


#: What a damaged or forged line can raise while it is read: it is counted, never a crash.
_BAD_LINE = (
    ValueError,
    KeyError,
    TypeError,
    IndexError,
    AttributeError,
    OverflowError,
    RecursionError,
)


def printable(text: str) -> str:
    """One line of plain text: control characters and Unicode line breaks (which end a
    Markdown table row or a log line) become spaces. Process names are chosen by the code
    the job runs, and land in the summary and in log lines."""
    return "".join(
        " " if (c < " " or "\x7f" <= c <= "\x9f" or c in "\u2028\u2029") else c for c in text
    )


def _float(value: Any) -> float | None:
    return None if value is None else _time(value)


def _util(value: Any) -> float | None:
    """A percentage: NVML's are whole numbers (kept so), GPM's are fractions."""
    if value is None:
        return None
    out = _time(value)
    return int(out) if out.is_integer() else out


def _ints(value: Any, n: int) -> Any:
    """A list of ``n`` integers from the file, or None (unsupported)."""
    if value is None:
        return None
    out = tuple(int(v) for v in value)
    if len(out) != n:
        raise ValueError(f"expected {n} numbers, got {len(out)}")
    return out


def _sample(ts: float, g: dict[str, Any]) -> GpuSample:
    util = g.get("util")
    viol = g.get("violation_ns") or {}
    gpm = dict(g.get("gpm") or {})
    listed = g.get("procs", ())
    procs = list(listed or ())
    # a 4th item false: a PID this namespace could not resolve (not the job's to claim)
    own = [p for p in procs if len(p) < 4 or p[3] is not False]
    return GpuSample(
        ts,
        int(g["index"]),
        _util(util),
        _int(g.get("mem_util")),
        int(g["mem_used"]),
        _int(g.get("power_mw")),
        _int(g.get("temp")),
        _int(g.get("sm_mhz")),
        _int(g.get("throttle")),
        tuple((int(p[0]), int(p[1]), str(p[2])) for p in own),
        slot=_int(g.get("slice")),
        util_busy_s=_float(g.get("util_busy_s")),
        energy_mj=_int(g.get("energy_mj")),
        board_power_mw=_int(g.get("board_power_mw")),
        mem_reserved=_int(g.get("mem_reserved")),
        violation_ns=tuple(sorted((str(k), int(v)) for k, v in dict(viol).items())),
        activity=tuple((k, _float(gpm[k])) for k in ACTIVITY if k in gpm),
        pcie_bytes=_ints(g.get("pcie_bytes"), 2),
        nvlink_kib=_ints(g.get("nvlink_kib"), 2),
        ecc=_ints(g.get("ecc"), 2),
        remap=_ints(g.get("remap"), 4),
        board_pcie_bytes=_ints(g.get("board_pcie_bytes"), 2),
        board_nvlink_kib=_ints(g.get("board_nvlink_kib"), 2),
        board_ecc=_ints(g.get("board_ecc"), 2),
        board_remap=_ints(g.get("board_remap"), 4),
        foreign=tuple(int(p[0]) for p in procs if len(p) >= 4 and p[3] is False),
        procs_unknown=listed is None,
    )


def _timed(samples: list[GpuSample], interval: float) -> tuple[GpuSample, ...]:
    """Each sample with the time it stands for (``dt``) and the energy counter's increase,
    both from the same device's previous recorded sample."""
    last: dict[tuple[int, int | None], GpuSample] = {}
    out = []
    for s in samples:
        prev = last.get(s.key)
        dt = interval if prev is None else max(0.0, s.ts - prev.ts)
        delta = None
        if (
            prev is not None
            and s.energy_mj is not None
            and prev.energy_mj is not None
            and s.energy_mj >= prev.energy_mj
        ):  # a reset (driver reload) is no pair
            delta = s.energy_mj - prev.energy_mj
        out.append(dataclasses.replace(s, dt=dt, energy_delta_mj=delta))
        last[s.key] = s
    return tuple(out)


def parse_recording(text: str) -> Recording:
    """The sample file's lines; a torn last line (kill -9 mid-write) is counted, not fatal.

    Every field is checked as it is read (a line that fails counts as unreadable), so what
    reaches the numbers has its types. The **last** start line opens the recording: the
    sampler appends, so anything before its own start line (a file another job or an
    earlier step planted at the path, a sampler killed before a second start) is not this
    sampler's window."""
    header: dict[str, Any] | None = None
    samples: list[GpuSample] = []
    times: list[float] = []
    events: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    stop: dict[str, Any] | None = None
    bad = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            kind = record["kind"]
            if kind == "start":
                header = {
                    "ts": _time(record["ts"]),
                    "interval": _time(record["interval"]),
                    "gpus": [
                        GpuInfo(
                            int(g["index"]),
                            str(g["name"]),
                            str(g["uuid"]),
                            int(g["memory_total"]),
                            g.get("mig"),
                            _int(g.get("slice")),
                            _int(g.get("gi")),
                            (
                                None
                                if g.get("util_source", "nvml") is None
                                else str(g.get("util_source", "nvml"))
                            ),
                        )
                        for g in record["gpus"]
                    ],
                }
                if header["interval"] <= 0:
                    raise ValueError("interval")
                samples, times, events, errors, stop = [], [], [], [], None
            elif kind == "sample":
                ts = _time(record["ts"])
                got = [_sample(ts, g) for g in record["gpus"]]
                times.append(ts)
                samples.extend(got)
            elif kind == "event":
                events.append(
                    {
                        "kind": "event",
                        "ts": _time(record["ts"]),
                        "gpu": int(record.get("gpu", -1)),
                        "type": str(record.get("type")),
                        "data": int(record.get("data", 0)),
                        "gi": _int(record.get("gi")),
                        "ci": _int(record.get("ci")),
                        "recovery_action": _int(record.get("recovery_action")),
                    }
                )
            elif kind == "error":
                errors.append(
                    {
                        "kind": "error",
                        "ts": _time(record["ts"]),
                        "gpu": int(record.get("gpu", -1)),
                        "call": str(record.get("call", "")),
                        "code": int(record.get("code", 0)),
                        "name": str(record.get("name", "UNKNOWN")),
                        "gap": bool(record.get("gap", False)),
                    }
                )
            elif kind == "stop":
                stop = {
                    "kind": "stop",
                    "ts": _time(record["ts"]),
                    "reason": str(record.get("reason", "")),
                    "samples": int(record.get("samples", 0)),
                }
            else:
                raise ValueError(kind)
        except _BAD_LINE:
            bad += 1
    if header is None:
        raise RecordingError(
            "the sample file has no start line (none, or none readable): the sampler did not start."
        )
    return Recording(
        header["ts"],
        header["interval"],
        tuple(header["gpus"]),
        _timed(samples, header["interval"]),
        tuple(times),
        tuple(events),
        tuple(errors),
        stop,
        bad,
    )


# -- inputs besides the recording -------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    """A span of the job: a step from the jobs API, or the monitor's own window."""

    name: str
    start: float
    end: float


@dataclass(frozen=True)
class Pricing:
    usd_per_minute: Decimal | None
    source: str
    """How the price was chosen, e.g. ``price-per-hour: 3.12`` or the SKU and its date."""
    per_gpu: bool = False
    """The price is one GPU's (``price-per-gpu-hour``): the job pays it for each GPU it
    watched (those CUDA_VISIBLE_DEVICES gave it, e.g. a gpu-lease), not the whole runner."""


@dataclass(frozen=True)
class Limits:
    expect_gpu_use: bool = False
    max_memory: int | None = None
    """Bytes; fails when any GPU's peak memory is above it."""
    min_utilisation: float | None = None
    """Percent; fails when any GPU's mean utilisation is below it."""
    unknown_fails: bool = False
    """A check whose counter the GPU does not support fails (else: a warning says so)."""


# -- results ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessUse:
    pid: int
    name: str
    peak_memory: int


@dataclass(frozen=True)
class GpuUsage:
    gpu: GpuInfo
    samples: int
    busy_s: float | None
    """None: no utilisation reading at all (unknown, never 0)."""
    util_mean: float | None
    util_p95: float | None
    util_max: float | None
    mem_util_mean: float | None
    peak_memory: int
    peak_process: str
    peak_at_s: float | None
    energy_wh: float | None
    power_max_w: float | None
    temp_max: int | None
    throttled_s: float | None
    throttle_reasons: dict[str, float]
    processes: tuple[ProcessUse, ...]
    lost_at_s: float | None
    board_energy_wh: float | None = None
    """A MIG slice: the whole board's energy, shown as such and never charged to the slice."""
    memory_reserved: int | None = None
    """The most memory the driver reserved (nvmlMemory_v2_t); None where not read."""
    activity: dict[str, float | None] = field(default_factory=dict)
    """Mean GPM ratio (percent) by ``ACTIVITY`` name; {} where GPM is unsupported (unknown)."""
    io: dict[str, int | None] = field(default_factory=dict)
    """Bytes moved during the job: ``pcie_tx``, ``pcie_rx``, ``nvlink_tx``, ``nvlink_rx``
    (None: the counter is unsupported)."""
    health: dict[str, int | None] = field(default_factory=dict)
    """Growth during the job: ``ecc_corrected``, ``ecc_uncorrected``, ``rows_remapped``;
    and ``remap_pending`` / ``remap_failure`` at the end (None: not supported)."""
    foreign_processes: tuple[int, ...] = ()
    """PIDs on this GPU that NVML listed but this PID namespace cannot resolve."""
    processes_unknown_s: float = 0.0
    """Seconds of samples whose process list the driver did not give (NO_PERMISSION, ...)."""
    board_io: dict[str, int | None] | None = None
    """A MIG slice: ``io`` of the whole board (every tenant's), never the slice's; None for
    a whole GPU."""
    board_health: dict[str, int | None] | None = None
    """A MIG slice: ``health`` of the whole board; None for a whole GPU."""


@dataclass(frozen=True)
class PhaseUsage:
    name: str
    start_s: float
    duration_s: float
    samples: int
    busy_s: float | None
    util_mean: float | None
    peak_memory: int
    energy_wh: float | None


@dataclass(frozen=True)
class Cost:
    window_s: float
    window_from: str
    """``job`` (the jobs API's started_at) or ``monitor`` (the start step)."""
    paid_minutes: int
    gpu_minutes_paid: float
    gpu_minutes_used: float | None
    idle_fraction: float | None
    """None when a GPU's busy time is unknown (no utilisation counter) or part of the paid
    time was not watched (``unwatched``: the sampler died or stopped on a limit)."""
    usd_per_minute: Decimal | None
    price_source: str
    cost_usd: Decimal | None
    idle_cost_usd: Decimal | None
    per_gpu: bool = False
    """``usd_per_minute`` is one GPU's: cost = price × GPU-minutes paid."""


@dataclass(frozen=True)
class Finding:
    level: str
    """``error`` fails the step (an assertion); ``warning`` and ``notice`` report."""
    code: str
    message: str
    at_s: float | None = None


@dataclass(frozen=True)
class Report:
    recording: Recording
    end: float
    gpus: tuple[GpuUsage, ...]
    phases: tuple[PhaseUsage, ...]
    phases_from: str
    cost: Cost
    findings: tuple[Finding, ...] = field(default=())
    right_size: rs.Advice | None = None
    """The smallest GPU or MIG profile that would have held the job (None: no table)."""

    @property
    def ok(self) -> bool:
        return not any(f.level == "error" for f in self.findings)

    @property
    def gpu_used(self) -> bool:
        """A process of this job's PID namespace used a GPU, or a GPU without processes of
        another namespace was busy (a foreign process's busy time is not the job's)."""
        return any(
            g.processes or ((g.busy_s or 0) > 0 and not g.foreign_processes) for g in self.gpus
        )

    @property
    def foreign_only(self) -> bool:
        """The only GPU users were processes this PID namespace cannot resolve."""
        return not self.gpu_used and any(g.foreign_processes for g in self.gpus)

    @property
    def use_unknown(self) -> bool:
        """No use was seen, but the driver did not list the processes of some samples."""
        return not self.gpu_used and any(g.processes_unknown_s > 0 for g in self.gpus)


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
    """Busy time, utilisation, peak memory and energy of a set of samples, each standing for
    its recorded ``dt``: one GPU's whole recording (the GPU table) or every GPU's samples
    within a step (the phase table). Both tables state the rules of this module's docstring;
    computing them in one place keeps the two tables from drifting apart."""

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
    """The energy counter's increase where a sample has one, else power × dt; None when
    neither was read (unsupported: unknown, never 0). A device with a counter starts it at
    its first sample, which therefore adds nothing."""
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
    """Each GPM ratio's mean over the samples that have it, weighted by their Δt."""
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
    """Bytes moved (PCIe, NVLink) and ECC / remapped-row growth across the job; with
    ``board``, a MIG slice's record of its whole board's counters."""
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


def unwatched(rec: Recording, end: float) -> tuple[float, float] | None:
    """(from, to) seconds after the start that no sample covers although the job still paid
    for them: the sampler died (``kill -9``, a full disk: no stop line) or stopped on a limit
    (size-limit, max-duration) well before the report. None when it watched to the end
    (within two intervals and a second: the report's own stop)."""
    if rec.stop is not None and rec.stop.get("reason") not in ("size-limit", "max-duration"):
        return None
    last = rec.sample_times[-1] if rec.sample_times else rec.started
    if end - last <= 2 * rec.interval + 1:
        return None
    return (last - rec.started, end - rec.started)


def gpus_unwatched(rec: Recording, end: float) -> tuple[int, ...]:
    """The GPUs no sample covers from well before the end although the sampler ran on: an
    NVML error that never cleared (a driver upgrade mid-job: LIB_RM_VERSION_MISMATCH) or a
    lost GPU. Their time after the last sample is no more idle than a dead sampler's."""
    last: dict[int, float] = {}
    for sample in rec.samples:
        last[sample.index] = max(sample.ts, last.get(sample.index, sample.ts))
    return tuple(
        g.index for g in rec.gpus if end - last.get(g.index, rec.started) > 2 * rec.interval + 1
    )


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
    if steps:
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
        phases_from = "steps"
    else:
        phases = (_phase(Phase("start → report", rec.started - 1e-6, end), rec),)
        phases_from = "monitor"
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


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = max(0, int(round(seconds)))
    if s >= 3600:
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
    return f"{s // 60}:{s % 60:02d}"


ALL_INSTANCES = 0xFFFFFFFF
"""nvmlEventData_t's gpuInstanceId/computeInstanceId for an event of the whole board."""


def _ours(event: dict[str, Any], gpus: Sequence[GpuInfo]) -> bool:
    """An event is the job's unless it names a GPU instance other than the watched slices
    of that GPU (another tenant's Xid on a MIG board is not this job's finding)."""
    gis = {
        g.gi
        for g in gpus
        if g.index == event.get("gpu") and g.slot is not None and g.gi is not None
    }
    gi = event.get("gi")
    return not gis or gi is None or gi == ALL_INSTANCES or gi in gis


EVENT_WAIT = "nvmlEventSetWait"
"""An error line of this call: the sampler's event set failed (no events after it)."""


def _error_findings(rec: Recording) -> list[Finding]:
    """GPU_IS_LOST ends a GPU's samples; any other NVML error is a gap the sampler retried
    across (from the error to the GPU's next sample)."""
    out = []
    for e in rec.errors:
        at = float(e["ts"]) - rec.started
        gpu = e.get("gpu")
        if e.get("call") == EVENT_WAIT:
            out.append(
                Finding(
                    "warning",
                    "events-unwatched",
                    f"NVML's event wait answered {e.get('name')} ({e.get('code')}) at "
                    f"+{_clock(at)}: Xid and ECC events from +{_clock(at)} on were not "
                    "watched (no Xid reported after that is no evidence of none; the kernel "
                    "log's NVRM lines have them).",
                    at,
                )
            )
            continue
        if e.get("code") == 15:
            out.append(
                Finding(
                    "warning",
                    "gpu-lost",
                    f"GPU {gpu}: NVML answered {e.get('name')} ({e.get('code')}) at +{_clock(at)}: "
                    "the GPU stopped answering (fallen off the bus -- Xid 79 -- or a fatal or "
                    "GPU-unavailable error: the kernel log's Xid says which); no samples after "
                    "that. Drain this runner and reset the GPU.",
                    at,
                )
            )
            continue
        back = next((s.ts for s in rec.samples if s.index == gpu and s.ts > float(e["ts"])), None)
        gap = (
            f"no samples from +{_clock(at)} to +{_clock(back - rec.started)}; sampling resumed"
            if back is not None
            else f"no samples from +{_clock(at)} on (the sampler kept asking), so the idle "
            "share and its cost are unknown"
            if e.get("gap")
            else "no samples from this GPU after that"
        )
        out.append(
            Finding(
                "warning",
                "nvml-failed",
                f"GPU {gpu}: NVML answered {e.get('name')} ({e.get('code')}) at +{_clock(at)}; "
                f"{gap}.",
                at,
            )
        )
    return out


def xid_finding(code: int, gpu: object, at: float, recovery_action: object = None) -> Finding:
    """An Xid with the catalogue's meaning and immediate action; a reset is asked only
    where the action's bucket takes the GPU out of service (13/31/43 do not), and a
    workflow bucket (74's NVLink registers, 154's recovery action) says what decides: for
    154 the action the driver asked for (``recovery_action``, read with the event)."""
    meaning = XID_MEANING.get(code)
    action = XID_ACTION.get(code)
    if meaning is None:
        what, then = "see NVIDIA's Xid catalogue", f": {_CATALOGUE['source']}"
    elif code in XID_RESET:
        what, then = meaning, f": catalogue action {action}; drain this runner"
    elif code in XID_NO_RESET:
        what, then = meaning, f": catalogue action {action}; the GPU needs no reset"
    else:
        guidance = BUCKET_GUIDANCE.get(str(action), "see the catalogue")
        if action == "XID_154":
            guidance += ": " + recovery_action_text(recovery_action)
        what, then = meaning, f": catalogue action {action}; {guidance}"
    return Finding(
        "warning", f"xid-{code}", f"GPU {gpu}: Xid {code} ({what}) at +{_clock(at)}{then}.", at
    )


def _event_findings(rec: Recording) -> list[Finding]:
    out = []
    for e in rec.events:
        if not _ours(e, rec.gpus):
            continue
        at = float(e["ts"]) - rec.started
        kind = str(e.get("type"))
        if kind == "xid":
            out.append(
                xid_finding(int(e.get("data", 0)), e.get("gpu"), at, e.get("recovery_action"))
            )
            continue
        known = EVENT_ACTIONS.get(kind)
        text = f"{known['meaning']}; {known['action']}" if known else "an NVML event"
        if kind == "recovery-action":
            text += "; " + recovery_action_text(e.get("recovery_action"))
        out.append(
            Finding(
                known["level"] if known else "warning",
                kind,
                f"GPU {e.get('gpu')}: {kind} event ({text}) at +{_clock(at)}.",
                at,
            )
        )
    return out


def _health_findings(h: dict[str, int | None], label: str) -> list[Finding]:
    """ECC errors and remapped rows that grew while the job ran."""
    out = []
    if h.get("ecc_uncorrected"):
        out.append(
            Finding(
                "warning",
                "ecc-uncorrected",
                f"{label}: {h['ecc_uncorrected']} uncorrected ECC error(s) during the job "
                "(volatile count): its results may be wrong; drain this runner and reset the GPU.",
            )
        )
    if h.get("ecc_corrected"):
        out.append(
            Finding(
                "notice",
                "ecc-corrected",
                f"{label}: {h['ecc_corrected']} corrected ECC error(s) during the job.",
            )
        )
    if h.get("rows_remapped") or h.get("remap_failure"):
        out.append(
            Finding(
                "warning",
                "rows-remapped",
                f"{label}: {h.get('rows_remapped') or 0} memory row(s) remapped during the job"
                + (
                    "; a remap is pending: reset the GPU when idle to activate it"
                    if h.get("remap_pending")
                    else ""
                )
                + (
                    "; row remapping FAILED: the GPU needs service"
                    if h.get("remap_failure")
                    else ""
                )
                + ".",
            )
        )
    return out


def _unwatched_note(report: Report) -> str:
    gap = unwatched(report.recording, report.end)
    if gap is None:
        return ""
    return (
        f"; +{_clock(gap[0])} to +{_clock(gap[1])} was not watched, so the idle share and "
        "idle cost are unknown (busy time counts only what was watched)"
    )


def findings(report: Report, limits: Limits) -> list[Finding]:
    rec = report.recording
    out: list[Finding] = []
    out.extend(_error_findings(rec))
    out.extend(_event_findings(rec))
    if rec.stop is None:
        last = (rec.sample_times[-1] - rec.started) if rec.sample_times else None
        out.append(
            Finding(
                "warning",
                "sampler-ended-early",
                "the sampler ended without its last line (killed, or the disk "
                f"filled); samples end at +{_clock(last)}{_unwatched_note(report)}.",
                last,
            )
        )
    elif rec.stop.get("reason") == "size-limit":
        out.append(
            Finding(
                "warning",
                "sample-file-full",
                "the sample file reached its size limit; later samples were not recorded"
                f"{_unwatched_note(report)}.",
            )
        )
    if rec.truncated_at is not None:
        out.append(
            Finding(
                "warning",
                "sample-file-too-large",
                "the sample file is larger than the sampler ever writes: something "
                f"else wrote to it; only its first {rec.truncated_at} bytes were "
                "read.",
            )
        )
    if rec.bad_lines:
        out.append(
            Finding(
                "warning",
                "unreadable-lines",
                f"{rec.bad_lines} line(s) of the sample file were unreadable.",
            )
        )
    boards: set[int] = set()
    for g in report.gpus:
        label = f"GPU {g.gpu.index} ({g.gpu.name})"
        out.extend(_health_findings(g.health, label))
        if g.board_health is not None and g.gpu.index not in boards:
            # a MIG board's counters, once per board: the hardware the job ran on, any
            # tenant's errors (never charged to the slice as its own)
            boards.add(g.gpu.index)
            board = f"GPU {g.gpu.index}, board-wide (the whole MIG-enabled GPU, every slice)"
            out.extend(_health_findings(g.board_health, board))
        if limits.max_memory is not None and g.peak_memory > limits.max_memory:
            out.append(
                Finding(
                    "error",
                    "max-memory-exceeded",
                    f"{label} peaked at {g.peak_memory / MIB:.0f} MiB"
                    + (f" ({g.peak_process})" if g.peak_process else "")
                    + f", above max-memory ({limits.max_memory / MIB:.0f} MiB).",
                    g.peak_at_s,
                )
            )
        if limits.min_utilisation is not None and g.util_mean is None:
            out.append(
                Finding(
                    "error" if limits.unknown_fails else "warning",
                    "min-utilisation-unknown",
                    f"{label}: min-utilisation could not be evaluated: NVML reports no "
                    "utilisation for it ("
                    + (
                        "a MIG slice on a GPU without GPM counters, which are Hopper and newer"
                        if g.gpu.slot is not None
                        else "not supported"
                    )
                    + "); its busy time and idle share are unknown.",
                )
            )
        elif (
            limits.min_utilisation is not None
            and g.util_mean is not None
            and g.util_mean < limits.min_utilisation
        ):
            out.append(
                Finding(
                    "error",
                    "min-utilisation-unmet",
                    f"{label} averaged {g.util_mean:.1f} % utilisation, below min-utilisation "
                    f"({limits.min_utilisation:g} %).",
                )
            )
    if limits.expect_gpu_use and report.foreign_only:
        pids = sorted({p for g in report.gpus for p in g.foreign_processes})
        out.append(
            Finding(
                "error" if limits.unknown_fails else "warning",
                "gpu-use-unknown",
                "expect-gpu-use could not be evaluated: the only GPU processes (PIDs "
                + ", ".join(map(str, pids[:8]))
                + ") are outside this PID namespace (NVML lists host PIDs inside a container): "
                "they may be this job's or another container's.",
            )
        )
    elif limits.expect_gpu_use and report.use_unknown:
        unread = [g for g in report.gpus if g.processes_unknown_s > 0]
        out.append(
            Finding(
                "error" if limits.unknown_fails else "warning",
                "gpu-use-unknown",
                "expect-gpu-use could not be evaluated: no GPU was busy, and the GPU process "
                "list could not be read for "
                + ", ".join(
                    f"GPU {g.gpu.index} ({g.gpu.name}, {_clock(g.processes_unknown_s)})"
                    for g in unread
                )
                + " (the driver refused it: NO_PERMISSION or NOT_SUPPORTED); a process may have "
                "held GPU memory between kernels.",
            )
        )
    elif limits.expect_gpu_use and not report.gpu_used:
        out.append(
            Finding(
                "error",
                "gpu-not-used",
                "expect-gpu-use: no process used a GPU and no GPU was busy while the monitor ran: "
                "the GPU tests ran on the CPU (a framework built without CUDA, or one that cannot "
                "see the device) or were skipped.",
            )
        )
    return sorted(out, key=lambda f: (f.level != "error", f.at_s is None, f.at_s or 0.0))


# -- views ------------------------------------------------------------------------------


UNKNOWN = "unknown"
"""How the summary shows a counter the GPU does not support (never as 0)."""


def _pct(value: float | None) -> str:
    if value is None:
        return UNKNOWN
    return f"{value:.0f} %" if value >= 10 or value == 0 else f"{value:.1f} %"


def _wh(value: float | None) -> str:
    return UNKNOWN if value is None else f"{value:.2f} Wh"


def _busy(value: float | None) -> str:
    return UNKNOWN if value is None else _clock(value)


def _energy_cell(g: GpuUsage) -> str:
    if g.gpu.slot is not None and g.energy_wh is None:
        return (
            "board-wide " + _wh(g.board_energy_wh) + " (whole GPU, not this slice's)"
            if g.board_energy_wh is not None
            else UNKNOWN
        )
    return _wh(g.energy_wh)


def _mib(value: int) -> str:
    return f"{value / MIB:,.0f} MiB"


def _usd(value: Decimal | None) -> str:
    return "-" if value is None else f"${value.quantize(Decimal('0.01'), ROUND_HALF_UP)}"


def _trim(value: Decimal) -> str:
    """A per-minute price as written in the table (0.052, not 0.05 or 0.0520000)."""
    text = f"{value.quantize(Decimal('0.0001'), ROUND_HALF_UP):f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    # a process name is chosen by the code the job ran: one line, then shown as text
    return markdown_table(headers, [[printable(str(c)) for c in row] for row in rows])


def charts(report: Report, max_points: int = 100, max_gpus: int = 8) -> list[str]:
    """One ``xychart-beta`` per GPU: utilisation % and memory used % of total over time."""
    rec = report.recording
    out = []
    for usage in report.gpus[:max_gpus]:
        gpu = usage.gpu
        # only readings there are: an unsupported one is no 0 on the line
        mine = [s for s in rec.samples if s.key == gpu.key and s.util is not None]
        if not mine:
            continue
        util = downsample([float(s.util or 0) for s in mine], max_points)
        mem = downsample(
            [
                round(100.0 * s.mem_used / gpu.memory_total, 1) if gpu.memory_total else 0.0
                for s in mine
            ],
            max_points,
        )
        n = len(util)
        times = [mine[(i * len(mine)) // n].ts - rec.started for i in range(n)]
        out.append(
            xychart(
                f"GPU {gpu.index} {gpu.name}: utilisation and memory used, % (line 1: util, "
                f"line 2: memory)",
                [_clock(t) for t in times],
                [Series("utilisation %", tuple(util)), Series("memory %", tuple(mem))],
                y_title="%",
                y_range=(0, 100),
                x_title="time since start",
            )
        )
    return out


def _bytes(value: int | None) -> str:
    if value is None:
        return UNKNOWN
    for unit, size in (("GiB", 2**30), ("MiB", MIB), ("KiB", 1024)):
        if value >= size:
            return f"{value / size:,.1f} {unit}"
    return f"{value} B"


def _pair(a: int | None, b: int | None) -> str:
    return UNKNOWN if a is None and b is None else f"{_bytes(a)} / {_bytes(b)}"


def _health_cell(h: dict[str, int | None]) -> str:
    if h.get("ecc_uncorrected") is None and h.get("rows_remapped") is None:
        return UNKNOWN
    ecc = (
        UNKNOWN
        if h.get("ecc_uncorrected") is None
        else f"+{h.get('ecc_corrected') or 0} / +{h['ecc_uncorrected']}"
    )
    rows = UNKNOWN if h.get("rows_remapped") is None else f"+{h['rows_remapped']}"
    return f"ECC {ecc}, rows remapped {rows}" + (" (pending)" if h.get("remap_pending") else "")


SIGNALS_UNKNOWN = (
    "DCGM-level signals (GPM activity, PCIe and NVLink bytes, ECC and remapped rows): "
    "unknown, none is supported by these GPUs and driver (GPM needs Hopper or newer).\n"
)


def signals_table(report: Report) -> str:
    """DCGM-level signals per GPU: GPM activity (Hopper and newer), PCIe and NVLink bytes,
    ECC and remapped-row growth; a line saying they are unknown when no GPU had any."""
    rows = []
    for g in report.gpus:
        # a MIG slice has no counters of its own: the board's, marked board-wide
        io, health = (g.board_io, g.board_health) if g.board_io is not None else (g.io, g.health)
        health = health or {}
        if not (g.activity or any(v is not None for v in (*io.values(), *health.values()))):
            continue
        mark = "board-wide " if g.board_io is not None else ""
        rows.append(
            (
                f"{g.gpu.index} {g.gpu.name}",
                " / ".join(_pct(g.activity.get(k)) for k in ("sm", "tensor", "dram"))
                if g.activity
                else UNKNOWN + " (GPM: Hopper and newer)",
                mark + _pair(io.get("pcie_tx"), io.get("pcie_rx")),
                mark + _pair(io.get("nvlink_tx"), io.get("nvlink_rx")),
                mark + _health_cell(health),
            )
        )
    if not rows:
        return SIGNALS_UNKNOWN if report.gpus else ""
    return _table(
        [
            "GPU",
            "SM active / tensor / DRAM (GPM)",
            "PCIe tx / rx",
            "NVLink tx / rx",
            "ECC corrected / uncorrected, remapped rows (during the job)",
        ],
        rows,
    )


def markdown(report: Report) -> str:
    c = report.cost
    n = len(report.gpus)
    used = UNKNOWN if c.gpu_minutes_used is None else f"{c.gpu_minutes_used:.1f}"
    idle = None if c.idle_fraction is None else 100 * c.idle_fraction
    head = (
        f"### gpu-monitor: {n} GPU(s), {used} of "
        f"{c.gpu_minutes_paid:.0f} paid GPU-minutes used ({_pct(idle)} "
        "idle"
        + (f", {_usd(c.idle_cost_usd)} idle cost" if c.idle_cost_usd is not None else "")
        + ")\n"
    )
    parts = [head]
    parts.append(
        _table(
            [
                "GPU",
                "busy",
                "utilisation mean / p95 / max",
                "peak memory",
                "by",
                "energy",
                "throttled",
            ],
            [
                (
                    f"{g.gpu.index} {g.gpu.name}",
                    _busy(g.busy_s),
                    (
                        f"{_pct(g.util_mean)} / {_pct(g.util_p95)} / {_pct(g.util_max)}"
                        if g.util_mean is not None
                        else UNKNOWN
                    ),
                    f"{_mib(g.peak_memory)} of {_mib(g.gpu.memory_total)}",
                    g.peak_process or "-",
                    _energy_cell(g),
                    _busy(g.throttled_s)
                    + (
                        " ("
                        + ", ".join(f"{k} {_clock(v)}" for k, v in g.throttle_reasons.items())
                        + ")"
                        if g.throttle_reasons
                        else ""
                    ),
                )
                for g in report.gpus
            ],
        )
    )
    signals = signals_table(report)
    if signals:
        parts.append(signals)
    price = (
        f"${_trim(c.usd_per_minute)}/min"
        + (" per GPU" if c.per_gpu else "")
        + f" ({c.price_source})"
        if c.usd_per_minute is not None
        else "unknown: set `price-per-hour` (an amount or a GitHub-hosted GPU SKU)"
    )
    parts.append(
        _table(
            [
                "paid minutes",
                "GPU-minutes paid",
                "GPU-minutes used",
                "idle",
                "price",
                "cost",
                "idle cost",
            ],
            [
                (
                    f"{c.paid_minutes} ({_clock(c.window_s)} from the {c.window_from} "
                    "start, rounded up)",
                    f"{c.gpu_minutes_paid:.0f}",
                    UNKNOWN if c.gpu_minutes_used is None else f"{c.gpu_minutes_used:.2f}",
                    _pct(idle),
                    price,
                    _usd(c.cost_usd),
                    UNKNOWN
                    if c.idle_fraction is None and c.cost_usd is not None
                    else _usd(c.idle_cost_usd),
                )
            ],
        )
    )
    what = "step (jobs API)" if report.phases_from == "steps" else "phase"
    parts.append(
        _table(
            [
                what,
                "start",
                "duration",
                "busy GPU time",
                "mean utilisation",
                "peak memory",
                "energy",
            ],
            [
                (
                    p.name,
                    ("-" if p.start_s < -0.5 else "+") + _clock(abs(p.start_s)),
                    _clock(p.duration_s),
                    _busy(p.busy_s),
                    _pct(p.util_mean),
                    _mib(p.peak_memory),
                    _wh(p.energy_wh),
                )
                for p in report.phases
            ],
        )
    )
    if report.right_size is not None:
        parts.append(f"**Right size:** {printable(report.right_size.line())}.\n")
    parts.extend(charts(report))
    if report.findings:
        shown = report.findings[:MAX_FINDINGS_SHOWN]
        parts.append(
            _table(
                ["level", "code", "at", "finding"],
                [
                    (
                        f.level,
                        f.code,
                        f"+{_clock(f.at_s)}" if f.at_s is not None else "-",
                        f.message,
                    )
                    for f in shown
                ],
            )
        )
        if len(report.findings) > len(shown):
            parts.append(
                f"… and {len(report.findings) - len(shown)} more findings (all of them "
                "are in the JSON report).\n"
            )
    return "\n".join(parts)


def as_json(report: Report) -> dict[str, Any]:
    """The report file (schema: actions/gpu-monitor/report.schema.json)."""
    c = report.cost
    rec = report.recording

    def money(v: Decimal | None) -> float | None:
        return None if v is None else float(v)

    def r(v: float | None, digits: int) -> float | None:
        return None if v is None else round(v, digits)

    return {
        "schema_version": SCHEMA_VERSION,
        "ok": report.ok,
        "started": rec.started,
        "ended": report.end,
        "interval_s": rec.interval,
        "samples": len(rec.sample_times),
        "gpu_used": report.gpu_used,
        "gpus": [
            {
                "index": g.gpu.index,
                "name": g.gpu.name,
                "uuid": g.gpu.uuid,
                "memory_total_bytes": g.gpu.memory_total,
                "samples": g.samples,
                "mig_slice": g.gpu.slot,
                "utilisation_source": (
                    g.gpu.util_source if g.busy_s is not None or g.util_mean is not None else None
                ),
                "busy_s": r(g.busy_s, 6),
                "utilisation": {"mean": r(g.util_mean, 3), "p95": g.util_p95, "max": g.util_max},
                "memory_utilisation_mean": r(g.mem_util_mean, 3),
                "peak_memory_bytes": g.peak_memory,
                "peak_process": g.peak_process,
                "peak_at_s": g.peak_at_s,
                "energy_wh": r(g.energy_wh, 6),
                "board_energy_wh": r(g.board_energy_wh, 6),
                "memory_reserved_bytes": g.memory_reserved,
                "power_max_w": g.power_max_w,
                "temperature_max_c": g.temp_max,
                "throttled_s": g.throttled_s,
                "throttle_reasons_s": g.throttle_reasons,
                "processes": [
                    {"pid": p.pid, "name": p.name, "peak_memory_bytes": p.peak_memory}
                    for p in g.processes
                ],
                "lost_at_s": g.lost_at_s,
                "activity": {k: r(v, 3) for k, v in g.activity.items()},
                "io_bytes": dict(g.io),
                "health": dict(g.health),
                "board_io_bytes": None if g.board_io is None else dict(g.board_io),
                "board_health": None if g.board_health is None else dict(g.board_health),
                "foreign_pids": list(g.foreign_processes),
            }
            for g in report.gpus
        ],
        "phases_from": report.phases_from,
        "phases": [
            {
                "name": p.name,
                "start_s": p.start_s,
                "duration_s": p.duration_s,
                "samples": p.samples,
                "busy_s": r(p.busy_s, 6),
                "utilisation_mean": r(p.util_mean, 3),
                "peak_memory_bytes": p.peak_memory,
                "energy_wh": r(p.energy_wh, 6),
            }
            for p in report.phases
        ],
        "cost": {
            "window_s": c.window_s,
            "window_from": c.window_from,
            "paid_minutes": c.paid_minutes,
            "gpu_minutes_paid": c.gpu_minutes_paid,
            "gpu_minutes_used": c.gpu_minutes_used,
            "idle_fraction": c.idle_fraction,
            "usd_per_minute": money(c.usd_per_minute),
            "price_source": c.price_source,
            "price_per_gpu": c.per_gpu,
            "cost_usd": money(c.cost_usd),
            "idle_cost_usd": money(c.idle_cost_usd),
        },
        "findings": [
            {"level": f.level, "code": f.code, "message": f.message, "at_s": f.at_s}
            for f in report.findings
        ],
        "right_size": right_size_json(report.right_size),
    }


def right_size_json(a: rs.Advice | None) -> dict[str, Any] | None:
    """The report's ``right_size`` object (None: no table was given)."""
    if a is None:
        return None
    pick = a.suggestion
    return {
        "peak_memory_bytes": a.peak_memory,
        "needed_bytes": a.needed,
        "current": a.current,
        "current_memory_bytes": a.current_memory,
        "activity": None if a.activity is None else round(a.activity, 3),
        "suggestion": None if pick is None else pick.name,
        "suggestion_kind": None if pick is None else pick.kind,
        "suggestion_memory_bytes": None if pick is None else pick.capacity,
        "suggestion_source": None if pick is None else pick.source,
        "usd_per_minute": None if a.usd_per_minute is None else float(a.usd_per_minute),
        "cost_usd": None if a.cost_usd is None else float(a.cost_usd),
        "line": a.line(),
    }


CSV_COLUMNS = (
    "ts",
    "elapsed_s",
    "gpu",
    "uuid",
    "utilisation",
    "memory_utilisation",
    "memory_used_mib",
    "power_w",
    "temperature_c",
    "sm_clock_mhz",
    "throttle_reasons",
    "processes",
    "mig_slice",
    "busy_s",
    "energy_counter_mj",
    "memory_reserved_mib",
    "board_power_w",
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "dram_active",
    "pcie_tx_bytes",
    "pcie_rx_bytes",
    "nvlink_tx_kib",
    "nvlink_rx_kib",
    "ecc_corrected",
    "ecc_uncorrected",
    "remapped_rows",
    "foreign_pids",
    "board_pcie_tx_bytes",
    "board_pcie_rx_bytes",
    "board_nvlink_tx_kib",
    "board_nvlink_rx_kib",
    "board_ecc_corrected",
    "board_ecc_uncorrected",
)


def _cells(values: tuple[int, ...] | None, n: int) -> list[str]:
    return [""] * n if values is None else [str(v) for v in values]


def _activity_cells(s: GpuSample) -> list[str]:
    got = dict(s.activity)
    return ["" if got.get(k) is None else f"{got[k]:g}" for k in ACTIVITY]


def samples_csv(rec: Recording) -> str:
    """One row per GPU (or MIG slice) per sample; processes as ``name:pid:MiB`` joined by
    spaces; an unsupported reading is an empty cell. ``busy_s`` is the time with a kernel
    running that the sample stands for (the driver's buffer, else utilisation × Δt)."""
    uuids = {g.key: g.uuid for g in rec.gpus}
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for s in rec.samples:
        writer.writerow(
            [
                f"{s.ts:.3f}",
                f"{s.ts - rec.started:.3f}",
                s.index,
                uuids.get(s.key, ""),
                "" if s.util is None else s.util,
                "" if s.mem_util is None else s.mem_util,
                f"{s.mem_used / MIB:.1f}",
                "" if s.power_mw is None else f"{s.power_mw / 1000:.3f}",
                "" if s.temp is None else s.temp,
                "" if s.sm_mhz is None else s.sm_mhz,
                "" if s.throttle is None else f"0x{s.throttle:x}",
                " ".join(f"{name}:{pid}:{used / MIB:.0f}" for pid, used, name in s.procs),
                "" if s.slot is None else s.slot,
                "" if s.util_busy_s is None and s.util is None else f"{s.busy_s:.3f}",
                "" if s.energy_mj is None else s.energy_mj,
                "" if s.mem_reserved is None else f"{s.mem_reserved / MIB:.1f}",
                "" if s.board_power_mw is None else f"{s.board_power_mw / 1000:.3f}",
                *_activity_cells(s),
                *_cells(s.pcie_bytes, 2),
                *_cells(s.nvlink_kib, 2),
                *_cells(s.ecc, 2),
                "" if s.remap is None else s.remap[0] + s.remap[1],
                " ".join(map(str, s.foreign)),
                *_cells(s.board_pcie_bytes, 2),  # a MIG slice: its whole board's counters
                *_cells(s.board_nvlink_kib, 2),
                *_cells(s.board_ecc, 2),
            ]
        )
    return buf.getvalue()


def outputs(report: Report) -> dict[str, str]:
    """The step's figures as outputs; an unknown figure is an empty string, never 0."""
    c = report.cost
    gpus = report.gpus
    busy = [g.busy_s for g in gpus]
    utils = [g.util_mean for g in gpus]
    energy = [g.energy_wh for g in gpus]
    return {
        "ok": "true" if report.ok else "false",
        "gpu-count": str(len(gpus)),
        "gpu-used": "true" if report.gpu_used else "false",
        "busy-seconds": "" if None in busy else f"{sum(b or 0.0 for b in busy):.6g}",
        "utilisation-mean": (
            "" if None in utils or not utils else f"{sum(u or 0.0 for u in utils) / len(utils):.1f}"
        ),
        "peak-memory-mib": str(max((g.peak_memory for g in gpus), default=0) // MIB),
        "energy-wh": "" if None in energy else f"{sum(e or 0.0 for e in energy):.3f}",
        "paid-minutes": str(c.paid_minutes),
        "gpu-minutes-used": "" if c.gpu_minutes_used is None else f"{c.gpu_minutes_used:.2f}",
        "idle-fraction": "" if c.idle_fraction is None else f"{c.idle_fraction:.4f}",
        "idle-cost-usd": "" if c.idle_cost_usd is None else str(c.idle_cost_usd),
    }
