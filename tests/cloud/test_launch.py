"""gpu-cloud-runner (start) against moto: the walk, the tags, the refusal, the clean-up."""

from __future__ import annotations

import base64
import json

import pytest

from gpu_ci.specs import DLAMI_PARAMETER
from testkit.cloud.jobs import REPO, RUN_ID, job_env
from testkit.cloud.moto_ec2 import market_of

MANAGED = "gpu-ci:managed"


def _tags(params, kind):
    """The tags a recorded RunInstances request asked for on ``kind`` at creation."""
    found = {}
    for n in range(1, 4):
        if params.get(f"TagSpecification.{n}.ResourceType") != kind:
            continue
        m = 1
        while f"TagSpecification.{n}.Tag.{m}.Key" in params:
            found[params[f"TagSpecification.{n}.Tag.{m}.Key"]] = params[
                f"TagSpecification.{n}.Tag.{m}.Value"
            ]
            m += 1
    return found


@pytest.mark.slow
def test_two_candidates_without_capacity_then_the_third_launches_tagged(cloud, repo, run_cli):
    aws = cloud.aws
    aws.inject("InsufficientInstanceCapacity", instance_type="g5.xlarge", market="spot")
    aws.inject("InsufficientInstanceCapacity", instance_type="g4dn.xlarge", market="spot")
    result = run_cli(["gpu-cloud-runner"], job_env(cloud, repo))
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.outputs
    assert (out["instance-type"], out["market"]) == ("g6.xlarge", "spot")
    outcomes = [a["outcome"] for a in json.loads(out["attempts"])]
    assert outcomes == ["capacity", "capacity", "launched"]
    launches = aws.calls("RunInstances")
    assert [p.params["InstanceType"] for p in launches] == ["g5.xlarge", "g4dn.xlarge", "g6.xlarge"]
    assert len({p.params["ClientToken"] for p in launches}) == 3  # one token per candidate
    sent = launches[-1].params
    # launch settings moto ignores, asserted on the request itself
    assert sent["InstanceInitiatedShutdownBehavior"] == "terminate"
    assert sent["MetadataOptions.HttpTokens"] == "required"
    assert sent["MetadataOptions.HttpPutResponseHopLimit"] == "1"
    assert not any(k.startswith("IamInstanceProfile") for k in sent)
    assert market_of(sent) == "spot"
    # tags at creation on the VM, its volume and its network interface
    for kind in ("instance", "volume", "network-interface"):
        tags = _tags(sent, kind)
        assert tags[MANAGED] == "true" and tags["gpu-ci:run-id"] == str(RUN_ID), kind
        assert tags["gpu-ci:runner-id"] == out["runner-id"] and tags["Name"] == out["label"]
        assert tags["gpu-ci:expires-at"] == out["expires-at"]
        assert tags["gpu-ci:usd-per-hour"] == out["hourly-price"] == "0.8048"
    (vm,) = aws.live(**{MANAGED: "true"})
    assert vm["InstanceId"] == out["instance-id"]
    volume_tags = aws.client().describe_volumes(
        Filters=[{"Name": "attachment.instance-id", "Values": [vm["InstanceId"]]}]
    )["Volumes"][0]["Tags"]
    assert {"Key": "gpu-ci:repository", "Value": REPO} in volume_tags
    # the user data starts the timers before the runner, and runs the JIT runner
    script = base64.b64decode(sent["UserData"]).decode()
    assert script.index("shutdown -h +120") < script.index("spot/instance-action")
    assert script.index("spot/instance-action") < script.index("run.sh --jitconfig")
    # the label is the runner's only custom label, and unguessable (a 16-hex-digit nonce)
    (runner,) = repo.runners[REPO]
    assert runner.labels == [out["label"]] and str(runner.id) == out["runner-id"]
    assert out["label"].startswith(f"gpu-ci-{RUN_ID}-1-") and out["label"].endswith("-gpu")


@pytest.mark.slow
def test_all_capacity_gone_deletes_the_registration_and_fails(cloud, repo, run_cli):
    cloud.aws.inject("InsufficientInstanceCapacity")
    result = run_cli(["gpu-cloud-runner"], job_env(cloud, repo))
    assert result.returncode == 1
    assert "no candidate launched: of 6" in result.stdout
    assert "registration" in result.stdout and "was deleted" in result.stdout
    assert len(cloud.aws.calls("RunInstances")) == 6  # 2 markets x 3 types x 1 zone
    assert repo.runners[REPO] == [] and cloud.aws.live() == []
    assert "| spot | g5.xlarge |" in result.summary


