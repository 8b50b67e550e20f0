"""Read the driver through NVML (nvidia-ml-py), never by parsing ``nvidia-smi`` output.

Every NVML failure becomes data in the snapshot (an error code and the call that failed);
nothing here raises for a broken driver. Queries that a GPU does not support (consumer
boards have no ECC or row remapping) read as ``None``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from gpu_ci.cuda.facts import BRANDS, Gpu, MigInstance, NvmlSnapshot
from gpu_ci.cuda.nvml_codes import (
    BAD_PIDS,
    ERROR_NAMES,
    FUNCTION_NOT_FOUND,
    INSUFFICIENT_SIZE,
    LIBRARY_NOT_FOUND,
    NO_PERMISSION,
    NOT_SUPPORTED,
    PROCESS_CALLS,
    SUCCESS,
    WIDE_STRIDE,
    process_entries,
)

T = TypeVar("T")

PROC_VERSION = Path("/proc/driver/nvidia/version")


def kernel_module_version(path: Path | None = None) -> str:
    # GPU_CI_NVIDIA_PROC_VERSION lets tests point at a recorded copy of the file.
    path = path or Path(os.environ.get("GPU_CI_NVIDIA_PROC_VERSION") or PROC_VERSION)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    match = re.search(r"Kernel Module(?: for [\w]+)?\s+([\d.]+)", text)
    return match.group(1) if match else ""


class _Failed(Exception):
    def __init__(self, call: str, code: int) -> None:
        super().__init__(call)
        self.call = call
        self.code = code


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_errors(pynvml: Any) -> tuple[type[BaseException], ...]:
    """What an NVML call through nvidia-ml-py raises for a driver answer: ``NVMLError``, and
    ``NVMLLibraryMismatchError`` (not an NVMLError) where an unversioned wrapper finds its
    versioned symbol missing (a driver older than the binding, e.g. R470 without _v3)."""
    mismatch = getattr(pynvml, "NVMLLibraryMismatchError", None)
    return (pynvml.NVMLError, mismatch) if isinstance(mismatch, type) else (pynvml.NVMLError,)


def error_code(pynvml: Any, exc: BaseException) -> int:
    """The nvmlReturn_t of a caught error (a library mismatch is FUNCTION_NOT_FOUND)."""
    return int(exc.value) if isinstance(exc, pynvml.NVMLError) else FUNCTION_NOT_FOUND


@dataclass(frozen=True)
class Process:
    """One running compute process as the driver lists it."""

    pid: int | None
    """None where the entry was unreadable (a driver that wrote another struct size)."""
    used_bytes: int | None = None


def running_processes(pynvml: Any, handle: Any) -> list[Process]:
    """List a device's compute processes on every driver generation.

    The compute processes on ``handle`` (a GPU or a MIG device), read safely on every driver
    generation: the newest exported call the driver has (_v3, then _v2, then v1), into a buffer wide
    enough for any entry size a driver wrote, decoded with the header's entry size unless that gives
    impossible PIDs (0 or 2**32-1) where 32 bytes does not (early R535). Raises ``pynvml.NVMLError``
    for the driver's answer (NO_PERMISSION, GPU_IS_LOST, ...).
    """
    for name, size in PROCESS_CALLS:
        try:
            fn = pynvml._nvmlGetFunctionPointer(name)  # the binding's own symbol lookup
        except pynvml.NVMLError as exc:
            if int(exc.value) == FUNCTION_NOT_FOUND:
                continue
            raise
        count = ctypes.c_uint(0)
        ret = fn(handle, ctypes.byref(count), None)  # nvml.h: "call ... with *infoCount = 0"
        if ret == SUCCESS:
            return []
        if ret != INSUFFICIENT_SIZE:
            raise pynvml.NVMLError(ret)
        room = count.value * 2 + 5  # processes may start between the two calls
        buf = (ctypes.c_ubyte * (room * max(size, WIDE_STRIDE)))()
        count = ctypes.c_uint(room)
        ret = fn(handle, ctypes.byref(count), buf)
        if ret != SUCCESS:
            raise pynvml.NVMLError(ret)
        n = min(count.value, room)
        entries, possible = process_entries(buf, n, size)
        return [
            Process(pid, used) if possible or pid not in BAD_PIDS else Process(None)
            for pid, used in entries
        ]
    raise pynvml.NVMLError(FUNCTION_NOT_FOUND)


def _newer_or_older(pynvml: Any, newer: str, older: str, *args: Any) -> Any:
    """``newer(*args)`` where the binding and the driver have it, else ``older(*args)``:
    an older driver lacks the symbol (FUNCTION_NOT_FOUND, or NVMLLibraryMismatchError from
    a versioned wrapper), an older nvidia-ml-py the wrapper."""
    fn = getattr(pynvml, newer, None)
    if fn is not None:
        try:
            return fn(*args)
        except nvml_errors(pynvml) as exc:
            if error_code(pynvml, exc) != FUNCTION_NOT_FOUND:
                raise
    return getattr(pynvml, older)(*args)


def temperature(pynvml: Any, handle: Any) -> int:
    """The GPU sensor's temperature in °C. nvml.h (NVML 13): nvmlDeviceGetTemperature is
    DEPRECATED(13.0), "Use nvmlDeviceGetTemperatureV instead"; older drivers have only it."""
    sensor = pynvml.NVML_TEMPERATURE_GPU
    return int(
        _newer_or_older(
            pynvml, "nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature", handle, sensor
        )
    )


def clocks_event_reasons(pynvml: Any, handle: Any) -> int:
    """The active clocks event (throttle) reason bits. nvml.h (NVML 13):
    nvmlDeviceGetCurrentClocksThrottleReasons is DEPRECATED(13.0), "Use
    nvmlDeviceGetCurrentClocksEventReasons instead" (the same bits); older drivers have only
    the throttle name."""
    return int(
        _newer_or_older(
            pynvml,
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetCurrentClocksThrottleReasons",
            handle,
        )
    )


def memory_info(pynvml: Any, handle: Any) -> tuple[int, int]:
    """(total, used) bytes of a GPU. nvml.h: in MIG mode a parent's aggregate memory comes
    "only if the caller has appropriate privileges. Per-instance information can be queried
    by using specific MIG device handles": without privileges (NO_PERMISSION) this is the
    sum over the GPU's MIG devices, the memory CUDA can reach. Raises ``pynvml.NVMLError``."""
    try:
        mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
        return int(mem.total), int(mem.used)
    except pynvml.NVMLError as exc:
        if int(exc.value) != NO_PERMISSION or not pynvml.nvmlDeviceGetMigMode(handle)[0]:
            raise
    total = used = 0
    for slot in range(int(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except pynvml.NVMLError:  # NOT_FOUND: no MIG device in this slot
            continue
        mem = pynvml.nvmlDeviceGetMemoryInfo(mig)
        total += int(mem.total)
        used += int(mem.used)
    return total, used


class _Reader:
    """One reading of the driver, with NVML's failures as values.

    Every call goes through ``call`` (a failure ends the reading) or ``optional`` (a
    failure is noted on the GPU, NOT_SUPPORTED silently).
    """

    def __init__(self, pynvml: Any) -> None:
        self.nvml = pynvml
        self.caught = nvml_errors(pynvml)

    def call(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except self.caught as exc:
            raise _Failed(name, error_code(self.nvml, exc)) from None

    def optional(
        self, gpu_errors: list[str], name: str, fn: Callable[..., T], *args: Any
    ) -> T | None:
        try:
            return fn(*args)
        except self.caught as exc:
            code = error_code(self.nvml, exc)
            if code != NOT_SUPPORTED:
                gpu_errors.append(f"{name}: {ERROR_NAMES.get(code, code)}")
            return None

    def cuda_version(self, extra: dict[str, Any]) -> int:
        """The CUDA version the driver supports, through libcuda where it can.

        nvml.h: _v2 is libcuda's cuDriverGetVersion(), LIBRARY_NOT_FOUND without
        libcuda.so.1 (a container with NVIDIA_DRIVER_CAPABILITIES=utility),
        FUNCTION_NOT_FOUND where the driver or libcuda lacks it. v1 then answers "a known
        supported version number".
        """
        n = self.nvml
        try:
            return int(
                self.call("nvmlSystemGetCudaDriverVersion_v2", n.nvmlSystemGetCudaDriverVersion_v2)
            )
        except _Failed as failed:
            if failed.code not in (LIBRARY_NOT_FOUND, FUNCTION_NOT_FOUND):
                raise
            extra["cuda_driver_version_v2"] = ERROR_NAMES.get(failed.code, str(failed.code))
            if failed.code == LIBRARY_NOT_FOUND:
                extra["libcuda"] = "LIBRARY_NOT_FOUND"
        return int(self.call("nvmlSystemGetCudaDriverVersion", n.nvmlSystemGetCudaDriverVersion))

    def processes(self, errors: list[str], name: str, handle: Any) -> int | None:
        found = self.optional(errors, name, running_processes, self.nvml, handle)
        return None if found is None else len(found)

    def mig_instances(self, errors: list[str], handle: Any) -> list[MigInstance]:
        """Read a MIG parent's instances, each through its own handle.

        The MIG instances of a MIG parent, each read through its own handle.

        nvml.h: a MIG parent's aggregate information comes "only if the caller has
        appropriate privileges. Per-instance information can be queried by using specific
        MIG device handles".
        """
        n, optional = self.nvml, self.optional
        slots = optional(errors, "MIG devices", n.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
        instances = []
        for slot in range(slots):
            mig = optional([], "MIG device", n.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
            uuid = (
                None
                if mig is None
                else optional(errors, "MIG device UUID", n.nvmlDeviceGetUUID, mig)
            )
            if uuid is None:
                continue
            name = optional([], "MIG name", n.nvmlDeviceGetName, mig)
            mem = optional([], "MIG memory", n.nvmlDeviceGetMemoryInfo, mig)
            instances.append(
                MigInstance(
                    _text(uuid),
                    _text(name) if name is not None else "",
                    int(mem.total) if mem is not None else None,
                    self.processes(errors, "MIG processes", mig),
                )
            )
        return instances

    def gpu(self, index: int) -> Gpu:
        """One GPU: what every check needs, each unreadable query noted on it."""
        n, call, optional = self.nvml, self.call, self.optional
        handle = call("nvmlDeviceGetHandleByIndex", n.nvmlDeviceGetHandleByIndex, index)
        errors: list[str] = []
        brand = optional(errors, "brand", n.nvmlDeviceGetBrand, handle)
        mig = optional(errors, "MIG mode", n.nvmlDeviceGetMigMode, handle)
        mig_enabled = None if mig is None else bool(mig[0])
        instances = self.mig_instances(errors, handle) if mig_enabled else []
        memory_total, _used = call("nvmlDeviceGetMemoryInfo", memory_info, n, handle)
        persistence = optional(errors, "persistence mode", n.nvmlDeviceGetPersistenceMode, handle)
        uncorrected, volatile = n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC
        ecc = optional(
            errors, "ECC errors", n.nvmlDeviceGetTotalEccErrors, handle, uncorrected, volatile
        )
        retired = optional(
            errors, "retired pages", n.nvmlDeviceGetRetiredPagesPendingStatus, handle
        )
        remap = optional(errors, "remapped rows", n.nvmlDeviceGetRemappedRows, handle)
        if mig_enabled:
            counts = [m.other_processes for m in instances]
            procs = None if None in counts else sum(c or 0 for c in counts)
        else:
            procs = self.processes(errors, "processes", handle)
        name = _text(call("nvmlDeviceGetName", n.nvmlDeviceGetName, handle))
        uuid = _text(call("nvmlDeviceGetUUID", n.nvmlDeviceGetUUID, handle))
        capability = call(
            "nvmlDeviceGetCudaComputeCapability", n.nvmlDeviceGetCudaComputeCapability, handle
        )
        return Gpu(
            index=index,
            name=name,
            uuid=uuid,
            compute_capability=tuple(capability),
            memory_total_bytes=memory_total,
            brand=BRANDS.get(int(brand), str(brand)) if brand is not None else "unknown",
            mig_enabled=mig_enabled,
            mig_uuids=tuple(m.uuid for m in instances),
            persistence_mode=None if persistence is None else bool(persistence),
            ecc_uncorrected_volatile=None if ecc is None else int(ecc),
            retired_pages_pending=None if retired is None else bool(retired),
            remapped_rows_pending=None if remap is None else bool(remap[2]),
            remapped_rows_failure=None if remap is None else bool(remap[3]),
            other_processes=procs,
            unreadable=tuple(errors),
            mig_instances=tuple(instances),
        )


def _failure(failed: _Failed) -> NvmlSnapshot:
    return NvmlSnapshot(
        ok=False,
        error_code=failed.code,
        error_name=ERROR_NAMES.get(failed.code, "UNKNOWN"),
        failed_call=failed.call,
        kernel_module_version=kernel_module_version(),
    )


def read_snapshot() -> NvmlSnapshot:
    """Read the driver and every GPU.

    Read the driver and every GPU; a failure is data in the snapshot.
    """
    try:
        import pynvml
    except ImportError:  # pragma: no cover - a dependency of the package
        return NvmlSnapshot(
            ok=False, error_code=12, error_name="LIBRARY_NOT_FOUND", failed_call="import pynvml"
        )
    reader = _Reader(pynvml)
    try:
        reader.call("nvmlInit", pynvml.nvmlInit)
    except _Failed as failed:
        return _failure(failed)
    extra: dict[str, Any] = {}
    try:
        driver = _text(reader.call("nvmlSystemGetDriverVersion", pynvml.nvmlSystemGetDriverVersion))
        cuda = reader.cuda_version(extra)
        count = int(reader.call("nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount))
        gpus = [reader.gpu(index) for index in range(count)]
    except _Failed as failed:
        return _failure(failed)
    finally:
        with contextlib.suppress(*reader.caught):
            pynvml.nvmlShutdown()
    return NvmlSnapshot(
        ok=True,
        driver_version=driver,
        cuda_driver_version=cuda,
        gpus=tuple(gpus),
        kernel_module_version=kernel_module_version(),
        extra=extra,
    )
