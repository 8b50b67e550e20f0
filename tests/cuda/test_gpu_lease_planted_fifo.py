"""gpu-lease against another OS user's FIFOs and files in the lease directory.

In the shared sticky directory another OS user may create any name, a FIFO included, and
the victim cannot rename over it. A blocking reader of a FIFO with no writer waits
forever: the holder of a job that ended (cancelled, ``kill -9``) would hang in its clean-up
while it still holds the GPU's ``flock``, and a job that found no free GPU would hang while
it names the holders. So info files (``<uuid>.<uid>.json``) are read like lock files: no
link, no blocking, a regular file of the uid the name gives (or root's), and the holder
frees its GPUs before it cleans up.

Driven as tests/cuda/test_gpu_lease_host.py drives gpu-lease: the real CLI and its detached
holder on the fake 8-GPU host, the victim's job as the user ``nobody`` and the attacker as
``daemon`` (``setpriv``), so the directory's sticky rules apply as on a shared runner host.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest

from testkit.cli import parse_output_file
from testkit.gpu_lease_env import UUIDS as HOST_UUIDS
from testkit.gpu_lease_env import fake_host_env
from testkit.shared import ROOT

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0 or not shutil.which("setpriv"),
    reason="needs Linux, root and setpriv to act as two other OS users",
)

UUIDS = list(HOST_UUIDS[:8])
VICTIM, ATTACKER = "nobody", "daemon"


def _as(user: str) -> list[str]:
    return [
        "setpriv",
        f"--reuid={user}",
        f"--regid={'nogroup' if user == 'nobody' else user}",
        "--clear-groups",
    ]


def _python_for_others() -> str:
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    for candidate in (f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        if (
            subprocess.run([*_as(VICTIM), candidate, "-c", "pass"], capture_output=True).returncode
            == 0
        ):
            return candidate
    pytest.skip(f"no {version} that the user nobody may run")


class Host:
    """The fake host, its lease directory, and the processes this test started."""

    def __init__(self, root: Path) -> None:
        import pynvml

        fake = fake_host_env(root)
        self.root = root
        self.leases = Path(fake["GPU_CI_LEASE_DIR"])
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("INPUT_", "GITHUB_", "RUNNER_", "CUDA_"))
        }
        self.env.update(fake, GPU_CI_LEASE_POLL_S="0.05")
        self.env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT / "src"), str(Path(pynvml.__file__).parent)]
        )
        self.procs: list[subprocess.Popen] = []

    def start(
        self, name: str, gpus: int, wait: str, user: str = ""
    ) -> tuple[subprocess.Popen, Path, subprocess.Popen]:
        temp = self.root / f"temp-{name}"
        temp.mkdir()
        output = temp / "output"
        for path in (output, temp / "env", temp / "summary"):
            path.touch()
        sleeper = subprocess.Popen(["sleep", "600"])
        self.procs.append(sleeper)
        env = dict(
            self.env,
            RUNNER_TEMP=str(temp),
            GITHUB_OUTPUT=str(output),
            GITHUB_ENV=str(temp / "env"),
            GITHUB_STEP_SUMMARY=str(temp / "summary"),
            GITHUB_ACTIONS="true",
            GITHUB_REPOSITORY="octo/gpu-repo",
            GITHUB_RUN_ID=f"run-{name}",
            GITHUB_JOB="tests",
            RUNNER_NAME=f"runner-{name}",
            GPU_CI_LEASE_JOB_PID=str(sleeper.pid),
            INPUT_MODE="lease",
            INPUT_GPUS=str(gpus),
            INPUT_WAIT_MINUTES=wait,
        )
        prefix, python = [], sys.executable
        if user:
            prefix, python = _as(user), _python_for_others()
            for path in (temp, output, temp / "env", temp / "summary"):
                shutil.chown(path, user)
        proc = subprocess.Popen(
            [*prefix, python, "-m", "gpu_ci", "gpu-lease"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=str(self.root),
        )
        self.procs.append(proc)
        return proc, output, sleeper

    def held(self, uuid: str) -> bool:
        from gpu_ci import locks
        from gpu_ci.cuda.lease.lease import lock_name

        return locks.held(self.leases / lock_name(uuid))

    def plant_fifo(self, name: str) -> None:
        subprocess.run([*_as(ATTACKER), "mkfifo", str(self.leases / name)], check=True)

    def holders(self) -> list[int]:
        """The detached holders this test's jobs started: their command lines name our root."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"gpu_ci.cuda.lease.holder" in argv and any(
                a.startswith(str(self.root).encode()) for a in argv
            ):
                found.append(int(entry.name))
        return found


@pytest.fixture
def host() -> Iterator[Host]:
    root = Path(tempfile.mkdtemp(prefix="gpu-lease-red-"))
    root.chmod(0o755)
    made = Host(root)
    try:
        yield made
    finally:
        for pid in made.holders():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        for proc in made.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        shutil.rmtree(root, ignore_errors=True)


def _finish(proc: subprocess.Popen, timeout: float = 30) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"gpu-lease still running after {timeout:g} s (hung)")
    return proc.returncode, out


def test_a_fifo_named_as_the_victims_info_file_never_keeps_a_dead_jobs_gpu(host):
    """Another user plants FIFOs ``<uuid>.<victim uid>.json``; a killed job's GPU stays locked."""
    from gpu_ci.cuda.lease.lease import lock_name, prepare_directory

    assert prepare_directory(host.leases) == ""
    uid = int(subprocess.run(["id", "-u", VICTIM], capture_output=True, text=True).stdout)
    for uuid in UUIDS:
        host.plant_fifo(f"{lock_name(uuid)[:-5]}.{uid}.json")
    proc, output, sleeper = host.start("victim", gpus=1, wait="0.1", user=VICTIM)
    code, out = _finish(proc)
    assert code == 0, out
    leased = parse_output_file(output.read_text())["gpu-uuids"]
    uuid = next(u for u in UUIDS if u in leased)
    assert host.held(uuid)
    sleeper.kill()  # the job ends without its release step (cancelled, kill -9)
    sleeper.wait()
    deadline = time.monotonic() + 30
    while host.held(uuid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not host.held(uuid), "the dead job's holder hangs on the planted FIFO, GPU still locked"


def test_a_fifo_beside_the_locks_never_hangs_a_job_that_found_no_gpu(host):
    """Another user's FIFO beside the locks hangs a job finding no GPU."""
    from gpu_ci.cuda.lease.lease import lock_name, prepare_directory

    assert prepare_directory(host.leases) == ""
    first, _output, _sleeper = host.start("first", gpus=1, wait="0.1")
    assert _finish(first)[0] == 0
    host.plant_fifo(f"{lock_name(UUIDS[0])[:-5]}.1.json")
    short, _output, _sleeper = host.start("short", gpus=8, wait="0")
    code, out = _finish(short)
    assert code == 1 and "could be leased" in out, out


def test_an_info_file_owned_by_another_user_than_its_name_gives_is_not_read(tmp_path):
    """Another user's file under the victim's name names no holder."""
    from gpu_ci.cuda.lease.lease import Holder, info_path, read_info

    uid = int(subprocess.run(["id", "-u", VICTIM], capture_output=True, text=True).stdout)
    path = info_path(tmp_path, UUIDS[0], uid)
    path.write_text(json.dumps(asdict(Holder(uuid=UUIDS[0], pid=os.getpid(), started=1.0))))
    shutil.chown(path, ATTACKER)
    assert read_info(path) is None
    shutil.chown(path, VICTIM)
    found = read_info(path)
    assert found is not None and found.pid == os.getpid()
