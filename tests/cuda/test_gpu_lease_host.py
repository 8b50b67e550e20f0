"""gpu-lease on a shared host: the real CLI and its detached holders against a fake 8-GPU
host (the fake libnvidia-ml.so.1), one lease directory, several concurrent jobs.

Every wait here bounds a hang (a holder that never answers or never ends); nothing is
timed. Each job's "job process" is a ``sleep`` the test owns (``GPU_CI_LEASE_JOB_PID``):
ending it is the job's end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from testkit.cli import parse_output_file
from testkit.gpu_lease_env import UUIDS as HOST_UUIDS
from testkit.gpu_lease_env import fake_host_env
from testkit.gpu_monitor_env import wait_for_stop_line
from testkit.shared import ROOT

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="gpu-lease's locks and holders are Linux's"
)

UUIDS = list(HOST_UUIDS[:8])


@dataclass
class Job:
    name: str
    proc: subprocess.Popen[str]
    sleeper: subprocess.Popen[bytes]
    output: Path
    temp: Path
    stdout: str = ""

    def finish(self, timeout: float = 120) -> int:
        self.stdout, _ = self.proc.communicate(timeout=timeout)
        return self.proc.returncode

    @property
    def outputs(self) -> dict[str, str]:
        return parse_output_file(self.output.read_text())

    @property
    def uuids(self) -> list[str]:
        return json.loads(self.outputs["gpu-uuids"])

    def holder_pid(self) -> int:
        state = next(self.temp.glob("gpu-ci-lease/*/holder.json"))
        return int(json.loads(state.read_text())["pid"])


@dataclass
class Host:
    root: Path
    env: dict[str, str]
    leases: Path
    jobs: list[Job] = field(default_factory=list)

    def start(
        self,
        name: str,
        *,
        gpus: int = 2,
        wait: str = "1",
        mode: str = "lease",
        user: str = "",
        extra: dict[str, str] | None = None,
        job: Job | None = None,
    ) -> Job:
        temp = job.temp if job else self.root / f"temp-{name}"
        temp.mkdir(exist_ok=True)
        output = temp / f"output-{mode}"
        output.write_text("")
        for name_ in ("env", "summary"):
            (temp / name_).touch()
        sleeper = job.sleeper if job else subprocess.Popen(["sleep", "600"])
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
            INPUT_MODE=mode,
            INPUT_GPUS=str(gpus),
            INPUT_WAIT_MINUTES=wait,
            **(extra or {}),
        )
        prefix, python = [], sys.executable
        if user:
            prefix = ["setpriv", f"--reuid={user}", "--regid=nogroup", "--clear-groups"]
            python = other_users_python()
            env["PYTHONPATH"] += os.pathsep + site_packages()
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
        made = Job(name, proc, sleeper, output, temp)
        if job is None:
            self.jobs.append(made)
        return made

    def lease(self, name: str, **kwargs: object) -> Job:
        job = self.start(name, **kwargs)  # type: ignore[arg-type]
        assert job.finish() == 0, job.stdout
        return job

    def held(self, uuid: str) -> bool:
        from gpu_ci import locks
        from gpu_ci.cuda.lease.lease import lock_name

        return locks.held(self.leases / lock_name(uuid))

    def wait_free(self, uuids: list[str], timeout: float = 30) -> None:
        """Bounds a holder that does not end; the holder polls its job every 0.05 s here."""
        deadline = time.monotonic() + timeout
        while any(self.held(u) for u in uuids):
            assert time.monotonic() < deadline, f"still held: {uuids}"
            time.sleep(0.05)


def site_packages() -> str:
    import pynvml

    return str(Path(pynvml.__file__).parent)


def other_users_python() -> str:
    """An interpreter of this Python version that another user may run (the venv's links
    into root's home, which other users cannot enter): the system's, with the venv's
    site-packages on PYTHONPATH."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    for candidate in (f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        probe = subprocess.run(
            [
                "setpriv",
                "--reuid=nobody",
                "--regid=nogroup",
                "--clear-groups",
                candidate,
                "-c",
                "pass",
            ],
            capture_output=True,
        )
        if probe.returncode == 0:
            return candidate
    pytest.skip(f"no {version} that the user nobody may run (the venv's is in root's home)")


