"""The admission hook reads its token file once, then removes it.

On ARC's same-container modes the job's steps run in the runner's container as the
runner's user: a token in the runner's environment is the job's too. The runner pod's init
container copies the Secret into a file; the hook reads it and unlinks it before anything
else (any REST call, any refusal), so the job's first step finds nothing. Every way the
file can be wrong refuses the job (fail closed), without a REST call. Driven as
tests/github/test_runner_admission.py drives the hook, against the test GitHub server.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpu_ci.commands.runner_admission import main
from gpu_ci.github import admission_token
from testkit.github.approvals import checks_url, post
from testkit.github_server import FakeGitHub, PullRequest, WorkflowRun

REPO = "octo-org/gpu-project"
FORK = "fork-owner/gpu-project"
HEAD = "c0ffee" + "0" * 34
WORKFLOW = ".github/workflows/cuda-ci.yml"
TOKEN = "github_pat_admission1234"
APPROVED = "Approved by @maintainer for c0ffee000000: GPU run queued."


@pytest.fixture
def server() -> Any:
    with FakeGitHub() as gh:
        gh.add_repo(REPO)
        yield gh


def _token_file(tmp_path: Path, text: str = TOKEN + "\n") -> Path:
    """The file the init container writes: the runner user's, mode 0400."""
    directory = tmp_path / "admission"
    directory.mkdir()
    path = directory / "token"
    path.write_text(text)
    path.chmod(0o400)
    return path


def _env(server: FakeGitHub, tmp_path: Path, token_file: Path, **extra: str) -> dict[str, str]:
    event = tmp_path / "event.json"
    event.write_text(
        json.dumps(
            {
                "action": "labeled",
                "number": 7,
                "label": {"name": "CUDA CI"},
                "pull_request": {"number": 7, "head": {"sha": HEAD}, "user": {"login": "author"}},
            }
        )
    )
    env = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_WORKFLOW_REF": f"{REPO}/{WORKFLOW}@refs/pull/7/merge",
        "GITHUB_RUN_ID": "4242",
        "GITHUB_RUN_ATTEMPT": "1",
        "GITHUB_TRIGGERING_ACTOR": "maintainer",
        "GITHUB_API_URL": server.url,
        "GPU_CI_ADMISSION_TOKEN_FILE": str(token_file),
        "GPU_CI_ALLOWED_WORKFLOWS": WORKFLOW,
        "GPU_CI_GATE_LABELS": "CUDA CI",
        "GPU_CI_HTTP_RETRIES": "0",
    }
    env.update(extra)
    return env


def _approve(server: FakeGitHub) -> None:
    """The maintainer's label approval of fork PR #7, and its run."""
    server.add_pull(REPO, PullRequest(7, HEAD, head_repo=FORK))
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    server.add_run(
        REPO,
        WorkflowRun(4242, "x", WORKFLOW, HEAD, actor="maintainer", created_at=now, head_repo=FORK),
    )
    post(server, APPROVED, repo=REPO, sha=HEAD, url=checks_url(7, REPO))


def _run(env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(env)
    return code, capsys.readouterr().out


def test_the_hook_reads_the_token_file_then_removes_it(server, tmp_path, capsys):
    """The job's first step finds no token: the file is gone, and the calls used it."""
    _approve(server)
    path = _token_file(tmp_path)
    code, out = _run(_env(server, tmp_path, path), capsys)
    assert code == 0, out
    assert not path.exists()
    calls = server.requests()
    assert calls and all(TOKEN in r.headers.get("Authorization", "") for r in calls)


def test_a_refusal_before_any_call_still_removes_the_token_file(server, tmp_path, capsys):
    """A bad setting refuses the job; the job still finds no token."""
    path = _token_file(tmp_path)
    env = _env(server, tmp_path, path, GPU_CI_ALLOWED_WORKFLOWS="ci.yml")
    code, out = _run(env, capsys)
    assert code == 1 and "GPU_CI_ALLOWED_WORKFLOWS" in out, out
    assert not path.exists()
    assert server.requests() == []


def _missing(path: Path) -> None:
    path.unlink()


def _link(path: Path) -> None:
    target = path.with_name("elsewhere")
    path.rename(target)
    path.symlink_to(target)


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _empty(path: Path) -> None:
    path.chmod(0o600)
    path.write_text("\n")


def _huge(path: Path) -> None:
    path.chmod(0o600)
    path.write_text("x" * (admission_token.LIMIT + 1))


BROKEN = [
    ("missing", _missing, "does not exist"),
    ("a-symbolic-link", _link, "symbolic link"),
    ("a-fifo", _fifo, "not a regular file"),
    ("empty", _empty, "holds no token"),
    ("too-large", _huge, "holds no token"),
]


@pytest.mark.parametrize(
    ("mutate", "message"), [(m, w) for _, m, w in BROKEN], ids=[n for n, *_ in BROKEN]
)
def test_a_token_file_that_is_not_the_init_containers_refuses(
    server, tmp_path, capsys, mutate, message
):
    """A missing, linked, FIFO, empty or oversized file refuses, uncalled."""
    _approve(server)
    path = _token_file(tmp_path)
    mutate(path)
    code, out = _run(_env(server, tmp_path, path), capsys)
    assert code == 1 and message in out and "GPU_CI_ADMISSION_TOKEN_FILE" in out, out
    assert server.requests() == []


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0,
    reason="needs root to give the file to another user",
)
def test_a_token_file_of_another_user_refuses(server, tmp_path, capsys):
    """The init container wrote the runner user's own copy only."""
    _approve(server)
    path = _token_file(tmp_path)
    shutil.chown(path, "nobody")
    code, out = _run(_env(server, tmp_path, path), capsys)
    assert code == 1 and "owned by uid" in out, out
    assert server.requests() == []


def test_a_token_file_that_cannot_be_removed_refuses(server, tmp_path, capsys, monkeypatch):
    """Fail closed: a token the job could still read is a token the job has."""
    _approve(server)
    path = _token_file(tmp_path)

    def refuse(_path: Any) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(admission_token.os, "unlink", refuse)
    code, out = _run(_env(server, tmp_path, path), capsys)
    assert code == 1 and "cannot be removed" in out, out
    assert server.requests() == []


def test_the_file_wins_over_a_token_in_the_environment(server, tmp_path, capsys):
    """With both set the file is consumed, so nothing is left behind."""
    _approve(server)
    path = _token_file(tmp_path)
    env = _env(server, tmp_path, path, GPU_CI_ADMISSION_TOKEN="github_pat_other")
    code, out = _run(env, capsys)
    assert code == 0, out
    assert not path.exists()
    assert all(TOKEN in r.headers.get("Authorization", "") for r in server.requests())
