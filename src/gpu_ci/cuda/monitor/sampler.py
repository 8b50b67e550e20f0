"""gpu-monitor's sampler: a detached process that reads NVML every ``interval`` seconds and
appends one JSON line per sample to a file under ``RUNNER_TEMP``.

Composite actions have no post step, so ``mode: start`` launches this process and returns;
``mode: report`` stops it and reads the file (:mod:`gpu_ci.cuda.monitor.report`). The file
is the only channel between the two, so it is plain JSON Lines that a user can upload and
read without us:

* ``{"kind": "start", "version": 1, "ts": <epoch s>, "interval": s, "pid": n, "gpus": [...]}``
* ``{"kind": "sample", "ts": ..., "gpus": [{"index", "util", "mem_util", "mem_used",
  "power_mw", "temp", "sm_mhz", "throttle", "procs": [[pid, bytes, name], ...],
  "util_busy_s", "energy_mj", "mem_reserved", "violation_ns": {"power": ns, ...}}]}``
  (a field the GPU does not support is ``null``; a lost GPU is absent). ``util_busy_s``:
  busy seconds since the previous sample from the driver's utilisation sample buffer
  (``nvmlDeviceGetSamples``), which covers the whole interval where a single reading
  covers one driver sample period; ``energy_mj``: the driver's energy counter;
  ``mem_used`` is allocated memory and ``mem_reserved`` the driver's reservation
  (``nvmlDeviceGetMemoryInfo_v2``; on drivers without it ``mem_used`` is v1's reserved +
  allocated and ``mem_reserved`` is null); ``violation_ns``: the violation counters.
  A MIG slice is an entry with ``"slice": slot`` (its parent's ``index``): its own memory
  and processes (through its MIG device handle), utilisation from GPM
  (``nvmlGpmMigSampleGet``; ``null`` where unsupported), and the board's power as
  ``board_power_mw`` (the whole GPU's, never the slice's), and the board's counters as
  ``board_pcie_bytes``, ``board_nvlink_kib``, ``board_ecc``, ``board_remap`` (read through
  the parent handle: nvml.h has them per device, not per MIG device). The start line's GPU entry of
  a slice has ``slice``, ``gi`` (its GPU instance id) and ``util_source``.
  Since issue 28's signals, each entry may also hold ``gpm`` ({"sm", "occupancy", "tensor",
  "dram"}: GPM percentages since the previous sample, Hopper and newer; null otherwise),
  ``pcie_bytes`` / ``nvlink_kib`` ([tx, rx] driver counters from field values),
  ``ecc`` ([corrected, uncorrected] volatile counts) and ``remap`` ([correctable,
  uncorrectable, pending, failure] rows), each null where unsupported; ``procs`` is null
  where the driver did not list the processes (NO_PERMISSION, ...); a process entry has a
  4th item ``false`` when NVML lists a PID this namespace cannot name (a host PID seen from
  a container).
* ``{"kind": "event", "ts": ..., "gpu": i, "type": "xid" | "ecc-sbe" | "ecc-dbe" | ...,
  "data": n, "gi": n, "ci": n}`` (``EVENT_TYPES`` names them; the GPU and compute instance
  of the event; 0xFFFFFFFF: none); a recovery-action event and an Xid 154 also hold
  ``"recovery_action"``: the driver's NVML_FI_DEV_GET_GPU_RECOVERY_ACTION read when the
  event arrived (nvmlDeviceGpuRecoveryAction_t), null where the field is unsupported
* ``{"kind": "error", "ts": ..., "gpu": i, "call": "...", "code": n, "name": "GPU_IS_LOST",
  "gap": bool}`` (only GPU_IS_LOST ends a GPU's samples; any other error is a gap, written
  once, and the GPU is asked again each sample); ``"call": "nvmlEventSetWait"`` with
  ``"gpu": -1``: the event set failed and no events were watched after it
* ``{"kind": "stop", "ts": ..., "reason": "signal" | "max-samples" | "max-duration" |
  "size-limit" | "all-gpus-lost", "samples": n}``

Memory is bounded: nothing accumulates in the process but a small cache of process names.
The file is bounded too (``MAX_BYTES``); a sampler killed with ``kill -9`` leaves a file
without a ``stop`` line, which the report says. One sampler per job: it holds an exclusive
``flock`` on ``sampler.lock`` for its whole life, so a second ``start`` sees it and leaves it
alone. Time comes from one clock function, which tests replace through the environment
(``GPU_CI_MONITOR_FAKE_CLOCK=<epoch>``: sample *i* is at ``epoch + i * interval`` and the
sampler does not sleep; ``GPU_CI_MONITOR_FAKE_LAG=<s>`` makes each sample that much late, a
sampler that falls behind), so that the tests are deterministic.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from gpu_ci.cuda.detached import BASE_KEEP, Detached
from gpu_ci.cuda.nvml import (
    error_code,
    memory_info,
    nvml_errors,
    running_processes,
    temperature,
)

FORMAT_VERSION = 1
LOCK_NAME = "sampler.lock"
STATE_NAME = "sampler.json"
SAMPLES_NAME = "samples.jsonl"
LOG_NAME = "sampler.log"
MAX_BYTES = 64 * 2**20
"""The sample file stops growing here (about 2 days of one GPU at 1 s)."""
MAX_DURATION_S = 5 * 24 * 3600.0
"""GitHub's longest job (self-hosted, 5 days): a sampler nobody stopped ends by itself."""
MARKER = "gpu_ci.cuda.monitor.sampler"
"""In the sampler's command line: the report signals a pid only when it finds this there."""
SAMPLER = Detached(
    module=MARKER,
    state_name=STATE_NAME,
    log_name=LOG_NAME,
    keep=BASE_KEEP | {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "RUNNER_TEMP"},
    keep_prefixes=("LC_", "GPU_CI_MONITOR_", "FAKE_NVML_"),
)
"""The sampler as a detached process. It keeps the test knobs (``GPU_CI_MONITOR_*``,
``FAKE_NVML_*``: the fake libnvidia-ml's files) and which GPUs the job sees."""