@pytest.mark.slow
def test_a_budget_smaller_than_the_reservation_refuses_before_any_call(cloud, repo, run_cli):
    # 120 min x $1.006/h (g5.xlarge, the dearest) = $2.012 > $2.00
    result = run_cli(["gpu-cloud-runner"], job_env(cloud, repo, budget_left="2.00"))
    assert result.returncode == 1
    assert "may cost $2.01" in result.stdout and "$2.00 left" in result.stdout
    assert cloud.aws.calls() == [] and repo.log == []
    within = run_cli(["gpu-cloud-runner"], job_env(cloud, repo, budget_left="2.02"))
    assert within.returncode == 0, within.stdout


@pytest.mark.slow
def test_quota_is_reported_as_quota_and_the_walk_goes_on(cloud, repo, run_cli):
    cloud.aws.inject("MaxSpotInstanceCountExceeded", market="spot")
    cloud.aws.inject("InsufficientInstanceCapacity", market="on-demand", instance_type="g5.xlarge")
    result = run_cli(["gpu-cloud-runner"], job_env(cloud, repo))
    assert result.returncode == 0, result.stdout
    attempts = json.loads(result.outputs["attempts"])
    assert [a["outcome"] for a in attempts] == ["quota"] * 3 + ["capacity", "launched"]
    assert result.outputs["market"] == "on-demand"


def test_a_configuration_error_fails_at_once(cloud, repo, run_cli):
    cloud.aws.inject("InvalidAMIID.NotFound")
    result = run_cli(["gpu-cloud-runner"], job_env(cloud, repo))
    assert result.returncode == 1
    assert "InvalidAMIID.NotFound" in result.stdout and "none was tried" in result.stdout
    assert len(cloud.aws.calls("RunInstances")) == 1
    assert repo.runners[REPO] == []


@pytest.mark.slow
def test_throttling_backs_off_and_asks_the_same_candidate_with_the_same_token(cloud, repo, run_cli):
    cloud.aws.inject("RequestLimitExceeded", times=1)
    result = run_cli(["gpu-cloud-runner"], job_env(cloud, repo))
    assert result.returncode == 0, result.stdout
    first, second = cloud.aws.calls("RunInstances")
    assert first.answered == 503 and second.answered == 200
    assert first.params["ClientToken"] == second.params["ClientToken"]
    assert second.at - first.at >= 1.0
    assert json.loads(result.outputs["attempts"])[0]["tries"] == 2


@pytest.mark.slow
def test_a_re_run_launches_on_demand(cloud, repo, run_cli):
    result = run_cli(["gpu-cloud-runner"], job_env(cloud, repo, attempt=2))
    assert result.returncode == 0, result.stdout
    assert result.outputs["market"] == "on-demand"
    assert [market_of(r.params) for r in cloud.aws.calls("RunInstances")] == ["on-demand"]
    assert result.outputs["label"].startswith(f"gpu-ci-{RUN_ID}-2-")


def test_the_image_comes_from_a_public_ssm_parameter(cloud, repo, run_cli):
    name = DLAMI_PARAMETER
    cloud.aws.parameters[name] = cloud.image
    result = run_cli(["gpu-cloud-runner"], job_env(cloud, repo, image=f"ssm:{name}"))
    assert result.returncode == 0, result.stdout
    assert cloud.aws.calls("RunInstances")[0].params["ImageId"] == cloud.image


