"""gpu-monitor's NVML reads: what one sample line holds for each GPU.

Built on :mod:`gpu_ci.cuda.nvml`'s calls and :mod:`gpu_ci.cuda.nvml_codes`' names. It keeps
what a sample needs from the previous one: the utilisation buffer's last timestamp, the
GPM samples, and which queries a GPU does not support.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_ci.cuda.nvml import (
    error_code,
    memory_info,
    nvml_errors,
    running_processes,
    temperature,
)
from gpu_ci.cuda.nvml_codes import (
    ARGUMENT_VERSION_MISMATCH,
    FUNCTION_NOT_FOUND,
    GPU_IS_LOST,
    NOT_FOUND,
    NOT_SUPPORTED,
)

GPU_UTILIZATION_SAMPLES = 1
"""nvmlSamplingType_t: "percent of time during which one or more kernels was executing"."""
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


class Reader:
    """The NVML calls of one sample, with errors as values."""

    def __init__(self) -> None:
        import pynvml

        self.nvml = pynvml
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
        """Call an NVML query; None when the GPU lacks it.

        The value, or None when the GPU does not support the query (lost → raises).
        """
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
        """Read the clocks-event reasons on old and new drivers.

        Clocks-event reasons; drivers before R535 lack the renamed call (nvidia-ml-py then raises
        FUNCTION_NOT_FOUND), so the old name is asked next.
        """
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
        """Read the PCIe and NVLink traffic counters.

        PCIe bytes and NVLink KiB counters (field values), each pair None where the driver answers
        NOT_SUPPORTED for it; asked no more once nothing is supported.
        """
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
        """Read the recovery action the driver asks for now.

        The nvmlDeviceGpuRecoveryAction_t the driver asks for now, or None where the field is
        unsupported (a driver before it) or the read fails: never a guess.
        """
        n = self.nvml
        try:
            values = n.nvmlDeviceGetFieldValues(handle, [FI_GPU_RECOVERY_ACTION])
        except nvml_errors(n):
            return None
        return _field_value(values[0]) if len(values) else None

    def health(self, index: int, handle: Any) -> dict[str, Any]:
        """Read the ECC counts and remapped rows.

        Volatile ECC error counts [corrected, uncorrected] and remapped rows [correctable,
        uncorrectable, pending, failure]; None where the GPU has no ECC or row remapping (consumer
        boards), asked once then.
        """
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
        """List the GPU's compute processes, named where possible.

        The compute processes, or None where the driver did not list them (NO_PERMISSION,
        NOT_SUPPORTED, a list that kept growing: INSUFFICIENT_SIZE): unknown, which the report must
        not read as "no process".
        """
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
        """Read the violation counters: time held below application clocks.

        The violation counters (ns below application clocks, by reason), or None where the driver
        has none (asked once; nvml.h marks the call deprecated in 13.0 in favour of field values,
        and drivers still export it).
        """
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
        """Read a MIG board's counters through its parent handle.

        A MIG board's PCIe/NVLink, ECC and remapped-row counters, read through the parent handle
        (nvml.h documents them per device, not per MIG device handle; remapped rows are
        NOT_SUPPORTED while MIG is enabled), as ``board_*``: the whole GPU's, every tenant's,
        recorded apart from the slice's own figures.
        """
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
    """Read an integer field value; None when the driver failed.

    An integer nvmlFieldValue_t's value (nvmlValueType_t 1-6), None when its nvmlReturn is nonzero
    ("value is undefined if nvmlReturn != NVML_SUCCESS").
    """
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


def _gpm_pair(reader: Reader, key: tuple[int, int | None], handle: Any) -> bool:
    """Allocate a GPM-capable device's two GPM samples.

    Allocates the two GPM samples of a device that supports GPM (Hopper and newer).
    """
    n = reader.nvml
    with contextlib.suppress(n.NVMLError, AttributeError):
        if n.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
            reader.gpm_pairs[key] = (n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc())
            return True
    return False


def gpu_header(reader: Reader, index: int, handle: Any) -> dict[str, Any]:
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


def slice_header(reader: Reader, device: Device) -> dict[str, Any]:
    """A MIG slice's entry in the start line.

    A MIG slice's start-line entry; allocates its two GPM samples where GPM works.
    """
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


def address(handle: Any) -> int:
    """A device handle's pointer value, to match events to GPUs.

    A device handle's pointer value (event data carries the handle, not the index).
    """
    import ctypes

    return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)
