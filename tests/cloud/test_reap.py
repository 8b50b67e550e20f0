"""gpu-cloud-runner/reap against moto and the test GitHub: two passes, ours only."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from gpu_ci.cloud import naming
from testkit.cloud.jobs import REPO, job_env
from testkit.github_server import WorkflowRun, add_runner

#: The reaper's now (GPU_CI_NOW): two hours after the VMs of the test were launched.
AT = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(hours=2)
SHA = "c" * 40
CUDA = ".github/workflows/cuda.yml"


def reap_env(cloud, repo, **inputs):
    return {**job_env(cloud, repo, **inputs), "GPU_CI_NOW": naming.iso(AT)}


@pytest.fixture
def estate(cloud, repo):
    """One of each: what the reaper must end, and what it must leave alone."""
    repo.add_run(
        REPO,
        WorkflowRun(
            1,
            "CUDA CI",
            ".github/workflows/cuda.yml",
            SHA,
            status="completed",
            updated_at=naming.iso(AT - timedelta(minutes=20)),
        ),
    )
    repo.add_run(REPO, WorkflowRun(2, "CUDA CI", CUDA, SHA, status="in_progress"))
    later = naming.iso(AT + timedelta(hours=1))

    def vm(run_id, expires, price="1.2"):
        tags = naming.Owner(REPO, run_id, 1, "gpu").tags()
        tags |= {naming.EXPIRES_AT: expires, naming.PRICE: price}
        return cloud.aws.tagged(cloud.subnets[0], cloud.image, tags)

    old = str(naming.RunnerName.new(3, 1, "gpu", AT - timedelta(hours=1)))
    fresh = str(naming.RunnerName.new(4, 1, "gpu", AT - timedelta(minutes=2)))
    return {
        "expired": vm(2, naming.iso(AT - timedelta(minutes=30))),
        "orphan": vm(1, later),
        "running": vm(2, later),
        "stranger": cloud.aws.untagged(cloud.subnets[0], cloud.image),
        "ghost": add_runner(repo, REPO, old, labels=[old]).id,
        "fresh": add_runner(repo, REPO, fresh, labels=[fresh]).id,
        "foreign": add_runner(repo, REPO, "lab-gpu-box", labels=["gpu"]).id,
    }


@pytest.mark.slow
def test_the_reaper_ends_leaks_and_ghosts_and_nothing_else(cloud, repo, run_cli, estate, tmp_path):
    report = tmp_path / "reap.json"
    result = run_cli(["gpu-cloud-runner/reap"], reap_env(cloud, repo, report_file=str(report)))
    assert result.returncode == 0, result.stdout
    assert json.loads(result.outputs["terminated"]) == [estate["expired"], estate["orphan"]]
    assert json.loads(result.outputs["deleted"]) == [estate["ghost"]]
    live = {vm["InstanceId"] for vm in cloud.aws.live()}
    assert live == {estate["running"], estate["stranger"]}
    assert {r.id for r in repo.runners[REPO]} == {estate["fresh"], estate["foreign"]}
    # leaked: 30 min past expiry + 20 min past the run's end, at $1.20/h
    assert result.outputs["leaked-minutes"] == "50"
    assert result.outputs["leaked-cost"] == "1.00"
    doc = json.loads(report.read_text())
    assert [t["why"] for t in doc["terminated"]][1] == "its workflow run has completed"
    assert repo.contract_violations == []


def test_a_dry_run_changes_nothing(cloud, repo, run_cli, estate):
    result = run_cli(["gpu-cloud-runner/reap"], reap_env(cloud, repo, dry_run="true"))
    assert result.returncode == 0, result.stdout
    assert len(json.loads(result.outputs["terminated"])) == 2
    assert cloud.aws.calls("TerminateInstances") == []
    assert not repo.requests("DELETE")
    assert len(cloud.aws.live()) == 4 and len(repo.runners[REPO]) == 3
    assert "dry run" in result.summary


def test_the_grace_is_longer_than_the_longest_start(cloud, repo, run_cli):
    result = run_cli(["gpu-cloud-runner/reap"], reap_env(cloud, repo, grace_minutes="14"))
    assert result.returncode == 2 and "at least 15" in result.stdout
    assert cloud.aws.calls() == [] and repo.log == []


def test_another_repositorys_vms_are_never_touched(cloud, repo, run_cli):
    expired = naming.iso(AT - timedelta(hours=1))
    theirs = naming.Owner("octo-org/other-repo", 7, 1, "gpu").tags()
    theirs |= {naming.EXPIRES_AT: expired, naming.PRICE: "1"}
    vm = cloud.aws.tagged(cloud.subnets[0], cloud.image, theirs)
    no_repo = {"gpu-ci:managed": "true", naming.EXPIRES_AT: expired}
    bare = cloud.aws.tagged(cloud.subnets[0], cloud.image, no_repo)
    result = run_cli(["gpu-cloud-runner/reap"], reap_env(cloud, repo))
    assert result.returncode == 0, result.stdout
    assert result.outputs["terminated"] == "[]"
    assert {v["InstanceId"] for v in cloud.aws.live()} == {vm, bare}