GPU_IS_LOST = 15
NOT_SUPPORTED = 3
TIMEOUT = 10
NOT_FOUND = 6
FUNCTION_NOT_FOUND = 13
GPU_UTILIZATION_SAMPLES = 1
"""nvmlSamplingType_t: "percent of time during which one or more kernels was executing"."""
ARGUMENT_VERSION_MISMATCH = 25
#: nvmlPerfPolicyType_t counters read each sample, and how the file names them: "how long
#: did <reason> cause the GPU to be below application clocks" (ns, cumulative).
VIOLATION_POLICIES = {0: "power", 1: "thermal", 3: "board_limit", 5: "reliability", 10: "total"}
GPM_GRAPHICS_UTIL = 1
"""NVML_GPM_METRIC_GRAPHICS_UTIL: "Percentage of time any compute/graphics app was active"."""
#: nvmlGpmMetricId_t (nvml.h) asked besides GRAPHICS_UTIL, and how the file names them:
#: SM_UTIL "Percentage of SMs that were busy", SM_OCCUPANCY "Percentage of warps that were
#: active vs theoretical maximum", ANY_TENSOR_UTIL "Percentage of time the GPU's SMs were
#: doing ANY tensor operations", DRAM_BW_UTIL "Percentage of DRAM bw used vs theoretical
#: maximum" (all 0.0 - 100.0; Hopper and newer).
GPM_ACTIVITY = {2: "sm", 3: "occupancy", 5: "tensor", 10: "dram"}
#: nvmlFieldValue_t ids read each sample (nvml.h): NVML_FI_DEV_PCIE_COUNT_TX_BYTES / _RX_BYTES
#: ("PCIe transmit bytes. Value can be wrapped.") and NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX /
#: _RX ("NVLink TX Data throughput in KiB"; "A scopeId of UINT_MAX returns aggregate value
#: summed up across all links").
ALL_LINKS = 0xFFFFFFFF
IO_FIELDS = ((197, 0), (198, 0), (138, ALL_LINKS), (139, ALL_LINKS))
#: nvmlMemoryErrorType_t CORRECTED / UNCORRECTED, nvmlEccCounterType_t VOLATILE (since boot).
ECC_CORRECTED, ECC_UNCORRECTED, ECC_VOLATILE = 0, 1, 0
#: NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (nvml.h): "GPU Recovery action. See
#: nvmlDeviceGpuRecoveryAction_t" -- what the driver asks for with a recovery-action event
#: or an Xid 154 (GPU_RECOVERY_ACTION_CHANGED).
FI_GPU_RECOVERY_ACTION = 230
RECOVERY_EVENT = 0x8000
XID_RECOVERY_ACTION_CHANGED = 154

#: nvmlEventType* bits we ask for (nvml.h), and how the file names them. eventData is the
#: Xid for nvmlEventTypeXidCriticalError and "0 for any other event".
EVENT_TYPES = {
    0x8: "xid",
    0x1: "ecc-sbe",
    0x2: "ecc-dbe",
    0x200: "ecc-sbe-storm",
    0x400: "dram-retirement",
    0x800: "dram-retirement-failure",
    0x1000: "poison-nonfatal",
    0x2000: "poison-fatal",
    0x4000: "gpu-unavailable",
    0x8000: "recovery-action",
}


