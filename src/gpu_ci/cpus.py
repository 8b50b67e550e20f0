"""How many cores this process may run on: its affinity, not the host's count.

A runner container pinned to a few cores of a large GPU host (``docker --cpuset-cpus``,
Kubernetes' static CPU manager) sees every core in ``os.cpu_count()``: sizing worker pools
and download streams from it would start dozens of processes on the cores of another job.
"""

from __future__ import annotations

import os


def usable() -> int:
    """The cores this process may use; at least 1.

    The scheduler's set (``sched_getaffinity``) where the platform tells; else the machine's
    (``os.cpu_count()``)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # macOS, Windows
        return os.cpu_count() or 1
