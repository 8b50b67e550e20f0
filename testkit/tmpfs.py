"""Small tmpfs mounts, for the tests of a full or read-only disk.

Mounting needs root and mount(8): elsewhere the test is skipped, with that reason.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


class Tmpfs:
    """Mounts tmpfs folders for one test and unmounts them after."""

    def __init__(self, parent: Path) -> None:
        self.parent = parent
        self.mounted: list[Path] = []

    def __call__(self, name: str = "small", options: str = "size=1m") -> Path:
        """Mount a tmpfs at ``parent/name`` with ``options``, or skip the test."""
        mnt = self.parent / name
        mnt.mkdir(exist_ok=True)
        if (
            os.geteuid() != 0
            or subprocess.run(
                ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mnt)], capture_output=True
            ).returncode
            != 0
        ):
            pytest.skip(f"mounting a tmpfs ({options}) needs root and mount(8)")
        self.mounted.append(mnt)
        return mnt

    def unmount_all(self) -> None:
        for mnt in reversed(self.mounted):
            subprocess.run(["umount", "-l", str(mnt)], check=False)
        self.mounted.clear()


@contextmanager
def tmpfs_mounts(parent: Path) -> Iterator[Tmpfs]:
    """A ``Tmpfs`` under ``parent`` whose mounts go when the block ends."""
    mounts = Tmpfs(parent)
    try:
        yield mounts
    finally:
        mounts.unmount_all()
