"""gpu-gate's test-merge: the merge commit of the approved head, or a refusal with its reason."""

from __future__ import annotations

import pytest

from gpu_ci.github import gate
from testkit.github_server import Commit, PullRequest
from testkit.shared import webhook

REPO = "Codertocat/Hello-World"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
BASE = "ba5e" * 10
MERGE = "3e7e" * 10


@pytest.fixture
def server(github):
    github.add_repo(REPO, roles={"Codertocat": "write"})
    github.add_pull(
        REPO,
        PullRequest(2, HEAD, base_sha=BASE, mergeable=True, merge_commit_sha=MERGE),
    )
    github.repos[REPO].commits[MERGE] = Commit(MERGE, parents=[BASE, HEAD])
    return github


def gate_cli(run_cli, server, test_merge="true"):
    event = webhook("pull_request.labeled")
    event["label"]["name"] = "CUDA CI"
    event["sender"]["login"] = "Codertocat"
    env = {
        "GITHUB_API_URL": server.url,
        "GITHUB_REPOSITORY": REPO,
        "INPUT_GITHUB_TOKEN": "ghs_secret",
        "INPUT_TEST_MERGE": test_merge,
    }
    return run_cli(["gpu-gate"], env, event=event, event_name="pull_request")


def test_merge_commit_of_the_approved_head_runs(run_cli, server):
    result = gate_cli(run_cli, server)
    assert result.returncode == 0, result.stdout
    out = result.outputs
    assert (out["run"], out["sha"], out["head-sha"]) == ("true", MERGE, HEAD)
    assert "merge into main at ba5eba5eba5e" in out["reason"]
    # the label's two calls, the pull request again at decision time, the merge commit
    assert [r.path for r in server.log][-2:] == [
        f"/repos/{REPO}/pulls/2",
        f"/repos/{REPO}/commits/{MERGE}",
    ]
    assert f"| tested commit | merge commit {MERGE} of the head {HEAD} |" in result.summary


def test_head_only_stays_the_default(run_cli, server):
    out = gate_cli(run_cli, server, test_merge="false").outputs
    assert (out["run"], out["sha"], out["head-sha"]) == ("true", HEAD, HEAD)
    assert not server.requests("GET", "/commits/")


def test_a_merge_commit_of_a_stale_base_refuses(run_cli, server):
    server.repos[REPO].pulls[2].base_sha = "c" * 40  # main moved; GitHub has not recomputed
    out = gate_cli(run_cli, server).outputs
    assert out["run"] == "false"
    assert out["reason"] == (
        f"test-merge is true and GitHub's merge commit {MERGE[:12]} of #2 merges main at "
        f"{BASE[:12]}, but main is at cccccccccccc now: GitHub prepares it a few seconds after "
        "each push: re-run this workflow's gate job (the approval stays valid while the head "
        "does not move)."
    )
    assert out["sha"] == HEAD and out["runs-on"] == '"ubuntu-latest"'


def test_a_merge_commit_of_a_stale_head_refuses(run_cli, server):
    server.repos[REPO].commits[MERGE].parents = [BASE, "1" * 40]
    out = gate_cli(run_cli, server).outputs
    assert out["run"] == "false"
    assert "merges 111111111111, not the approved head ec26c3e57ca3" in out["reason"]
    assert out["sha"] == HEAD


def test_a_conflict_refuses_with_what_to_do(run_cli, server):
    pull = server.repos[REPO].pulls[2]
    pull.mergeable, pull.merge_commit_sha = False, None
    out = gate_cli(run_cli, server).outputs
    assert out["run"] == "false"
    assert "conflicts with main" in out["reason"] and "rebase" in out["reason"]
    assert not server.requests("GET", "/commits/")


def test_a_merge_commit_not_computed_yet_refuses(run_cli, server):
    server.repos[REPO].pulls[2].mergeable = None
    out = gate_cli(run_cli, server).outputs
    assert out["run"] == "false"
    assert "has not computed whether #2 merges cleanly" in out["reason"]


def test_a_head_moved_after_the_label_is_refused_before_the_merge(run_cli, server):
    server.repos[REPO].pulls[2].head_sha = "9" * 40
    out = gate_cli(run_cli, server).outputs
    assert out["run"] == "false" and "apply the label again" in out["reason"]
    assert not server.requests("GET", "/commits/")


@pytest.mark.parametrize("parents", [[BASE], [BASE, HEAD, "2" * 40], [HEAD, BASE]])
def test_only_the_base_then_the_approved_head_are_accepted(parents):
    decision = gate.Decision(run=True, reason="approved.", event="e", sha=HEAD, pr_number="2")
    pull = {"mergeable": True, "merge_commit_sha": MERGE, "base": {"sha": BASE, "ref": "main"}}
    commit = {"parents": [{"sha": p} for p in parents]}
    out = gate.decide_merge(decision, pull, commit)
    assert (out.run, out.sha, out.head_sha) == (False, HEAD, HEAD)
    ok = gate.decide_merge(decision, pull, {"parents": [{"sha": BASE}, {"sha": HEAD}]})
    assert (ok.run, ok.sha, ok.head_sha) == (True, MERGE, HEAD)
