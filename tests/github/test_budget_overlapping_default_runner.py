"""The budget against a dear ``gpu-runs-on`` runner that shares a cheap kind's labels.

The admin's H100 box is ``gpu-runs-on`` (``[self-hosted, gpu, h100x8]``, ``gpu-price``
24/h); the T4 boxes are a kind (``[self-hosted, gpu]``, 0.50/h). GitHub gives a job that
asks for ``gpu`` any of them, so the cheap kind's labels do not say which runner took it.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from testkit.github.runs import REPO, gate, gpu_run
from testkit.github_server import add_runner

HOSTILE = ".github/workflows/miner.yml"
ENV = {
    "INPUT_GPU_RUNS_ON": json.dumps(["self-hosted", "gpu", "h100x8"]),
    "INPUT_GPU_RUNNER_KINDS": json.dumps(
        {"t4": {"labels": ["self-hosted", "gpu"], "price": "0.50/h"}}
    ),
}
MONEY = ["--monthly-budget", "$2000", "--gpu-price", "24/h", "--reserve-minutes", "60"]


def test_a_job_on_the_gpu_runs_on_runner_is_not_priced_as_a_cheaper_kind(run_cli, server):
    """A fork's `runs-on: gpu` job, 200 h on the gpu-runs-on H100, is priced as a T4."""
    add_runner(
        server,
        REPO,
        "h100-1",
        labels=["self-hosted", "linux", "x64", "gpu", "h100x8"],
        status="online",
    )
    gpu_run(
        server,
        datetime(2026, 11, 20, 1, tzinfo=timezone.utc),
        200 * 60,
        path=HOSTILE,
        labels=("gpu",),  # GitHub gives it h100-1, the idle gpu-runs-on runner
    )
    result = gate(run_cli, server, MONEY, env=ENV)
    assert result.returncode == 0, result.stdout
    # 200 h on the H100 at gpu-price $24/h is $4,800, not the T4's $0.50/h ($100)
    assert result.outputs["budget-spent"] == "4800.00", result.stdout
    assert result.outputs["run"] == "false", result.stdout
