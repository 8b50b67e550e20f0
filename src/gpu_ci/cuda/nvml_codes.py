"""NVML's return codes and its process list's layout, as nvml.h has them.

Standard library only: the pytest plugin imports it in the job's own Python,
where pynvml may be missing. A test compares the table with nvml.h.
"""

from __future__ import annotations

import struct
from typing import Any

#: nvmlReturn_t values (nvml.h) by code, without the ``NVML_ERROR_`` prefix.
ERROR_NAMES: dict[int, str] = {
    0: "SUCCESS",
    1: "UNINITIALIZED",
    2: "INVALID_ARGUMENT",
    3: "NOT_SUPPORTED",
    4: "NO_PERMISSION",
    5: "ALREADY_INITIALIZED",
    6: "NOT_FOUND",
    7: "INSUFFICIENT_SIZE",
    8: "INSUFFICIENT_POWER",
    9: "DRIVER_NOT_LOADED",
    10: "TIMEOUT",
    11: "IRQ_ISSUE",
    12: "LIBRARY_NOT_FOUND",
    13: "FUNCTION_NOT_FOUND",
    14: "CORRUPTED_INFOROM",
    15: "GPU_IS_LOST",
    16: "RESET_REQUIRED",
    17: "OPERATING_SYSTEM",
    18: "LIB_RM_VERSION_MISMATCH",
    19: "IN_USE",
    20: "MEMORY",
    21: "NO_DATA",
    22: "VGPU_ECC_NOT_SUPPORTED",
    23: "INSUFFICIENT_RESOURCES",
    24: "FREQ_NOT_SUPPORTED",
    25: "ARGUMENT_VERSION_MISMATCH",
    26: "DEPRECATED",
    27: "NOT_READY",
    28: "GPU_NOT_FOUND",
    29: "INVALID_STATE",
    30: "RESET_TYPE_NOT_SUPPORTED",
    999: "UNKNOWN",
}

SUCCESS = 0
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
INSUFFICIENT_SIZE = 7
TIMEOUT = 10
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
ARGUMENT_VERSION_MISMATCH = 25


def error_name(code: int) -> str:
    """Name an NVML return code; unknown codes say so."""
    return ERROR_NAMES.get(code, f"UNKNOWN_{code}")


# -- the running-process list ---------------------------------------------------------------

#: The exported names nvidia-ml-py's wrappers reach, newest first, with nvml.h's entry size
#: (nvmlProcessInfo_t = _v2_t: pid, usedGpuMemory, GPU and compute instance ids; _v1_t: the
#: first two). R470 exports no _v3 (nvidia-ml-py's unversioned wrapper then raises
#: NVMLLibraryMismatchError); nvidia-ml-py has no wrapper for the v1 symbol at all.
PROCESS_CALLS = (
    ("nvmlDeviceGetComputeRunningProcesses_v3", 24),
    ("nvmlDeviceGetComputeRunningProcesses_v2", 24),
    ("nvmlDeviceGetComputeRunningProcesses", 16),
)
#: Early R535 drivers wrote _v3 entries 32 bytes apart (an 8-byte field the header never
#: shipped): read with the header's 24 bytes, the second entry starts inside the first.
WIDE_STRIDE = 32
BAD_PIDS = (0, 0xFFFFFFFF)
_NOT_AVAILABLE = 0xFFFFFFFFFFFFFFFF


def _entries(buf: Any, count: int, stride: int) -> list[tuple[int, int | None]]:
    out = []
    for k in range(count):
        pid, used = struct.unpack_from("<I4xQ", buf, k * stride)
        out.append((pid, None if used == _NOT_AVAILABLE else used))
    return out


def process_entries(buf: Any, count: int, size: int) -> tuple[list[tuple[int, int | None]], bool]:
    """Each listed process's (pid, used bytes), and whether all pids are possible.

    Read at the header's entry ``size`` (v1's 16 bytes: the same pid and usedGpuMemory),
    else 32 bytes apart where only that gives possible pids (0 and 2**32-1 are not)."""
    entries = _entries(buf, count, size)
    if size > 16 and any(pid in BAD_PIDS for pid, _ in entries):
        wide = _entries(buf, count, WIDE_STRIDE)
        if not any(pid in BAD_PIDS for pid, _ in wide):
            return wide, True
        return entries, False
    return entries, True
