"""The detached-process rules, the same for gpu-monitor's sampler and gpu-lease's holder.

The holder now refuses what the sampler refused: a state file that is a FIFO, a link or
too large; a private directory with group or other bits; a pid that stopped being ours
while we waited to SIGKILL it. Each process here is a stand-in with the real one's command
line, so the rules see what they would see on a runner.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpu_ci.cuda import detached
from gpu_ci.cuda.lease import holder, lease
from gpu_ci.cuda.monitor import control
from gpu_ci.cuda.monitor import sampler as monitor

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc, flock")

UUID = "GPU-00000000-0000-0000-0000-000000000001"

#: A stand-in holder: argv = [-c, module, state_dir, lock, ready, exec_after]. It ignores
#: SIGTERM, holds the lock, and after ``exec_after`` seconds (if > 0) becomes another
#: program under the same pid: a pid that is no longer ours.
STAND_IN = """
import fcntl, os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
fd = os.open(sys.argv[3], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.set_inheritable(fd, True)
open(sys.argv[4], "w").close()
after = float(sys.argv[5])
if after > 0:
    time.sleep(after)
    os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)"])
time.sleep(60)
"""


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []

    def start(module: str, directory: Path, lock: Path, exec_after: float = 0.0):
        ready = tmp_path / f"ready-{len(started)}"
        argv = [sys.executable, "-c", STAND_IN, module, str(directory), str(lock), str(ready)]
        proc = subprocess.Popen([*argv, str(exec_after)])
        started.append(proc)
        while not ready.exists():
            assert proc.poll() is None, "the stand-in died"
            time.sleep(0.01)
        return proc

    yield start
    for proc in started:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()


def holder_state(tmp_path: Path, stand_in) -> tuple[Path, dict[str, object]]:
    """A job's holder directory whose state names a live holder of ours."""
    state_dir = tmp_path / "gpu-ci-lease" / "job"
    assert detached.make_private(state_dir) == ""
    leases = tmp_path / "leases"
    leases.mkdir()
    proc = stand_in(holder.MARKER, state_dir, leases / lease.lock_name(UUID))
    return state_dir, {"pid": proc.pid, "directory": str(leases), "uuids": [UUID]}


def bounded(call: Callable[[], object], fifo: Path) -> object:
    """``call()``'s result; a failure if it blocked on ``fifo`` (a hang bound)."""
    got: list[object] = []
    thread = threading.Thread(target=lambda: got.append(call()), daemon=True)
    thread.start()
    thread.join(30)
    if thread.is_alive():
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(30)
        raise AssertionError(f"{call} blocked on a planted FIFO")
    return got[0]


def test_the_stand_in_passes_for_our_holder(tmp_path: Path, stand_in):
    # the control for the refusals below: a regular state file naming it is the job's lease
    state_dir, state = holder_state(tmp_path, stand_in)
    (state_dir / holder.STATE_NAME).write_text(json.dumps(state))
    assert holder.current(state_dir) == state


def test_the_holder_refuses_a_state_file_that_is_a_fifo(tmp_path: Path, stand_in):
    state_dir, _state = holder_state(tmp_path, stand_in)
    fifo = state_dir / holder.STATE_NAME
    os.mkfifo(fifo)
    assert bounded(lambda: holder.current(state_dir), fifo) == {}
    assert bounded(lambda: holder.release(state_dir), fifo) == "not-held"


def test_the_holder_refuses_a_state_file_that_is_a_link(tmp_path: Path, stand_in):
    state_dir, state = holder_state(tmp_path, stand_in)
    elsewhere = tmp_path / "planted.json"
    elsewhere.write_text(json.dumps(state))
    (state_dir / holder.STATE_NAME).symlink_to(elsewhere)
    assert holder.current(state_dir) == {}
    assert holder.release(state_dir) == "not-held"


def test_the_holder_refuses_an_oversized_state_file(tmp_path: Path, stand_in):
    state_dir, state = holder_state(tmp_path, stand_in)
    huge = json.dumps({**state, "pad": "x" * detached.STATE_LIMIT})
    (state_dir / holder.STATE_NAME).write_text(huge)
    assert holder.current(state_dir) == {}
    assert monitor.SAMPLER.read_state(state_dir) is None  # the same bound for the sampler


@pytest.mark.parametrize("mode", [0o750, 0o705, 0o770], ids=oct)
def test_the_monitor_clears_group_and_other_bits_as_the_lease_does(tmp_path: Path, mode: int):
    directory = tmp_path / "gpu-ci-monitor" / "job"
    directory.mkdir(parents=True)
    for path in (directory.parent, directory):
        path.chmod(mode)
    control.require_private(directory)
    for path in (directory.parent, directory):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700


@pytest.mark.slow
def test_the_holder_never_sigkills_a_pid_that_stopped_being_ours(tmp_path: Path, stand_in):
    state_dir = tmp_path / "gpu-ci-lease" / "job"
    assert detached.make_private(state_dir) == ""
    leases = tmp_path / "leases"
    leases.mkdir()
    # it ignores SIGTERM, then, while the release waits, its pid runs another program
    proc = stand_in(holder.MARKER, state_dir, leases / lease.lock_name(UUID), exec_after=0.5)
    state = {"pid": proc.pid, "directory": str(leases), "uuids": [UUID]}
    (state_dir / holder.STATE_NAME).write_text(json.dumps(state))
    assert holder.release(state_dir, wait_s=2.0) != "killed"
    assert proc.poll() is None, "SIGKILL went to a process that was no longer our holder"


@pytest.mark.slow
def test_the_sampler_never_sigkills_a_pid_that_stopped_being_ours(tmp_path: Path, stand_in):
    directory = tmp_path / "gpu-ci-monitor" / "job"
    control.require_private(directory)
    proc = stand_in(monitor.MARKER, directory, directory / monitor.LOCK_NAME, exec_after=0.5)
    (directory / monitor.STATE_NAME).write_text(json.dumps({"pid": proc.pid}))
    assert control.stop_sampler(directory, wait_s=2.0) != "killed"
    assert proc.poll() is None, "SIGKILL went to a process that was no longer our sampler"


def test_a_process_of_ours_that_ignores_sigterm_is_killed(tmp_path: Path, stand_in):
    state_dir, state = holder_state(tmp_path, stand_in)
    (state_dir / holder.STATE_NAME).write_text(json.dumps(state))
    assert holder.release(state_dir, wait_s=0.3) == "killed"


def test_a_process_of_another_directory_is_not_ours(tmp_path: Path, stand_in):
    state_dir, state = holder_state(tmp_path, stand_in)
    pid = int(str(state["pid"]))
    assert holder.HOLDER.is_ours(pid, state_dir)
    assert not holder.HOLDER.is_ours(pid, state_dir.parent / "other-job")
    assert not monitor.SAMPLER.is_ours(pid, state_dir)  # another module


def test_both_environments_are_allow_lists(tmp_path: Path):
    environ = {"PATH": "/bin", "GH_PAT": "secret", "GPU_CI_MONITOR_X": "1", "LC_ALL": "C"}
    for process in (holder.HOLDER, monitor.SAMPLER):
        env = process.environment(environ)
        assert "GH_PAT" not in env and env["PATH"] == "/bin" and env["LC_ALL"] == "C"
    assert "GPU_CI_MONITOR_X" in monitor.SAMPLER.environment(environ)
    assert "GPU_CI_MONITOR_X" not in holder.HOLDER.environment(environ)
