"""gpu-monitor's recording: the sampler's file, parsed into typed records.

The sampler writes it and the report reads it; this is their shared vocabulary. A line a
job's step could have forged or torn is refused with the line's number, never trusted.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any

MIB = 2**20

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
    """Give each sample its time span and energy increase.

    Each sample with the time it stands for (``dt``) and the energy counter's increase, both from
    the same device's previous recorded sample.
    """
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


def _gpu_info(g: dict[str, Any]) -> GpuInfo:
    source = g.get("util_source", "nvml")
    return GpuInfo(
        int(g["index"]),
        str(g["name"]),
        str(g["uuid"]),
        int(g["memory_total"]),
        g.get("mig"),
        _int(g.get("slice")),
        _int(g.get("gi")),
        None if source is None else str(source),
    )


def _start(record: dict[str, Any]) -> dict[str, Any]:
    header: dict[str, Any] = {
        "ts": _time(record["ts"]),
        "interval": _time(record["interval"]),
        "gpus": [_gpu_info(g) for g in record["gpus"]],
    }
    if header["interval"] <= 0:
        raise ValueError("interval")
    return header


def _event(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "event",
        "ts": _time(record["ts"]),
        "gpu": int(record.get("gpu", -1)),
        "type": str(record.get("type")),
        "data": int(record.get("data", 0)),
        "gi": _int(record.get("gi")),
        "ci": _int(record.get("ci")),
        "recovery_action": _int(record.get("recovery_action")),
    }


def _error(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "error",
        "ts": _time(record["ts"]),
        "gpu": int(record.get("gpu", -1)),
        "call": str(record.get("call", "")),
        "code": int(record.get("code", 0)),
        "name": str(record.get("name", "UNKNOWN")),
        "gap": bool(record.get("gap", False)),
    }


def _stop(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "stop",
        "ts": _time(record["ts"]),
        "reason": str(record.get("reason", "")),
        "samples": int(record.get("samples", 0)),
    }


def parse_recording(text: str) -> Recording:
    """Parse the sample file into a recording.

    The sample file's lines; a torn last line (kill -9 mid-write) is counted, not fatal.

    Every field is checked as it is read (a line that fails counts as unreadable), so what
    reaches the numbers has its types. The **last** start line opens the recording: the
    sampler appends, so anything before its own start line (a file another job or an
    earlier step planted at the path, a sampler killed before a second start) is not this
    sampler's window.
    """
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
                header = _start(record)
                samples, times, events, errors, stop = [], [], [], [], None
            elif kind == "sample":
                ts = _time(record["ts"])
                got = [_sample(ts, g) for g in record["gpus"]]
                times.append(ts)
                samples.extend(got)
            elif kind == "event":
                events.append(_event(record))
            elif kind == "error":
                errors.append(_error(record))
            elif kind == "stop":
                stop = _stop(record)
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


def unwatched(rec: Recording, end: float) -> tuple[float, float] | None:
    """The span at the end that no sample covers.

    (from, to) seconds after the start that no sample covers although the job still paid for them:
    the sampler died (``kill -9``, a full disk: no stop line) or stopped on a limit (size-limit,
    max-duration) well before the report. None when it watched to the end (within two intervals and
    a second: the report's own stop).
    """
    if rec.stop is not None and rec.stop.get("reason") not in ("size-limit", "max-duration"):
        return None
    last = rec.sample_times[-1] if rec.sample_times else rec.started
    if end - last <= 2 * rec.interval + 1:
        return None
    return (last - rec.started, end - rec.started)


def gpus_unwatched(rec: Recording, end: float) -> tuple[int, ...]:
    """The GPUs no sample covers near the end.

    The GPUs no sample covers from well before the end although the sampler ran on: an NVML error
    that never cleared (a driver upgrade mid-job: LIB_RM_VERSION_MISMATCH) or a lost GPU. Their time
    after the last sample is no more idle than a dead sampler's.
    """
    last: dict[int, float] = {}
    for sample in rec.samples:
        last[sample.index] = max(sample.ts, last.get(sample.index, sample.ts))
    return tuple(
        g.index for g in rec.gpus if end - last.get(g.index, rec.started) > 2 * rec.interval + 1
    )
