"""The example GPU workflow's gate job, unmodified, under act against the local server."""

from __future__ import annotations

import pytest

from testkit.github.runs import labeled
from testkit.github_server import PullRequest
from testkit.shared import ROOT, webhook

pytestmark = pytest.mark.e2e

REPO = "Codertocat/Hello-World"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
EXAMPLE = ROOT / "examples" / "cuda-ci.yml"


@pytest.fixture
def server(github):
    github.add_repo(REPO, roles={"Codertocat": "maintain"})
    github.add_pull(REPO, PullRequest(2, HEAD, labels=["CUDA CI"]))
    return github


def test_labelled_pull_request_runs_on_gpu(act, server):
    event = labeled()
    result = act(
        EXAMPLE,
        "pull_request",
        event,
        job="gate",
        repository=REPO,
        env={"GITHUB_API_URL": server.url},
    )
    assert result.returncode == 0, result.log
    assert result.outputs["run"] == "true"
    assert result.outputs["sha"] == HEAD
    # the example names its runner group (there is no default)
    assert result.outputs["runs-on"] == '{"group":"gpu-ephemeral","labels":["linux","gpu"]}'
    assert [r.path for r in server.log][-2:] == [
        f"/repos/{REPO}/collaborators/Codertocat/permission",
        f"/repos/{REPO}/pulls/2",
    ]
    assert server.log[-1].headers["Authorization"] == "token e2e-token"


def test_other_label_does_not_run(act, server):
    result = act(
        EXAMPLE,
        "pull_request",
        webhook("pull_request.labeled"),
        job="gate",
        repository=REPO,
        env={"GITHUB_API_URL": server.url},
    )
    assert result.returncode == 0, result.log
    assert result.outputs["run"] == "false"
    assert result.outputs["runs-on"] == '"ubuntu-latest"'
    assert server.log == []
