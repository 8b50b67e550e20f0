"""Issue 33: on a shared multi-GPU host whose jobs lease their GPUs (gpu-lease), gpu-monitor
charges ``price-per-gpu-hour`` for each GPU the job sees, and the idle cost per leased GPU,
never the whole host's price (the fake 8-GPU host of testkit/gpu_lease_env.py)."""

from __future__ import annotations

import json
from decimal import Decimal

from gpu_ci.pricing import job_cost
from testkit.gpu_lease_env import UUIDS, fake_host_env
from testkit.gpu_monitor_env import EPOCH, monitor_dir, wait_for_stop_line


def leased_job(tmp_path, gpus):
    env = fake_host_env(tmp_path / "host", gpus=8)
    (tmp_path / "runner_temp").mkdir()
    env.update(
        {
            "RUNNER_TEMP": str(tmp_path / "runner_temp"),
            "INPUT_INTERVAL": "1",
            "GPU_CI_MONITOR_FAKE_CLOCK": f"{EPOCH:.0f}",
            "GPU_CI_MONITOR_MAX_SAMPLES": "30",
            # what gpu-lease exports for later steps: the leased GPUs by UUID, in PCI order
            "CUDA_VISIBLE_DEVICES": ",".join(UUIDS[i] for i in gpus),
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        }
    )
    return env


def test_a_leased_pair_of_an_8_gpu_host_pays_two_gpus_not_the_host(run_cli, tmp_path):
    env = leased_job(tmp_path, (2, 5))
    assert run_cli(["gpu-monitor", "--mode", "start"], env).returncode == 0
    wait_for_stop_line(env)
    result = run_cli(["gpu-monitor", "--mode", "report", "--price-per-gpu-hour", "2.40"], env)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((monitor_dir(env) / "report.json").read_text())
    assert [g["uuid"] for g in report["gpus"]] == [UUIDS[2], UUIDS[5]]
    cost = report["cost"]
    # 30 s -> 1 paid minute; $2.40/h = $0.04/min per GPU; 2 leased GPUs, both idle
    assert cost["paid_minutes"] == 1 and cost["gpu_minutes_paid"] == 2
    assert cost["price_per_gpu"] is True and cost["cost_usd"] == 0.08
    assert cost["idle_fraction"] == 1 and cost["idle_cost_usd"] == 0.08
    assert "$0.04/min per GPU (price-per-gpu-hour 2.40)" in result.summary
    # the runner's price for the same job: once, whatever the GPUs
    runner = run_cli(["gpu-monitor", "--mode", "report", "--price-per-hour", "2.40"], env)
    assert runner.outputs["idle-cost-usd"] == "0.0400"


def test_both_prices_are_a_usage_error(run_cli, tmp_path):
    env = {"RUNNER_TEMP": str(tmp_path), "INPUT_INTERVAL": "1"}  # refused before any NVML
    result = run_cli(
        [
            "gpu-monitor",
            "--mode",
            "report",
            "--price-per-hour",
            "3",
            "--price-per-gpu-hour",
            "1",
        ],
        env,
    )
    assert result.returncode == 2
    assert "not both" in result.stdout + result.stderr


def test_job_cost_is_per_gpu_only_when_asked():
    assert job_cost(Decimal("0.04"), 3, 2, per_gpu=True) == Decimal("0.24")
    assert job_cost(Decimal("0.04"), 3, 2, per_gpu=False) == Decimal("0.12")
