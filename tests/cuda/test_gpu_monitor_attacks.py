"""gpu-monitor against a hostile or unlucky job: a pull request's code in later steps of the
same job (same user), process and GPU names it controls, a torn, malformed, planted or huge
sample file, a read-only RUNNER_TEMP, two jobs that share one."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from gpu_ci.cuda.monitor import control, views
from gpu_ci.cuda.monitor import recording as mr_recording
from gpu_ci.cuda.monitor import sampler as monitor
from testkit.gpu_monitor_env import EPOCH, IDLE_SCRIPT, fake_gpu_env, monitor_dir, start_line

EVIL = (
    'py\r::set-output name=ok::true\n::add-mask::s3cret%0A::warning::x|y`\u2028```"][\x1b[2J\x85z'
)


def recording(name: str = "H200", proc: str = "python", samples: int = 5) -> list[str]:
    lines = [start_line(name, "GPU-1", 16 * 2**30)]
    lines += [
        json.dumps(
            {
                "kind": "sample",
                "ts": EPOCH + i,
                "gpus": [
                    {
                        "index": 0,
                        "util": 50,
                        "mem_util": 1,
                        "mem_used": 2**30,
                        "procs": [[5, 2**30, proc]],
                    }
                ],
            }
        )
        for i in range(samples)
    ]
    lines.append(
        json.dumps({"kind": "stop", "ts": EPOCH + samples, "reason": "signal", "samples": samples})
    )
    return lines


def plant(env: dict[str, str], lines: list[str]) -> Path:
    directory = monitor_dir(env)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / monitor.SAMPLES_NAME
    path.write_text("\n".join(lines) + "\n")
    return path


def base_env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "rt").mkdir(exist_ok=True)
    return {"RUNNER_TEMP": str(tmp_path / "rt"), "GPU_CI_MONITOR_FAKE_CLOCK": f"{EPOCH:.0f}"}


def test_sampler_gets_an_allow_listed_environment(run_cli, tmp_path):
    # A secret in the job's env: may have any name; later steps (PR code) read /proc/<pid>/environ.
    env = {
        **fake_gpu_env(tmp_path, IDLE_SCRIPT, samples=None, interval="0.05"),
        "GH_PAT": "ghp_s3cret",
        "DATABASE_URL": "postgres://u:s3cret@db",
        "CODECOV_AUTH": "s3cret",
    }
    assert run_cli(["gpu-monitor", "--mode", "start"], env).returncode == 0
    directory = monitor_dir(env)
    pid = monitor.SAMPLER.read_state(directory)["pid"]
    try:
        environ = (Path(f"/proc/{pid}") / "environ").read_bytes()
        assert b"s3cret" not in environ
        assert b"FAKE_NVML_SCRIPT=" in environ  # what it needs still reaches it
    finally:
        assert run_cli(["gpu-monitor", "--mode", "report"], env).returncode == 0


@pytest.mark.slow
def test_names_cannot_issue_workflow_commands_or_break_the_summary(run_cli, tmp_path):
    env = base_env(tmp_path)
    plant(env, recording(name="H200\n::error::gpu" + EVIL, proc=EVIL))
    result = run_cli(["gpu-monitor", "--mode", "report", "--max-memory", "1MiB"], env)
    assert result.returncode == 1, result.stdout + result.stderr
    for line in result.stdout.splitlines():
        assert not line.startswith("::") or line.startswith(
            ("::error ", "::warning ", "::notice ")
        ), line
    assert result.outputs["ok"] == "false"
    # Every summary line that starts a table row ends it: no CR/LF/NEL/LS inside a cell.
    for line in result.summary.splitlines():
        if line.startswith("|"):
            assert line.endswith("|") and "\r" not in line and "\x85" not in line, repr(line)
    rows = [x for x in result.summary.splitlines() if x.startswith("| 0 H200")]
    assert len(rows) == 1 and "\x1b" not in rows[0]
    from testkit.mermaid_check import assert_charts_parse, unavailable

    if unavailable() is None:  # the chart's title carries the GPU name
        assert_charts_parse(result.summary, expect=1)


def test_start_prints_gpu_names_as_plain_text():
    # The start's log line names the GPUs; a name is one line of printable text.
    text = mr_recording.printable("NVIDIA\n::add-mask::x\r\x85\u2028y\x1b")
    assert "\n" not in text and "\r" not in text and "\x1b" not in text
    assert "\x85" not in text and "\u2028" not in text and text.startswith("NVIDIA")


@pytest.mark.parametrize(
    "bad",
    [
        "[" * 100_000 + "]" * 100_000,
        json.dumps(
            {"kind": "sample", "ts": EPOCH, "gpus": [{"index": 0, "util": 1e999, "mem_used": 1}]}
        ),
        json.dumps(
            {"kind": "sample", "ts": "nan", "gpus": [{"index": 0, "util": 5, "mem_used": 1}]}
        ),
        json.dumps({"kind": "sample", "ts": EPOCH, "gpus": ["x"]}),
        json.dumps({"kind": "event", "ts": EPOCH, "gpu": 0, "type": "xid", "data": "x"}),
        json.dumps({"kind": "event", "ts": "soon", "gpu": 0, "type": "xid", "data": 79}),
        json.dumps({"kind": "error", "ts": "x", "gpu": 0, "code": 15}),
        json.dumps(["kind", "stop"]),
        json.dumps({"kind": "stop", "ts": 1e999}),
    ],
)
def test_malformed_lines_are_counted_never_a_crash(run_cli, tmp_path, bad):
    env = base_env(tmp_path)
    lines = recording()
    plant(env, lines[:-1] + [bad] + lines[-1:])
    result = run_cli(["gpu-monitor", "--mode", "report"], env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "internal error" not in result.stdout
    assert "unreadable-lines" in result.outputs["findings"]
    assert result.outputs["busy-seconds"] == "2.5"  # 5 s at 50 %


def test_a_malformed_start_line_is_a_clear_error(run_cli, tmp_path):
    env = base_env(tmp_path)
    plant(
        env,
        [json.dumps({"kind": "start", "ts": EPOCH, "interval": 1.0, "gpus": [{"index": "zero"}]})],
    )
    result = run_cli(["gpu-monitor", "--mode", "report"], env)
    assert result.returncode == 1
    assert "internal error" not in result.stdout and "start line" in result.stdout


def test_a_file_planted_before_start_is_not_reported(run_cli, tmp_path):
    # Another job (or an earlier step) left a busy recording where this job's sampler writes;
    # the sampler appends to it: the report covers this sampler's window only.
    env = fake_gpu_env(tmp_path, IDLE_SCRIPT, samples=10)
    plant(env, recording(samples=50))
    assert run_cli(["gpu-monitor", "--mode", "start"], env).returncode == 0
    from testkit.gpu_monitor_env import wait_for_stop_line

    wait_for_stop_line(env)
    result = run_cli(["gpu-monitor", "--mode", "report", "--expect-gpu-use", "true"], env)
    assert result.returncode == 1, result.stdout
    assert result.outputs["busy-seconds"] == "0" and result.outputs["gpu-used"] == "false"


def test_a_huge_sample_file_is_read_up_to_the_samplers_limit(run_cli, tmp_path):
    env = {**base_env(tmp_path), "GPU_CI_MONITOR_MAX_BYTES": "4096"}
    lines = recording(samples=12_000)
    path = plant(env, lines)
    assert path.stat().st_size > 4096 + 2**20  # the sampler's limit and the report's slack
    result = run_cli(["gpu-monitor", "--mode", "report"], env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "sample-file-too-large" in result.outputs["findings"]
    assert 1000 < int(result.outputs["busy-seconds"]) < 12_000


@pytest.fixture
def small_temp(tmpfs):
    """RUNNER_TEMP (as fake_gpu_env names it) on a 1 MiB tmpfs (needs root and mount)."""
    return tmpfs("runner_temp")


def fill(directory: Path) -> None:
    with open(directory / "filler", "wb", buffering=0) as out, contextlib.suppress(OSError):
        while True:
            out.write(b"\0" * 4096)


@pytest.mark.parametrize("made", [False, True])
def test_read_only_runner_temp_is_a_named_error(run_cli, tmp_path, small_temp, made):
    env = fake_gpu_env(tmp_path, IDLE_SCRIPT, samples=5)
    if made:  # an earlier step made the job's directory, then the disk went read-only
        monitor_dir(env).mkdir(parents=True)
    subprocess.run(["mount", "-o", "remount,ro", str(small_temp)], check=True)
    result = run_cli(["gpu-monitor", "--mode", "start"], env)
    assert result.returncode == 1, result.stdout
    assert "internal error" not in result.stdout and "Read-only file system" in result.stdout


@pytest.mark.parametrize("when", ["before-start", "after-start"])
def test_full_runner_temp_is_named_and_the_report_still_reports(
    run_cli, tmp_path, small_temp, when
):
    env = fake_gpu_env(tmp_path, IDLE_SCRIPT, samples=None, interval="0.05")
    if when == "before-start":
        fill(small_temp)
        result = run_cli(["gpu-monitor", "--mode", "start"], env)
        assert result.returncode == 1, result.stdout
        assert "internal error" not in result.stdout
        assert "No space left" in result.stdout or "disk" in result.stdout, result.stdout
        return
    assert run_cli(["gpu-monitor", "--mode", "start"], env).returncode == 0
    fill(small_temp)  # the sampler's next line hits a full disk
    directory = monitor_dir(env)
    for _ in range(400):
        if not control.lock_held(directory):
            break
        time.sleep(0.05)
    result = run_cli(["gpu-monitor", "--mode", "report"], env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "sampler-ended-early" in result.outputs["findings"]
    assert "cannot write" in result.stdout  # report.json: a warning, the summary holds all
    assert "### gpu-monitor: 1 GPU(s)" in result.summary


def test_two_jobs_with_one_run_id_sharing_runner_temp_keep_apart(tmp_path):
    # Matrix legs share run id, attempt and job id; two runners on one host may share a temp.
    one = {
        "GITHUB_RUN_ID": "7",
        "GITHUB_RUN_ATTEMPT": "1",
        "GITHUB_JOB": "gpu",
        "RUNNER_NAME": "host-1",
    }
    two = {**one, "RUNNER_NAME": "host-2"}
    assert control.job_directory("/t", one) != control.job_directory("/t", two)


def test_a_job_directory_another_user_made_is_refused(run_cli, tmp_path):
    # Without RUNNER_TEMP the directory is in the shared /tmp: another user may have made it.
    if os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root")
    env = fake_gpu_env(tmp_path, IDLE_SCRIPT, samples=5)
    directory = monitor_dir(env)
    directory.mkdir(parents=True)
    os.chown(directory.parent, 65534, 65534)
    result = run_cli(["gpu-monitor", "--mode", "start"], env)
    assert result.returncode == 1 and "belongs to uid 65534" in result.stdout, result.stdout
    assert not (directory / monitor.SAMPLES_NAME).exists()
    os.chown(directory.parent, 0, 0)
    directory.rmdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    directory.symlink_to(victim)
    result = run_cli(["gpu-monitor", "--mode", "start"], env)
    assert result.returncode == 1 and "not a directory" in result.stdout, result.stdout
    assert list(victim.iterdir()) == []


def test_report_files_are_never_written_through_a_planted_link(run_cli, tmp_path):
    env = base_env(tmp_path)
    plant(env, recording())
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    directory = monitor_dir(env)
    for pid in range(os.getpid(), os.getpid() + 2000):  # the report's pid is one of these
        (directory / f".report.json.{pid}.tmp").symlink_to(victim)
    result = run_cli(["gpu-monitor", "--mode", "report"], env)
    assert result.returncode == 0, result.stdout
    assert victim.read_text() == "mine\n"
    assert json.loads((directory / "report.json").read_text())["samples"] == 5


def test_report_signals_only_this_jobs_sampler(run_cli, tmp_path):
    # A later step holds the lock and points sampler.json at processes that merely look alike.
    env = base_env(tmp_path)
    plant(env, recording())
    directory = monitor_dir(env)
    lookalikes = [
        subprocess.Popen(
            ["python3", "-c", "import time; time.sleep(60)", str(directory)]
        ),  # the directory, not the marker
        subprocess.Popen(
            ["python3", "-c", "import time; time.sleep(60)", monitor.MARKER, str(directory) + "x"]
        ),  # the marker, another directory
    ]
    lock = os.open(directory / monitor.LOCK_NAME, os.O_RDWR | os.O_CREAT)
    import fcntl

    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        for proc in lookalikes:
            (directory / monitor.STATE_NAME).write_text(json.dumps({"pid": proc.pid}))
            result = run_cli(["gpu-monitor", "--mode", "report"], env)
            assert result.returncode == 0, result.stdout
            assert proc.poll() is None
    finally:
        os.close(lock)
        for proc in lookalikes:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_an_event_storm_keeps_the_summary_under_githubs_limit(run_cli, tmp_path):
    # A GPU raising an ECC event many times a second for a long job: 100 000 events.
    env = base_env(tmp_path)
    lines = recording()
    storm = [
        json.dumps({"kind": "event", "ts": EPOCH + 1, "gpu": 0, "type": "ecc-sbe", "data": 1})
    ] * 100_000
    plant(env, lines[:-1] + storm + lines[-1:])
    result = run_cli(["gpu-monitor", "--mode", "report", "--max-memory", "1MiB"], env)
    assert result.returncode == 1, result.stdout[-2000:]
    assert len(result.summary.encode()) < 2**20  # GitHub drops a larger step summary whole
    assert "99951 more findings" in result.summary
    findings = json.loads(result.outputs["findings"])
    assert len(findings) == views.MAX_FINDINGS_SHOWN and findings[0]["level"] == "error"
    report = json.loads(Path(result.outputs["report-file"]).read_text())
    assert len(report["findings"]) == 100_001
    assert result.stdout.count("::warning") <= views.MAX_FINDINGS_SHOWN


def _bounded(call, fifos):
    """``call()``'s result, or a failure if it blocked on a FIFO: after a bounded wait the
    FIFOs get a writer, which releases a blocked open (a hang bound, not a timed test)."""
    import threading

    got: list[object] = []

    def run():
        try:
            got.append(call())
        except Exception as exc:  # the caller asserts on it
            got.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(30)
    if thread.is_alive():
        for fifo in fifos:
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(30)
        raise AssertionError(f"{call} blocked on a planted FIFO")
    return got[0]


def test_planted_fifos_and_links_never_hang_the_report(tmp_path):
    from gpu_ci.errors import GpuCiError

    directory = tmp_path / "job"
    directory.mkdir()
    names = (monitor.SAMPLES_NAME, monitor.LOCK_NAME, monitor.STATE_NAME, control.NO_GPU_NAME)
    fifos = [directory / n for n in names]
    for fifo in fifos:
        os.mkfifo(fifo)
    # the job's later steps replaced each file with a FIFO: an open would wait for a writer
    got = _bounded(lambda: control.read_recording(directory, {}), fifos)
    assert isinstance(got, GpuCiError) and "not a regular file" in got.message
    assert _bounded(lambda: control.lock_held(directory), fifos) is False
    assert _bounded(lambda: monitor.SAMPLER.read_state(directory), fifos) is None
    assert "unreadable" in _bounded(lambda: control.no_gpu_reason(directory), fifos)
    assert _bounded(lambda: control.stop_sampler(directory), fifos) == "not-running"
    # a link to another file of the user's is not read as the samples
    (directory / monitor.SAMPLES_NAME).unlink()
    other = tmp_path / "elsewhere.jsonl"
    other.write_text("\n".join(recording()) + "\n")
    (directory / monitor.SAMPLES_NAME).symlink_to(other)
    got = _bounded(lambda: control.read_recording(directory, {}), [])
    assert isinstance(got, GpuCiError) and "symbolic link" in got.message


def test_a_gpu_lost_before_the_start_is_no_cpu_runner(run_cli, tmp_path):
    # the runner's GPU fell off the bus before the job: NVML answers GPU_IS_LOST reading it,
    # so the start reads no GPU. That is a broken GPU runner to drain, not "a CPU runner?"
    # with "no GPU in this job" and a GPU count of 0
    env = fake_gpu_env(
        tmp_path, IDLE_SCRIPT, samples=3, machine={"fail": {"nvmlDeviceGetMemoryInfo": 15}}
    )
    started = run_cli(["gpu-monitor", "--mode", "start"], env)
    assert started.returncode == 0, started.stdout
    assert "CPU runner" not in started.stdout and "GPU_IS_LOST" in started.stdout
    assert "::warning title=gpu-monitor%3A gpu-lost::" in started.stdout
    result = run_cli(["gpu-monitor", "--mode", "report"], env)
    assert result.returncode == 0, result.stdout
    assert "no GPU in this job" not in result.summary and "GPU_IS_LOST" in result.summary
    assert "::warning title=gpu-monitor%3A gpu-lost::[gpu-lost]" in result.stdout
    assert result.outputs["gpu-count"] == ""  # unknown, not 0
