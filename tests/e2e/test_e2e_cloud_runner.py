"""The cloud runner's start -> GPU job -> stop shape under act, against moto and the test
GitHub: a failed GPU job still has its VM and runner ended."""

from __future__ import annotations

import pytest

from testkit.act_runner import run_act
from testkit.shared import ROOT

pytestmark = pytest.mark.e2e
pytest.importorskip("moto", reason="moto[server] (the test extra) is not installed")

from testkit.cloud.jobs import REPO  # noqa: E402
from testkit.cloud.moto_ec2 import FakeAws  # noqa: E402

WORKFLOW = ROOT / "tests" / "e2e" / "workflows" / "cloud-runner.yml"
STOP_ONLY = ROOT / "tests" / "e2e" / "workflows" / "cloud-runner-stop.yml"


def test_a_failed_gpu_job_still_ends_its_vm_and_runner(act, github):
    github.add_repo(REPO)
    with FakeAws() as aws:
        aws.reset()  # moto's state is the process's: act's run id is always 1
        subnets, group = aws.network(zones=1)
        env = {
            **aws.env(),
            "GITHUB_API_URL": github.url,
            "E2E_SUBNETS": subnets[0],
            "E2E_GROUP": group,
            "E2E_IMAGE": aws.image(),
        }
        # the JIT runner connects once the VM boots: here, as soon as AWS answers the launch
        aws.after_launch = lambda: [setattr(r, "status", "online") for r in github.runners[REPO]]
        result = act(WORKFLOW, "workflow_dispatch", {"inputs": {}}, repository=REPO, env=env)
        assert result.returncode != 0  # the GPU job failed, on purpose
        out = result.outputs
        assert out["label"].startswith("gpu-ci-") and out["vm"].startswith("i-")
        assert out["stopped"] == [out["vm"]]
        assert aws.live() == [] and github.runners[REPO] == []


def test_a_start_cancelled_while_launching_is_stopped(github, tmp_path, tool_cache):
    """The run is cancelled while AWS holds the start's RunInstances (answered 5 s later:
    the VM comes up after the start is gone). act skips every later step of a cancelled run
    (GitHub runs `always()` jobs), so the stop job runs as its own act run of the same run
    id, with nothing from the start: it waits for the launch in flight and ends it."""
    github.add_repo(REPO)
    launched = tmp_path / "launched"
    with FakeAws() as aws:
        aws.reset()  # moto's state is the process's: act's run id is always 1
        subnets, group = aws.network(zones=1)
        aws.on_launch = launched.touch  # cancel the run (act: SIGINT) right there
        aws.delay["RunInstances"] = 5
        env = {
            **aws.env(),
            "GITHUB_API_URL": github.url,
            "E2E_SUBNETS": subnets[0],
            "E2E_GROUP": group,
            "E2E_IMAGE": aws.image(),
        }
        event = {"inputs": {}}
        common = {"tool_cache": tool_cache, "repository": REPO, "env": env}
        cancelled = run_act(
            tmp_path / "run",
            WORKFLOW,
            "workflow_dispatch",
            event,
            interrupt_when=launched,
            **common,
        )
        assert cancelled.returncode != 0 and cancelled.outputs.get("label", "") == ""
        assert len(github.runners[REPO]) == 1
        stop = run_act(tmp_path / "stop", STOP_ONLY, "workflow_dispatch", event, **common)
        assert stop.returncode == 0, stop.log[:6000]
        (launch,) = aws.calls("RunInstances")
        assert launch.answered == 200  # the VM was made, after its start was cancelled
        assert len(stop.outputs["stopped"]) == 1
        assert aws.live() == [] and github.runners[REPO] == []
