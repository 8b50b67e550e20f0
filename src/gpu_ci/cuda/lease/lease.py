"""gpu-lease's rules: which GPUs of a shared host a job may take, and how the lease is kept.

Several self-hosted runners on one 4- or 8-GPU host collide when each job uses every GPU.
A lease is one ``flock`` per GPU UUID on a file in a host-wide directory, held by a small
detached holder process (:mod:`gpu_ci.cuda.lease.holder`) for as long as the job runs.

Why ``flock``: the kernel releases a lock when its last fd closes, so a holder that crashes
or is ``kill -9``-ed frees its GPUs at once; no stale lease needs reaping and none can be
reaped while its holder lives (the lock decides, never a file's content). Beside each lock,
``<uuid>.<uid>.json`` says who holds it (job, repository, runner, pid, user) for the "who
holds what" message; it is informational only (a dead holder's file is ignored, and
replaced by the next lease of that user).

Why these file rules (the directory is shared among OS users, like ``/tmp``):

* The directory is created ``1777`` (sticky): anyone may create lock files, no one may
  delete or rename another user's. One that is a symbolic link, not a directory, writable
  by others without the sticky bit, or owned by someone other than root or this user (a
  sticky directory's owner may delete anyone's files, and a deleted lock file lets two jobs
  lock two different files) is refused.
* Lock files are opened with ``O_NOFOLLOW | O_NONBLOCK`` (no planted link, no FIFO that
  blocks the open) and must be regular files. An existing file is opened *without*
  ``O_CREAT``: Linux's ``fs.protected_regular`` refuses ``O_CREAT`` on another user's file in
  a sticky world-writable directory. It is opened read-write where we may, else read-only:
  ``flock`` needs only an open fd. A lock file must be this user's or root's: its owner
  may delete it from the sticky directory, and a job that then creates a new one locks
  another file than the job still holding the old one. Another user's lock file is
  skipped and named; an admin pre-creates root-owned ones for GPUs that several OS users
  lease. Among jobs of one OS user the lease is cooperative: each may delete the other's
  files.
* The info file's name carries the uid, so every user replaces only their own files (a
  rename over another user's file in a sticky directory fails). Another user may still
  plant a FIFO or link under that name: an info file is read only when it is a regular
  file of the uid its name gives (or root's), without following a link or blocking, and a
  holder gives its GPUs back before it cleans its info files up.

Which GPUs: one free of other leases (its lock is free), without compute processes (nothing
runs on a GPU nobody leased unless it is foreign: another runner that does not lease, or a
zombie of an earlier job), not in MIG mode (CUDA sees a MIG GPU's instances, never the
GPU by its UUID), and with ``min-free-memory`` free (and room for one test worker of
``memory-per-worker``). A GPU whose lock file cannot be used (a planted FIFO or link) is
skipped and named. The scan takes GPUs in NVML's (PCI bus) order and gives every
lock back when it cannot take enough, then tries again: no job waits while holding GPUs,
so jobs waiting for each other never deadlock.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from gpu_ci.atomic import write_atomic
from gpu_ci.cuda.detached import read_small
from gpu_ci.locks import lock_now

DEFAULT_DIRECTORY = "/tmp/gpu-ci-leases"
DIRECTORY_VARIABLE = "GPU_CI_LEASE_DIR"
GIB = 1024**3


@dataclass(frozen=True)
class Candidate:
    """A GPU as the scan reads it from NVML."""

    index: int
    uuid: str
    total_bytes: int | None
    free_bytes: int | None
    """None where NVML could not answer."""
    processes: int | None
    """Compute processes on it; None where NVML could not list them."""
    mig: bool = False
    """MIG mode is on: CUDA sees its MIG devices, never the whole GPU by its UUID."""


@dataclass(frozen=True)
class Holder:
    """Who holds a GPU (from the info file beside its lock)."""

    uuid: str
    pid: int
    user: str = ""
    repository: str = ""
    run_id: str = ""
    job: str = ""
    runner: str = ""
    started: float = 0.0

    def describe(self) -> str:
        where = "/".join(p for p in (self.repository, self.run_id, self.job) if p)
        parts = [f"pid {self.pid}"] + ([f"user {self.user}"] if self.user else [])
        parts += [f"runner {self.runner}"] if self.runner else []
        return (f"job {where} " if where else "") + "(" + ", ".join(parts) + ")"


def directory_from(value: str, environ: Mapping[str, str]) -> Path:
    """The input, else ``$GPU_CI_LEASE_DIR``, else ``/tmp/gpu-ci-leases``: every runner on a
    host must name the same one (the README's set-up puts it in the runners' ``.env``)."""
    return Path(value.strip() or environ.get(DIRECTORY_VARIABLE, "").strip() or DEFAULT_DIRECTORY)


def prepare_directory(path: Path) -> str:
    """Create the shared lease directory, or say why it is unsafe.

    Create the lease directory (``1777``) if absent; '' when it is safe to use, else why not.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        try:
            os.mkdir(path, 0o700)
            os.chmod(path, 0o1777)  # the umask would narrow mkdir's mode
        except FileExistsError:
            pass  # another job made it first: check theirs
        except OSError as exc:
            return f"cannot create it: {exc.strerror}"
        try:
            info = os.lstat(path)
        except OSError as exc:
            return exc.strerror or str(exc)
    except OSError as exc:
        return exc.strerror or str(exc)
    return directory_problem(info.st_mode, info.st_uid, os.geteuid())


