"""The budget counts every workflow's GPU jobs, by labels or runner group.

A pull request can add a workflow file of its own: counting only ``gpu-workflows`` let 200
GPU hours of a ``miner.yml`` on ``[self-hosted, gpu]`` leave the gate at $0.00 spent.
"""

from __future__ import annotations

from datetime import datetime, timezone

from testkit.github.runs import GATE_CALLS, REPO, api_calls, gate, gpu_run
from testkit.github_server import Job

HOSTILE = ".github/workflows/miner.yml"
MONEY = ["--monthly-budget", "$50", "--gpu-price", "0.052", "--reserve-minutes", "60"]


def test_a_hostile_workflows_gpu_hours_are_counted_and_the_gate_refuses(run_cli, server):
    """A hostile workflow's 200 GPU hours are counted: refused.

    200 GPU hours of an admitted ``miner.yml`` run (a ``pull_request_review`` run of the
    fork author's own file) are $624 at $0.052/min: over a $50 budget, whatever
    ``gpu-workflows`` says. Calls: the ledger's listing, 1 page of runs, 1 jobs call per
    run of the month (here 2: the miner and the CPU-only lint run)."""
    gpu_run(
        server,
        datetime(2026, 11, 20, 1, tzinfo=timezone.utc),
        200 * 60,
        path=HOSTILE,
        event="pull_request_review",
    )
    lint = gpu_run(
        server, datetime(2026, 11, 29, tzinfo=timezone.utc), 500, labels=("self-hosted", "cpu")
    )  # a self-hosted CPU job of 500 min: not a GPU job, not counted
    before = len(server.log)
    result = gate(run_cli, server, [*MONEY, "--gpu-workflows", "cuda-ci.yml"])
    assert result.returncode == 0, result.stdout
    assert result.outputs["run"] == "false", result.stdout
    # 12,000 GPU minutes; the ubuntu-latest gate jobs and the self-hosted CPU job: none
    assert result.outputs["budget-spent"] == "624.00"
    assert "$624.00 of $50.00" in result.outputs["reason"]
    assert "| GPU jobs | labels gpu, self-hosted |" in result.summary
    assert "miner.yml" not in result.outputs["reason"]  # the verdict, not a list of files
    assert "'gpu-workflows' is deprecated" in result.stdout
    budget_calls = [r.path for r in api_calls(server, before)][GATE_CALLS:]
    assert len(budget_calls) == 1 + 1 + 2, budget_calls
    assert budget_calls[1] == f"/repos/{REPO}/actions/runs"  # every workflow, one listing
    assert f"/repos/{REPO}/actions/runs/{lint.id}/jobs" in budget_calls


def test_without_gpu_workflows_the_hostile_run_counts_too(run_cli, server):
    """The gate's default used to be its own workflow file: now it is every workflow."""
    gpu_run(server, datetime(2026, 11, 20, 1, tzinfo=timezone.utc), 600, path=HOSTILE)
    ref = {"GITHUB_WORKFLOW_REF": f"{REPO}/.github/workflows/cuda-ci.yml@refs/pull/2/merge"}
    result = gate(run_cli, server, MONEY, env=ref)
    assert result.outputs["budget-spent"] == "31.20", result.stdout  # 600 min × $0.052
    assert result.outputs["run"] == "true"  # 31.20 + 3.12 <= 50
    assert "deprecated" not in result.stdout


def _queued(server, labels, path=".github/workflows/nightly.yml"):
    run = gpu_run(
        server, datetime(2026, 11, 30, 13, 50, tzinfo=timezone.utc), 0, path=path, event="push"
    )
    run.jobs.append(
        Job(
            server.next_id(),
            "queued",
            list(labels),
            status="queued",
            created_at="2026-11-30T13:50:00Z",
            runner_name=None,
        )
    )
    return run


GROUP = {"INPUT_GPU_RUNS_ON": '{"group": "gpu-pool"}'}


def test_a_group_only_gpu_runs_on_reserves_for_queued_scale_set_jobs(run_cli, server):
    """``gpu-runs-on: {group: gpu-pool}`` and an ARC scale set in that group: a queued job
    asks for the scale set's name as its one label (``runs-on: arc-gpu``), or for no label
    (``runs-on: {group: gpu-pool}``); neither has a runner group yet, both reserve 60 min.
    A queued job on a hosted image (``ubuntu-latest``) reserves nothing."""
    _queued(server, ["arc-gpu"])
    _queued(server, [])
    _queued(server, ["ubuntu-latest"])
    minutes = ["--monthly-budget", "180 minutes", "--reserve-minutes", "60"]
    result = gate(run_cli, server, minutes, env=GROUP)
    assert result.outputs["budget-spent"] == "120", result.stdout  # 2 × 60
    assert result.outputs["run"] == "true"  # 120 + 60 = 180
    assert "| of which still running (reserved) | 120 min |" in result.summary
    _queued(server, ["ARC-GPU"])
    again = gate(run_cli, server, minutes, env=GROUP)
    assert again.outputs["budget-spent"] == "180" and again.outputs["run"] == "false"


def test_a_group_only_gpu_runs_on_does_not_reserve_for_labelled_sets(run_cli, server):
    """A queued job of a self-hosted label set: no group reservation.

    A queued job asking for several labels (``[self-hosted, cpu]``) is a label set of
    self-hosted runners, not a scale set: a group-only ``gpu-runs-on`` leaves it out."""
    _queued(server, ["self-hosted", "cpu"])
    result = gate(run_cli, server, ["--monthly-budget", "60 minutes"], env=GROUP)
    assert result.outputs["budget-spent"] == "0", result.stdout
    assert result.outputs["run"] == "true"


def test_a_scale_set_gpu_runs_on_reserves_for_its_queued_jobs(run_cli, server):
    """``gpu-runs-on: arc-gpu`` (the scale set's name, its one label): a queued job asking
    for it reserves, whatever its workflow; one asking for another scale set does not."""
    _queued(server, ["arc-gpu"], path=HOSTILE)
    _queued(server, ["arc-cpu"])
    scale_set = {"INPUT_GPU_RUNS_ON": '"arc-gpu"'}
    result = gate(run_cli, server, ["--monthly-budget", "120 minutes"], env=scale_set)
    assert result.outputs["budget-spent"] == "60", result.stdout
    assert result.outputs["run"] == "true"  # 60 + 60 = 120
