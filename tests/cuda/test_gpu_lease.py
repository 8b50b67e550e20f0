"""gpu-lease's rules, without a process: the directory's safety, which GPU is fit, the
worker map, the "who holds what" message, and the inputs' errors."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from gpu_ci.cuda.lease import lease
from gpu_ci.cuda.lease.lease import GIB, Candidate, Holder
from testkit.shared import ROOT

DIR = stat.S_IFDIR


@pytest.mark.parametrize(
    ("mode", "uid", "why"),
    [
        (DIR | 0o1777, 0, ""),
        (DIR | 0o1777, 1000, ""),  # this user's own
        (DIR | 0o755, 0, ""),
        (DIR | 0o777, 0, "no sticky bit"),
        (stat.S_IFLNK | 0o777, 0, "symbolic link"),
        (stat.S_IFREG | 0o644, 0, "not a directory"),
        (DIR | 0o1777, 1001, "belongs to uid 1001"),
    ],
)
def test_directory_problem(mode: int, uid: int, why: str):
    got = lease.directory_problem(mode, uid, 1000)
    assert (why in got and got) if why else got == ""


def test_prepare_directory_creates_it_sticky_and_refuses_a_link(tmp_path: Path):
    made = tmp_path / "leases"
    assert lease.prepare_directory(made) == ""
    assert stat.S_IMODE(made.lstat().st_mode) == 0o1777
    link = tmp_path / "link"
    link.symlink_to(made)
    assert "symbolic link" in lease.prepare_directory(link)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="flock and mkfifo")
def test_lock_files_refuse_links_and_fifos_and_lock_once(tmp_path: Path):
    uuid = "GPU-1"
    (tmp_path / "target").write_text("")
    (tmp_path / lease.lock_name("GPU-link")).symlink_to(tmp_path / "target")
    with pytest.raises(OSError):
        lease.open_lock(tmp_path, "GPU-link")
    os.mkfifo(tmp_path / lease.lock_name("GPU-fifo"))
    with pytest.raises(OSError, match="not a regular file"):
        lease.open_lock(tmp_path, "GPU-fifo")  # O_NONBLOCK: no hang on the open
    fd = lease.try_lock(tmp_path, uuid)
    assert fd is not None
    assert lease.try_lock(tmp_path, uuid) is None  # a second open file: the lock is held
    os.close(fd)
    again = lease.try_lock(tmp_path, uuid)
    assert again is not None
    os.close(again)
    assert stat.S_IMODE((tmp_path / lease.lock_name(uuid)).stat().st_mode) & 0o044


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_a_lock_file_of_another_non_root_user_is_refused(tmp_path: Path):
    """Its owner may delete it from the sticky directory after we lock it: a third job then
    creates and locks a new file for the same GPU while our lease still holds the old one."""
    theirs = tmp_path / lease.lock_name("GPU-theirs")
    theirs.write_text("")
    os.chown(theirs, 65534, 65534)
    with pytest.raises(OSError, match="belongs to uid 65534, who may delete it"):
        lease.open_lock(tmp_path, "GPU-theirs")
    root_owned = tmp_path / lease.lock_name("GPU-admin")
    root_owned.write_text("")  # pre-created by an admin: root's, 0644
    fd = lease.try_lock(tmp_path, "GPU-admin")
    assert fd is not None
    os.close(fd)


def test_lock_name_keeps_a_uuid_inside_the_directory():
    assert lease.lock_name("GPU-../../etc/x") == "GPU-.._.._etc_x.lock"
    assert "/" not in lease.lock_name("a/b")


def gpu(index: int, free_gib: float | None = 80, procs: int | None = 0) -> Candidate:
    free = None if free_gib is None else int(free_gib * GIB)
    return Candidate(index, f"GPU-{index}", 80 * GIB, free, procs)


@pytest.mark.parametrize(
    ("candidate", "min_free", "why"),
    [
        (gpu(0), 0, ""),
        (gpu(0, free_gib=10), 20 * GIB, "10.0 GiB free, below the 20.0 GiB"),
        (gpu(0, procs=2), 0, "2 foreign compute process(es)"),
        (gpu(0, procs=None), 0, "processes cannot be read"),
        (gpu(0, free_gib=None), 0, "memory cannot be read"),
    ],
)
def test_unfit(candidate: Candidate, min_free: int, why: str):
    got = lease.unfit(candidate, min_free)
    assert (why in got) if why else got == ""


def test_worker_devices_one_per_gpu_without_a_size():
    assert lease.worker_devices([gpu(0), gpu(1)], None) == ("GPU-0", "GPU-1")


def test_worker_devices_by_memory_interleaved():
    got = lease.worker_devices(
        [gpu(0, free_gib=40), gpu(1, free_gib=17), gpu(2, free_gib=5)], 8 * GIB
    )
    # 5, 2 and (at least) 1 workers; gw0..gw2 on three different GPUs
    assert got == ("GPU-0", "GPU-1", "GPU-2", "GPU-0", "GPU-1", "GPU-0", "GPU-0", "GPU-0")


def test_busy_message_names_holders_and_reasons():
    held = {"GPU-0": Holder("GPU-0", 77, "ci", "octo/repo", "123", "tests", "runner-a")}
    text = lease.busy_message(
        2, 5, {"GPU-1": "1 foreign compute process(es) run on it"}, held, [gpu(0), gpu(1), gpu(2)]
    )
    assert text.startswith("no 2 GPU(s) could be leased within 5 minute(s) on this host (3 GPU(s))")
    assert (
        "GPU 0 GPU-0: leased by job octo/repo/123/tests (pid 77, user ci, runner runner-a)"
    ) in text
    assert "GPU 1 GPU-1: 1 foreign compute process(es) run on it" in text
    assert "GPU 2 GPU-2: free" in text


def test_holders_ignore_dead_pids_and_bad_files(tmp_path: Path):
    live = Holder("GPU-0", os.getpid(), started=2.0)
    dead = Holder("GPU-0", 2**22 + 12345, started=3.0)  # above pid_max's default
    lease.write_info(tmp_path, live)
    (tmp_path / "GPU-0.99999.json").write_text(json.dumps(asdict(dead)))
    (tmp_path / "GPU-0.4.json").write_text("not json")
    assert lease.holders(tmp_path, ["GPU-0", "GPU-1"]) == {"GPU-0": live}
    lease.remove_info(tmp_path, ["GPU-0"], pid=1)  # not its pid: kept
    assert lease.holders(tmp_path, ["GPU-0"]) == {"GPU-0": live}
    lease.remove_info(tmp_path, ["GPU-0"], pid=os.getpid())
    assert lease.holders(tmp_path, ["GPU-0"]) == {}


def test_directory_from_input_then_variable_then_default():
    assert lease.directory_from(" /x ", {"GPU_CI_LEASE_DIR": "/y"}) == Path("/x")
    assert lease.directory_from("", {"GPU_CI_LEASE_DIR": "/y"}) == Path("/y")
    assert lease.directory_from("", {}) == Path(lease.DEFAULT_DIRECTORY)


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("INPUT_GPUS", "0", "whole number of GPUs from 1 to 64"),
        ("INPUT_GPUS", "two", "whole number of GPUs"),
        ("INPUT_WAIT_MINUTES", "-1", "minutes from 0 to 1440"),
        ("INPUT_MIN_FREE_MEMORY", "lots", "size such as 20GiB"),
        ("INPUT_MEMORY_PER_WORKER", "8 parsecs", "input 'memory-per-worker'"),
        ("INPUT_MODE", "grab", "mode"),
    ],
)
def test_bad_inputs_are_usage_errors(run_cli, tmp_path: Path, name: str, value: str, says: str):
    env = {
        "INPUT_MODE": "lease",
        "RUNNER_TEMP": str(tmp_path),
        name: value,
        "GPU_CI_LEASE_DIR": str(tmp_path / "leases"),
    }
    result = run_cli(["gpu-lease"], env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert says in result.stdout
    assert not (tmp_path / "leases").exists()  # refused before anything was made


def readme_conftest() -> str:
    text = (ROOT / "actions" / "gpu-lease" / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    (snippet,) = [b for b in blocks if "PYTEST_XDIST_WORKER" in b]
    return snippet


@pytest.mark.parametrize(
    ("worker", "expected"), [("gw0", "GPU-a"), ("gw4", "GPU-b"), ("", "unchanged")]
)
def test_the_readmes_conftest_gives_each_worker_its_gpu(tmp_path: Path, worker: str, expected: str):
    """The documented recipe, run by pytest as a project's top-level conftest.py would be
    (a worker's PYTEST_XDIST_WORKER set as pytest-xdist sets it; gw4 of 3 slots wraps)."""
    (tmp_path / "conftest.py").write_text(readme_conftest())
    (tmp_path / "test_worker.py").write_text(
        "import os\n\ndef test_device():\n"
        f"    assert os.environ['CUDA_VISIBLE_DEVICES'] == {expected!r}\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
    env.update(GPU_CI_WORKER_DEVICES="GPU-a,GPU-b,GPU-a", CUDA_VISIBLE_DEVICES="unchanged")
    if worker:
        env["PYTEST_XDIST_WORKER"] = worker
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_the_job_process_is_the_parent_of_the_steps_shell():
    """As on a runner (Runner.Worker -> the step's bash -> python): here this test process
    plays Runner.Worker. ``; true`` keeps bash from exec-ing python in its place."""
    code = "from gpu_ci.cuda.lease.holder import job_process; print(job_process({}))"
    done = subprocess.run(
        ["bash", "-c", f'"{sys.executable}" -c "{code}"; true'],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
    )
    assert int(done.stdout) == os.getpid()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_a_job_is_its_pid_and_start_time():
    from gpu_ci.cuda.lease.holder import job_alive, job_process, start_time

    me = os.getpid()
    assert job_alive(me, start_time(me))
    assert not job_alive(me, str(int(start_time(me)) + 1))  # a recycled pid is another job
    assert not job_alive(2**22 + 12345, "")
    assert job_alive(0, "")  # no job to watch (a container): the holder ends with it
    assert job_process({"GPU_CI_LEASE_JOB_PID": "123"}) == 123
    assert job_process({"GPU_CI_LEASE_JOB_PID": "x"}) == 0
