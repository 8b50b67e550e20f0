"""Issue 26's attacks on the "GPU CI" status, through ``gpu-ci gpu-status`` against the local
GitHub server (the pure rules are in tests/test_status_binding.py)."""

from __future__ import annotations

import time

import pytest

from testkit.github.approvals import checks_url
from testkit.github.runs import approved_run_event, forged_review_run, labeled
from testkit.github_server import Job, PullRequest, WorkflowRun
from testkit.shared import webhook

REPO = "Codertocat/Hello-World"
FORK = "contributor/Hello-World"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
RUNS = f"https://github.com/{REPO}/actions/runs"


def stamp(seconds_ago: float = 0) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - seconds_ago))


_IDS = iter(range(7000, 8000))


def status(description: str, state: str = "pending", url: str = "", ago: float = 60) -> dict:
    """A commit status in GitHub's complete shape (the test server serves only those)."""
    sid = next(_IDS)
    bot = {
        "login": "github-actions[bot]",
        "id": 41898282,
        "node_id": "MDM6Qm90NDE4OTgyODI=",
        "avatar_url": "https://avatars.githubusercontent.com/in/15368?v=4",
        "gravatar_id": "",
        "url": "https://api.github.com/users/github-actions%5Bbot%5D",
        "html_url": "https://github.com/apps/github-actions",
        "type": "Bot",
        "site_admin": False,
        **{
            k: "https://api.github.com/users/github-actions%5Bbot%5D/" + k
            for k in (
                "followers_url",
                "following_url",
                "gists_url",
                "starred_url",
                "subscriptions_url",
                "organizations_url",
                "repos_url",
                "events_url",
                "received_events_url",
            )
        },
    }
    return {
        "url": f"https://api.github.com/repos/{REPO}/statuses/{HEAD}",
        "id": sid,
        "node_id": f"SC_{sid}",
        "avatar_url": None,
        "context": "GPU CI",
        "state": state,
        "description": description,
        "target_url": url or None,
        "created_at": stamp(ago),
        "updated_at": stamp(ago),
        "creator": bot,
    }


def approval(number: int = 2) -> dict:
    return status(
        f"Approved by @maintainer for {HEAD[:12]}: GPU run queued.",
        url=checks_url(number, REPO),
        ago=120,
    )


PASSED = status(
    f"GPU tests passed on {HEAD[:12]} (approved by @maintainer).",
    "success",
    f"{RUNS}/5/attempts/1",
    ago=30,
)


@pytest.fixture
def env(github):
    github.add_repo(REPO, roles={"maintainer": "write", "triager": "triage"})
    github.add_pull(REPO, PullRequest(2, HEAD, head_repo=FORK))
    return {
        "GITHUB_API_URL": github.url,
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_TOKEN": "t",
        "GITHUB_SERVER_URL": "https://github.com",
    }


def workflow_run(action: str, created_at: str | None = None, **fields) -> dict:
    return approved_run_event(action, created_at or stamp(150), **fields)


def test_cli_a_forged_run_of_a_deleted_fork_posts_nothing(run_cli, github, env):
    """`name: CUDA CI` on pull_request_review in a fork that is deleted while it runs."""
    run = forged_review_run(github, (stamp(99), stamp(98), stamp(1)), repo=REPO)
    forged = workflow_run(
        "completed",
        id=run.id,
        event="pull_request_review",
        head_repository=None,
        path=".github/workflows/fake.yml",
        html_url=f"{RUNS}/{run.id}",
        triggering_actor={"login": "contributor"},
    )
    result = run_cli(["gpu-status"], env, event=forged, event_name="workflow_run")
    assert result.returncode == 0, result.stdout
    assert github.requests("POST") == []
    assert "fake.yml" in result.outputs["description"]


def test_cli_in_progress_landing_on_the_result_is_put_back(run_cli, github, env):
    """`completed` of run 5 posts 'passed' while `requested` of run 5 is between reading the
    statuses (the approval on top) and posting 'in progress'."""
    repo = github.repos[REPO]
    repo.statuses[HEAD] = [approval()]
    fired = []

    def completed_lands_first(path: str) -> None:
        if not fired:
            fired.append(path)
            repo.statuses[HEAD].insert(0, dict(PASSED, created_at=stamp()))

    github.on_request("POST", rf"/statuses/{HEAD}$", completed_lands_first)
    result = run_cli(
        ["gpu-status"],
        env,
        event=workflow_run("requested", status="queued", conclusion=None),
        event_name="workflow_run",
    )
    assert result.returncode == 0, result.stdout
    top = repo.statuses[HEAD][0]
    assert (top["state"], top["description"], top["target_url"]) == (
        "success",
        PASSED["description"],
        PASSED["target_url"],
    )
    assert result.outputs["state"] == "success"


def test_cli_a_refused_label_leaves_a_passed_head_alone(run_cli, github, env):
    github.repos[REPO].statuses[HEAD] = [PASSED, approval()]
    event = labeled()
    event["sender"]["login"] = "triager"
    result = run_cli(
        ["gpu-status"],
        {**env, "INPUT_GATE_RUN": "false", "INPUT_GATE_REASON": "@triager has triage access"},
        event=event,
        event_name="pull_request_target",
    )
    assert result.returncode == 0, result.stdout
    assert github.requests("POST") == []
    assert github.repos[REPO].statuses[HEAD][0]["state"] == "success"


def test_cli_another_pull_request_at_the_approved_head_keeps_the_approval(run_cli, github, env):
    github.repos[REPO].statuses[HEAD] = [approval(2)]
    event = webhook("pull_request.opened")
    event["pull_request"]["number"] = 9
    result = run_cli(["gpu-status"], env, event=event, event_name="pull_request_target")
    assert result.returncode == 0, result.stdout
    assert github.requests("POST") == []
    assert "#2" in result.outputs["description"]


def test_cli_a_later_run_of_the_approver_does_not_overwrite_a_failure(run_cli, github, env):
    """Approved, the GPU tests failed; a later label by the maintainer runs the fork's own
    "CUDA CI" as the maintainer, and its `tests` job passes."""
    repo = github.repos[REPO]
    failed = status(
        f"GPU tests failed on {HEAD[:12]} (approved by @maintainer): tests: failure.",
        "failure",
        f"{RUNS}/5/attempts/1",
        ago=60,
    )
    repo.statuses[HEAD] = [
        failed,
        status(
            "Approved by @maintainer: GPU run in progress.", url=f"{RUNS}/5/attempts/1", ago=100
        ),
        approval(),
    ]
    run = WorkflowRun(
        github.next_id(), "CUDA CI", ".github/workflows/cuda-ci.yml", HEAD, actor="maintainer"
    )
    run.jobs = [Job(github.next_id(), "tests", ["ubuntu-latest"], created_at=stamp(30))]
    github.add_run(REPO, run)
    github.start_job(run.jobs[0].id, stamp(29))
    github.complete_job(run.jobs[0].id, stamp(1))
    for action in ("requested", "completed"):
        event = workflow_run(action, id=run.id, html_url=f"{RUNS}/{run.id}", created_at=stamp(30))
        result = run_cli(["gpu-status"], env, event=event, event_name="workflow_run")
        assert result.returncode == 0, result.stdout
    assert github.requests("POST") == []
    assert repo.statuses[HEAD][0] == failed