@pytest.mark.slow
def test_no_cloud_credentials_says_how_to_give_them_and_deletes_the_registration(
    cloud, repo, run_cli
):
    env = job_env(cloud, repo)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        env[name] = ""
    env.update({"AWS_EC2_METADATA_DISABLED": "true", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"})
    env["AWS_CONFIG_FILE"] = "/nonexistent"
    result = run_cli(["gpu-cloud-runner"], env)
    assert result.returncode == 1
    assert "NoCredentialsError" in result.stdout and "configure-aws-credentials" in result.stdout
    assert repo.runners[REPO] == [] and cloud.aws.calls("RunInstances") == []


@pytest.mark.slow
def test_every_candidate_has_its_own_token_whatever_the_job_key(cloud, repo, run_cli):
    # A 16-character job key makes the name 66 characters: a token cut to 64 from its end
    # lost the candidate's index, and every candidate of the walk shared one token.
    cloud.aws.inject("InsufficientInstanceCapacity", instance_type="g5.xlarge")
    cloud.aws.inject("InsufficientInstanceCapacity", instance_type="g4dn.xlarge", market="spot")
    env = job_env(cloud, repo, job_key="cuda-12-tests-ab")
    env["GITHUB_RUN_ID"] = "98765432101"  # run ids have 11 digits now
    result = run_cli(["gpu-cloud-runner"], env)
    assert result.returncode == 0, result.stdout
    tokens = [p.params["ClientToken"] for p in cloud.aws.calls("RunInstances")]
    assert len(tokens) == 3 and len(set(tokens)) == 3
    assert all(len(t) <= 64 for t in tokens)  # EC2's limit
    assert all(result.outputs["label"].split("-")[5] in t for t in tokens)  # the nonce


@pytest.mark.slow
def test_a_registration_reaped_while_launching_ends_the_vm_and_fails(cloud, repo, run_cli):
    # The reaper deletes an offline registration with no VM once it is older than its grace:
    # a start still walking the candidates then launches a VM whose runner cannot connect,
    # and the GPU job would wait in the queue for a runner nobody can bring.
    cloud.aws.on_launch = lambda: repo.runners[REPO].clear()  # the reaper's DELETE
    result = run_cli(["gpu-cloud-runner"], job_env(cloud, repo))
    assert result.returncode == 1, result.stdout
    assert "was deleted while the VM launched" in result.stdout
    assert cloud.aws.live() == [] and len(cloud.aws.calls("TerminateInstances")) == 1
    assert "label" not in result.outputs
    assert repo.contract_violations == []


def test_the_launch_timeout_stays_within_the_reapers_shortest_grace(cloud, repo, run_cli):
    result = run_cli(["gpu-cloud-runner"], job_env(cloud, repo, launch_timeout="601"))
    assert result.returncode == 2 and "from 10 to 600" in result.stdout
    assert cloud.aws.calls() == [] and repo.log == []


def test_a_second_start_with_the_same_job_key_in_a_run_launches_nothing(cloud, repo, run_cli):
    # Two starts of one run attempt with one job key (a matrix leg each) tag their VMs alike:
    # either stop would find and terminate both VMs, the other leg's mid-job.
    from datetime import datetime, timezone

    from gpu_ci.cloud import naming
    from testkit.github_server import add_runner

    first = naming.RunnerName.new(RUN_ID, 1, "gpu", datetime.now(timezone.utc))
    theirs = add_runner(repo, REPO, str(first), labels=[str(first)])
    result = run_cli(["gpu-cloud-runner"], job_env(cloud, repo))
    assert result.returncode == 1, result.stdout
    assert f"runner {theirs.id}" in result.stdout and "its own job-key" in result.stdout
    assert cloud.aws.calls("RunInstances") == []
    assert [r.id for r in repo.runners[REPO]] == [theirs.id]  # ours deleted, theirs kept
    assert repo.contract_violations == []


def _boots(repo):
    """What a VM that boots does: its JIT runner connects, and GitHub lists it online."""

    def online():
        for runner in repo.runners[REPO]:
            runner.status = "online"

    return online


@pytest.mark.slow  # waits out its 6 s online-timeout: ~11 s
def test_a_vm_that_never_boots_is_ended_and_the_start_fails(cloud, repo, run_cli):
    # No runner ever connects: without the wait the start passed, and the GPU job waited in
    # GitHub's queue for a day for a runner that could not come (no timer ran on the VM).
    result = run_cli(["gpu-cloud-runner"], job_env(cloud, repo, online_timeout="6"))
    assert result.returncode == 1, result.stdout
    assert "did not come online within online-timeout (6 s)" in result.stdout
    assert cloud.aws.live() == [] and repo.runners[REPO] == []
    assert "label" not in result.outputs
    assert repo.contract_violations == []


@pytest.mark.slow
def test_the_start_returns_once_its_runner_is_online(cloud, repo, run_cli):
    cloud.aws.after_launch = _boots(repo)
    result = run_cli(["gpu-cloud-runner"], job_env(cloud, repo, online_timeout="600"))
    assert result.returncode == 0, result.stdout
    (vm,) = cloud.aws.live()
    assert vm["InstanceId"] == result.outputs["instance-id"]
    assert [r.status for r in repo.runners[REPO]] == ["online"]
    assert repo.contract_violations == []
