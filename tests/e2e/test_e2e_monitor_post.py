"""gpu-monitor's one-step form (``actions/gpu-monitor/job``) under act: its post step reports
after a failed step and after a cancelled run (fake GPU, fake clock)."""

from __future__ import annotations

import json

import pytest

from testkit.gpu_monitor_env import E2E_SCRIPT, fake_gpu_env
from testkit.shared import ROOT

pytestmark = pytest.mark.e2e

WORKFLOW = ROOT / "tests" / "e2e" / "workflows" / "monitor-post.yml"
POST = "Post ./actions/gpu-monitor/job"  # how act names the post step
SUMMARY = "### gpu-monitor: 1 GPU(s), 0.5 of 1 paid GPU-minutes used (50 % idle"


def job_env(tmp_path):
    env = fake_gpu_env(tmp_path, E2E_SCRIPT, samples=45)
    env.pop("RUNNER_TEMP")  # act's runner sets its own
    env.pop("INPUT_INTERVAL")
    report = tmp_path / "out" / "report.json"
    return {
        **env,
        "GPU_CI_PRINT_SUMMARY": "1",
        "E2E_REPORT": str(report),
        "E2E_CANCEL_ME": str(tmp_path / "cancel-me"),
    }, report


def assert_reported(result, report):
    """The post step ran the report: its summary in the log, its JSON report on disk."""
    post = result.log[result.log.index(POST) :]
    assert SUMMARY in post, result.log[-6000:]
    # the report's outputs (act logs them): price-per-hour reached it (the runner passes a
    # JavaScript action's inputs as INPUT_PRICE-PER-HOUR)
    assert result.outputs["busy-seconds"] == "30" and result.outputs["ok"] == "true"
    assert result.outputs["idle-cost-usd"] == "0.0260"  # $0.052 * 1 min * 50 % idle
    data = json.loads(report.read_text())
    assert data["ok"] is True and data["gpu_used"] is True and data["samples"] == 45
    assert [g["busy_s"] for g in data["gpus"]] == [30]
    assert data["gpus"][0]["peak_memory_bytes"] == 8192 * 2**20


def test_one_step_form_reports_after_a_failed_step(act, tmp_path):
    env, report = job_env(tmp_path)
    result = act(WORKFLOW, "workflow_dispatch", {"inputs": {}}, env=env, job="failing")
    assert result.returncode != 0, result.log[-6000:]  # the tests' step failed the job
    assert result.outputs["start-gpu-count"] == "1"
    assert "samples.jsonl" in result.outputs["start-samples-file"]
    log = result.log
    assert "never-runs" not in json.dumps(result.outputs) and "Never runs" not in log
    assert log.index("GPU tests that fail") < log.index(POST) < log.rindex(SUMMARY)
    assert_reported(result, report)


def test_one_step_form_reports_after_a_cancellation(act, tmp_path):
    env, report = job_env(tmp_path)
    result = act(
        WORKFLOW,
        "workflow_dispatch",
        {"inputs": {}},
        env=env,
        job="cancelled",
        interrupt_when=tmp_path / "cancel-me",
    )
    assert (tmp_path / "cancel-me").exists(), result.log[-6000:]
    assert result.returncode != 0, result.log[-6000:]
    log = result.log
    # act cancelled the run (as the runner cancels a job: the running step is killed, the
    # steps after it are skipped, the post steps run)
    cancelled = log.index("this step has been cancelled")
    assert log.index("GPU tests that are cancelled") < cancelled < log.index(POST)
    assert "never-runs" not in json.dumps(result.outputs) and "Never runs" not in log
    assert_reported(result, report)


def test_one_step_form_reports_nothing_when_its_start_failed(act, tmp_path):
    """main saved no state (GITHUB_STATE): post says the start failed, never "no samples"."""
    env, report = job_env(tmp_path)
    result = act(WORKFLOW, "workflow_dispatch", {"inputs": {}}, env=env, job="start-fails")
    assert result.returncode != 0, result.log[-6000:]  # the start's bad input
    log = result.log
    assert "input 'interval' of gpu-monitor must be seconds" in log
    post = log[log.index(POST) :]
    assert "gpu-monitor did not start in this job (see its main step)" in post, log[-6000:]
    assert "found no samples" not in log and "### gpu-monitor" not in log
    assert not report.exists()