@dataclass(frozen=True)
class SamplerConfig:
    directory: Path
    interval: float = 1.0
    fake_epoch: float | None = None
    """Tests: the clock reads ``fake_epoch + i * interval`` and the sampler never sleeps."""
    max_samples: int = 0
    """Tests and benchmarks: stop after this many samples (0: until signalled)."""
    max_bytes: int = MAX_BYTES
    fake_lag: float = 0.0
    """Tests: a sampler that falls behind: each sample takes ``interval + fake_lag`` on the
    fake clock (as slow driver calls make a real one late)."""

    @classmethod
    def from_environ(
        cls, directory: Path, interval: float, environ: Mapping[str, str]
    ) -> SamplerConfig:
        fake = environ.get("GPU_CI_MONITOR_FAKE_CLOCK", "").strip()
        limit = environ.get("GPU_CI_MONITOR_MAX_SAMPLES", "").strip()
        size = environ.get("GPU_CI_MONITOR_MAX_BYTES", "").strip()  # tests: a tiny disk
        lag = environ.get("GPU_CI_MONITOR_FAKE_LAG", "").strip()
        return cls(
            directory,
            interval,
            float(fake) if fake else None,
            int(limit) if limit else 0,
            int(size) if size else MAX_BYTES,
            float(lag) if lag and fake else 0.0,
        )


# -- reading NVML -----------------------------------------------------------------------


