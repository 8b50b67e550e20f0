"""The documented gpu-cloud-runner example's gate under act: its budget counts the VMs' jobs.

The GPU job asks for its VM's one-off label (``gpu-ci-<run>-…``, gpu-cloud-runner's
``label`` output), so the gate's budget matches those jobs by the label prefix of a runner
kind, at the kind's price."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from testkit.github.runs import gpu_run, labeled
from testkit.github_server import PullRequest
from testkit.shared import ROOT

pytestmark = pytest.mark.e2e

REPO = "Codertocat/Hello-World"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
EXAMPLE = ROOT / "examples" / "gpu-cloud-runner.yml"


def test_the_cloud_examples_budget_counts_the_vm_jobs_at_the_vm_price(act, github):
    github.add_repo(REPO, roles={"Codertocat": "maintain"})
    github.add_pull(REPO, PullRequest(2, HEAD, labels=["CUDA CI"]))
    day = datetime(2026, 11, 3, 10, tzinfo=timezone.utc)
    path = f".github/workflows/{EXAMPLE.name}"
    # two VM jobs of 60 and 30 minutes at g5.xlarge's $1.006/h: $1.006 + $0.503
    gpu_run(github, day, 60, labels=("gpu-ci-1001-1-tests-20261103t100000",), path=path)
    gpu_run(github, day, 30, labels=("gpu-ci-1002-1-tests-20261103t110000",), path=path)
    gpu_run(github, day, 45, labels=("self-hosted", "cpu-only"), path=path)  # not a VM job
    result = act(
        EXAMPLE,
        "pull_request",
        labeled(),
        job="gate",
        repository=REPO,
        env={"GITHUB_API_URL": github.url, "GPU_CI_NOW": "2026-11-30T14:00:00Z"},
    )
    assert result.returncode == 0, result.log
    assert result.outputs["run"] == "true", result.log
    assert result.outputs["budget-spent"] == "1.51"  # $1.509, rounded for the output
    assert "gpu-runs-on is not set" not in result.log
