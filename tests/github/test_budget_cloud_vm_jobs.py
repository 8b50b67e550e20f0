"""The budget sees the GPU jobs of gpu-cloud-runner VMs.

The cloud example's GPU job asks for the start job's label, one per VM
(``gpu-ci-<run>-<attempt>-<time>-<nonce>-<key>``), and a just-in-time runner sits in no
GPU runner group. The example's gate must still count those jobs, or 200 hours of approved
runs would leave it at $0.00 spent and ``run=true`` under its $200 budget.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from testkit.github.runs import HEAD, REPO, gate, gpu_run
from testkit.github_server import PullRequest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "gpu-cloud-runner.yml"


@pytest.fixture
def server(github):
    github.add_repo(REPO, roles={"Codertocat": "write"})
    github.add_pull(REPO, PullRequest(2, HEAD, labels=["CUDA CI"]))
    return github


def _example_gate() -> dict[str, str]:
    steps = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))["jobs"]["gate"]["steps"]
    return next(s["with"] for s in steps if "gpu-gate" in s.get("uses", ""))


def test_the_cloud_examples_budget_counts_the_vm_jobs(run_cli, server):
    """200 VM hours leave the cloud example's $200 budget at $0.00."""
    gate_inputs = _example_gate()
    start = datetime(2026, 11, 2, 1, tzinfo=timezone.utc)
    for i in range(100):  # 100 approved runs of 120 minutes, each on its own VM
        when = start + timedelta(hours=6 * i)
        label = f"gpu-ci-{8812345000 + i}-1-{1793000000 + i}-f2c8c756a201ac{i:02d}-gpu"
        gpu_run(server, when, 120, labels=(label,))
    args = ["--monthly-budget", gate_inputs["monthly-budget"]]
    args += ["--reserve-minutes", str(gate_inputs["reserve-minutes"])]
    if "gpu-price" in gate_inputs:
        args += ["--gpu-price", gate_inputs["gpu-price"]]
    env = {
        "INPUT_" + name.upper().replace("-", "_"): str(gate_inputs.get(name, ""))
        for name in ("gpu-runs-on", "gpu-runner-kinds")
    }
    result = gate(run_cli, server, args, env=env)
    assert result.returncode == 0, result.stdout
    # 12,000 VM minutes at $1.006/h: $201.20 of a $200 budget
    assert result.outputs["budget-spent"] != "0.00", result.stdout
    assert result.outputs["run"] == "false", result.stdout
