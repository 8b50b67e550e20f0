"""gpu-monitor pushes a job's metrics to the real Prometheus Pushgateway, read back over HTTP."""

from __future__ import annotations

import re

import pytest

from testkit.gpu_monitor_env import BUSY_SCRIPT, UUID0, fake_gpu_env, wait_for_stop_line
from testkit.pushgateway import job_env, metrics, needs_pushgateway, pushgateway

pytestmark = needs_pushgateway

JOB_ENV = job_env("555", "2", "gpu-runner-1")


def value(text: str, name: str, **labels: str) -> float:
    """The sample of ``name`` whose labels include ``labels`` (exposition format)."""
    for match in re.finditer(rf"^{name}\{{([^}}]*)\}} (\S+)$", text, re.MULTILINE):
        have = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        if all(have.get(k) == v for k, v in labels.items()):
            return float(match.group(2))
    raise AssertionError(f"no {name} with {labels} in:\n{text}")


def test_job_metrics_reach_the_pushgateway(run_cli, tmp_path):
    env = {**fake_gpu_env(tmp_path, BUSY_SCRIPT, samples=90), **JOB_ENV}
    assert run_cli(["gpu-monitor", "--mode", "start"], env).returncode == 0
    wait_for_stop_line(env)
    with pushgateway() as url:
        result = run_cli(
            [
                "gpu-monitor",
                "--mode",
                "report",
                "--pushgateway-url",
                url,
                "--price-per-hour",
                "3.12",
                "--github-token",
                "",
            ],
            env,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"pushed the job's metrics to {url}" in result.stdout
        text = metrics(url)
    job = {
        "repository": "octo-org/octo-repo",
        "workflow": "CUDA CI",
        "github_job": "tests",
        "run_id": "555",
        "run_attempt": "2",
        "runner": "gpu-runner-1",
    }
    # dcgm-exporter's label names for the same things (gpu, UUID, modelName, Hostname)
    gpu = {**job, "UUID": UUID0, "gpu": "0", "modelName": "NVIDIA H200"}
    assert 'Hostname="' in text and "gpu_uuid" not in text
    # GPM on the (Hopper) fake: SM activity is a ratio; PCIe is unsupported there: no series
    assert value(text, "gpu_ci_job_gpu_sm_active_ratio", **gpu) == 0
    assert "gpu_ci_job_gpu_pcie_tx_bytes{" not in text
    assert value(text, "gpu_ci_job_gpu_busy_seconds", **gpu) == 45  # 30 s x 100 % + 30 s x 50 %
    assert value(text, "gpu_ci_job_gpu_utilization_mean_ratio", **gpu) == 0.5
    assert value(text, "gpu_ci_job_gpu_memory_peak_bytes", **gpu) == 30720 * 2**20
    assert value(text, "gpu_ci_job_gpu_energy_joules", **gpu) == pytest.approx(16800)
    assert value(text, "gpu_ci_job_paid_minutes", **job) == 2
    assert value(text, "gpu_ci_job_idle_ratio", **job) == 0.625
    # $3.12/h = $0.052/min; 2 minutes, 62.5 % idle
    assert value(text, "gpu_ci_job_idle_cost_usd", **job) == pytest.approx(0.065)


def test_an_unreachable_gateway_is_a_warning_not_a_failure(run_cli, tmp_path):
    env = {**fake_gpu_env(tmp_path, BUSY_SCRIPT, samples=5), **JOB_ENV}
    assert run_cli(["gpu-monitor", "--mode", "start"], env).returncode == 0
    wait_for_stop_line(env)
    with pushgateway() as url:
        pass  # started and stopped: nothing listens there now
    result = run_cli(
        ["gpu-monitor", "--mode", "report", "--pushgateway-url", url, "--github-token", ""], env
    )
    assert result.returncode == 0, result.stdout
    assert "::warning title=gpu-monitor%3A pushgateway::" in result.stdout
