"""The example label-remover workflow, unmodified, under act against the local server."""

from __future__ import annotations

import pytest

from testkit.github.runs import labeled
from testkit.github_server import PullRequest
from testkit.shared import ROOT, webhook

pytestmark = pytest.mark.e2e

REPO = "Codertocat/Hello-World"
EXAMPLE = ROOT / "examples" / "cuda-ci-remove-label.yml"


def test_remover_takes_the_label_off(act, github):
    github.add_repo(REPO)
    github.add_pull(REPO, PullRequest(2, "a" * 40, labels=["CUDA CI", "bug"]))
    event = labeled()
    result = act(
        EXAMPLE,
        "pull_request_target",
        event,
        repository=REPO,
        job="remove-label",
        env={"GITHUB_API_URL": github.url},
    )
    assert result.returncode == 0, result.log
    assert result.outputs["removed"] == '["CUDA CI"]'
    assert github.repos[REPO].pulls[2].labels == ["bug"]
    assert [(r.method, r.path) for r in github.log] == [
        ("DELETE", f"/repos/{REPO}/issues/2/labels/CUDA%20CI")
    ]


def test_remover_ignores_other_labels(act, github):
    github.add_repo(REPO)
    github.add_pull(REPO, PullRequest(2, "a" * 40, labels=["CUDA CI", "bug"]))
    result = act(
        EXAMPLE,
        "pull_request_target",
        webhook("pull_request.labeled"),
        repository=REPO,
        env={"GITHUB_API_URL": github.url},
    )
    assert result.returncode == 0, result.log
    assert github.log == []
    assert github.repos[REPO].pulls[2].labels == ["CUDA CI", "bug"]
