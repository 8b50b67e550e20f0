"""Reading files a hostile job or OS user could have planted.

A job's later steps (the same OS user) can plant anything in the job's directories, and
another OS user can create any name in a shared sticky directory. A planted FIFO blocks a
reader forever; a link points elsewhere. So such a file is opened without following a link
and without blocking, and checked on the opened descriptor: a regular file, and where it
matters, owned by whom it should be. Both wings read these files here.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Collection
from pathlib import Path


class NotRegular(OSError):
    """A planted FIFO, device, directory or link: not a regular file."""


class NotOwned(OSError):
    """A regular file owned by another user than the one expected."""


def open_regular(path: Path, owners: Collection[int] | None = None) -> int:
    """Open ``path`` for reading, never blocking and never through a link.

    ``owners``: the uids it may belong to (None: any). A planted FIFO would block an open
    forever (hanging a step that runs after a cancellation). Raises ``NotRegular`` for
    anything but a regular file, ``NotOwned`` for another owner, ``OSError`` otherwise.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegular(errno.ELOOP, "a symbolic link, not our file", str(path)) from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise NotRegular(errno.EINVAL, "not a regular file (a FIFO or device?)", str(path))
    if owners is not None and info.st_uid not in owners:
        os.close(fd)
        raise NotOwned(errno.EPERM, f"owned by uid {info.st_uid}, not ours", str(path))
    return fd


def read_small(path: Path, limit: int, owners: Collection[int] | None = None) -> bytes:
    """Read at most ``limit`` bytes of a regular file (see ``open_regular``)."""
    with os.fdopen(open_regular(path, owners), "rb") as handle:
        return handle.read(limit)
