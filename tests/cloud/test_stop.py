"""gpu-cloud-runner/stop against moto: found by tags, never by the start's outputs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone

import pytest

from gpu_ci.cloud import naming
from testkit.cloud.jobs import REPO, RUN_ID, job_env
from testkit.github_server import add_runner
from testkit.shared import ROOT

OWNER = naming.Owner(REPO, RUN_ID, 1, "gpu")


def _start_killed_after_launch(cloud, repo, tmp_path):
    """The start job, killed (SIGKILL) right after AWS answered its RunInstances."""
    output = tmp_path / "start_output"
    output.write_text("")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("INPUT_", "GITHUB_"))},
        **job_env(cloud, repo),
        "GITHUB_OUTPUT": str(output),
        "PYTHONPATH": str(ROOT / "src"),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpu_ci", "gpu-cloud-runner"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    cloud.aws.after_launch = lambda: os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    return output.read_text()


@pytest.mark.slow
def test_a_start_killed_right_after_the_launch_is_stopped_by_tags(cloud, repo, run_cli, tmp_path):
    outputs = _start_killed_after_launch(cloud, repo, tmp_path)
    assert "instance-id" not in outputs  # the stop has nothing from the start
    (vm,) = cloud.aws.live(**{"gpu-ci:run-id": str(RUN_ID)})
    assert len(repo.runners[REPO]) == 1
    report = tmp_path / "cost.json"
    result = run_cli(
        ["gpu-cloud-runner/stop"], job_env(cloud, repo, wait_seconds="60", report_file=str(report))
    )
    assert result.returncode == 0, result.stdout
    assert json.loads(result.outputs["instance-ids"]) == [vm["InstanceId"]]
    assert cloud.aws.live() == [] and repo.runners[REPO] == []
    doc = json.loads(report.read_text())
    assert doc["kind"] == "gpu-cloud-runner" and doc["run_id"] == RUN_ID
    assert doc["vms"][0]["minutes"] >= 1 and doc["vms"][0]["usd_per_hour"] == "1.006"
    assert result.outputs["spot-interrupted"] == "false"
    assert f"| {vm['InstanceId']} |" in result.summary


@pytest.mark.slow
def test_a_launch_still_in_flight_is_waited_for(cloud, repo, run_cli):
    name = naming.RunnerName.new(RUN_ID, 1, "gpu", datetime.now(timezone.utc))
    runner = add_runner(repo, REPO, str(name), labels=[str(name)])
    tags = {**OWNER.tags(), naming.RUNNER_ID: str(runner.id), naming.PRICE: "1.006"}

    def launch_late():
        time.sleep(3)
        cloud.aws.tagged(cloud.subnets[0], cloud.image, tags)

    threading.Thread(target=launch_late).start()
    result = run_cli(["gpu-cloud-runner/stop"], job_env(cloud, repo, wait_seconds="60"))
    assert result.returncode == 0, result.stdout
    assert len(json.loads(result.outputs["instance-ids"])) == 1
    assert cloud.aws.live() == [] and repo.runners[REPO] == []


def test_nothing_started_is_no_error_and_no_wait(cloud, repo, run_cli):
    begun = time.monotonic()
    result = run_cli(["gpu-cloud-runner/stop"], job_env(cloud, repo, wait_seconds="600"))
    assert result.returncode == 0, result.stdout
    assert time.monotonic() - begun < 60  # no registration: no launch can be in flight
    assert result.outputs["instance-ids"] == "[]" and result.outputs["vm-minutes"] == "0"


def test_other_runs_vms_are_left_alone(cloud, repo, run_cli):
    other = naming.Owner(REPO, RUN_ID + 1, 1, "gpu").tags()
    mine = cloud.aws.tagged(cloud.subnets[0], cloud.image, OWNER.tags())
    theirs = cloud.aws.tagged(cloud.subnets[0], cloud.image, other)
    stranger = cloud.aws.untagged(cloud.subnets[0], cloud.image)
    result = run_cli(["gpu-cloud-runner/stop"], job_env(cloud, repo))
    assert json.loads(result.outputs["instance-ids"]) == [mine]
    assert {vm["InstanceId"] for vm in cloud.aws.live()} == {theirs, stranger}


@pytest.mark.slow
def test_a_spot_interruption_is_read_from_the_clouds_record(cloud, repo, run_cli):
    vm = cloud.aws.tagged(cloud.subnets[0], cloud.image, OWNER.tags(), spot=True)
    cloud.aws.reclaim_spot(vm)
    result = run_cli(["gpu-cloud-runner/stop"], job_env(cloud, repo))
    assert result.returncode == 0, result.stdout
    assert result.outputs["spot-interrupted"] == "true"
    assert "Server.SpotInstanceTermination" in result.stdout
    assert cloud.aws.calls("TerminateInstances") == []  # already gone: nothing to end
