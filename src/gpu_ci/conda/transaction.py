"""Locks, a journal and sweeping: jobs that share a host, and jobs killed with ``kill -9``.

* **One job per prefix.** ``<parent>/.<name>.gpu-ci.lock`` is held (``flock``, released by
  the kernel when the process dies, however it dies) from the first look at the prefix to
  the end; a second job waits, and says so in the log.
* **Many jobs per package cache.** The cache needs no lock: every temporary name carries the
  writer's token, every entry appears by an atomic rename, and an entry already there and
  valid is success. Each writer holds ``<pkgs>/.gpu-ci-runs/<token>`` locked while it runs,
  so a later run can tell a dead writer's leftovers from a live writer's work in progress.
* **A journal beside the prefix** (``.<name>.gpu-ci-journal.json``) names the staging and
  backup directories of the transaction in flight. The new environment is complete (conda
  packages, pip entries, marker) in staging before the swap, and the swap is two renames:
  prefix → backup, staging → prefix. Recovery needs no state beyond which paths exist:
  backup without prefix means the swap was cut between the renames (put the backup back);
  backup with prefix means it finished (drop the backup). Staging is always dropped.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from gpu_ci import locks
from gpu_ci.downloads import TOKEN

Log = Callable[[str], None]
RUNS = ".gpu-ci-runs"


@contextlib.contextmanager
def exclusive(path: Path, what: str, log: Log) -> Iterator[None]:
    """Hold an exclusive lock on ``path``, logging while waiting for it."""
    if sys.platform == "win32":  # no flock; jobs on one Windows host are not serialised
        yield
        return
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another job"
            log(f"waiting for {what}: {path} is held by {holder}")
            started = time.monotonic()
            fcntl.flock(fd, fcntl.LOCK_EX)
            log(f"got {what} after {time.monotonic() - started:.1f} s")
        with contextlib.suppress(OSError):  # who holds it: for the log of a waiting job
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {os.uname().nodename}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def registered(pkgs_dir: Path) -> Iterator[None]:
    """Mark this process as a live writer of ``pkgs_dir`` meanwhile.

    The lock is taken on a temporary name and then renamed into ``.gpu-ci-runs/<token>``, so
    a sweeper never sees a registration that is not locked yet.
    """
    runs = pkgs_dir / RUNS
    runs.mkdir(parents=True, exist_ok=True)
    if sys.platform == "win32":
        yield
        return
    import fcntl

    tmp = runs / f".{TOKEN}.new"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.replace(tmp, runs / TOKEN)
        yield
    finally:
        with contextlib.suppress(OSError):
            (runs / TOKEN).unlink()
        os.close(fd)


def _token_of(name: str) -> str:
    """The writer token in one of our temporary names, or ''."""
    for mark in (".part-", ".tmp-"):
        if mark in name:
            return name.rsplit(mark, 1)[1]
    return ""


def sweep_cache(pkgs_dir: Path, cache: Path) -> int:
    """Remove temporaries whose writer is gone; returns how many were removed.

    Temporaries are listed *before* their writers are probed: a writer registers before it
    creates anything, so a temporary seen here belongs to a registration made earlier.
    """
    candidates: list[Path] = []
    # the names of the glob patterns '*.part-*' (archives) and '.*.tmp-*' (cache entries),
    # from one listing each: a glob costs more than the rest of a reused run's sweep
    for folder, dot, mark in ((pkgs_dir / "archives", "", ".part-"), (cache, ".", ".tmp-")):
        try:
            names = os.listdir(folder)
        except OSError:  # absent (or not a directory): nothing of ours to sweep there
            continue
        candidates.extend(
            folder / name for name in names if name.startswith(dot) and mark in name[len(dot) :]
        )
    removed = 0
    verdict: dict[str, bool] = {}
    for path in candidates:
        token = _token_of(path.name)
        if not token or token == TOKEN or not token.isalnum():
            continue
        if token not in verdict:
            verdict[token] = not locks.held(pkgs_dir / RUNS / token)
        if verdict[token]:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            removed += 1
    for token, dead in verdict.items():
        if dead:
            with contextlib.suppress(FileNotFoundError):
                (pkgs_dir / RUNS / token).unlink()
    return removed


# NamedTuples, not frozen dataclasses: each class costs every run ~0.2 ms to create, not ~1.3.


class Paths(NamedTuple):
    """The names one transaction on ``target`` uses, all beside it."""

    target: Path

    @property
    def lock(self) -> Path:
        return self.target.with_name(f".{self.target.name}.gpu-ci.lock")

    @property
    def journal(self) -> Path:
        return self.target.with_name(f".{self.target.name}.gpu-ci-journal.json")

    @property
    def staging(self) -> Path:
        return self.target.with_name(f".{self.target.name}.gpu-ci-new-{TOKEN}")

    @property
    def backup(self) -> Path:
        return self.target.with_name(f".{self.target.name}.gpu-ci-old-{TOKEN}")

    @property
    def work(self) -> Path:
        return self.target.with_name(f".{self.target.name}.gpu-ci-work-{TOKEN}")

    @property
    def probe(self) -> Path:
        """The rename probe's directory: made and removed by one process, with or without
        the lock (so never swept as another run's leftover while it may be live)."""
        return self.target.with_name(f".{self.target.name}.gpu-ci-probe-{TOKEN}")

    def beside(self, *kinds: str) -> list[Path]:
        """Our names beside the target of these kinds (``gpu-ci-new-``, ...), sorted: one
        listing, no glob (a target named like a pattern, ``env[1]``, is matched as it is
        written, and five globs cost a warm run 3 ms)."""
        starts = tuple(f".{self.target.name}.{kind}" for kind in kinds)
        parent = self.target.parent
        try:
            names = os.listdir(parent)
        except OSError:  # absent, or not a directory: nothing of ours there
            return []
        return sorted(parent / n for n in names if n.startswith(starts))

    def stale_probes(self, older_than: float = 3600.0) -> list[Path]:
        """Empty probe directories a run killed inside its three-syscall probe left: a live
        probe exists for milliseconds, so an hour-old one is nobody's."""
        now = time.time()
        out = []
        for p in self.beside("gpu-ci-probe-"):
            with contextlib.suppress(OSError):
                if (
                    now - p.lstat().st_mtime > older_than
                    and p.is_dir()
                    and not p.is_symlink()
                    and not any(p.iterdir())
                ):
                    out.append(p)
        return sorted(out)

    def leftovers(self) -> list[Path]:
        """Staging and work directories of earlier runs.

        Only the lock holder makes them."""
        return self.beside("gpu-ci-new-", "gpu-ci-work-", "gpu-ci-journal.json.tmp-")


def begin(paths: Paths) -> None:
    """Record the transaction before anything of it exists on disk."""
    _write_json(
        paths.journal,
        {
            "target": str(paths.target),
            "staging": str(paths.staging),
            "backup": str(paths.backup),
            "pid": os.getpid(),
            "started": time.time(),
        },
    )


def recover(paths: Paths, log: Log) -> str:
    """Finish or roll back what a killed or failed run left.

    Call it with the lock held.

    Returns what was done, '' when there was nothing to do.
    """
    done = ""
    try:
        journal = json.loads(paths.journal.read_text())
    except FileNotFoundError:
        journal = None
    except (OSError, ValueError):
        journal = {}  # torn write: the transaction had not started renaming anything
    if journal is not None:
        backup = Path(str(journal.get("backup") or ""))
        if journal.get("backup") and backup.exists() and backup.parent == paths.target.parent:
            if paths.target.exists():
                shutil.rmtree(backup)
                done = "finished an interrupted swap (dropped the old environment)"
            else:
                os.rename(backup, paths.target)
                done = "rolled back an interrupted swap (restored the old environment)"
    if not paths.target.exists() and not paths.target.is_symlink():
        legacy = sorted(paths.beside("gpu-ci-old-"), key=lambda p: p.stat().st_mtime)
        if legacy and (legacy[-1] / "conda-meta").is_dir():
            # gpu-ci 1.0.0 kept no journal: its backup, alone, is the environment to restore
            os.rename(legacy[-1], paths.target)
            done = done or f"restored {legacy[-1].name}, left by an interrupted gpu-ci 1.0.0"
    for probe in paths.stale_probes():
        with contextlib.suppress(OSError):
            probe.rmdir()
    for left in paths.leftovers():
        if left.is_dir() and not left.is_symlink():
            shutil.rmtree(left)
        else:
            left.unlink()
        done = done or "removed a staging directory an interrupted run left"
    if journal is not None:
        with contextlib.suppress(FileNotFoundError):
            paths.journal.unlink()
    if done:
        log(f"setup-conda-from-lock: {paths.target}: {done}.")
    return done


def swap(paths: Paths, crash: Callable[[], None]) -> None:
    """Put the complete staging directory in place of the target: two renames."""
    if paths.target.exists() or paths.target.is_symlink():
        os.rename(paths.target, paths.backup)
        crash()
    os.rename(paths.staging, paths.target)


def finish(paths: Paths) -> None:
    if paths.backup.exists():
        shutil.rmtree(paths.backup)
    with contextlib.suppress(FileNotFoundError):
        paths.journal.unlink()


def _write_json(path: Path, data: object) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{TOKEN}")
    with open(tmp, "w") as handle:
        json.dump(data, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


ENTRIES_LOCK = ".gpu-ci-entries.lock"
"""In the package cache: held shared by every job while it links from cache entries, and
exclusively (briefly) by a job that replaces an entry that exists, so that no job links
half of one archive's files and half of another's."""


@contextlib.contextmanager
def shared(path: Path) -> Iterator[None]:
    """Hold a shared lock on ``path`` (created if needed): many holders at once, and none
    while another job holds it with ``exclusive``."""
    if sys.platform == "win32":
        yield
        return
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)
