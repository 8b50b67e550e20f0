"""The three-workflow setup, unmodified, under act against the local server: a pull request
from a fork is opened, approved, tested on the GPU, pushed to again and closed (six act runs);
and the watchdog (one). Each step checks the "GPU CI" statuses GitHub would show, and the
pull request's one comment (edited in place by both inert workflows, collapsed on close).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from testkit.act_runner import run_act
from testkit.github.approvals import checks_url, post_approval
from testkit.github.runs import forged_review_run, played_run, run_event, stuck_run
from testkit.github.runs import labeled as gate_labeled
from testkit.github_server import PullRequest
from testkit.shared import ROOT, webhook

pytestmark = pytest.mark.e2e

REPO = "Codertocat/Hello-World"
FORK = "contributor/Hello-World"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
HEAD2 = "2" * 40
REMOVER = ROOT / "examples" / "cuda-ci-remove-label.yml"
STATUS = ROOT / "examples" / "cuda-ci-status.yml"
WATCHDOG = ROOT / "examples" / "cuda-ci-watchdog.yml"


def ago(minutes: float) -> str:
    return (datetime.now(timezone.utc) - timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def from_fork(event: dict, sender: str) -> dict:
    event["pull_request"]["head"]["repo"]["full_name"] = FORK
    event["pull_request"]["head"]["repo"]["fork"] = True
    event["sender"]["login"] = sender
    return event


def on_remover(act, event: dict, env: dict):
    """The label-remover example on a ``pull_request_target`` event."""
    return act(REMOVER, "pull_request_target", event, repository=REPO, env=env)


def gpu_ci(github, sha: str) -> list[tuple[str, str]]:
    """(state, description) of the commit's GPU CI statuses, oldest first."""
    return [
        (s["state"], s["description"])
        for s in reversed(github.repos[REPO].statuses.get(sha, []))
        if s["context"] == "GPU CI"
    ]


def the_comment(github) -> tuple[int, str]:
    """(id, body) of the pull request's one GPU CI comment: never a second one."""
    (comment,) = github.comments_of(REPO, 2)
    assert comment.user == "github-actions[bot]"
    return comment.id, comment.body


@pytest.fixture
def act_steps(tmp_path, tool_cache):
    """Several act runs in one test, each in its own directory (one copy of the repository
    per run, as on GitHub)."""
    count = iter(range(100))

    def run(workflow, event_name, event, **kwargs):
        workdir = tmp_path / f"step{next(count)}"
        workdir.mkdir()
        return run_act(workdir, workflow, event_name, event, tool_cache=tool_cache, **kwargs)

    return run


def test_a_fork_pull_request_through_the_three_workflows(act_steps, github):
    act = act_steps
    github.add_repo(REPO, roles={"maintainer": "write", "contributor": "read"})
    pr = github.add_pull(REPO, PullRequest(2, HEAD, head_repo=FORK, user="contributor"))
    env = {"GITHUB_API_URL": github.url}

    # 1. opened: waiting for approval
    opened = on_remover(act, from_fork(webhook("pull_request.opened"), "contributor"), env)
    assert opened.returncode == 0, opened.log
    assert gpu_ci(github, HEAD) == [
        (
            "pending",
            "Waiting for approval: someone with write "
            "access or higher applies the 'CUDA CI' label.",
        )
    ]
    comment_id, body = the_comment(github)
    assert "Waiting for approval" in body and "applies the label `CUDA CI`" in body
    assert "/gpu-ci run" not in body  # the example has no comment relay: none is offered
    assert "No GPU? Run the tests on a free GPU in Colab" in body

    # 2. a maintainer applies the label: the label comes off, the status names the approver
    pr.labels.append("CUDA CI")
    event = from_fork(gate_labeled(), "maintainer")
    labeled = on_remover(act, event, env)
    assert labeled.returncode == 0, labeled.log
    assert pr.labels == []
    assert gpu_ci(github, HEAD)[-1] == (
        "pending",
        f"Approved by @maintainer for {HEAD[:12]}: GPU run queued.",
    )
    assert the_comment(github)[0] == comment_id
    assert "Approved by @\u2060maintainer" in the_comment(github)[1]

    # 3. the GPU workflow's run (its jobs as GitHub reports them) completes
    gate, gpu = (ago(30), ago(30), ago(29)), (ago(29), ago(22), ago(2))
    run = played_run(github, gate, gpu, repo=REPO, actor="maintainer", head_branch="changes")
    done = webhook("workflow_run.completed.with-pull-requests")
    done["repository"]["full_name"] = REPO
    approved_at = github.repos[REPO].statuses[HEAD][0]["created_at"]  # the label created the run
    done["workflow_run"].update(
        id=run.id,
        head_sha=HEAD,
        event="pull_request",
        run_attempt=1,
        pull_requests=[],
        path=run.path,
        created_at=approved_at,
        run_started_at=approved_at,
        html_url=f"https://github.com/{REPO}/actions/runs/{run.id}",
        triggering_actor={"login": "maintainer"},
        head_repository={"full_name": FORK},
        workflow_id=run.workflow_id,
    )
    requested = json.loads(json.dumps(done))
    requested["action"] = "requested"
    requested["workflow_run"].update(status="queued", conclusion=None)
    started = act(STATUS, "workflow_run", requested, repository=REPO, env=env)
    assert started.returncode == 0, started.log
    latest = github.repos[REPO].statuses[HEAD][0]
    assert (latest["state"], latest["description"], latest["target_url"]) == (
        "pending",
        "Approved by @maintainer: GPU run in progress.",
        f"https://github.com/{REPO}/actions/runs/{run.id}/attempts/1",
    )
    result = act(STATUS, "workflow_run", done, repository=REPO, env=env)
    assert result.returncode == 0, result.log
    state, description = gpu_ci(github, HEAD)[-1]
    assert state == "success"
    assert description == (
        f"GPU tests passed on {HEAD[:12]} (approved by @maintainer); waited 7 min for a runner."
    )
    assert the_comment(github)[0] == comment_id  # written by the workflow_run workflow too
    assert "✅ passed: GPU tests passed" in the_comment(github)[1]

    # 4. the contributor pushes after the approval: the new head waits again
    pr.head_sha = HEAD2
    push = from_fork(webhook("pull_request.synchronize"), "contributor")
    push["pull_request"]["head"]["sha"] = HEAD2
    push.update(before=HEAD, after=HEAD2)
    pushed = on_remover(act, push, env)
    assert pushed.returncode == 0, pushed.log
    assert gpu_ci(github, HEAD2) == [
        (
            "pending",
            f"New push (was {HEAD[:12]}): waiting for approval; someone with write "
            "access or higher applies 'CUDA CI'.",
        )
    ]
    assert gpu_ci(github, HEAD)[-1][0] == "success"  # the old commit keeps its result
    assert the_comment(github)[0] == comment_id
    assert f"New push (was {HEAD[:12]})" in the_comment(github)[1].replace("\u2060", "")

    # 5. closed: the comment collapses to one line (comment-on-close: collapse)
    pr.state = "closed"
    closed = from_fork(webhook("pull_request.closed"), "contributor")
    closed["pull_request"]["head"]["sha"] = HEAD2
    done_closed = on_remover(act, closed, env)
    assert done_closed.returncode == 0, done_closed.log
    comment_id_now, body = the_comment(github)
    assert comment_id_now == comment_id and "pull request #2 was closed" in body
    # Every write went to statuses, the label or the one comment (created once, then edited);
    # nothing touched the pull request's code.
    writes = {(r.method, r.path.split("/")[4]) for r in github.log if r.method != "GET"}
    assert writes == {
        ("POST", "statuses"),
        ("DELETE", "issues"),
        ("POST", "issues"),
        ("PATCH", "issues"),
    }
    assert len(github.requests("POST", "/comments")) == 1


