"""A background process that outlives the step that starts it.

Composite actions have no post step. So gpu-monitor's sampler and gpu-lease's holder run
detached: one step starts them, a later step stops them. Both live in a job directory that
the job's later steps can write, as the same user, running a pull request's code. Every
rule here assumes those steps are hostile:

* the directory is this user's and nobody else's (``make_private``);
* the process gets an allow-list of the environment, never the job's ``env:``;
* its state file is read only when it is a regular file, and never past a size bound;
* a pid is signalled only while it still runs our module for this directory, checked
  again before ``SIGKILL`` (a pid can be recycled while we wait).

:class:`Detached` is one such process; :mod:`gpu_ci.cuda.monitor.sampler` and
:mod:`gpu_ci.cuda.lease.holder` each declare theirs.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import gpu_ci

# the rules for a planted file, shared with the github wing (re-exported for this wing)
from gpu_ci.regular_files import NotRegular as NotRegular
from gpu_ci.regular_files import open_regular as open_regular
from gpu_ci.regular_files import read_small as read_small

STATE_LIMIT = 2**16
"""A state file is a few hundred bytes; a larger one was not written by our process."""
BASE_KEEP = frozenset(
    {"PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "HOME", "LANG", "TZ", "TMPDIR", "RUNNER_TRACKING_ID"}
)
"""What every detached process keeps: the loader's and Python's paths, the locale, and the
runner's tracking id (so the runner's clean-up of the job's processes still ends it)."""


def make_private(directory: Path) -> str:
    """Make a job directory and its parent private to this user.

    Make ``directory`` and its parent this user's, mode 0700; '' or why not.

    Both must be real directories of this user. A group or other bit is cleared. Without
    ``RUNNER_TEMP`` they live in the shared temporary directory, where another user could
    have made them first and planted links in them.
    """
    with contextlib.suppress(OSError):  # RUNNER_TEMP itself (the runner makes it)
        directory.parent.parent.mkdir(parents=True, exist_ok=True)
    for path in (directory.parent, directory):
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(path, 0o700)
            info = os.lstat(path)
            if not stat.S_ISDIR(info.st_mode):
                return f"{path} is not a directory (a symbolic link?)"
            if info.st_uid != os.geteuid():
                return f"{path} belongs to uid {info.st_uid}, not to this user ({os.geteuid()})"
            if info.st_mode & 0o077:
                os.chmod(path, 0o700)
        except OSError as exc:
            return f"{path}: {exc.strerror}"
    return ""


def open_log(path: Path) -> int:
    """Open the process's log for appending, refusing links and FIFOs.

    Open the process's log for appending; never through a link or into a FIFO.
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
    fd = os.open(path, flags | os.O_CLOEXEC, 0o600)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotRegular(errno.EINVAL, "not a regular file (a FIFO or device?)", str(path))
    return fd


@dataclass(frozen=True)
class Detached:
    """One kind of detached process: its module, state file and environment.

    The process runs ``python -m <module> <directory> ...``. Its command line is how a
    later step recognises it: ``module`` and ``directory`` must both be arguments.
    """

    module: str
    state_name: str
    log_name: str
    keep: frozenset[str] = BASE_KEEP
    keep_prefixes: tuple[str, ...] = ("LC_",)

    def read_state(self, directory: Path) -> dict[str, Any] | None:
        """Read the process's state file, refusing anything suspicious.

        The process's state file as a dict; None when absent or not ours.

        Refused: a link, a FIFO, a device, more than ``STATE_LIMIT`` bytes, bad JSON.
        """
        try:
            raw = read_small(directory / self.state_name, STATE_LIMIT + 1)
            data = json.loads(raw.decode("utf-8")) if len(raw) <= STATE_LIMIT else None
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def is_ours(self, pid: int, directory: Path) -> bool:
        """Whether ``pid`` runs this module for ``directory``, as this user.

        Never signal a recycled pid: another process may have it now.
        """
        if pid <= 0:
            return False
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            owner = os.stat(f"/proc/{pid}").st_uid
        except OSError:
            return False
        args = argv.split("\0")
        return owner == os.geteuid() and self.module in args and str(directory) in args

    def environment(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The allow-listed environment, with this checkout's source first on PYTHONPATH.

        The process outlives the step, into steps that may run a pull request's code as
        the same user, who can read /proc/<pid>/environ. So it never gets the job's
        ``env:``: a secret there may have any name. The bootstrapped venv holds
        dependencies only, so the process must load this checkout's code.
        """
        env = {
            k: v for k, v in environ.items() if k in self.keep or k.startswith(self.keep_prefixes)
        }
        src = str(Path(gpu_ci.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        return env

    def spawn(
        self, directory: Path, args: Sequence[str], environ: Mapping[str, str], *, pipes: bool
    ) -> subprocess.Popen[bytes]:
        """Start the process detached, in a new session.

        Start the process in a new session; its stderr goes to its log.

        With ``pipes`` its stdin and stdout are pipes to talk through; else stdin is
        /dev/null and stdout goes to the log too.
        """
        log = open_log(directory / self.log_name)
        with os.fdopen(log, "ab") as handle:
            stdin: int | IO[bytes] = subprocess.PIPE if pipes else subprocess.DEVNULL
            stdout: int | IO[bytes] = subprocess.PIPE if pipes else handle
            return subprocess.Popen(
                [sys.executable, "-m", self.module, str(directory), *args],
                stdin=stdin,
                stdout=stdout,
                stderr=handle,
                cwd=str(directory),
                env=self.environment(environ),
                start_new_session=True,
                close_fds=True,
            )

    def log_tail(self, directory: Path, chars: int = 800) -> str:
        """The end of the process's log, for an error message."""
        try:
            raw = read_small(directory / self.log_name, 2**20)
        except OSError:
            return "(no log)"
        return raw.decode("utf-8", "replace").strip()[-chars:] or "(empty log)"


@dataclass(frozen=True)
class Stop:
    """How to stop one running process: its pid and how to tell it ended."""

    pid: int
    directory: Path
    ended: Callable[[], bool]
    """True once the process let go of what it held (its lock)."""
    wait_s: float = 15.0
    poll_s: float = 0.05
    sleep: Callable[[float], None] = time.sleep


def stop(process: Detached, how: Stop) -> str:
    """Stop a process of ours: ``stopped``, ``killed`` or ``not-ours``.

    SIGTERM first. ``killed``: it ignored SIGTERM for ``wait_s``, so it got SIGKILL, but
    only after checking again that the pid is still ours.
    """
    if not process.is_ours(how.pid, how.directory):
        return "not-ours"
    with contextlib.suppress(ProcessLookupError):
        os.kill(how.pid, signal.SIGTERM)
    deadline = time.monotonic() + how.wait_s
    while time.monotonic() < deadline:
        if how.ended():
            return "stopped"
        how.sleep(how.poll_s)
    if not process.is_ours(how.pid, how.directory):
        return "stopped"
    with contextlib.suppress(ProcessLookupError):
        os.kill(how.pid, signal.SIGKILL)
    return "killed"
