"""NVML's return codes by name, as nvml.h defines them.

Standard library only: the pytest plugin imports it in the job's own Python,
where pynvml may be missing. A test compares the table with nvml.h.
"""

from __future__ import annotations

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
