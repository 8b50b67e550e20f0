"""The porting guides' example workflows, unmodified, under act against the local server.

Only their CPU-side jobs run here (the gate, the label remover, a build): the GPU jobs need
GPU runners and GitHub's checkout."""

from __future__ import annotations

import json

import pytest

from testkit.github.runs import labeled
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


def _sklearn_port(act, sklearn, workflow: str, event: str, job: str):
    """One job of a scikit-learn port example on a gate-label event, against ``sklearn``."""
    return act(
        EXAMPLES / workflow,
        event,
        labeled(),
        job=job,
        repository=REPO,
        env={"GITHUB_API_URL": sklearn.url},
    )


def test_scikit_learn_port_tests_the_merge_commit(act, sklearn):
    result = _sklearn_port(act, sklearn, "port-scikit-learn-cuda-ci.yml", "pull_request", "gate")
    assert result.returncode == 0, result.log
    assert (result.outputs["run"], result.outputs["sha"]) == ("true", MERGE)
    assert result.outputs["head-sha"] == HEAD
    assert result.outputs["runs-on"] == '{"group":"cuda-gpu-runner-group"}'
    assert [r.path for r in sklearn.log][-1] == f"/repos/{REPO}/commits/{MERGE}"


def test_scikit_learn_port_refuses_a_stale_merge_commit(act, sklearn):
    sklearn.repos[REPO].pulls[2].base_sha = "c" * 40  # main moved since GitHub computed it
    result = _sklearn_port(act, sklearn, "port-scikit-learn-cuda-ci.yml", "pull_request", "gate")
    assert result.returncode == 0, result.log
    assert result.outputs["run"] == "false"
    assert "re-run this workflow's gate job" in result.outputs["reason"]


