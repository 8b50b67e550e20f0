"""Comment commands and trusted authors through the CLI and the loopback GitHub server: the
REST calls each decision costs, the outputs and the summary, the budget."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from testkit.events import on_pull_request
from testkit.github.runs import BUDGET, GPU_RUNS_ON, NOW, gpu_run, month_of_runs, spend
from testkit.github_server import Commit, PullRequest
from testkit.shared import webhook

REPO = "Codertocat/Hello-World"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"


def run_gate(run_cli, server, event_name, event, args=()):
    env = {
        "GITHUB_API_URL": server.url,
        "GITHUB_REPOSITORY": REPO,
        "INPUT_GITHUB_TOKEN": "ghs_secret",
        "GITHUB_SHA": "d" * 40,  # an issue_comment run's GITHUB_SHA: the default branch
        "GPU_CI_NOW": NOW,
        "INPUT_TIERS": "mini, full",
        **GPU_RUNS_ON,
    }
    return run_cli(["gpu-gate", *args], env, event=event, event_name=event_name)


def command(body, commenter="Codertocat"):
    return on_pull_request(webhook("issue_comment.created"), body=body, commenter=commenter)


def test_a_maintainers_command_runs_the_head_with_its_tier_in_two_calls(run_cli, server):
    result = run_gate(run_cli, server, "issue_comment", command(f"/gpu-ci run {HEAD[:10]} full"))
    assert result.returncode == 0, result.stdout
    out = result.outputs
    assert (out["run"], out["sha"], out["pr-number"]) == ("true", HEAD, "2")
    assert (out["labeled-by"], out["permission"], out["approval"]) == (
        "Codertocat",
        "write",
        "comment",
    )
    assert json.loads(out["tiers"]) == ["full"]
    assert out["runs-on"] == '["self-hosted","gpu"]'
    assert [r.path for r in server.log] == [
        f"/repos/{REPO}/collaborators/Codertocat/permission",
        f"/repos/{REPO}/pulls/2",
    ]
    assert (
        "| approval | [comment](https://github.com/Codertocat/Hello-World/pull/2#issuecomment-"
        in (result.summary)
    )
    assert "| approver | Codertocat |" in result.summary
    assert f"| SHA in the comment | {HEAD[:10]} |" in result.summary
    assert "| decision | **run** |" in result.summary


def test_a_strangers_command_costs_one_call_and_says_why(run_cli, server):
    result = run_gate(run_cli, server, "issue_comment", command(f"/gpu-ci run {HEAD}", "rando"))
    assert result.returncode == 0, result.stdout
    assert (result.outputs["run"], result.outputs["tiers"], result.outputs["approval"]) == (
        "false",
        "[]",
        "",
    )
    assert (
        "rando has the 'read' role; a '/gpu-ci run' comment needs 'write'"
        in (result.outputs["reason"])
    )
    assert [r.path for r in server.log] == [f"/repos/{REPO}/collaborators/rando/permission"]
    assert "| decision | skip |" in result.summary


def test_the_budget_guard_refuses_a_comment_approval_as_a_label_one(run_cli, server):
    month_of_runs(server, per_day=2, days=10)  # $12.48 spent
    args = [BUDGET[0], "$15", *BUDGET[2:]]
    result = run_gate(run_cli, server, "issue_comment", command(f"/gpu-ci run {HEAD}"), args)
    assert result.returncode == 0, result.stdout
    assert result.outputs["run"] == "false"
    assert "$12.48 of $15.00" in result.outputs["reason"]
    assert "| budget verdict | **over: refused** |" in result.summary


def synchronize(author):
    payload = webhook("pull_request.synchronize")
    payload["pull_request"]["user"]["login"] = author
    payload["pull_request"]["head"]["sha"] = HEAD
    return payload


def test_a_trusted_authors_push_runs_and_an_untrusted_push_on_top_does_not(run_cli, server):
    server.repos[REPO].roles["alice"] = "maintain"
    server.repos[REPO].pulls[2] = PullRequest(2, HEAD, user="alice")
    args = ["--trusted-authors", "write"]
    server.repos[REPO].commits[HEAD] = Commit(HEAD, author="alice", committer="alice")
    own = run_gate(run_cli, server, "pull_request", synchronize("alice"), args)
    assert own.returncode == 0, own.stdout
    assert (own.outputs["run"], own.outputs["sha"], own.outputs["approval"]) == (
        "true",
        HEAD,
        "trusted-author",
    )
    assert [r.path for r in server.log] == [
        f"/repos/{REPO}/collaborators/alice/permission",
        f"/repos/{REPO}/pulls/2",
        f"/repos/{REPO}/commits/{HEAD}",
    ]
    # a collaborator of the fork pushes on top of alice's pull request
    server.repos[REPO].commits[HEAD] = Commit(HEAD, author="mallory", committer="mallory")
    pushed = run_gate(run_cli, server, "pull_request", synchronize("alice"), args)
    assert pushed.outputs["run"] == "false"
    assert (
        "authored by mallory, not by the pull request's author alice" in (pushed.outputs["reason"])
    )
    # (verified heads: tests/github/test_comment_rules.py, no server needed)


def test_an_author_below_the_trusted_role_costs_one_call(run_cli, server):
    result = run_gate(
        run_cli, server, "pull_request", synchronize("rando"), ["--trusted-authors", "write"]
    )
    assert result.outputs["run"] == "false"
    assert (
        "the author rando has the 'read' role, below trusted-authors ('write')"
        in (result.outputs["reason"])
    )
    assert [r.path for r in server.log] == [f"/repos/{REPO}/collaborators/rando/permission"]


def test_gpu_spend_counts_a_comment_runs_gpu_job_for_the_commenter(run_cli, server, tmp_path):
    """A comment's run is an ``issue_comment`` run of the comment workflow whose triggering
    actor is the commenter: gpu-spend's approver column (and the budget, which reads the same
    rows) names them, as it names the labeller of a label's run."""
    start = datetime(2026, 11, 20, 9, 0, tzinfo=timezone.utc)
    gpu_run(server, start, 11.5, who="Codertocat")  # a label's run
    gpu_run(
        server,
        start,
        29.5,
        pr=None,  # GitHub lists no pull request for an issue_comment run
        who="maint",
        event="issue_comment",
        path=".github/workflows/cuda-ci-comment.yml",
    )
    result = spend(
        run_cli, server, tmp_path, ["--gpu-workflows", "cuda-ci.yml, cuda-ci-comment.yml"]
    )
    assert result.returncode == 0, result.stdout
    doc = json.loads((tmp_path / "out" / "spend.json").read_text())
    approvers = {r["key"]: r["minutes"] for r in doc["by"]["approver"]}
    assert approvers == {"Codertocat": 12, "maint": 30}
    workflows = {r["key"]: r["minutes"] for r in doc["by"]["workflow"]}
    assert workflows == {"cuda-ci.yml": 12, "cuda-ci-comment.yml": 30}


