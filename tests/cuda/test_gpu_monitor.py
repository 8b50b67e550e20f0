"""gpu-monitor against a fake GPU playing a scripted time series (real nvidia-ml-py, real
detached sampler process, the CLI as a runner calls it)."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import time
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import jsonschema
import pytest

from gpu_ci.cuda.monitor import control, recording, views
from gpu_ci.cuda.monitor import report as mr
from gpu_ci.cuda.monitor import results as mr_results
from gpu_ci.cuda.monitor import sampler as monitor
from testkit.github_server import Job, Step, WorkflowRun
from testkit.gpu_monitor_env import (
    BUSY_SCRIPT,
    EPOCH,
    IDLE_SCRIPT,
    LOST_SCRIPT,
    UUID0,
    fake_gpu_env,
    monitor_dir,
    start_line,
    wait_for_stop_line,
)
from testkit.mermaid_check import assert_charts_parse, parse, require_mermaid
from testkit.shared import ROOT

SCHEMA = json.loads((ROOT / "actions" / "gpu-monitor" / "report.schema.json").read_text())
GiB = 2**30
MiB = 2**20


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def start_and_finish(run_cli, env):
    started = run_cli(["gpu-monitor", "--mode", "start"], env)
    assert started.returncode == 0, started.stdout + started.stderr
    wait_for_stop_line(env)
    return started


def test_report_numbers_match_the_script(run_cli, tmp_path):
    env = fake_gpu_env(tmp_path, BUSY_SCRIPT, samples=90)
    started = start_and_finish(run_cli, env)
    assert started.outputs["gpu-count"] == "1"
    result = run_cli(
        ["gpu-monitor", "--mode", "report", "--price-per-hour", "linux_4_core_gpu"], env
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.outputs
    # busy by nvml.h's definition (utilisation x time): 30 s at 100 % + 30 s at 50 % = 45 s;
    # mean (0*30 + 100*30 + 50*30) / 90 = 50.
    assert out["busy-seconds"] == "45"
    assert out["utilisation-mean"] == "50.0"
    assert out["peak-memory-mib"] == "30720"
    # (30 * 60 W + 30 * 300 W + 30 * 200 W) * 1 s / 3600 = 4.667 Wh
    assert out["energy-wh"] == "4.667"
    # 90 s of job -> 2 whole billed minutes; 0.75 of 2 GPU-minutes busy -> 62.5 % idle;
    # 2 * $0.052 = $0.104, 62.5 % of it idle.
    assert out["paid-minutes"] == "2"
    assert out["gpu-minutes-used"] == "0.75"
    assert out["idle-fraction"] == "0.6250"
    assert out["idle-cost-usd"] == "0.0650"
    assert out["gpu-used"] == "true" and out["ok"] == "true"

    report = json.loads(Path(out["report-file"]).read_text())
    jsonschema.validate(report, SCHEMA)
    gpu = report["gpus"][0]
    assert gpu["uuid"] == UUID0 and gpu["samples"] == 90
    assert gpu["utilisation"] == {"mean": 50.0, "p95": 100.0, "max": 100.0}
    assert gpu["peak_process"] == "python (pid 4242, 30000 MiB)"
    assert gpu["peak_at_s"] == 60.0
    assert gpu["throttled_s"] == 10.0
    assert gpu["throttle_reasons_s"] == {"thermal (software)": 10.0}
    assert gpu["temperature_max_c"] == 88 and gpu["power_max_w"] == 300.0
    assert [(p["pid"], p["name"], p["peak_memory_bytes"]) for p in gpu["processes"]] == [
        (4242, "python", 30000 * MiB),
        (4343, "nccl-helper", 700 * MiB),
    ]
    assert report["cost"]["usd_per_minute"] == 0.052
    assert report["cost"]["window_from"] == "monitor" and report["cost"]["window_s"] == 90.0
    assert report["phases_from"] == "monitor"

    rows = list(csv.DictReader(io.StringIO(Path(out["samples-csv"]).read_text())))
    assert len(rows) == 90
    assert rows[65]["utilisation"] == "50" and rows[65]["memory_used_mib"] == "30720.0"
    assert rows[65]["processes"] == "python:4242:30000 nccl-helper:4343:700"

    summary = result.summary
    assert "### gpu-monitor: 1 GPU(s), 0.8 of 2 paid GPU-minutes used (62 % idle" in summary
    assert "| 0 NVIDIA H200 | 0:45 | 50 % / 100 % / 100 % | 30,720 MiB of 143,771 MiB" in summary
    assert "$0.052/min (linux_4_core_gpu on" in summary
    assert "```mermaid\nxychart-beta" in summary


@pytest.mark.parametrize(("samples", "paid"), [(60, 1), (61, 2), (120, 2), (121, 3)])
def test_paid_minutes_round_up_per_job(samples, paid):
    lines = [start_line()]
    lines += [
        json.dumps(
            {
                "kind": "sample",
                "ts": EPOCH + i,
                "gpus": [{"index": 0, "util": 100 if i % 2 else 0, "mem_util": 0, "mem_used": 0}],
            }
        )
        for i in range(samples)
    ]
    rec = recording.parse_recording("\n".join(lines))
    report = mr.compute(
        rec, end=EPOCH + samples, pricing=mr_results.Pricing(Decimal("0.102"), "windows_4_core_gpu")
    )
    assert report.cost.paid_minutes == paid
    assert report.cost.cost_usd == Decimal("0.102") * paid
    assert report.cost.gpu_minutes_used == round((samples // 2) / 60, 4)
    # The sampler was killed before its last line: a finding, not a crash.
    assert [f.code for f in report.findings] == ["sampler-ended-early"]


def test_gpu_lost_mid_job_is_a_finding_with_its_time(run_cli, tmp_path):
    env = fake_gpu_env(tmp_path, LOST_SCRIPT, samples=20)
    start_and_finish(run_cli, env)
    records = [json.loads(x) for x in (monitor_dir(env) / "samples.jsonl").read_text().splitlines()]
    assert records[-1]["reason"] == "all-gpus-lost"
    result = run_cli(["gpu-monitor", "--mode", "report"], env)
    assert result.returncode == 0, result.stdout + result.stderr
    findings = {f["code"]: f for f in json.loads(result.outputs["findings"])}
    assert "GPU_IS_LOST (15) at +0:08" in findings["gpu-lost"]["message"]
    # The Xid arrives while the sampler waits after sample 5: stamped at the next tick.
    assert "Xid 79 (GPU has fallen off the bus) at +0:06" in findings["xid-79"]["message"]
    report = json.loads(Path(result.outputs["report-file"]).read_text())
    assert report["gpus"][0]["lost_at_s"] == 8.0 and report["gpus"][0]["samples"] == 8
    assert "| warning | gpu-lost | +0:08 |" in result.summary
    assert "Traceback" not in result.stdout + result.stderr


def test_expect_gpu_use_fails_when_no_process_used_the_gpu(run_cli, tmp_path):
    env = fake_gpu_env(tmp_path, IDLE_SCRIPT, samples=10)
    start_and_finish(run_cli, env)
    result = run_cli(["gpu-monitor", "--mode", "report", "--expect-gpu-use", "true"], env)
    assert result.returncode == 1
    assert result.outputs["ok"] == "false" and result.outputs["gpu-used"] == "false"
    assert any("gpu-not-used" in e and "ran on the CPU" in e for e in result.errors)


def test_expect_gpu_use_passes_and_thresholds_fail(run_cli, tmp_path):
    env = fake_gpu_env(tmp_path, BUSY_SCRIPT, samples=90)
    start_and_finish(run_cli, env)
    ok = run_cli(
        [
            "gpu-monitor",
            "--mode",
            "report",
            "--expect-gpu-use",
            "true",
            "--max-memory",
            "40GiB",
            "--min-utilisation",
            "50",
        ],
        env,
    )
    assert ok.returncode == 0, ok.stdout
    bad = run_cli(
        ["gpu-monitor", "--mode", "report", "--max-memory", "20GiB", "--min-utilisation", "60%"],
        env,
    )
    assert bad.returncode == 1
    codes = [f["code"] for f in json.loads(bad.outputs["findings"])]
    assert codes == ["max-memory-exceeded", "min-utilisation-unmet"]
    assert any(
        "peaked at 30720 MiB (python (pid 4242, 30000 MiB)), above max-memory (20480 MiB)" in e
        for e in bad.errors
    )


@pytest.mark.slow
def test_per_step_breakdown_from_the_jobs_api(run_cli, tmp_path, github):
    env = fake_gpu_env(tmp_path, BUSY_SCRIPT, samples=90)
    github.add_repo("octo-org/octo-repo")
    job = Job(
        7001,
        "tests (3.12)",
        ["self-hosted", "gpu"],
        status="in_progress",
        started_at=iso(EPOCH - 20),
        runner_name="gpu-runner-1",
        steps=[
            Step("Set up job", 1, started_at=iso(EPOCH - 20), completed_at=iso(EPOCH - 2)),
            Step("gpu-monitor start", 1, started_at=iso(EPOCH - 2), completed_at=iso(EPOCH)),
            Step("Install", 2, started_at=iso(EPOCH), completed_at=iso(EPOCH + 29)),
            Step("GPU tests", 3, started_at=iso(EPOCH + 29), completed_at=iso(EPOCH + 89)),
            Step(
                "gpu-monitor report",
                4,
                status="in_progress",
                conclusion=None,
                started_at=iso(EPOCH + 89),
            ),
        ],
    )
    other = Job(
        7002,
        "tests (3.11)",
        ["self-hosted", "gpu"],
        status="in_progress",
        started_at=iso(EPOCH),
        runner_name="gpu-runner-2",
    )
    github.add_run(
        "octo-org/octo-repo",
        WorkflowRun(
            555,
            "CUDA CI",
            ".github/workflows/cuda-ci.yml",
            "a" * 40,
            status="in_progress",
            jobs=[job, other],
        ),
    )
    env.update(
        {
            "GITHUB_API_URL": github.url,
            "GITHUB_REPOSITORY": "octo-org/octo-repo",
            "GITHUB_RUN_ID": "555",
            "GITHUB_RUN_ATTEMPT": "1",
            "GITHUB_JOB": "tests",
            "RUNNER_NAME": "gpu-runner-1",
            "INPUT_GITHUB_TOKEN": "t0k",
        }
    )
    start_and_finish(run_cli, env)
    result = run_cli(["gpu-monitor", "--mode", "report"], env)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(Path(result.outputs["report-file"]).read_text())
    assert report["phases_from"] == "steps"
    phases = {p["name"]: p for p in report["phases"]}
    assert list(phases) == [
        "Set up job (before gpu-monitor started)",
        "gpu-monitor start",
        "Install",
        "GPU tests",
        "gpu-monitor report",
    ]
    assert phases["Set up job (before gpu-monitor started)"]["samples"] == 0
    assert phases["Install"]["busy_s"] == 0 and phases["Install"]["samples"] == 29
    assert phases["GPU tests"]["busy_s"] == 45 and phases["GPU tests"]["samples"] == 60
    assert phases["GPU tests"]["peak_memory_bytes"] == 30720 * MiB
    # Billing counts from the job's start (20 s before the monitor): 110 s -> 2 minutes.
    assert report["cost"]["window_from"] == "job" and report["cost"]["window_s"] == 110.0
    assert report["cost"]["paid_minutes"] == 2
    assert "| GPU tests | +0:29 | 1:00 | 0:45 | 75 % | 30,720 MiB |" in result.summary
    assert github.requests("GET", "/actions/runs/555/attempts/1/jobs")


@pytest.mark.slow
def test_jobs_api_refusal_falls_back_to_one_phase(run_cli, tmp_path, github):
    env = fake_gpu_env(tmp_path, IDLE_SCRIPT, samples=5)
    github.add_repo("octo-org/octo-repo")
    github.forbid("GET", r"/actions/runs/555/", times=10)
    env.update(
        {
            "GITHUB_API_URL": github.url,
            "GITHUB_REPOSITORY": "octo-org/octo-repo",
            "GITHUB_RUN_ID": "555",
            "RUNNER_NAME": "gpu-runner-1",
            "INPUT_GITHUB_TOKEN": "t0k",
        }
    )
    start_and_finish(run_cli, env)
    result = run_cli(["gpu-monitor", "--mode", "report"], env)
    assert result.returncode == 0, result.stdout
    assert "actions: read" in result.stdout
    assert json.loads(Path(result.outputs["report-file"]).read_text())["phases_from"] == "monitor"


def test_no_gpu_start_and_report_succeed_with_a_notice(run_cli, tmp_path):
    env = {"LD_LIBRARY_PATH": str(tmp_path / "empty"), "RUNNER_TEMP": str(tmp_path)}
    started = run_cli(["gpu-monitor", "--mode", "start"], env)
    assert started.returncode == 0, started.stdout
    assert "::notice title=gpu-monitor%3A no GPU::" in started.stdout
    result = run_cli(["gpu-monitor", "--mode", "report"], env)
    assert result.returncode == 0, result.stdout
    assert result.outputs["gpu-count"] == "0"
    assert "no GPU in this job" in result.summary
    strict = run_cli(["gpu-monitor", "--mode", "report", "--expect-gpu-use", "true"], env)
    assert strict.returncode == 1


def test_report_without_start_is_a_clear_error(run_cli, tmp_path):
    result = run_cli(["gpu-monitor", "--mode", "report"], {"RUNNER_TEMP": str(tmp_path)})
    assert result.returncode == 1
    assert "mode: start" in result.errors[0] and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ([], "input 'mode' is required"),
        (["--mode", "watch"], "must be one of start, report"),
        (["--mode", "start", "--interval", "0"], "input 'interval'"),
        (["--mode", "report", "--max-memory", "lots"], "input 'max-memory'"),
        (["--mode", "report", "--min-utilisation", "150"], "input 'min-utilisation'"),
        (["--mode", "report", "--price-per-hour", "free"], "input 'price-per-hour'"),
    ],
)
def test_unusable_inputs_exit_2(run_cli, tmp_path, args, needle):
    result = run_cli(["gpu-monitor", *args], {"RUNNER_TEMP": str(tmp_path)})
    assert result.returncode == 2
    assert needle in result.stdout


def test_two_starts_one_sampler_and_report_stops_it(run_cli, tmp_path):
    # A real clock here (no fake): the sampler runs until the report signals it.
    env = {
        **fake_gpu_env(tmp_path, IDLE_SCRIPT, samples=None, interval="0.05"),
        "INPUT_GITHUB_TOKEN": "t0k-secret",
        "GITHUB_TOKEN": "t0k-secret",
        "ACTIONS_RUNTIME_TOKEN": "t0k-secret",
    }
    first = run_cli(["gpu-monitor", "--mode", "start"], env)
    assert first.returncode == 0, first.stdout + first.stderr
    directory = monitor_dir(env)
    pid = monitor.SAMPLER.read_state(directory)["pid"]
    second = run_cli(["gpu-monitor", "--mode", "start"], env)
    assert second.returncode == 0
    assert f"a sampler already runs for this job (pid {pid})" in second.stdout
    assert monitor.SAMPLER.read_state(directory)["pid"] == pid
    assert control.lock_held(directory) and control.is_our_sampler(pid, directory)
    # The sampler outlives the step into untrusted code's steps: no token in its environment.
    environ = (Path(f"/proc/{pid}") / "environ").read_bytes()
    assert b"t0k-secret" not in environ and b"INPUT_" not in environ
    result = run_cli(["gpu-monitor", "--mode", "report"], env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not control.lock_held(directory)
    records = [json.loads(x) for x in (directory / "samples.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in records].count("start") == 1
    assert records[-1]["kind"] == "stop" and records[-1]["reason"] == "signal"
    assert "sampler-ended-early" not in result.outputs["findings"]


def test_sampler_killed_with_sigkill_is_reported(run_cli, tmp_path):
    env = fake_gpu_env(tmp_path, IDLE_SCRIPT, samples=None, interval="0.05")
    assert run_cli(["gpu-monitor", "--mode", "start"], env).returncode == 0
    directory = monitor_dir(env)
    pid = monitor.SAMPLER.read_state(directory)["pid"]
    os.kill(pid, signal.SIGKILL)
    for _ in range(200):  # the kernel releases the lock when the process is gone
        if not control.lock_held(directory):
            break
        time.sleep(0.05)
    result = run_cli(["gpu-monitor", "--mode", "report"], env)
    assert result.returncode == 0, result.stdout
    assert "sampler-ended-early" in result.outputs["findings"]


def test_stop_never_signals_a_pid_that_is_not_our_sampler(tmp_path):
    directory = tmp_path / "m"
    directory.mkdir()
    (directory / monitor.STATE_NAME).write_text(json.dumps({"pid": os.getpid()}))
    assert not control.is_our_sampler(os.getpid(), directory)
    assert control.stop_sampler(directory) == "not-running"


@pytest.mark.slow
def test_charts_parse_with_mermaids_parser_and_are_downsampled(run_cli, tmp_path):
    require_mermaid()
    env = fake_gpu_env(tmp_path, BUSY_SCRIPT, samples=250, gpus=2)
    start_and_finish(run_cli, env)
    result = run_cli(["gpu-monitor", "--mode", "report"], env)
    assert result.returncode == 0, result.stdout
    bodies = assert_charts_parse(result.summary, expect=2)
    for body in bodies:
        x_axis = next(line for line in body.splitlines() if "x-axis" in line)
        assert x_axis.count(",") + 1 == 100  # 250 samples -> 100 points
        assert all(
            line.count(",") + 1 == 100
            for line in body.splitlines()
            if line.strip().startswith("line [")
        )


@pytest.mark.slow
def test_mermaid_check_rejects_a_malformed_chart():
    require_mermaid()
    good = 'xychart-beta\n    x-axis ["a", "b"]\n    line [1, 2]\n'
    broken = 'xychart-beta\n    x-axis ["a", "b"]\n    line [1, 2\n'
    quoted = 'xychart-beta\n    title "a "quoted" title"\n    line [1, 2]\n'
    results = parse([good, broken, quoted])
    assert results[0].ok and results[0].type == "xychart"
    assert not results[1].ok and "Parse error" in (results[1].error or "")
    assert not results[2].ok
    with pytest.raises(AssertionError, match="mermaid rejected the chart"):
        assert_charts_parse(f"```mermaid\n{broken}```\n")


def readme_example() -> str:
    text = (ROOT / "actions" / "gpu-monitor" / "README.md").read_text()
    body = text.split("<!-- BEGIN gpu-monitor example summary -->\n````markdown\n", 1)[1]
    return body.split("````\n<!-- END gpu-monitor example summary -->", 1)[0]


def test_readme_example_summary_is_what_the_code_writes():
    from testkit.gpu_monitor_env import example_report

    report = example_report()
    assert readme_example() == views.markdown(report)
    jsonschema.validate(views.as_json(report), SCHEMA)
    # 175 s -> 3 paid minutes, $0.156; 30 s at 96 % + 25 s at 48 % = 40.8 busy seconds of
    # 180 -> idle cost 0.156 * (1 - 40.8/180)
    assert report.cost.paid_minutes == 3 and report.cost.idle_cost_usd == Decimal("0.1206")


@pytest.mark.slow
def test_readme_example_chart_parses():
    require_mermaid()
    assert_charts_parse(readme_example(), expect=1)


def test_sample_file_stops_growing_at_its_limit(run_cli, tmp_path):
    env = {**fake_gpu_env(tmp_path, BUSY_SCRIPT, samples=500), "GPU_CI_MONITOR_MAX_BYTES": "4000"}
    start_and_finish(run_cli, env)
    path = monitor_dir(env) / "samples.jsonl"
    assert path.stat().st_size <= 4000 + 200  # the stop line may pass the limit
    result = run_cli(["gpu-monitor", "--mode", "report"], env)
    assert result.returncode == 0, result.stdout
    assert "sample-file-full" in result.outputs["findings"]
    report = json.loads(Path(result.outputs["report-file"]).read_text())
    assert 0 < report["samples"] < 500


def test_start_imports_neither_the_github_client_nor_prometheus(tmp_path):
    import subprocess
    import sys

    env = fake_gpu_env(tmp_path, IDLE_SCRIPT, samples=3)
    code = (
        "import atexit, json, sys\n"
        "atexit.register(lambda: print(json.dumps(sorted(sys.modules))))\n"
        "from gpu_ci.cli import main\n"
        "sys.exit(main(['gpu-monitor', '--mode', 'start']))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src"), **env},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    modules = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert "pynvml" in modules
    assert not {"github", "prometheus_client", "gpu_ci.github.client", "requests"} & modules
    wait_for_stop_line(env)


def test_gpu_without_utilisation_counters_reports_memory_and_processes(run_cli, tmp_path):
    # A MIG-enabled GPU answers NOT_SUPPORTED for utilisation: memory and processes remain.
    env = fake_gpu_env(tmp_path, LOST_SCRIPT.split("5 ")[0], samples=4)
    config = tmp_path / "nvml.cfg"
    config.write_text(config.read_text() + "fail.nvmlDeviceGetUtilizationRates=3\n")
    start_and_finish(run_cli, env)
    result = run_cli(["gpu-monitor", "--mode", "report", "--expect-gpu-use", "true"], env)
    assert result.returncode == 0, result.stdout
    report = json.loads(Path(result.outputs["report-file"]).read_text())
    gpu = report["gpus"][0]
    # no utilisation counter: busy time is unknown (null), never 0
    assert gpu["samples"] == 4 and gpu["busy_s"] is None and gpu["lost_at_s"] is None
    assert gpu["peak_memory_bytes"] == 2048 * MiB and report["gpu_used"] is True


def test_a_torn_last_line_is_counted_not_fatal():
    head = start_line()
    sample = json.dumps(
        {
            "kind": "sample",
            "ts": EPOCH,
            "gpus": [{"index": 0, "util": 40, "mem_util": 1, "mem_used": MiB}],
        }
    )
    rec = recording.parse_recording(f"{head}\n{sample}\n{sample[:25]}")  # kill -9 mid-write
    assert rec.bad_lines == 1 and len(rec.samples) == 1
    report = mr.compute(rec, end=EPOCH + 1)
    assert [f.code for f in report.findings] == ["sampler-ended-early", "unreadable-lines"]
    with pytest.raises(recording.RecordingError, match="no start line"):
        recording.parse_recording(sample)


def test_one_gpu_over_the_monitor_window_reads_the_same_in_both_tables():
    """The GPU table and the phase table count busy time, mean utilisation, peak memory and
    energy by one rule: with one GPU and no steps, its row and the one phase agree."""
    head = json.dumps(
        {
            "kind": "start",
            "version": 1,
            "ts": EPOCH,
            "interval": 0.5,
            "pid": 1,
            "gpus": [{"index": 0, "name": "G", "uuid": "U", "memory_total": GiB}],
        }
    )
    gpus = [
        {"index": 0, "util": 30, "mem_util": 1, "mem_used": 5 * MiB, "power_mw": 70_500},
        {"index": 0, "util": 0, "mem_util": 1, "mem_used": 9 * MiB},
        {"index": 0, "mem_util": 2, "mem_used": 9 * MiB, "power_mw": 123_000},
        {"index": 0, "util": 85, "mem_util": 3, "mem_used": 2 * MiB, "power_mw": 300},
    ]
    lines = [head] + [
        json.dumps({"kind": "sample", "ts": EPOCH + 0.5 * (i + 1), "gpus": [g]})
        for i, g in enumerate(gpus)
    ]
    report = mr.compute(recording.parse_recording("\n".join(lines)), end=EPOCH + 2)
    (gpu,), (phase,) = report.gpus, report.phases
    assert (phase.busy_s, phase.util_mean, phase.peak_memory, phase.energy_wh) == (
        gpu.busy_s,
        gpu.util_mean,
        gpu.peak_memory,
        gpu.energy_wh,
    )
    # busy = utilisation x time: 30 % and 85 % of 0.5 s each
    assert gpu.busy_s == pytest.approx(0.575)
    assert (gpu.peak_memory, gpu.util_mean) == (9 * MiB, 115 / 3)
    assert gpu.energy_wh == pytest.approx((70.5 + 123 + 0.3) * 0.5 / 3600)
