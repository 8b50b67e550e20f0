"""Disk and permission failures as named errors, never retried as network errors.

A full disk (``ENOSPC``, ``EDQUOT``), a read-only file system (``EROFS``) or a missing
permission (``EACCES``, ``EPERM``) will not heal by retrying: each becomes a
:class:`DiskError` that names the path, what was being written and, for space, how much is
needed and free, so the job log says what to fix.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from gpu_ci.errors import GpuCiError

SPACE = (errno.ENOSPC, errno.EDQUOT)


class DiskError(GpuCiError):
    """The disk is full, read-only or not ours to write: exit 1, nothing retried."""


def free_bytes(path: Path) -> int:
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def mb(n: float) -> str:
    """Bytes for people: kB below a megabyte, so that 12 kB is not '0.0 MB'."""
    if n >= 1e6:
        return f"{n / 1e6:.1f} MB"
    return f"{n / 1e3:.0f} kB" if n >= 1e4 else f"{int(n)} bytes"


def as_disk_error(
    exc: BaseException, path: Path | str, what: str, need: int | None = None
) -> DiskError | None:
    """The named error for a disk or permission failure ``exc``; else None."""
    if not isinstance(exc, OSError) or exc.errno is None:
        return None
    where = getattr(exc, "filename", None) or path
    if exc.errno in SPACE:
        needed = f"{mb(need)} needed, " if need else ""
        return DiskError(
            f"{what}: no space left on the device of {where} ({needed}"
            f"{mb(free_bytes(Path(str(where))))} free). Free space there or "
            "point pkgs-dir/prefix at a larger disk; nothing was left half-done.",
            title="disk full",
        )
    if exc.errno == errno.EROFS:
        return DiskError(
            f"{what}: {where} is on a read-only file system. Choose a writable "
            "location (e.g. under $RUNNER_TOOL_CACHE or $RUNNER_TEMP).",
            title="read-only file system",
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return DiskError(
            f"{what}: permission denied for {where} (running as uid "
            f"{os.getuid() if hasattr(os, 'getuid') else '?'}). Choose a "
            "directory this user can write, or fix its owner.",
            title="permission denied",
        )
    return None


def require_space(directory: Path, need: int, what: str) -> None:
    free = free_bytes(directory)
    if need > free:
        raise DiskError(
            f"{what} needs {mb(need)} on the device of {directory}, but only "
            f"{mb(free)} is free. Free space there or point pkgs-dir/prefix at a "
            "larger disk; nothing was changed.",
            title="disk full",
        )


def probe_writable(directory: Path, what: str) -> None:
    """Create (then remove) a file in ``directory``: ``os.access`` misses read-only mounts."""
    probe = directory / f".gpu-ci-probe-{os.urandom(16).hex()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        named = as_disk_error(exc, directory, what)
        if named is not None:
            raise named from None
        raise GpuCiError(f"{what}: cannot write in {directory} ({exc.strerror}).") from None
