"""Read the driver through NVML (nvidia-ml-py), never by parsing ``nvidia-smi`` output.

Every NVML failure becomes data in the snapshot (an error code and the call that failed);
nothing here raises for a broken driver. Queries that a GPU does not support (consumer
boards have no ECC or row remapping) read as ``None``.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from gpu_ci.cuda.facts import BRANDS, Gpu, MigInstance, NvmlSnapshot

T = TypeVar("T")

PROC_VERSION = Path("/proc/driver/nvidia/version")
NOT_SUPPORTED = 3


def error_names() -> dict[int, str]:
    import pynvml

    return {getattr(pynvml, name): name[len("NVML_ERROR_"):]
            for name in dir(pynvml) if name.startswith("NVML_ERROR_")
            and isinstance(getattr(pynvml, name), int)}


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


def read_snapshot() -> NvmlSnapshot:
    try:
        import pynvml
    except ImportError:  # pragma: no cover - a dependency of the package
        return NvmlSnapshot(ok=False, error_code=12, error_name="LIBRARY_NOT_FOUND",
                            failed_call="import pynvml")
    names = error_names()

    def call(name: str, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            raise _Failed(name, int(exc.value)) from None

    def optional(gpu_errors: list[str], name: str, fn: Callable[..., T], *args: Any) -> T | None:
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            if int(exc.value) != NOT_SUPPORTED:
                gpu_errors.append(f"{name}: {names.get(int(exc.value), exc.value)}")
            return None

    def failure(failed: _Failed) -> NvmlSnapshot:
        return NvmlSnapshot(ok=False, error_code=failed.code,
                            error_name=names.get(failed.code, "UNKNOWN"),
                            failed_call=failed.call,
                            kernel_module_version=kernel_module_version())

    try:
        call("nvmlInit", pynvml.nvmlInit)
    except _Failed as failed:
        return failure(failed)
    try:
        driver = _text(call("nvmlSystemGetDriverVersion", pynvml.nvmlSystemGetDriverVersion))
        cuda = int(call("nvmlSystemGetCudaDriverVersion_v2",
                        pynvml.nvmlSystemGetCudaDriverVersion_v2))
        count = int(call("nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount))
        gpus = []
        for index in range(count):
            handle = call("nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, index)
            errors: list[str] = []
            memory = call("nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, handle)
            brand = optional(errors, "brand", pynvml.nvmlDeviceGetBrand, handle)
            mig = optional(errors, "MIG mode", pynvml.nvmlDeviceGetMigMode, handle)
            mig_enabled = None if mig is None else bool(mig[0])
            mig_uuids: list[str] = []
            instances: list[MigInstance] = []
            if mig_enabled:
                slots = optional(errors, "MIG devices", pynvml.nvmlDeviceGetMaxMigDeviceCount,
                                 handle) or 0
                for slot in range(slots):
                    mig_handle = optional([], "MIG device",
                                          pynvml.nvmlDeviceGetMigDeviceHandleByIndex,
                                          handle, slot)
                    if mig_handle is not None:
                        mig_uuid = _text(pynvml.nvmlDeviceGetUUID(mig_handle))
                        mig_uuids.append(mig_uuid)
                        mig_name = optional([], "MIG name", pynvml.nvmlDeviceGetName, mig_handle)
                        mig_mem = optional([], "MIG memory", pynvml.nvmlDeviceGetMemoryInfo,
                                           mig_handle)
                        instances.append(MigInstance(
                            mig_uuid, _text(mig_name) if mig_name is not None else "",
                            int(mig_mem.total) if mig_mem is not None else None))
            persistence = optional(errors, "persistence mode",
                                   pynvml.nvmlDeviceGetPersistenceMode, handle)
            ecc = optional(errors, "ECC errors", pynvml.nvmlDeviceGetTotalEccErrors, handle,
                           pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
            retired = optional(errors, "retired pages",
                               pynvml.nvmlDeviceGetRetiredPagesPendingStatus, handle)
            remap = optional(errors, "remapped rows", pynvml.nvmlDeviceGetRemappedRows, handle)
            procs = optional(errors, "processes", pynvml.nvmlDeviceGetComputeRunningProcesses,
                             handle)
            gpus.append(Gpu(
                index=index,
                name=_text(call("nvmlDeviceGetName", pynvml.nvmlDeviceGetName, handle)),
                uuid=_text(call("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, handle)),
                compute_capability=tuple(call("nvmlDeviceGetCudaComputeCapability",
                                              pynvml.nvmlDeviceGetCudaComputeCapability,
                                              handle)),
                memory_total_bytes=int(memory.total),
                brand=BRANDS.get(int(brand), str(brand)) if brand is not None else "unknown",
                mig_enabled=mig_enabled,
                mig_uuids=tuple(mig_uuids),
                persistence_mode=None if persistence is None else bool(persistence),
                ecc_uncorrected_volatile=None if ecc is None else int(ecc),
                retired_pages_pending=None if retired is None else bool(retired),
                remapped_rows_pending=None if remap is None else bool(remap[2]),
                remapped_rows_failure=None if remap is None else bool(remap[3]),
                other_processes=None if procs is None else len(procs),
                unreadable=tuple(errors),
                mig_instances=tuple(instances),
            ))
    except _Failed as failed:
        return failure(failed)
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
    return NvmlSnapshot(ok=True, driver_version=driver, cuda_driver_version=cuda,
                        gpus=tuple(gpus), kernel_module_version=kernel_module_version())
