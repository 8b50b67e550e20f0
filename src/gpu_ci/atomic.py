"""One way to write a file in place: a fresh temporary name beside it, then one rename.

``mkstemp`` opens the temporary file with ``O_EXCL`` (no link planted at a predictable name
is followed); ``rename`` acts on the name, not on what a link points to, so a link planted at
the target is replaced, never written through; a reader never sees half a file. Any error
(a full or read-only disk) removes the temporary file and is raised as it came (``OSError``):
the caller decides what it means (``runtime.write_report`` names the input; gpu-lease's
holder names are informational and drop it). Root module, so the wings may use it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def write_atomic(
    path: str | os.PathLike[str], text: str, *, mode: int = 0o644, make_parent: bool = True
) -> Path:
    import tempfile  # here: it costs every action's start-up ~2 ms, and few write files

    target = Path(path)
    if make_parent:
        target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            os.fchmod(out.fileno(), mode)
            out.write(text)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target