def directory_problem(mode: int, uid: int, euid: int) -> str:
    """Pure: '' when a directory of this mode and owner is safe to hold locks, else why."""
    if stat.S_ISLNK(mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(mode):
        return "it is not a directory"
    if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
        return "others may write it and it has no sticky bit (anyone could delete a lock)"
    if uid not in (0, euid):
        return (
            f"it belongs to uid {uid}, who could delete the other users' lock files; "
            "create it as root (install -d -m 1777)"
        )
    return ""


def lock_name(uuid: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in uuid) + ".lock"


def open_lock(directory: Path, uuid: str) -> int:
    """Open a GPU's lock file, refusing links and FIFOs.

    An fd on the GPU's lock file (created ``0644`` if absent); raises ``OSError``.
    """
    path = directory / lock_name(uuid)
    flags = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    for _ in range(3):
        for mode in (os.O_RDWR, os.O_RDONLY):
            try:
                fd = os.open(path, mode | flags)
            except PermissionError:
                continue
            except FileNotFoundError:
                break
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                os.close(fd)
                raise OSError(f"{path} is not a regular file")
            if info.st_uid not in (os.geteuid(), 0):
                os.close(fd)
                raise OSError(
                    f"{path} belongs to uid {info.st_uid}, who may delete it and so free "
                    "the lease; for GPUs that several users lease, an admin creates "
                    "root-owned lock files (see the gpu-lease README)"
                )
            return fd
        else:
            raise PermissionError(f"cannot open {path} (neither read-write nor read-only)")
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | flags, 0o644)
        except FileExistsError:
            continue  # another job created it between our two opens
    raise OSError(f"cannot open {path}")


def try_lock(directory: Path, uuid: str) -> int | None:
    """Take a GPU's lock without waiting.

    The GPU's lock as an open fd (close it to release), or None when another holds it.
    """
    return lock_now(open_lock(directory, uuid))


def unfit(gpu: Candidate, min_free: int) -> str:
    """Pure: '' when an unleased GPU may be leased, else why not (for the message)."""
    if gpu.mig:
        return (
            "MIG is enabled (a lease takes whole GPUs; CUDA would see none of it by its GPU UUID)"
        )
    if gpu.processes is None:
        return "its compute processes cannot be read"
    if gpu.processes:
        return f"{gpu.processes} foreign compute process(es) run on it"
    if gpu.free_bytes is None:
        return "its memory cannot be read"
    if gpu.free_bytes < min_free:
        return f"{gib(gpu.free_bytes)} free, below the {gib(min_free)} asked for"
    return ""


def gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def worker_devices(gpus: Sequence[Candidate], per_worker: int | None) -> tuple[str, ...]:
    """Pure: the UUID each pytest-xdist worker uses, by worker number (``gw0`` first).
    Without ``per_worker`` one worker per GPU; with it, as many as each GPU's free memory
    holds (at least one: a GPU is leased only with room for one), interleaved so that the
    first workers land on different GPUs."""
    slots = [
        1 if per_worker is None or g.free_bytes is None else max(1, g.free_bytes // per_worker)
        for g in gpus
    ]
    out: list[str] = []
    for round_ in range(max(slots, default=0)):
        out += [g.uuid for g, n in zip(gpus, slots) if round_ < n]
    return tuple(out)


# -- who holds what -----------------------------------------------------------------------


INFO_LIMIT = 8192
"""An info file is a few hundred bytes; a larger one is not read past this."""


def info_path(directory: Path, uuid: str, uid: int) -> Path:
    return directory / f"{lock_name(uuid)[:-5]}.{uid}.json"


def write_info(directory: Path, holder: Holder) -> None:
    """Record who holds a GPU, beside its lock.

    Write the holder's name beside its lock, atomically (a reader never sees half a file);
    informational, so a full disk loses only the name, never the lease.
    """
    target = info_path(directory, holder.uuid, os.geteuid())
    with contextlib.suppress(
        OSError
    ):  # gpu_ci.atomic: replaces a planted link, never writes through it
        write_atomic(target, json.dumps(asdict(holder)) + "\n", make_parent=False)


def remove_info(directory: Path, uuids: Iterable[str], pid: int) -> None:
    """Remove this user's info files that still name ``pid`` (never another holder's)."""
    for uuid in uuids:
        path = info_path(directory, uuid, os.geteuid())
        found = read_info(path)
        if found is not None and found.pid == pid:
            with contextlib.suppress(OSError):
                path.unlink()


def read_info(path: Path) -> Holder | None:
    """The holder an info file names, if the file is its user's.

    Another OS user may plant any name in the sticky directory, a FIFO included, which a
    blocking ``open`` would wait on forever. So the file is read as a planted file
    (``detached.read_small``: no link, no blocking, bounded) and must belong to the uid
    its name gives, or to root.
    """
    uid = path.name[:-5].rpartition(".")[2]
    if not uid.isdigit():
        return None
    try:
        data = json.loads(read_small(path, INFO_LIMIT, owners={int(uid), 0}))
        fields = {k: data[k] for k in Holder.__dataclass_fields__ if k in data}
        return Holder(**fields)
    except (OSError, ValueError, TypeError, KeyError):
        return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    except OSError:
        return False
    return True


def holders(directory: Path, uuids: Iterable[str]) -> dict[str, Holder]:
    """Name the live holder of each leased GPU.

    The live holder named for each GPU that has one (the newest when several claim it).
    """
    out: dict[str, Holder] = {}
    for uuid in uuids:
        stem = lock_name(uuid)[:-5]
        found = [
            h
            for p in directory.glob(f"{stem}.*.json")
            if (h := read_info(p)) is not None and h.pid > 0 and pid_alive(h.pid)
        ]
        if found:
            out[uuid] = max(found, key=lambda h: h.started)
    return out


def busy_message(
    count: int,
    minutes: float,
    skipped: Mapping[str, str],
    held: Mapping[str, Holder],
    gpus: Sequence[Candidate],
) -> str:
    """Pure: why no lease came within ``minutes``: every GPU and who holds it, or why it
    was skipped."""
    lines = []
    for gpu in gpus:
        if gpu.uuid in held:
            why = "leased by " + held[gpu.uuid].describe()
        else:
            why = skipped.get(gpu.uuid, "free")
        lines.append(f"GPU {gpu.index} {gpu.uuid}: {why}")
    return (
        f"no {count} GPU(s) could be leased within {minutes:g} minute(s) on this host "
        f"({len(gpus)} GPU(s)): " + "; ".join(lines) + "."
    )