def test_scikit_learn_port_remover_takes_the_label_off(act, sklearn):
    result = _sklearn_port(
        act, sklearn, "port-scikit-learn-label-remover.yml", "pull_request_target", "label-remover"
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
        labeled(),
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


CUPY_TRIGGER = EXAMPLES / "port-cupy-ci-trigger.yml"
CUPY = EXAMPLES / "port-cupy-ci.yml"
CUPY_TIERS = EXAMPLES / "port-cupy-ci-tiers.txt"
APP_TOKEN = "ghs_e2e_cupy_trigger_app"
APP = "cupy-ci-trigger"
BOT = f"{APP}[bot]"
T4 = ("self-hosted", "linux", "gpu-t4")
MULTI = ("self-hosted", "linux", "gpu-4xv100")
ROCM = ("self-hosted", "linux", "rocm-mi210")


@pytest.fixture
def cupy(github):
    github.add_repo(REPO, roles={"maint": "maintain"})
    github.add_pull(
        REPO, PullRequest(2, HEAD, base_sha=BASE, mergeable=True, merge_commit_sha=MERGE)
    )
    github.repos[REPO].commits[MERGE] = Commit(MERGE, parents=[BASE, HEAD])
    github.token_users[APP_TOKEN] = BOT
    tiers = CUPY_TIERS.read_text(encoding="utf-8")
    # the default branch as each event names it (GitHub's example payloads differ)
    github.repos[REPO].files = {b: {".github/gpu-ci-tiers.txt": tiers} for b in ("master", "main")}
    return github


def _workflow(path, tmp_path):
    import yaml

    workflow = yaml.safe_load(path.read_text(encoding="utf-8"))
    workflow["on"] = workflow.pop(True)  # YAML 1.1 reads the key `on` as true
    return workflow


def _write(workflow, tmp_path, name):
    import yaml

    out = tmp_path / "wf" / name
    out.parent.mkdir(exist_ok=True)
    out.write_text(yaml.safe_dump(workflow, sort_keys=False), encoding="utf-8")
    return out


def cupy_trigger(tmp_path):
    """The relay with its App token step played by one that prints a token the server knows
    as the App's (act cannot reach GitHub to mint one) and no deployment environment."""
    workflow = _workflow(CUPY_TRIGGER, tmp_path)
    job = workflow["jobs"]["test-request"]
    job.pop("environment")
    assert job["steps"][0]["uses"].startswith("actions/create-github-app-token@")
    job["steps"][0] = {
        "id": "app",
        "run": f'echo "token={APP_TOKEN}" >> "$GITHUB_OUTPUT"; '
        f'echo "app-slug={APP}" >> "$GITHUB_OUTPUT"',
    }
    return _write(workflow, tmp_path, CUPY_TRIGGER.name)


def cupy_ci(tmp_path):
    """port-cupy-ci.yml with the build's and the GPU job's steps replaced by probes (act has
    no GPU, and checkout needs GitHub); needs, conditions, matrix and runs-on stay."""
    workflow = _workflow(CUPY, tmp_path)
    workflow["jobs"]["build"]["steps"] = [{"run": "echo built"}]
    probe = (
        "python3 -c \"import json, os; print(json.dumps({'runs-on-' + os.environ['KIND']: "
        "json.loads(os.environ['RUNS_ON']), 'sha-' + os.environ['KIND']: os.environ['SHA']}))\""
        ' >> "$E2E_OUT"'
    )
    workflow["jobs"]["test"]["steps"] = [
        {
            "env": {
                "KIND": "${{ matrix.kind }}",
                "RUNS_ON": "${{ toJSON(matrix.runs-on) }}",
                "SHA": "${{ needs.guard.outputs.sha }}",
            },
            "run": probe,
        }
    ]
    return _write(workflow, tmp_path, CUPY.name)


def test_cupy_port_relays_test_mini_rocm_and_runs_both_tiers_kinds(cupy, tool_cache, tmp_path):
    """'/test mini,rocm <sha>': the inert relay applies ci:triggered with the App's token;
    the labeled run tests the merge commit on the T4 and the ROCm kinds only, each with its
    own runs-on, and the budget counts every kind's jobs at its price."""
    from datetime import datetime, timezone

    from testkit.act_runner import run_act
    from testkit.events import on_pull_request, pull_request_labeled
    from testkit.github.runs import gpu_run

    body = f"/test mini,rocm {HEAD}"
    cupy.add_issue_comment(REPO, 2, "maint", body)
    event = on_pull_request(webhook("issue_comment.created"), body=body, commenter="maint")
    relayed = run_act(
        tmp_path / "relay",
        cupy_trigger(tmp_path),
        "issue_comment",
        event,
        tool_cache=tool_cache,
        repository=REPO,
        env={"GITHUB_API_URL": cupy.url},
    )
    assert relayed.returncode == 0, relayed.log
    assert cupy.label_writes == [("POST", 2, "ci:triggered", BOT)]  # the App's account
    assert cupy.repos[REPO].pulls[2].labels == ["ci:triggered"]
    assert "Test on" not in relayed.log  # no GPU job in the comment workflow

    day = datetime(2026, 11, 3, 10, tzinfo=timezone.utc)
    path = f".github/workflows/{CUPY.name}"
    gpu_run(cupy, day, 10, labels=T4, path=path)  # 10 min at $0.60/h = $0.10
    gpu_run(cupy, day, 60, labels=MULTI, path=path)  # 60 min at $12.24/h = $12.24
    gpu_run(cupy, day, 30, labels=ROCM, path=path)  # 30 min at $4.00/h = $2.00
    labeled = pull_request_labeled("ci:triggered", BOT)
    labeled["sender"]["type"] = "Bot"
    ran = run_act(
        tmp_path / "labeled",
        cupy_ci(tmp_path),
        "pull_request",
        labeled,
        tool_cache=tool_cache,
        repository=REPO,
        env={
            "GITHUB_API_URL": cupy.url,
            "GPU_CI_NOW": "2026-11-30T14:00:00Z",
            "GPU_CI_PRINT_SUMMARY": "1",
        },
    )
    assert ran.returncode == 0, ran.log
    out = ran.outputs
    assert (out["run"], out["sha"], out["labeled-by"]) == ("true", MERGE, "maint"), ran.log
    assert json.loads(out["selected-kinds"]) == ["cuda-t4", "rocm"]
    # one GPU job per selected kind, each on its own runners, testing the merge commit
    assert out["runs-on-cuda-t4"] == {"labels": list(T4)}
    assert out["runs-on-rocm"] == {"labels": list(ROCM)}
    assert out["sha-cuda-t4"] == out["sha-rocm"] == MERGE
    assert "runs-on-cuda-multi" not in out
    assert out["budget-spent"] == "14.34"  # $0.10 + $12.24 + $2.00, each kind at its price
    # 120 min reserved on cuda-t4 ($1.20) and rocm ($8.00), none on cuda-multi
    assert "| this run reserves | $9.20 |" in ran.log
    assert "| reservation | 120 min per kind (cuda-t4, rocm) |" in ran.log
