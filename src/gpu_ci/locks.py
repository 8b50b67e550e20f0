"""``flock`` probes shared by the wings: is a lock held, and take one without waiting.

A lock held with ``flock`` is released by the kernel when its holder dies (``kill -9``
included), so "held" means "a live process owns it": the conda cache's sweep and the GPU
monitor's sampler both decide on that. Windows has no ``flock``: a lock reads as held (so
nothing is swept or started twice) and none can be taken.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def held(path: Path) -> bool:
    """True while some process holds a lock on ``path``.

    False when it is free or absent."""
    if sys.platform == "win32":
        return True
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # conflicts with an exclusive holder
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def try_exclusive(path: Path, mode: int = 0o644) -> int | None:
    """An exclusive lock on ``path`` as an open fd; None if held.

    The file is created if needed; closing the fd releases the lock. None on Windows."""
    if sys.platform == "win32":
        return None
    return lock_now(os.open(path, os.O_RDWR | os.O_CREAT, mode))


def lock_now(fd: int) -> int | None:
    """Lock an open file exclusively without waiting: ``fd``, or None (closed) if held."""
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd
