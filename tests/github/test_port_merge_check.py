"""The scikit-learn port's merge check, run under bash in a real git repository.

The build job checks out the gate's ``sha`` (GitHub's merge commit) and refuses to build
unless its second parent is the approved head (``head-sha``)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from testkit.shared import ROOT

EXAMPLE = ROOT / "examples" / "port-scikit-learn-cuda-ci.yml"


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    out = subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    return out.stdout.decode().strip()


@pytest.fixture
def merged(tmp_path: Path) -> tuple[Path, str, str]:
    """A repository checked out at a merge of ``head`` into ``main``: (repo, base, head)."""
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "base")
    base = git(tmp_path, "rev-parse", "HEAD")
    git(tmp_path, "checkout", "-q", "-b", "feature")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "head")
    head = git(tmp_path, "rev-parse", "HEAD")
    git(tmp_path, "checkout", "-q", "main")
    git(tmp_path, "merge", "-q", "--no-ff", "-m", "merge", "feature")
    return tmp_path, base, head


def merge_check(repo: Path, head_sha: str) -> int:
    steps = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))["jobs"]["build_wheel"]["steps"]
    step = next(s for s in steps if s.get("name") == "The merge commit merges the approved head")
    assert step["env"] == {"HEAD_SHA": "${{ needs.gate.outputs.head-sha }}"}
    env = {"PATH": os.environ["PATH"], "HEAD_SHA": head_sha}
    return subprocess.run(["bash", "-e", "-c", step["run"]], cwd=repo, env=env).returncode


def test_the_merge_of_the_approved_head_builds(merged):
    repo, base, head = merged
    assert git(repo, "rev-parse", "HEAD^1") == base
    assert merge_check(repo, head) == 0


def test_a_merge_of_another_head_does_not_build(merged):
    repo, base, _ = merged
    assert merge_check(repo, base) != 0
    assert merge_check(repo, "1" * 40) != 0