def make_host(root: Path, busy: dict[int, int] | None = None, mig: tuple[int, ...] = ()) -> Host:
    fake = fake_host_env(root, busy=busy, mig=mig)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("INPUT_", "GITHUB_", "RUNNER_", "CUDA_"))
    }
    env.update(fake, GPU_CI_LEASE_POLL_S="0.05", PYTHONPATH=str(ROOT / "src"))
    return Host(root, env, Path(fake["GPU_CI_LEASE_DIR"]))


@pytest.fixture
def host_root() -> Iterator[Path]:
    """A world-readable root (pytest's tmp_path is private to root): a second OS user's
    job must load the same fake library and source."""
    root = Path(tempfile.mkdtemp(prefix="gpu-lease-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def stop_all(host: Host) -> None:
    for job in host.jobs:
        if job.proc.poll() is None:
            job.proc.kill()
        job.sleeper.kill()
        job.sleeper.wait()


@pytest.fixture
def host(host_root: Path) -> Iterator[Host]:
    made = make_host(host_root)
    yield made
    stop_all(made)


def test_four_jobs_get_disjoint_pairs_a_fifth_names_the_holders_kill_9_frees(host: Host):
    jobs = [host.start(f"j{i}") for i in range(4)]  # all at once
    for job in jobs:
        assert job.finish() == 0, job.stdout
    sets = [set(job.uuids) for job in jobs]
    assert all(len(s) == 2 for s in sets)
    assert set().union(*sets) == set(UUIDS)  # 4 x 2 of 8: disjoint
    for job in jobs:
        env = (job.temp / "env").read_text()
        assert "CUDA_VISIBLE_DEVICES<<" in env and ",".join(job.uuids) in env
        assert "PCI_BUS_ID" in env
        assert job.outputs["cuda-visible-devices"] == ",".join(job.uuids)

    fifth = host.start("j5", wait="0.01")
    assert fifth.finish() == 1
    error = next(line for line in fifth.stdout.splitlines() if line.startswith("::error"))
    assert "no 2 GPU(s) could be leased within 0.01 minute(s)" in error
    for job in jobs:
        assert f"runner-{job.name}" in error and f"run-{job.name}" in error
        assert f"pid {job.holder_pid()}" in error
    assert "user root" in error

    victim = jobs[1]
    os.kill(victim.holder_pid(), signal.SIGKILL)
    host.wait_free(victim.uuids)
    sixth = host.lease("j6")
    assert sorted(sixth.uuids) == sorted(victim.uuids)


def test_a_gpu_with_a_foreign_process_is_skipped(host_root: Path):
    host = make_host(host_root, busy={0: 1, 2: 3})
    try:
        job = host.lease("only", gpus=2)
        assert job.uuids == [UUIDS[1], UUIDS[3]]
        short = host.start("short", gpus=6, wait="0")
        assert short.finish() == 1
        assert "1 foreign compute process(es) run on it" in short.stdout
        assert "3 foreign compute process(es) run on it" in short.stdout
    finally:
        stop_all(host)


def test_a_gpu_in_mig_mode_is_skipped(host_root: Path):
    host = make_host(host_root, mig=(0,))
    try:
        job = host.lease("whole", gpus=1)
        assert job.uuids == [UUIDS[1]]
        short = host.start("short", gpus=8, wait="0")
        assert short.finish() == 1 and "MIG is enabled" in short.stdout
    finally:
        stop_all(host)


def test_the_holder_keeps_no_secret_of_the_steps_environment(host: Host):
    job = host.lease(
        "secret",
        gpus=1,
        extra={"DATABASE_URL": "postgres://u:hunter2@db", "RUNNER_TRACKING_ID": "github_1234"},
    )
    environ = Path(f"/proc/{job.holder_pid()}/environ").read_bytes().split(b"\0")
    assert not any(b"hunter2" in v or v.startswith(b"INPUT_") for v in environ)
    assert b"RUNNER_TRACKING_ID=github_1234" in environ  # the runner's clean-up finds it


def test_min_free_memory_is_required(host: Host):
    job = host.start("big", gpus=1, wait="0", extra={"INPUT_MIN_FREE_MEMORY": "200GiB"})
    assert job.finish() == 1
    assert "140.4 GiB free, below the 200.0 GiB asked for" in job.stdout
    fits = host.lease(
        "fits",
        gpus=1,
        extra={"INPUT_MIN_FREE_MEMORY": "140GiB", "INPUT_MEMORY_PER_WORKER": "30GiB"},
    )
    assert fits.outputs["xdist-workers"] == "4"  # 140.4 GiB // 30 GiB
    assert set(json.loads(fits.outputs["worker-devices"]).values()) == set(fits.uuids)


def test_the_jobs_end_and_the_release_step_free_the_gpus(host: Host):
    ended = host.lease("ended", gpus=2)
    released = host.lease("released", gpus=2)
    assert all(host.held(u) for u in ended.uuids + released.uuids)
    ended.sleeper.kill()  # the job ends: its holder notices and goes
    ended.sleeper.wait()
    host.wait_free(ended.uuids)
    assert all(host.held(u) for u in released.uuids)  # a live lease is never taken

    step = host.start("released", mode="release", job=released)
    assert step.finish() == 0, step.stdout
    assert "gpu-lease: released" in step.stdout
    assert not any(host.held(u) for u in released.uuids)  # freed before the step returned
    assert not list(host.leases.glob("*.json"))  # the holders removed their names

    again = host.start("released", mode="release", job=released)
    assert again.finish() == 0 and "not-held" in again.stdout


def test_a_second_lease_in_the_same_job_changes_nothing(host: Host):
    first = host.lease("same", gpus=2)
    second = host.start("same", gpus=2, job=first)
    assert second.finish() == 0
    assert "already holds" in second.stdout
    assert json.loads(parse_output_file(second.output.read_text())["gpu-uuids"]) == first.uuids


def test_jobs_of_two_os_users_share_the_host(host: Host):
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run a second OS user's job")
    other_users_python()
    root_job = host.lease("root", gpus=1)  # creates the directory: root's, 1777
    info = host.leases.lstat()
    assert stat.S_IMODE(info.st_mode) == 0o1777 and info.st_uid == 0
    assert root_job.uuids == [UUIDS[0]]

    other = host.lease("nobody", gpus=2, user="nobody")
    assert other.uuids == [UUIDS[1], UUIDS[2]]  # root's GPU 0 is held: skipped
    assert (host.leases / f"{UUIDS[1]}.lock").stat().st_uid != 0

    released = host.start("root", mode="release", job=root_job)
    assert released.finish() == 0
    # GPU 0's lock file is root's (0644): nobody locks it read-only.
    third = host.lease("nobody2", gpus=1, user="nobody")
    assert third.uuids == [UUIDS[0]]
    assert (host.leases / f"{UUIDS[0]}.lock").stat().st_uid == 0
    fourth = host.lease("root2", gpus=1)  # nobody's held files are skipped by root as well
    assert fourth.uuids == [UUIDS[3]]

    # nobody cannot remove root's lock file (sticky directory)
    rm = subprocess.run(
        [
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "rm",
            "-f",
            str(host.leases / f"{UUIDS[3]}.lock"),
        ],
        capture_output=True,
        text=True,
    )
    assert rm.returncode != 0 and (host.leases / f"{UUIDS[3]}.lock").exists()


def test_a_lock_file_planted_by_another_user_never_holds_a_lease(host: Host):
    """Another OS user creates GPU 0's lock file first, waits for a victim to lock it, then
    deletes it and leases GPU 0 again on a new file: two holders of one GPU. The victim now
    skips that file and names why; a root-owned one an admin made is used by everyone."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to plant a second OS user's file")
    from gpu_ci.cuda.lease.lease import lock_name, prepare_directory

    assert prepare_directory(host.leases) == ""
    planted = host.leases / lock_name(UUIDS[0])
    subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "touch", str(planted)],
        check=True,
    )
    victim = host.lease("victim", gpus=1)
    assert victim.uuids == [UUIDS[1]]  # GPU 0's file is nobody's: skipped
    short = host.start("short", gpus=8, wait="0")
    assert short.finish() == 1
    assert f"GPU 0 {UUIDS[0]}: its lock file cannot be used" in short.stdout
    assert "belongs to uid" in short.stdout and "root-owned lock files" in short.stdout


@pytest.mark.parametrize("kind", ["symlink", "open"])
def test_an_unsafe_lease_directory_is_refused(host: Host, kind: str):
    real = host.root / "real"
    real.mkdir()
    if kind == "symlink":
        host.leases.symlink_to(real)
    else:
        host.leases.mkdir()
        host.leases.chmod(0o777)  # world-writable, no sticky bit
    job = host.start("unsafe")
    assert job.finish() == 1
    why = "symbolic link" if kind == "symlink" else "no sticky bit"
    assert "will not use the lease directory" in job.stdout and why in job.stdout
    assert not list(real.iterdir())


def test_a_planted_fifo_or_link_as_a_lock_file_is_skipped(host: Host):
    from gpu_ci.cuda.lease.lease import lock_name, prepare_directory

    assert prepare_directory(host.leases) == ""
    os.mkfifo(host.leases / lock_name(UUIDS[0]))  # an open of it would block without O_NONBLOCK
    (host.leases / lock_name(UUIDS[1])).symlink_to(host.root / "elsewhere")
    job = host.lease("planted", gpus=1)
    assert job.uuids == [UUIDS[2]]
    assert not (host.root / "elsewhere").exists()
    short = host.start("short", gpus=8, wait="0")
    assert short.finish() == 1
    assert f"GPU 0 {UUIDS[0]}: its lock file cannot be used" in short.stdout
    assert f"GPU 1 {UUIDS[1]}: its lock file cannot be used" in short.stdout


@pytest.mark.slow
def test_verify_cuda_env_and_gpu_monitor_see_only_the_leased_gpus(host: Host):
    job = host.lease("watched", gpus=2)
    env = dict(
        host.env,
        CUDA_VISIBLE_DEVICES=job.outputs["cuda-visible-devices"],
        CUDA_DEVICE_ORDER="PCI_BUS_ID",
        RUNNER_TEMP=str(job.temp),
        GITHUB_OUTPUT=str(job.temp / "verify-output"),
    )
    (job.temp / "verify-output").write_text("")
    verify = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpu_ci",
            "verify-cuda-env",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    outputs = parse_output_file((job.temp / "verify-output").read_text())
    assert outputs["gpu-count"] == "2", verify.stdout + verify.stderr
    assert [g["uuid"] for g in json.loads(outputs["gpus"])] == job.uuids

    (job.temp / "monitor-output").write_text("")
    env.update(
        GITHUB_OUTPUT=str(job.temp / "monitor-output"),
        INPUT_MODE="start",
        GPU_CI_MONITOR_FAKE_CLOCK="1790000000",
        GPU_CI_MONITOR_MAX_SAMPLES="5",
    )
    start = subprocess.run(
        [sys.executable, "-m", "gpu_ci", "gpu-monitor"], env=env, capture_output=True, text=True
    )
    assert parse_output_file((job.temp / "monitor-output").read_text())["gpu-count"] == "2", (
        start.stdout + start.stderr
    )
    wait_for_stop_line(
        {"RUNNER_TEMP": str(job.temp), **{k: env[k] for k in env if k.startswith("GITHUB_")}}
    )
    report_file = job.temp / "monitor-report.json"
    env.update(INPUT_MODE="report", INPUT_REPORT_FILE=str(report_file), INPUT_PRICE_PER_HOUR="3.12")
    report = subprocess.run(
        [sys.executable, "-m", "gpu_ci", "gpu-monitor"], env=env, capture_output=True, text=True
    )
    data = json.loads(report_file.read_text())
    assert [g["uuid"] for g in data["gpus"]] == job.uuids, report.stdout + report.stderr
    cost = data["cost"]  # the idle share is of the leased GPUs' minutes, not the host's 8
    assert cost["gpu_minutes_paid"] == 2 * cost["paid_minutes"]
    assert cost["idle_fraction"] == 1.0  # the fake GPUs never computed
