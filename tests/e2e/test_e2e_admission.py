"""The runner admission hook under act: who may re-run the approved run, and what else runs.

act runs no job-started hooks, so the GPU job's first step runs the shipped
``deploy/runner-hooks/gpu-admission.sh`` as the runner would, with the GITHUB_* variables act
sets for the job (the event, the repository, the actor) and those GitHub sets for a re-run
(``GITHUB_RUN_ATTEMPT``, ``GITHUB_TRIGGERING_ACTOR``, ``GITHUB_WORKFLOW_REF``, which act
lacks), against the loopback test GitHub server. One act run per case.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import pytest

from testkit.github.approvals import checks_url, post, post_approval
from testkit.github_server import PullRequest, WorkflowRun
from testkit.shared import ROOT

pytestmark = pytest.mark.e2e

REPO = "octo-org/gpu-project"
FORK = "contributor/gpu-project"
HEAD = "c0ffee" + "0" * 34
RUN_ID = 4242
WORKFLOW = ROOT / "tests" / "e2e" / "workflows" / "admission-hook.yml"
HOOK = ROOT / "deploy" / "runner-hooks" / "gpu-admission.sh"
BOT = "github-actions[bot]"


def _event() -> dict:
    """The maintainer's label on the fork's pull request #7.

    A re-run keeps its payload."""
    return {
        "action": "labeled",
        "number": 7,
        "label": {"name": "CUDA CI"},
        "sender": {"login": "maintainer"},
        "pull_request": {
            "number": 7,
            "state": "open",
            "head": {"sha": HEAD, "ref": "feature", "repo": {"full_name": FORK}},
            "base": {"ref": "main", "repo": {"full_name": REPO}},
        },
        "repository": {"full_name": REPO, "default_branch": "main"},
    }


def _approved_run_failed(github) -> None:
    """#7 approved at HEAD (covering cuda-ci.yml), its run 4242 recorded, then failed."""
    github.add_repo(REPO, roles={"maintainer": "write", "maint2": "write", "contributor": "read"})
    github.add_pull(REPO, PullRequest(7, HEAD, head_repo=FORK, user="contributor"))
    post_approval(github, repo=REPO, sha=HEAD, url=checks_url(7, REPO))
    attempt = f"https://github.com/{REPO}/actions/runs/{RUN_ID}/attempts"
    running = "Approved by @maintainer: GPU run in progress."
    post(github, running, repo=REPO, sha=HEAD, url=f"{attempt}/1")
    failed = f"GPU tests failed on {HEAD[:12]} (approved by @maintainer): tests: failure."
    post(github, failed, repo=REPO, sha=HEAD, state="failure", url=f"{attempt}/1")


def _hook_job(
    act, tmp_path: Path, github, file: str, job: dict[str, str], allowed: str | None = None
):
    """Run the GPU workflow, saved as ``file`` in the merge commit.

    ``allowed``: the runner admin's GPU workflow files (default: cuda-ci.yml)."""
    workflow = tmp_path / "wf" / file
    workflow.parent.mkdir()
    shutil.copy2(WORKFLOW, workflow)
    env = {
        "GITHUB_API_URL": github.url,
        "GITHUB_WORKFLOW_REF": f"{REPO}/.github/workflows/{file}@refs/pull/7/merge",
        **job,
        # the runner admin's variables (the runner's environment)
        "E2E_HOOK": str(HOOK),
        "GPU_CI_PYTHON": sys.executable,
        "GPU_CI_ADMISSION_TOKEN": "admission-token-1234",
        "GPU_CI_ALLOWED_WORKFLOWS": allowed or ".github/workflows/cuda-ci.yml",
    }
    return act(
        workflow,
        "pull_request",
        _event(),
        repository=REPO,
        env=env,
        act_args=["--actor", "maintainer"],
        secrets={},
    )


def test_a_maintainers_re_run_of_the_approved_run_is_admitted(act, tmp_path, github):
    _approved_run_failed(github)
    again = {"GITHUB_RUN_ID": str(RUN_ID), "GITHUB_RUN_ATTEMPT": "2"}
    result = _hook_job(
        act, tmp_path, github, "cuda-ci.yml", {**again, "GITHUB_TRIGGERING_ACTOR": "maint2"}
    )
    assert result.returncode == 0, result.log
    assert result.outputs == {"hook_rc": 0, "gpu_step": "ran"}
    assert f"run {RUN_ID} attempt 2 of .github/workflows/cuda-ci.yml is the run" in result.log
    assert "a re-run by @maint2 (write)" in result.log
    assert github.requests("GET", "/collaborators/maint2/permission")


def test_the_watchdogs_retry_of_the_approved_run_is_admitted(act, tmp_path, github):
    _approved_run_failed(github)
    retried = (
        "GPU run retried after the runner was lost (attempt 2); attempt 1: the job ended "
        "while step 3 was still running"
    )
    link = f"https://github.com/{REPO}/actions/runs/{RUN_ID}/attempts/2"
    post(github, retried, repo=REPO, sha=HEAD, url=link)
    job = {"GITHUB_RUN_ID": str(RUN_ID), "GITHUB_RUN_ATTEMPT": "2"}
    result = _hook_job(
        act, tmp_path, github, "cuda-ci.yml", {**job, "GITHUB_TRIGGERING_ACTOR": BOT}
    )
    assert result.returncode == 0, result.log
    assert result.outputs == {"hook_rc": 0, "gpu_step": "ran"}
    assert f"gpu-watchdog's retry (@{BOT})" in result.log
    assert not github.requests("GET", "/permission")


@pytest.mark.parametrize(
    ("file", "why"),
    [
        # a file the runner admin never allowed
        ("miner.yml", "approvals cover on this runner (.github/workflows/cuda-ci.yml)"),
        # a file the admin allows (for its nightly schedule), which this approval does not
        # cover: only the approval's own record says what the maintainer approved
        ("nightly.yml", "the approval of c0ffee000000 covers (.github/workflows/cuda-ci.yml)"),
    ],
)
def test_a_forks_other_workflow_file_at_the_approved_head_is_refused(
    act, tmp_path, github, file, why
):
    """The maintainer's label fires every ``pull_request`` workflow of the merge commit: the
    fork's own copy of another file, at the approved head, started by the approver, before
    gpu-status recorded the approved run."""
    github.add_repo(REPO, roles={"maintainer": "write"})
    github.add_pull(REPO, PullRequest(7, HEAD, head_repo=FORK, user="contributor"))
    post_approval(github, repo=REPO, sha=HEAD, url=checks_url(7, REPO))
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    path = f".github/workflows/{file}"
    github.add_run(
        REPO, WorkflowRun(5151, "x", path, HEAD, actor="maintainer", created_at=now, head_repo=FORK)
    )
    job = {
        "GITHUB_RUN_ID": "5151",
        "GITHUB_RUN_ATTEMPT": "1",
        "GITHUB_TRIGGERING_ACTOR": "maintainer",
    }
    allowed = ".github/workflows/cuda-ci.yml,.github/workflows/nightly.yml"
    result = _hook_job(
        act, tmp_path, github, file, job, allowed=allowed if file == "nightly.yml" else None
    )
    assert result.returncode != 0, result.log
    assert result.outputs == {"hook_rc": 1}
    assert "this GPU runner refused the job: rule 'covered workflow'" in result.log
    assert f"{path} is not a GPU workflow file" in result.log and why in result.log