class _Nvml:
    """The NVML calls of one sample, with errors as values."""

    def __init__(self) -> None:
        import pynvml

        self.nvml = pynvml
        self.names = {
            getattr(pynvml, n): n[len("NVML_ERROR_") :]
            for n in dir(pynvml)
            if n.startswith("NVML_ERROR_") and isinstance(getattr(pynvml, n), int)
        }
        self.process_names: dict[int, str] = {}
        self.buffer_last: dict[tuple[int, int | None], int] = {}
        self.no_buffer: set[tuple[int, int | None]] = set()
        self.gpm_pairs: dict[tuple[int, int | None], tuple[Any, Any]] = {}
        self.gpm_primed: set[tuple[int, int | None]] = set()
        self.no_violations: set[tuple[int, int | None]] = set()
        self.no_v2 = False
        self.no_io: set[int] = set()
        self.no_ecc: set[int] = set()
        self.no_remap: set[int] = set()

    def optional(self, fn: Callable[..., Any], *args: Any) -> Any:
        """The value, or None when the GPU does not support the query (lost → raises)."""
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            if int(exc.value) == GPU_IS_LOST:
                raise
            return None

    def process_name(self, pid: int) -> str:
        """The process's name, or "" where NVML cannot name it: inside a container NVML
        lists the host's PIDs, which this PID namespace does not hold (nvml.h:
        "NVML_ERROR_NOT_FOUND if process doesn't exists"), so the process is another
        namespace's -- possibly another container's -- and not shown as the job's."""
        if pid not in self.process_names:
            if len(self.process_names) > 1024:
                self.process_names.clear()
            name = ""
            with contextlib.suppress(self.nvml.NVMLError):
                raw = self.nvml.nvmlSystemGetProcessName(pid)
                name = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
            self.process_names[pid] = os.path.basename(name)
        return self.process_names[pid]

    def reasons(self, handle: Any) -> int | None:
        """Clocks-event reasons; drivers before R535 lack the renamed call (nvidia-ml-py
        then raises FUNCTION_NOT_FOUND), so the old name is asked next."""
        n = self.nvml
        for name in (
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetCurrentClocksThrottleReasons",
        ):
            fn = getattr(n, name, None)
            if fn is None:
                continue
            try:
                return int(fn(handle))
            except nvml_errors(n) as exc:
                code = error_code(n, exc)
                if code == GPU_IS_LOST:
                    raise
                if code != FUNCTION_NOT_FOUND:
                    return None
        return None

    def buffer_busy(self, key: tuple[int, int | None], handle: Any) -> float | None:
        """Busy seconds since the last call from the driver's utilisation sample buffer: each
        entry is the percentage of its own sample period (since the entry before it) in which
        a kernel ran. None on the first call (it only marks where the next one starts) and
        where the buffer is unsupported (a MIG-enabled GPU) or has no new entry."""
        n = self.nvml
        if key in self.no_buffer:
            return None
        last = self.buffer_last.get(key)
        try:
            _type, entries = n.nvmlDeviceGetSamples(handle, GPU_UTILIZATION_SAMPLES, last or 0)
        except n.NVMLError as exc:
            code = int(exc.value)
            if code == GPU_IS_LOST:
                raise
            if code != NOT_FOUND:  # NOT_FOUND: no entry since the last call
                self.no_buffer.add(key)
            return None
        entries = sorted((int(e.timeStamp), int(e.sampleValue.uiVal)) for e in entries)
        if not entries:
            return None
        self.buffer_last[key] = entries[-1][0]
        if last is None:
            return None
        return _buffer_busy_s(last, entries)

    def gpm(self, key: tuple[int, int | None], take: Callable[[Any], Any]) -> dict[str, Any]:
        """GPM metrics over the time since this device's previous GPM sample: ``util``
        (NVML_GPM_METRIC_GRAPHICS_UTIL) and the activity ratios of ``GPM_ACTIVITY``, each
        None where the metric's own nvmlReturn is nonzero; {} for the first sample and
        where GPM is unsupported (before Hopper: no sample pair was allocated). ``take``
        reads a sample into the buffer it is given (nvmlGpmSampleGet for a GPU,
        nvmlGpmMigSampleGet for a MIG instance)."""
        n = self.nvml
        pair = self.gpm_pairs.get(key)
        if pair is None:
            return {}
        prev, cur = pair
        try:
            take(cur)
        except n.NVMLError as exc:
            if int(exc.value) == GPU_IS_LOST:
                raise
            return {}
        self.gpm_pairs[key] = (cur, prev)
        if key not in self.gpm_primed:
            self.gpm_primed.add(key)
            return {}
        ids = {GPM_GRAPHICS_UTIL: "util", **GPM_ACTIVITY}
        get = n.c_nvmlGpmMetricsGet_t()
        get.version = n.NVML_GPM_METRICS_GET_VERSION
        get.numMetrics = len(ids)
        get.sample1, get.sample2 = prev, cur
        for k, metric_id in enumerate(ids):
            get.metrics[k].metricId = metric_id
        try:
            n.nvmlGpmMetricsGet(get)
        except n.NVMLError:
            return {}
        out = {}
        for k, name in enumerate(ids.values()):
            m = get.metrics[k]
            out[name] = round(float(m.value), 3) if int(m.nvmlReturn) == 0 else None
        return out

    def gpm_util(self, key: tuple[int, int | None], parent: Any, gi: int) -> dict[str, Any]:
        """A MIG instance's GPM metrics (nvmlGpmMigSampleGet on its parent)."""
        return self.gpm(key, lambda buf: self.nvml.nvmlGpmMigSampleGet(parent, gi, buf))

    def io(self, index: int, handle: Any) -> dict[str, Any]:
        """PCIe bytes and NVLink KiB counters (field values), each pair None where the
        driver answers NOT_SUPPORTED for it; asked no more once nothing is supported."""
        n = self.nvml
        if index in self.no_io:
            return {"pcie_bytes": None, "nvlink_kib": None}
        try:
            values = n.nvmlDeviceGetFieldValues(handle, list(IO_FIELDS))
        except nvml_errors(n) as exc:
            if error_code(n, exc) == GPU_IS_LOST:
                raise
            self.no_io.add(index)
            return {"pcie_bytes": None, "nvlink_kib": None}
        got = [_field_value(v) for v in values]
        if all(v is None for v in got):
            self.no_io.add(index)
        pcie = got[:2] if None not in got[:2] else None
        nvlink = got[2:] if None not in got[2:] else None
        return {"pcie_bytes": pcie, "nvlink_kib": nvlink}

    def recovery_action(self, handle: Any) -> int | None:
        """The nvmlDeviceGpuRecoveryAction_t the driver asks for now, or None where the
        field is unsupported (a driver before it) or the read fails: never a guess."""
        n = self.nvml
        try:
            values = n.nvmlDeviceGetFieldValues(handle, [FI_GPU_RECOVERY_ACTION])
        except nvml_errors(n):
            return None
        return _field_value(values[0]) if len(values) else None

    def health(self, index: int, handle: Any) -> dict[str, Any]:
        """Volatile ECC error counts [corrected, uncorrected] and remapped rows [correctable,
        uncorrectable, pending, failure]; None where the GPU has no ECC or row remapping
        (consumer boards), asked once then."""
        n = self.nvml
        ecc = remap = None
        if index not in self.no_ecc:
            try:
                ecc = [
                    int(n.nvmlDeviceGetTotalEccErrors(handle, kind, ECC_VOLATILE))
                    for kind in (ECC_CORRECTED, ECC_UNCORRECTED)
                ]
            except n.NVMLError as exc:
                if int(exc.value) == GPU_IS_LOST:
                    raise
                self.no_ecc.add(index)
        if index not in self.no_remap:
            try:
                remap = [int(x) for x in n.nvmlDeviceGetRemappedRows(handle)]
            except n.NVMLError as exc:
                if int(exc.value) == GPU_IS_LOST:
                    raise
                self.no_remap.add(index)
        return {"ecc": ecc, "remap": remap}

    def board(self, handle: Any) -> dict[str, Any]:
        """Figures of the whole GPU. Utilisation first: it raises when the GPU is lost."""
        n = self.nvml
        gpu_util: int | None
        mem_util: int | None
        try:
            util = n.nvmlDeviceGetUtilizationRates(handle)
            gpu_util, mem_util = int(util.gpu), int(util.memory)
        except n.NVMLError as exc:
            if int(exc.value) != NOT_SUPPORTED:  # e.g. a MIG-enabled GPU: no utilisation
                raise
            gpu_util = mem_util = None
        return {
            "util": gpu_util,
            "mem_util": mem_util,
            "power_mw": self.optional(n.nvmlDeviceGetPowerUsage, handle),
            "temp": self.optional(temperature, n, handle),  # NVML 13's name, else the old
            "sm_mhz": self.optional(n.nvmlDeviceGetClockInfo, handle, n.NVML_CLOCK_SM),
            "throttle": self.reasons(handle),
        }

    def processes(self, handle: Any) -> list[list[Any]] | None:
        """The compute processes, or None where the driver did not list them (NO_PERMISSION,
        NOT_SUPPORTED, a list that kept growing: INSUFFICIENT_SIZE): unknown, which the
        report must not read as "no process"."""
        # every driver generation (R470 has no _v3; nvidia-ml-py's wrapper would raise
        # NVMLLibraryMismatchError, which is no NVMLError); unreadable entries are skipped
        listed = self.optional(running_processes, self.nvml, handle)
        if listed is None:
            return None
        procs = [p for p in listed if p.pid is not None]
        out = []
        for p in procs:
            name = self.process_name(p.pid)
            # [pid, bytes, name] for a process of this PID namespace; a 4th item, false,
            # for one NVML lists that this namespace cannot resolve (a host PID)
            out.append(
                [p.pid, p.used_bytes or 0, name] if name else [p.pid, p.used_bytes or 0, "", False]
            )
        return out

    def violations(self, key: tuple[int, int | None], handle: Any) -> dict[str, int] | None:
        """The violation counters (ns below application clocks, by reason), or None where
        the driver has none (asked once; nvml.h marks the call deprecated in 13.0 in
        favour of field values, and drivers still export it)."""
        n = self.nvml
        if key in self.no_violations:
            return None
        out = {}
        for policy, name in VIOLATION_POLICIES.items():
            try:
                out[name] = int(n.nvmlDeviceGetViolationStatus(handle, policy).violationTime)
            except nvml_errors(n) as exc:
                if error_code(n, exc) == GPU_IS_LOST:
                    raise
        if not out:
            self.no_violations.add(key)
            return None
        return out

    def memory(self, handle: Any) -> tuple[int, int | None]:
        """(allocated, reserved) bytes: nvmlMemory_v2_t keeps the driver's reservation
        apart (v1's ``used`` is "Sum of Reserved and Allocated"); v1 where v2 is absent."""
        n = self.nvml
        version = getattr(n, "nvmlMemory_v2", None)  # older nvidia-ml-py: v1 only
        if not self.no_v2 and version is not None:
            try:
                mem = n.nvmlDeviceGetMemoryInfo(handle, version=version)
                return int(mem.used), int(mem.reserved)
            except nvml_errors(n) as exc:
                code = error_code(n, exc)
                if code == GPU_IS_LOST:
                    raise
                if code in (NOT_SUPPORTED, FUNCTION_NOT_FOUND, ARGUMENT_VERSION_MISMATCH):
                    self.no_v2 = True
                # NO_PERMISSION (an unprivileged MIG parent): v1's fallback sums its devices
        _total, used = memory_info(n, handle)
        return used, None

    def read(self, index: int, handle: Any) -> dict[str, Any]:
        n = self.nvml
        board = self.board(handle)
        mem_used, reserved = self.memory(handle)
        return {
            "index": index,
            **board,
            "mem_used": mem_used,
            "mem_reserved": reserved,
            "violation_ns": self.violations((index, None), handle),
            "procs": self.processes(handle),
            "util_busy_s": self.buffer_busy((index, None), handle),
            "energy_mj": self.optional(n.nvmlDeviceGetTotalEnergyConsumption, handle),
            "gpm": self.gpm((index, None), lambda buf: n.nvmlGpmSampleGet(handle, buf)) or None,
            **self.io(index, handle),
            **self.health(index, handle),
        }

    def board_counters(self, index: int, parent: Any) -> dict[str, Any]:
        """A MIG board's PCIe/NVLink, ECC and remapped-row counters, read through the parent
        handle (nvml.h documents them per device, not per MIG device handle; remapped rows
        are NOT_SUPPORTED while MIG is enabled), as ``board_*``: the whole GPU's, every
        tenant's, recorded apart from the slice's own figures."""
        got = {**self.io(index, parent), **self.health(index, parent)}
        return {f"board_{k}": v for k, v in got.items()}

    def read_slice(
        self, device: Device, board: dict[str, Any], counters: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """A MIG slice: its own memory, processes and GPM utilisation; the board's power and
        counters apart (board-wide, not the slice's)."""
        mem_used, reserved = self.memory(device.handle)
        gpm = self.gpm_util(device.key, device.parent, device.gi or 0)
        return {
            "index": device.index,
            "slice": device.slot,
            "util": gpm.pop("util", None),
            "gpm": gpm or None,
            "mem_util": None,
            "mem_used": mem_used,
            "mem_reserved": reserved,
            "power_mw": None,
            "board_power_mw": board["power_mw"],
            "temp": board["temp"],
            "sm_mhz": board["sm_mhz"],
            "throttle": board["throttle"],
            "procs": self.processes(device.handle),
            **(counters or {}),
        }


def _field_value(value: Any) -> int | None:
    """An integer nvmlFieldValue_t's value (nvmlValueType_t 1-6), None when its nvmlReturn
    is nonzero ("value is undefined if nvmlReturn != NVML_SUCCESS")."""
    if int(value.nvmlReturn) != 0:
        return None
    kind = int(value.valueType)
    field = {1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}.get(kind)
    return None if field is None else int(getattr(value.value, field))


def _buffer_busy_s(last: int, entries: list[tuple[int, int]]) -> float:
    """Busy seconds from ``last`` (µs) to the newest entry: each entry is the percentage of
    its own period, the time since the entry before it. When the buffer no longer reaches
    back to ``last`` (an interval longer than the driver keeps), the first entry's period
    is taken as long as the others' and the entries' mean stands for the uncovered start,
    rather than the first entry's value for the whole gap."""
    periods = [b[0] - a[0] for a, b in zip(entries, entries[1:])]
    typical = sorted(periods)[len(periods) // 2] if periods else None
    first_gap = entries[0][0] - last
    spans = [min(first_gap, typical) if typical else first_gap, *periods]
    covered = sum(max(0, p) for p in spans)
    if covered <= 0:
        return 0.0
    busy = sum(min(100, v) / 100 * max(0, p) for (_ts, v), p in zip(entries, spans))
    return busy / covered * max(0, entries[-1][0] - last) / 1e6


@dataclass(frozen=True)
class Device:
    """What one sample line entry reads: a whole GPU, or one MIG slice of GPU ``index``."""

    index: int
    handle: Any
    slot: int | None = None
    parent: Any = None
    gi: int | None = None

    @property
    def key(self) -> tuple[int, int | None]:
        return (self.index, self.slot)


def mig_devices(nvml: Any, index: int, parent: Any, environ: Mapping[str, str]) -> list[Device]:
    """The MIG devices of a MIG-enabled GPU that the job was given: those CUDA_VISIBLE_DEVICES
    names by ``MIG-`` UUID, else every one NVML lists (in a container given one slice, NVML
    lists that one). Empty when the GPU has none (or MIG is off)."""
    wanted = {
        e.strip().lower()
        for e in environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
        if e.strip().lower().startswith("mig-")
    }
    out = []
    try:
        if not nvml.nvmlDeviceGetMigMode(parent)[0]:
            return []
        slots = int(nvml.nvmlDeviceGetMaxMigDeviceCount(parent))
    except nvml.NVMLError:
        return []
    for slot in range(slots):
        try:
            handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, slot)
            uuid = nvml.nvmlDeviceGetUUID(handle)
            gi = int(nvml.nvmlDeviceGetGpuInstanceId(handle))
        except nvml.NVMLError:  # NOT_FOUND: no MIG device in this slot
            continue
        uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        if not wanted or uuid.lower() in wanted:
            out.append(Device(index, handle, slot, parent, gi))
    return out


def _gpm_pair(reader: _Nvml, key: tuple[int, int | None], handle: Any) -> bool:
    """Allocates the two GPM samples of a device that supports GPM (Hopper and newer)."""
    n = reader.nvml
    with contextlib.suppress(n.NVMLError, AttributeError):
        if n.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
            reader.gpm_pairs[key] = (n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc())
            return True
    return False


def _gpu_header(reader: _Nvml, index: int, handle: Any) -> dict[str, Any]:
    nvml = reader.nvml
    total, _used = memory_info(nvml, handle)
    mig: bool | None = None
    with contextlib.suppress(nvml.NVMLError):
        mig = bool(nvml.nvmlDeviceGetMigMode(handle)[0])
    _gpm_pair(reader, (index, None), handle)
    return {
        "index": index,
        "name": _text(nvml.nvmlDeviceGetName(handle)),
        "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
        "memory_total": total,
        "mig": mig,
    }


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _slice_header(reader: _Nvml, device: Device) -> dict[str, Any]:
    """A MIG slice's start-line entry; allocates its two GPM samples where GPM works."""
    n = reader.nvml
    mem = n.nvmlDeviceGetMemoryInfo(device.handle)
    source = "gpm" if _gpm_pair(reader, device.key, device.handle) else None
    return {
        "index": device.index,
        "slice": device.slot,
        "gi": device.gi,
        "name": _text(n.nvmlDeviceGetName(device.handle)),
        "uuid": _text(n.nvmlDeviceGetUUID(device.handle)),
        "memory_total": int(mem.total),
        "mig": True,
        "util_source": source,
    }


class _Writer:
    def __init__(self, handle: TextIO, max_bytes: int) -> None:
        self.handle = handle
        self.max_bytes = max_bytes
        self.written = handle.tell()

    def write(self, record: dict[str, Any]) -> bool:
        """Append one line; False once the file reached its limit."""
        line = json.dumps(record, separators=(",", ":")) + "\n"
        if self.written + len(line) > self.max_bytes and record["kind"] != "stop":
            return False
        self.handle.write(line)
        self.handle.flush()
        self.written += len(line)
        return True


def run_sampler(config: SamplerConfig, visible: list[int] | None = None) -> int:
    """The sampler's main loop (in the detached process). Returns its exit status."""
    directory = config.directory
    lock_fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        print("gpu-monitor: another sampler already runs for this job", file=sys.stderr)
        return 3
    stop: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        stop.append("signal")

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)

    import pynvml

    reader = _Nvml()
    pynvml.nvmlInit()
    count = pynvml.nvmlDeviceGetCount()
    indices = [i for i in range(count) if visible is None or i in visible]
    handles = {i: pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices}
    by_address = {_address(h): i for i, h in handles.items()}
    slices = {i: mig_devices(pynvml, i, h, os.environ) for i, h in handles.items()}
    events: Any = None
    with contextlib.suppress(pynvml.NVMLError):
        events = pynvml.nvmlEventSetCreate()
        registered = 0
        for handle in handles.values():
            with contextlib.suppress(pynvml.NVMLError):
                wanted = pynvml.nvmlDeviceGetSupportedEventTypes(handle) & sum(EVENT_TYPES)
                if wanted:
                    pynvml.nvmlDeviceRegisterEvents(handle, wanted, events)
                    registered += 1
        if not registered:
            pynvml.nvmlEventSetFree(events)
            events = None

    fake = config.fake_epoch
    started = fake if fake is not None else time.time()
    step = [0]

    def clock() -> float:
        if fake is None:
            return time.time()
        return started + step[0] * (config.interval + config.fake_lag)

    samples_path = directory / SAMPLES_NAME
    with open(samples_path, "a", encoding="utf-8") as handle:
        out = _Writer(handle, config.max_bytes)
        out.write(
            {
                "kind": "start",
                "version": FORMAT_VERSION,
                "ts": started,
                "interval": config.interval,
                "pid": os.getpid(),
                "gpus": [
                    entry
                    for i, h in handles.items()
                    for entry in (
                        [_slice_header(reader, d) for d in slices[i]]
                        if slices[i]
                        else [_gpu_header(reader, i, h)]
                    )
                ],
            }
        )
        (directory / STATE_NAME).write_text(
            json.dumps({"pid": os.getpid(), "started": started, "samples": str(samples_path)})
            + "\n"
        )
        lost: set[int] = set()
        failing: set[int] = set()
        reason = ""
        while not stop:
            began = time.monotonic()
            now = clock()
            gpus: list[dict[str, Any]] = []
            for i, h in handles.items():
                if i in lost:
                    continue
                try:
                    if slices[i]:  # a MIG board: the job's slices, the board read once
                        board = reader.board(h)
                        counters = reader.board_counters(i, h)
                        gpus.extend(reader.read_slice(d, board, counters) for d in slices[i])
                    else:
                        gpus.append(reader.read(i, h))
                    failing.discard(i)
                except pynvml.NVMLError as exc:
                    # Only GPU_IS_LOST ends a GPU's samples; any other failure (a TIMEOUT,
                    # an UNKNOWN under load) is a gap: the GPU is asked again next sample,
                    # and the error is written once per gap, not once per sample.
                    code = int(exc.value)
                    if code == GPU_IS_LOST:
                        lost.add(i)
                    elif i in failing:
                        continue
                    failing.add(i)
                    out.write(
                        {
                            "kind": "error",
                            "ts": now,
                            "gpu": i,
                            "call": "sample",
                            "code": code,
                            "name": reader.names.get(code, "UNKNOWN"),
                            "gap": code != GPU_IS_LOST,
                        }
                    )
            if not gpus and len(lost) == len(handles):
                reason = "all-gpus-lost"
                break
            if not out.write({"kind": "sample", "ts": now, "gpus": gpus}):
                reason = "size-limit"
                break
            step[0] += 1
            if config.max_samples and step[0] >= config.max_samples:
                reason = "max-samples"
            elif now - started >= MAX_DURATION_S:
                reason = "max-duration"
            if reason:
                break
            # Wait out the rest of the interval on the event set: Xid and ECC events
            # arrive during the wait and are stamped with the current clock.
            budget = (
                0.0 if fake is not None else max(0.0, config.interval - (time.monotonic() - began))
            )
            deadline = time.monotonic() + budget
            while not stop:
                left = deadline - time.monotonic()
                if events is None:
                    if left > 0:
                        time.sleep(left)
                    break
                try:
                    data = pynvml.nvmlEventSetWait(events, max(0, int(left * 1000)))
                except pynvml.NVMLError as exc:
                    code = int(exc.value)
                    if code != TIMEOUT:
                        # the event set broke: keep sampling without it, and say from when
                        # events went unwatched (no Xid after this is no evidence of none)
                        events = None
                        out.write(
                            {
                                "kind": "error",
                                "ts": clock(),
                                "gpu": -1,
                                "call": "nvmlEventSetWait",
                                "code": code,
                                "name": reader.names.get(code, "UNKNOWN"),
                                "gap": True,
                            }
                        )
                    break
                event = {
                    "kind": "event",
                    "ts": clock(),
                    "gpu": by_address.get(_address(data.device), -1),
                    "type": EVENT_TYPES.get(int(data.eventType), str(data.eventType)),
                    "data": int(data.eventData),
                    "gi": int(data.gpuInstanceId),
                    "ci": int(data.computeInstanceId),
                }
                if int(data.eventType) == RECOVERY_EVENT or (
                    event["type"] == "xid" and event["data"] == XID_RECOVERY_ACTION_CHANGED
                ):
                    event["recovery_action"] = reader.recovery_action(data.device)
                out.write(event)
                if left <= 0:
                    break
        out.write(
            {
                "kind": "stop",
                "ts": clock(),
                "reason": reason or (stop[0] if stop else "signal"),
                "samples": step[0],
            }
        )
    with contextlib.suppress(pynvml.NVMLError):
        for pair in reader.gpm_pairs.values():
            for sample in pair:
                pynvml.nvmlGpmSampleFree(sample)
        if events is not None:
            pynvml.nvmlEventSetFree(events)
        pynvml.nvmlShutdown()
    os.close(lock_fd)
    return 0


def _address(handle: Any) -> int:
    """A device handle's pointer value (event data carries the handle, not the index)."""
    import ctypes

    return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)


def main(argv: list[str]) -> int:
    """``python -m gpu_ci.cuda.monitor.sampler <directory> <interval> [visible indices]``."""
    directory = Path(argv[0])
    visible = [int(x) for x in argv[2].split(",") if x] if len(argv) > 2 else None
    config = SamplerConfig.from_environ(directory, float(argv[1]), os.environ)
    try:
        return run_sampler(config, visible)
    except Exception as exc:  # the log is all a detached process has
        print(f"gpu-monitor sampler failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover - the detached process
    raise SystemExit(main(sys.argv[1:]))
