"""The porting guides' example workflows, unmodified, under act against the local server.

Only their CPU-side jobs run here (the gate, the label remover, a build): the GPU jobs need
GPU runners and GitHub's checkout."""

from __future__ import annotations

import json

import pytest

from testkit.github_server import Commit, PullRequest
from testkit.shared import ROOT, webhook

pytestmark = pytest.mark.e2e

REPO = "Codertocat/Hello-World"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
BASE = "ba5e" * 10
MERGE = "3e7e" * 10
EXAMPLES = ROOT / "examples"
ACTIONS = "gpu-ci-actions/gpu-ci-actions"


@pytest.fixture
def sklearn(github):
    github.add_repo(REPO, roles={"Codertocat": "maintain"})
    github.add_pull(
        REPO,
        PullRequest(
            2,
            HEAD,
            labels=["CUDA CI"],
            base_sha=BASE,
            mergeable=True,
            merge_commit_sha=MERGE,
        ),
    )
    github.repos[REPO].commits[MERGE] = Commit(MERGE, parents=[BASE, HEAD])
    return github


def labelled() -> dict:
    event = webhook("pull_request.labeled")
    event["label"]["name"] = "CUDA CI"
    return event


def test_scikit_learn_port_tests_the_merge_commit(act, sklearn):
    result = act(
        EXAMPLES / "port-scikit-learn-cuda-ci.yml",
        "pull_request",
        labelled(),
        job="gate",
        repository=REPO,
        env={"GITHUB_API_URL": sklearn.url},
    )
    assert result.returncode == 0, result.log
    assert (result.outputs["run"], result.outputs["sha"]) == ("true", MERGE)
    assert result.outputs["head-sha"] == HEAD
    assert result.outputs["runs-on"] == '{"group":"cuda-gpu-runner-group"}'
    assert [r.path for r in sklearn.log][-1] == f"/repos/{REPO}/commits/{MERGE}"


def test_scikit_learn_port_refuses_a_stale_merge_commit(act, sklearn):
    sklearn.repos[REPO].pulls[2].base_sha = "c" * 40  # main moved since GitHub computed it
    result = act(
        EXAMPLES / "port-scikit-learn-cuda-ci.yml",
        "pull_request",
        labelled(),
        job="gate",
        repository=REPO,
        env={"GITHUB_API_URL": sklearn.url},
    )
    assert result.returncode == 0, result.log
    assert result.outputs["run"] == "false"
    assert "re-run this workflow's gate job" in result.outputs["reason"]


def test_scikit_learn_port_remover_takes_the_label_off(act, sklearn):
    result = act(
        EXAMPLES / "port-scikit-learn-label-remover.yml",
        "pull_request_target",
        labelled(),
        job="label-remover",
        repository=REPO,
        env={"GITHUB_API_URL": sklearn.url},
    )
    assert result.returncode == 0, result.log
    assert sklearn.repos[REPO].pulls[2].labels == []


JAX = EXAMPLES / "port-jax-bazel-cuda.yml"


def test_jax_port_gives_each_kind_its_runs_on_and_prices_each_kind(act, github):
    from datetime import datetime, timezone

    from testkit.github.runs import gpu_run

    github.add_repo(REPO)
    day = datetime(2026, 11, 3, 10, tzinfo=timezone.utc)
    path = f".github/workflows/{JAX.name}"
    # 10 min on the B200 kind at $12/h, 20 min on the H100 kind at $90/h
    gpu_run(github, day, 10, labels=("linux-x86-a4-224-b200-1gpu",), path=path, pr=None)
    gpu_run(github, day, 20, labels=("linux-x86-a3-8g-h100-8gpu",), path=path, pr=None)
    result = act(
        JAX,
        "schedule",
        {"schedule": "0 */2 * * *"},
        job="gate",
        repository=REPO,
        env={"GITHUB_API_URL": github.url, "GPU_CI_NOW": "2026-11-30T14:00:00Z"},
    )
    assert result.returncode == 0, result.log
    out = result.outputs
    assert out["run"] == "true", result.log
    assert json.loads(out["runs-on-kinds"]) == {
        "b200": {"labels": ["linux-x86-a4-224-b200-1gpu"]},
        "h100x8": {"labels": ["linux-x86-a3-8g-h100-8gpu"]},
    }
    assert out["budget-spent"] == "32.00"  # $2.00 + $30.00
    assert "gpu-runs-on is not set" not in result.log


RAPIDS = EXAMPLES / "port-rapids-conda-python-tests.yml"


def test_rapids_port_gates_each_leg_through_the_reusable_workflow(act, github, tmp_path):
    from gpu_ci.release import OWN_USES

    github.add_repo(REPO, roles={"Codertocat": "maintain"})
    github.add_pull(REPO, PullRequest(2, HEAD, labels=["CUDA CI"]))
    reusable = (ROOT / ".github" / "workflows" / "gpu-ci.yml").read_text(encoding="utf-8")
    pins = {m.group("ref") for m in OWN_USES.finditer(reusable)}
    mapped = [a for ref in pins for a in ("--local-repository", f"{ACTIONS}@{ref}={tmp_path}/repo")]
    result = act(
        RAPIDS,
        "pull_request",
        labelled(),
        repository=REPO,
        env={"GITHUB_API_URL": github.url},
        act_args=["--matrix", "cuda:12.9.1", *mapped],
    )
    out = result.outputs
    assert (out["run"], out["sha"]) == ("true", HEAD), result.log
    assert out["runs-on"] == '"linux-amd64-gpu-h100-latest-1"'  # this leg's GPU and driver
    # the leg's build then starts in its CUDA version's image: a container job, which
    # needs Docker (not on this machine), so act stops there
    assert "Build on CPU" in result.log and "docker" in result.log.lower()