def test_closing_the_approved_pull_request_ends_its_approval_under_act(act_steps, github):
    """The example's ``pull_request_target: closed`` ends #2's approval of its head: a pull
    request opened later at that commit waits for its own."""
    act = act_steps
    github.add_repo(REPO, roles={"maintainer": "write", "contributor": "read"})
    pr = github.add_pull(REPO, PullRequest(2, HEAD, head_repo=FORK, user="contributor"))
    env = {"GITHUB_API_URL": github.url}
    pr.labels.append("CUDA CI")
    event = from_fork(gate_labeled(), "maintainer")
    labeled = on_remover(act, event, env)
    assert labeled.returncode == 0, labeled.log
    assert gpu_ci(github, HEAD)[-1][1].startswith("Approved by @maintainer")
    pr.state = "closed"
    closed = on_remover(act, from_fork(webhook("pull_request.closed"), "contributor"), env)
    assert closed.returncode == 0, closed.log
    assert gpu_ci(github, HEAD)[-1] == (
        "pending",
        "Approval ended: #2 was closed. A pull request at this commit needs its own approval.",
    )


def test_a_forged_run_of_a_deleted_fork_posts_nothing_under_act(act_steps, github):
    """Issue 26, forged success: a fork adds a workflow `name: CUDA CI` on
    pull_request_review whose job `tests` sleeps on ubuntu-latest, reviews its own pull
    request and deletes the fork while it runs (head_repository null). The unmodified
    cuda-ci-status.yml posts nothing, with or without an approval of the head."""
    github.add_repo(REPO, roles={"maintainer": "write"})
    run = forged_review_run(github, (ago(30), ago(29), ago(1)), repo=REPO)
    forged = run_event(
        run,
        event="pull_request_review",
        run_attempt=1,
        pull_requests=[],
        head_repository=None,
        created_at=ago(30),
        html_url=f"https://github.com/{REPO}/actions/runs/{run.id}",
        triggering_actor={"login": "contributor"},
        actor={"login": "contributor"},
        workflow_id=run.workflow_id,
    )
    forged["repository"]["full_name"] = REPO
    env = {"GITHUB_API_URL": github.url}
    approval = post_approval(github, url=checks_url(), created_at=ago(31))
    for approved in ([], [approval]):
        github.repos[REPO].statuses[HEAD] = list(approved)
        result = act_steps(STATUS, "workflow_run", forged, repository=REPO, env=env)
        assert result.returncode == 0, result.log
        assert github.repos[REPO].statuses[HEAD] == approved
        assert "fake.yml" in result.log and "not of the GPU workflow" in result.log
    assert github.requests("POST") == []


def test_the_watchdog_cancels_a_run_no_gpu_runner_took(act, github):
    github.add_repo(REPO)
    run = stuck_run(github, ago(95), ago(94), runner="GitHub Actions 1")
    result = act(
        WATCHDOG,
        "schedule",
        {"schedule": "*/15 * * * *"},
        repository=REPO,
        env={"GITHUB_API_URL": github.url},
    )
    assert result.returncode == 0, result.log
    assert run.conclusion == "cancelled"
    # 7: the cancelled run is re-read to see it cancelled before its status (issue 25);
    # 8: failed runs are listed for re-runs (retry-infra-failures: 1 by default, issue 32)
    assert (
        "gpu-watchdog: 1 GPU jobs seen, 1 stale, 1 runs cancelled, 0 re-run, 8 REST calls."
        in result.log
    )
    assert result.outputs["complete"] == "true"
    ((state, description),) = gpu_ci(github, HEAD)
    assert state == "error"
    assert description.startswith("No GPU runner picked this up in 94 minutes")
    assert len(github.log) == 8