def test_the_watchdog_cancels_a_comment_run_and_sets_no_status_on_the_default_branch(
    run_cli, server
):
    """A comment's run has the default branch's commit as head_sha: cancelled like a label's
    run, but its "no runner" status would land on that commit, so none is set."""
    stuck = datetime.now(timezone.utc) - timedelta(minutes=75)
    label_run = gpu_run(server, stuck, 0, status="queued")
    comment_run = gpu_run(
        server,
        stuck,
        0,
        pr=None,
        who="maint",
        status="queued",
        event="issue_comment",
        path=".github/workflows/cuda-ci-comment.yml",
    )
    comment_run.head_sha = "d" * 40  # the default branch's head
    for run in (label_run, comment_run):
        run.status = "in_progress"
        run.jobs[-1].started_at = run.jobs[-1].runner_name = None
    env = {
        "GITHUB_API_URL": server.url,
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_TOKEN": "watchdog-token",
        "INPUT_WORKFLOWS": "cuda-ci.yml, cuda-ci-comment.yml",
    }
    result = run_cli(["gpu-watchdog"], env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(json.loads(result.outputs["cancelled"])) == sorted([label_run.id, comment_run.id])
    assert "d" * 40 not in server.repos[REPO].statuses
    assert [s["context"] for s in server.repos[REPO].statuses[HEAD]] == ["GPU CI"]


# -- require-approved-review holds on every approval path, not only labels -------------------

REVIEW = ["--require-approved-review", "true"]


def test_a_comment_approval_needs_an_approved_review_of_that_commit(run_cli, server):
    server.repos[REPO].roles["rev"] = "maintain"
    server.repos[REPO].pulls[2].reviews = [("rev", "APPROVED", "1" * 40)]  # an older commit
    body = command(f"/gpu-ci run {HEAD}")
    refused = run_gate(run_cli, server, "issue_comment", body, REVIEW)
    assert refused.returncode == 0, refused.stdout
    assert refused.outputs["run"] == "false"
    assert "require-approved-review is true" in refused.outputs["reason"]
    assert "post the '/gpu-ci run' command again" in refused.outputs["reason"]
    server.repos[REPO].pulls[2].reviews = [("rev", "APPROVED", HEAD)]
    ran = run_gate(run_cli, server, "issue_comment", body, REVIEW)
    assert ran.outputs["run"] == "true", ran.stdout
    assert "rev (maintain) approved that commit" in ran.outputs["reason"]


def test_a_trusted_author_needs_an_approved_review_of_that_commit(run_cli, server):
    server.repos[REPO].roles["alice"] = "maintain"
    server.repos[REPO].pulls[2] = PullRequest(2, HEAD, user="alice")
    server.repos[REPO].commits[HEAD] = Commit(HEAD, author="alice", committer="alice")
    args = ["--trusted-authors", "write", *REVIEW]
    refused = run_gate(run_cli, server, "pull_request", synchronize("alice"), args)
    assert refused.returncode == 0, refused.stdout
    assert refused.outputs["run"] == "false"
    assert "require-approved-review is true" in refused.outputs["reason"]
    server.repos[REPO].pulls[2].reviews = [("alice", "APPROVED", HEAD)]
    ran = run_gate(run_cli, server, "pull_request", synchronize("alice"), args)
    assert ran.outputs["run"] == "true", ran.stdout
    assert "alice (maintain) approved that commit" in ran.outputs["reason"]
