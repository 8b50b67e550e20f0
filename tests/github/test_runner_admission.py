"""The GPU runner's job-started hook (issue 26, item 4): a pull request that edits the GPU
workflow cannot reach a GPU runner unless a maintainer approved its head.

Driven as the runner drives a hook: the default variables of the job
(``GITHUB_REPOSITORY``, ``GITHUB_EVENT_NAME``, ``GITHUB_EVENT_PATH``,
``GITHUB_WORKFLOW_REF``, ``GITHUB_API_URL``) and the admin's variables, against the test
GitHub server; the end-to-end test runs ``deploy/runner-hooks/gpu-admission.sh`` with bash as
the runner does (``bash -e <file>``).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpu_ci.commands.runner_admission import main
from testkit.github.approvals import post
from testkit.github_server import FakeGitHub

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "deploy" / "runner-hooks" / "gpu-admission.sh"
REPO = "octo-org/gpu-project"
HEAD = "c0ffee" + "0" * 34
WORKFLOW = ".github/workflows/cuda-ci.yml"


def _payload(tmp_path: Path, head: str | None = HEAD) -> Path:
    """The fields the hook reads of a pull_request payload (GitHub's schema: head.sha)."""
    body: dict[str, Any] = {"action": "labeled", "number": 7}
    if head is not None:
        body["pull_request"] = {"number": 7, "head": {"sha": head, "ref": "feature"}}
    path = tmp_path / "event.json"
    path.write_text(json.dumps(body))
    return path


def _env(
    server: FakeGitHub,
    tmp_path: Path,
    *,
    event: str = "pull_request",
    ref: str = "refs/pull/7/merge",
    head: str | None = HEAD,
    **extra: str,
) -> dict[str, str]:
    env = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_EVENT_NAME": event,
        "GITHUB_EVENT_PATH": str(_payload(tmp_path, head)),
        "GITHUB_WORKFLOW_REF": f"{REPO}/{WORKFLOW}@{ref}",
        "GITHUB_API_URL": server.url,
        "GPU_CI_ADMISSION_TOKEN": "admission-token-1234",
        "GPU_CI_ALLOWED_WORKFLOWS": WORKFLOW,
        "GPU_CI_HTTP_RETRIES": "0",
    }
    env.update(extra)
    return env


#: A commit status on this repository's head, newest first.
_status = functools.partial(post, repo=REPO, sha=HEAD)


@pytest.fixture
def server() -> Any:
    with FakeGitHub() as gh:
        gh.add_repo(REPO)
        yield gh


