"""NVML through ctypes, for the job's Python where nvidia-ml-py may be missing.

Only the few calls the plugin needs: devices by index and UUID, memory, and the running
compute processes (newest exported call first, read as the cuda wing reads them: entries
that give impossible PIDs at the header's 24 bytes are read 32 bytes apart, as early R535
drivers wrote them).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from gpu_ci.cuda.nvml_codes import (
    BAD_PIDS,
    INSUFFICIENT_SIZE,
    PROCESS_CALLS,
    SUCCESS,
    WIDE_STRIDE,
    error_name,
    process_entries,
)

LIBRARY = "libnvidia-ml.so.1"

_ROOM = 64  # entries the first read makes room for (more only when the driver says so)


class NvmlError(Exception):
    """An NVML call answered something other than success."""

    def __init__(self, call: str, code: int) -> None:
        super().__init__(f"{call}: NVML_ERROR_{error_name(code)} ({code})")
        self.call = call
        self.code = code


@dataclass(frozen=True)
class Process:
    """One compute process on a GPU, as the driver lists it."""

    pid: int
    used_bytes: int | None


@dataclass(frozen=True)
class Memory:
    """A GPU's memory in bytes (nvmlMemory_t)."""

    total: int
    free: int
    used: int


class _MemoryT(ctypes.Structure):
    _fields_ = [  # noqa: RUF012 (ctypes' own declaration)
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


class Nvml:
    """An initialised NVML library; ``close`` shuts it down."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib
        self._process_call: tuple[Any, int] | None = None
        self._buf = (ctypes.c_ubyte * (_ROOM * WIDE_STRIDE))()

    @classmethod
    def open(cls, name: str = LIBRARY) -> Nvml | str:
        """NVML, or why it cannot be used.

        No library, no driver, or an initialisation that failed."""
        try:
            lib = ctypes.CDLL(name)
        except OSError as exc:
            return f"{name} does not load ({exc})"
        try:
            init = lib.nvmlInit_v2
        except AttributeError:
            return f"{name} has no nvmlInit_v2"
        code = init()
        if code != SUCCESS:
            return f"nvmlInit_v2: NVML_ERROR_{error_name(code)}"
        return cls(lib)

    def close(self) -> None:
        self._lib.nvmlShutdown()

    def _call(self, name: str, *args: Any) -> None:
        code = getattr(self._lib, name)(*args)
        if code != SUCCESS:
            raise NvmlError(name, code)

    def count(self) -> int:
        n = ctypes.c_uint(0)
        self._call("nvmlDeviceGetCount_v2", ctypes.byref(n))
        return n.value

    def handle(self, index: int) -> ctypes.c_void_p:
        dev = ctypes.c_void_p()
        self._call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(dev))
        return dev

    def uuid(self, dev: ctypes.c_void_p) -> str:
        buf = ctypes.create_string_buffer(96)
        self._call("nvmlDeviceGetUUID", dev, buf, ctypes.c_uint(96))
        return buf.value.decode(errors="replace")

    def memory(self, dev: ctypes.c_void_p) -> Memory:
        mem = _MemoryT()
        self._call("nvmlDeviceGetMemoryInfo", dev, ctypes.byref(mem))
        return Memory(mem.total, mem.free, mem.used)

    def process_name(self, pid: int) -> str | None:
        buf = ctypes.create_string_buffer(256)
        code = self._lib.nvmlSystemGetProcessName(ctypes.c_uint(pid), buf, ctypes.c_uint(256))
        return buf.value.decode(errors="replace") if code == SUCCESS else None

    def _processes_call(self) -> tuple[Any, int]:
        if self._process_call is None:
            for name, size in PROCESS_CALLS:
                fn = getattr(self._lib, name, None)
                if fn is not None:
                    self._process_call = (fn, size)
                    break
            else:
                raise NvmlError("nvmlDeviceGetComputeRunningProcesses", 13)
        return self._process_call

    def processes(self, dev: ctypes.c_void_p) -> list[Process]:
        """The compute processes on ``dev``: one call while they fit the buffer."""
        fn, size = self._processes_call()
        room = len(self._buf) // WIDE_STRIDE
        count = ctypes.c_uint(room)
        code = fn(dev, ctypes.byref(count), self._buf)
        while code == INSUFFICIENT_SIZE:  # nvml.h: *infoCount holds the count needed
            room = count.value * 2 + 5
            self._buf = (ctypes.c_ubyte * (room * WIDE_STRIDE))()
            count = ctypes.c_uint(room)
            code = fn(dev, ctypes.byref(count), self._buf)
        if code != SUCCESS:
            raise NvmlError("nvmlDeviceGetComputeRunningProcesses", code)
        n = min(count.value, room)
        entries, possible = process_entries(self._buf, n, size)
        if not possible:
            return []
        return [Process(pid, used) for pid, used in entries if pid not in BAD_PIDS]
