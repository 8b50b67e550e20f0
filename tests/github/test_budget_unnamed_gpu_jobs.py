"""The budget against GPU jobs that ask for no distinctive label.

A job's ``labels`` are what it asked for, not what the runner that ran it has: GitHub
gives a ``runs-on: self-hosted`` job (or ``runs-on: {group: <the GPU runners' group>}``)
any runner that has those labels or is in that group, the GPU runner of ``gpu-runs-on:
[self-hosted, gpu]`` included. The job object names that runner (``runner_name``) and its
group, and the repository's runner list gives its labels.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from testkit.github.runs import REPO, gate, gpu_run
from testkit.github_server import add_runner

HOSTILE = ".github/workflows/miner.yml"
MONEY = ["--monthly-budget", "$50", "--gpu-price", "0.052", "--reserve-minutes", "60"]


@pytest.mark.parametrize(
    ("labels", "group"),
    [
        pytest.param(("self-hosted",), None, id="runs-on-self-hosted"),
        pytest.param(("self-hosted", "linux", "x64"), None, id="runs-on-generic-labels"),
        pytest.param((), "gpu-runners", id="runs-on-the-gpu-runners-group"),
    ],
)
def test_a_forks_job_that_names_no_gpu_label_but_ran_on_the_gpu_runner_is_counted(
    run_cli, server, labels, group
):
    """A fork's miner.yml asks `runs-on: self-hosted`, runs 200 h on the GPU runner: $0."""
    # the repository's one self-hosted runner: the GPU box of gpu-runs-on [self-hosted, gpu],
    # in the runner group SECURITY-MODEL.md asks for (restricted to this repository)
    add_runner(server, REPO, "gpu-1", labels=["gpu"], status="online")
    run = gpu_run(
        server,
        datetime(2026, 11, 20, 1, tzinfo=timezone.utc),
        200 * 60,
        path=HOSTILE,
        event="pull_request_review",
        labels=labels,  # GitHub routes it to gpu-1: the only runner with these labels
    )
    gpu = next(j for j in run.jobs if j.runner_name == "gpu-1")
    gpu.runner_group_name = group
    result = gate(run_cli, server, MONEY)
    assert result.returncode == 0, result.stdout
    # 12,000 minutes on gpu-1 at $0.052/min: $624, over the $50 budget
    assert result.outputs["budget-spent"] == "624.00", result.stdout
    assert result.outputs["run"] == "false", result.stdout
