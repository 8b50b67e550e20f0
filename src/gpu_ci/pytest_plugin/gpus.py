"""The job's GPUs, who holds memory on them, and this process's PIDs.

The devices are the worker's own under gpu-lease's map (``GPU_CI_WORKER_DEVICES`` by xdist
worker number), else ``CUDA_VISIBLE_DEVICES`` read as CUDA reads it (indices in PCI bus
order, as gpu-lease sets ``CUDA_DEVICE_ORDER``, or UUIDs and their unique prefixes, up to the
first entry that names no GPU), else every GPU. NVML lists PIDs of the host's namespace: in
a container this process is found through ``NSpid`` where /proc shows it, or not at all,
which the report says.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from gpu_ci.pytest_plugin.nvml import Nvml, NvmlError, Process

MIB = 1024 * 1024
#: The longest process name reported; the rest is cut.
NAME_CHARS = 64
#: What a reported name keeps: anything else (newlines, escapes, markup) becomes ``?``.
_UNSAFE = re.compile(r"[^A-Za-z0-9._+@-]")


@dataclass(frozen=True)
class Device:
    """One GPU of the job: NVML's index, its UUID and handle."""

    index: int
    uuid: str
    handle: ctypes.c_void_p


@dataclass(frozen=True)
class Held:
    """A process holding memory on a job GPU, and whose it is."""

    gpu: int
    pid: int
    name: str
    mib: float | None
    whose: str  # "this process", "this job", "foreign"

    def as_json(self) -> dict[str, object]:
        return {
            "gpu": self.gpu,
            "pid": self.pid,
            "name": self.name,
            "mib": self.mib,
            "whose": self.whose,
        }


def worker_device(environ: Mapping[str, str]) -> str | None:
    """This xdist worker's device in gpu-lease's map, or None."""
    worker = environ.get("PYTEST_XDIST_WORKER", "")
    devices = [d for d in environ.get("GPU_CI_WORKER_DEVICES", "").split(",") if d.strip()]
    if not (worker.startswith("gw") and worker[2:].isdigit() and devices):
        return None
    return devices[int(worker[2:]) % len(devices)].strip()


def job_devices(nvml: Nvml, environ: Mapping[str, str]) -> tuple[list[Device], list[str]]:
    """The job's GPUs and notes on what could not be resolved."""
    count = nvml.count()
    every = []
    for i in range(count):
        handle = nvml.handle(i)
        every.append(Device(i, nvml.uuid(handle), handle))
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return every, []
    chosen: list[Device] = []
    notes: list[str] = []
    for raw in visible.split(","):
        entry = raw.strip()
        device = _resolve(entry, every)
        if device is None:
            if entry:
                notes.append(f"CUDA_VISIBLE_DEVICES entry {entry!r} names no GPU NVML lists")
            break  # CUDA ignores the entries after the first invalid one
        if device not in chosen:
            chosen.append(device)
    return chosen, notes


def _resolve(entry: str, every: list[Device]) -> Device | None:
    if entry.isdigit():
        return every[int(entry)] if int(entry) < len(every) else None
    if entry.startswith("GPU-"):
        matches = [d for d in every if d.uuid.startswith(entry)]
        return matches[0] if len(matches) == 1 else None
    return None  # MIG-... and anything else: not resolved here


def own_pids() -> frozenset[int]:
    """This process's PID in every namespace /proc shows (``NSpid``), and its own."""
    pids = {os.getpid()}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    pids.update(int(p) for p in line.split()[1:] if p.isdigit())
    except OSError:
        pass
    return frozenset(pids)


@functools.lru_cache(maxsize=4096)
def visible_here(pid: int) -> bool:
    """Whether ``pid`` is in this PID namespace (its /proc entry exists).

    Asked once per PID: a PID's namespace does not change, and a stat per process per
    test would cost more than the NVML read itself."""
    return os.path.exists(f"/proc/{pid}")


def whose(pid: int, mine: frozenset[int]) -> str:
    """This process, this job (the same session, e.g. xdist workers), or foreign."""
    if pid in mine:
        return "this process"
    try:
        return "this job" if os.getsid(pid) == os.getsid(0) else "foreign"
    except OSError:
        return "foreign"


def name_of(nvml: Nvml, pid: int) -> str:
    """A process's name as plain text: letters, digits and ``._+@-``.

    Another job chooses its executable's path and its comm (a newline included): printed
    raw, it would be a workflow command or markup in this job's log and summary."""
    name = nvml.process_name(pid)
    if name:
        return _plain(os.path.basename(name))
    try:
        with open(f"/proc/{pid}/comm") as f:
            return _plain(f.read().rstrip("\n"))
    except OSError:
        return "?"


def _plain(name: str) -> str:
    return _UNSAFE.sub("?", name[:NAME_CHARS]) or "?"


def holders(nvml: Nvml, devices: list[Device], mine: frozenset[int]) -> list[Held]:
    """Every process holding memory on the job's GPUs now, named and classified."""
    out = []
    for dev in devices:
        try:
            procs = nvml.processes(dev.handle)
        except NvmlError:
            continue
        for p in procs:
            mib = None if p.used_bytes is None else round(p.used_bytes / MIB, 1)
            out.append(Held(dev.index, p.pid, name_of(nvml, p.pid), mib, whose(p.pid, mine)))
    return out


def own_bytes(procs: list[Process], mine: frozenset[int]) -> int | None:
    """What this process holds among ``procs``; None when it cannot be told.

    Absent from a list none of whose PIDs is of this namespace (a container's view of
    host PIDs), this process may be one of them: unknown, rather than zero."""
    total = 0
    found = False
    for p in procs:
        if p.pid in mine:
            found = True
            total += p.used_bytes or 0
    if found or not procs:
        return total
    return 0 if any(visible_here(p.pid) for p in procs) else None