def _run(env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(env)
    return code, capsys.readouterr().out


def test_a_pull_request_job_whose_head_nobody_approved_is_refused(server, tmp_path, capsys):
    """The fork edited cuda-ci.yml (no gate, a job on the GPU runner): refused."""
    code, out = _run(_env(server, tmp_path), capsys)
    assert code == 1
    assert "::error title=GPU runner admission::" in out
    assert "carries no approval in 'GPU CI'" in out
    assert len(server.requests("GET")) == 1


def test_a_pull_request_job_whose_head_a_maintainer_approved_is_admitted(server, tmp_path, capsys):
    _status(server, "Approved by @maintainer for c0ffee000000: GPU run queued.")
    code, out = _run(_env(server, tmp_path), capsys)
    assert code == 0, out
    assert "admitted: c0ffee000000 was approved by @maintainer" in out
    assert len(server.requests("GET")) == 1


def test_an_approval_written_by_anyone_but_the_trusted_creator_is_not_one(server, tmp_path, capsys):
    _status(
        server, "Approved by @maintainer for c0ffee000000: GPU run queued.", creator="contributor"
    )
    code, out = _run(_env(server, tmp_path), capsys)
    assert code == 1 and "carries no approval" in out


def test_a_refusal_quoting_an_approval_is_not_one(server, tmp_path, capsys):
    _status(server, "Not approved: approved by @maintainer is what they said")
    code, out = _run(_env(server, tmp_path), capsys)
    assert code == 1 and "carries no approval" in out


def test_a_revocation_after_the_approval_refuses(server, tmp_path, capsys):
    _status(server, "Approved by @maintainer for c0ffee000000: GPU run queued.")
    _status(server, "Waiting for approval: a maintainer applies the label")  # newer
    code, out = _run(_env(server, tmp_path), capsys)
    assert code == 1 and "carries no approval" in out


def test_a_later_refused_label_does_not_void_the_approval_of_the_commit(server, tmp_path, capsys):
    """A triage user's refused label (issue 26: "a refused label from someone without the
    role does not reset" the head) leaves the maintainer's approval of this commit standing."""
    _status(server, "Approved by @maintainer for c0ffee000000: GPU run queued.")
    _status(server, "Not approved: @triager has triage, the label needs write")
    code, out = _run(_env(server, tmp_path), capsys)
    assert code == 0 and "approved by @maintainer" in out


def test_the_approval_context_is_compared_as_github_does_case_insensitively(
    server, tmp_path, capsys
):
    _status(server, "Approved by @maintainer for c0ffee000000: GPU run queued.", context="gpu ci")
    code, out = _run(_env(server, tmp_path), capsys)
    assert code == 0, out


def test_an_approval_of_another_commit_does_not_admit(server, tmp_path, capsys):
    _status(server, "Approved by @maintainer for abc: GPU run queued.", sha="a" * 40)
    code, out = _run(_env(server, tmp_path), capsys)
    assert code == 1


@pytest.mark.parametrize(
    ("event", "ref", "admitted"),
    [
        ("push", "refs/heads/main", True),
        ("schedule", "refs/heads/main", True),
        ("workflow_dispatch", "refs/heads/main", True),
        ("push", "refs/heads/feature", False),  # a branch's own definition
        ("workflow_dispatch", "refs/heads/edited", False),
        ("pull_request_target", "refs/heads/main", False),  # no approved head in the payload
    ],
)
def test_trusted_events_of_the_allowed_file_on_the_default_branch(
    server, tmp_path, capsys, event, ref, admitted
):
    code, out = _run(_env(server, tmp_path, event=event, ref=ref, head=None), capsys)
    assert code == (0 if admitted else 1), out
    assert len(server.requests("GET")) <= 2
    if admitted:
        assert "from the default branch (main)" in out


def test_the_default_branch_comes_from_the_api_not_the_payload(server, tmp_path, capsys):
    server.repos[REPO].default_branch = "trunk"
    code, _ = _run(_env(server, tmp_path, event="push", ref="refs/heads/main", head=None), capsys)
    assert code == 1
    code, _ = _run(_env(server, tmp_path, event="push", ref="refs/heads/trunk", head=None), capsys)
    assert code == 0


def test_another_workflow_file_on_the_default_branch_is_not_admitted(server, tmp_path, capsys):
    env = _env(server, tmp_path, event="push", ref="refs/heads/main", head=None)
    env["GITHUB_WORKFLOW_REF"] = f"{REPO}/.github/workflows/new-gpu.yml@refs/heads/main"
    code, out = _run(env, capsys)
    assert code == 1 and "allowed workflows (.github/workflows/cuda-ci.yml)" in out


def test_a_workflow_of_another_repository_is_refused(server, tmp_path, capsys):
    env = _env(server, tmp_path)
    env["GITHUB_WORKFLOW_REF"] = f"fork-owner/gpu-project/{WORKFLOW}@refs/heads/main"
    code, out = _run(env, capsys)
    assert code == 1 and "is not a workflow of octo-org/gpu-project" in out
    assert server.requests() == []


@pytest.mark.parametrize("status", [401, 404, 500])
def test_api_errors_fail_closed(server, tmp_path, capsys, status):
    _status(server, "Approved by @maintainer for c0ffee000000: GPU run queued.")
    server.inject("GET", r"/statuses", status, times=10)
    code, out = _run(_env(server, tmp_path), capsys)
    assert code == 1
    assert "this GPU runner refused the job" in out


def test_no_token_refuses_and_the_jobs_token_is_not_used(server, tmp_path, capsys):
    _status(server, "Approved by @maintainer for c0ffee000000: GPU run queued.")
    env = _env(server, tmp_path, GITHUB_TOKEN="job-token-abcdef")
    del env["GPU_CI_ADMISSION_TOKEN"]
    code, out = _run(env, capsys)
    assert code == 1 and "GPU_CI_ADMISSION_TOKEN is not set" in out
    assert server.requests() == []


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("GPU_CI_ALLOWED_WORKFLOWS", "cuda-ci.yml", "give workflow files as"),
        ("GPU_CI_TRUSTED_EVENTS", "push,pull_request_target", "only push, schedule"),
    ],
)
def test_unusable_admin_settings_refuse_with_what_to_fix(
    server, tmp_path, capsys, variable, value, message
):
    code, out = _run(_env(server, tmp_path, **{variable: value}), capsys)
    assert code == 1 and message in out


def test_the_hook_script_end_to_end_as_the_runner_runs_it(server, tmp_path):
    """``bash -e <file>`` with the job's variables: refused, then admitted after approval."""
    env = dict(os.environ, **_env(server, tmp_path), GPU_CI_PYTHON=sys.executable)
    env.pop("GITHUB_TOKEN", None)
    refused = subprocess.run(
        ["bash", "-e", str(HOOK)], env=env, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "::error title=GPU runner admission::" in refused.stdout
    _status(server, "Approved by @maintainer for c0ffee000000: GPU run queued.")
    admitted = subprocess.run(
        ["bash", "-e", str(HOOK)], env=env, capture_output=True, text=True, timeout=60
    )
    assert admitted.returncode == 0, admitted.stdout + admitted.stderr
    assert "admitted" in admitted.stdout


def test_the_hook_script_refuses_without_its_python(tmp_path):
    env = dict(os.environ, GPU_CI_PYTHON=str(tmp_path / "missing" / "python"))
    out = subprocess.run(
        ["bash", "-e", str(HOOK)], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 1 and "refusing the job" in out.stdout


def test_an_allowed_workflow_written_with_a_leading_dot_slash_is_that_file(
    server, tmp_path, capsys
):
    """`./.github/workflows/cuda-ci.yml` names the same file: `lstrip("./")` ate the dot of
    `.github` and refused the runner's whole configuration."""
    env = _env(
        server,
        tmp_path,
        event="push",
        ref="refs/heads/main",
        head=None,
        GPU_CI_ALLOWED_WORKFLOWS=f"./{WORKFLOW}",
    )
    code, out = _run(env, capsys)
    assert code == 0 and "admitted" in out
