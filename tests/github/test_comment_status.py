"""The "GPU CI" status for a trusted author's head: approved from the gate's decision on the
new head (in the privileged pull_request_target workflow), then bound to the author's own
pull_request run as a label's approval is bound to the labeller's."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from gpu_ci.github import statuses
from tests.conftest import webhook

REPO = "Codertocat/Hello-World"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
NOW = datetime(2026, 11, 2, 12, 0, tzinfo=timezone.utc)
CONFIG = statuses.make_config("GPU CI", "CUDA CI", "write", ["tests"])


def ts(minutes_ago: float) -> str:
    return (NOW - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def push(action="synchronize"):
    payload = webhook("pull_request.synchronize")
    payload["action"] = action
    payload["pull_request"]["head"]["sha"] = HEAD
    payload["pull_request"]["number"] = 2
    payload["pull_request"]["state"] = "open"
    return payload


def event(gate_run, action="synchronize", listed=()):
    return statuses.for_pull_event(
        CONFIG,
        action,
        push(action),
        gate_run,
        "alice (maintain) is a trusted author and the head ...",
        "alice" if gate_run else "",
        "https://github.com",
        REPO,
        list(listed),
    )


def test_a_trusted_authors_head_is_approved_in_their_name_and_others_wait():
    for action in ("opened", "synchronize", "reopened", "ready_for_review"):
        out = event(True, action).status
        assert out is not None and out.state == "pending"
        assert out.description == f"Approved by @alice for {HEAD[:12]}: GPU run queued."
        assert out.target_url == f"https://github.com/{REPO}/pull/2/checks"
    for refused in (False, None):  # an untrusted push, or no gate in the status job
        out = event(refused).status
        assert out is not None and "waiting for approval" in out.description.lower()


def test_the_trusted_authors_run_binds_to_that_approval_and_posts_its_result():
    approved = event(True).status
    assert approved is not None
    listed = [
        {
            "context": "GPU CI",
            "state": approved.state,
            "description": approved.description,
            "target_url": approved.target_url,
            "created_at": ts(50),
            "creator": {"login": "github-actions[bot]"},
        }
    ]

    def run(actor):
        return {
            "id": 5,
            "head_sha": HEAD,
            "event": "pull_request",
            "path": ".github/workflows/cuda-ci.yml",
            "html_url": f"https://github.com/{REPO}/actions/runs/5",
            "run_attempt": 1,
            "created_at": ts(51),
            "run_started_at": ts(51),
            "triggering_actor": {"login": actor},
            "actor": {"login": actor},
            "head_repository": {"full_name": "alice/Hello-World"},
            "pull_requests": [],
            "workflow_id": 9,
        }

    job = {
        "name": "tests",
        "status": "completed",
        "conclusion": "success",
        "created_at": ts(40),
        "started_at": ts(30),
        "runner_name": "gpu-1",
    }
    out = statuses.for_workflow_run(
        CONFIG, "completed", run("alice"), [job], listed, REPO, NOW, siblings=[]
    ).status
    assert out is not None and out.state == "success"
    # someone else's run of that head (a fork collaborator who pushed) is not the approval's
    other = statuses.for_workflow_run(
        CONFIG, "completed", run("mallory"), [job], listed, REPO, NOW, siblings=[]
    )
    assert other.status is None


def test_cli_the_privileged_status_job_approves_a_trusted_authors_push(run_cli, github):
    """As in cuda-ci-remove-label.yml's status job with trusted-authors set in its gate (and
    the gate step run on new heads too): gpu-gate, then gpu-status with its outputs."""
    from tests.github_server import Commit, PullRequest

    github.add_repo(REPO, roles={"alice": "maintain"})
    github.add_pull(REPO, PullRequest(2, HEAD, user="alice", head_repo="alice/Hello-World"))
    github.repos[REPO].commits[HEAD] = Commit(HEAD, author="alice", committer="alice")
    payload = push()
    payload["pull_request"]["user"]["login"] = "alice"
    env = {
        "GITHUB_API_URL": github.url,
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_TOKEN": "t",
        "GITHUB_SERVER_URL": "https://github.com",
    }
    gate = run_cli(
        ["gpu-gate", "--trusted-authors", "write", "--gpu-runs-on", "gpu"],
        env,
        event=payload,
        event_name="pull_request_target",
    )
    assert gate.returncode == 0, gate.stdout
    assert (gate.outputs["run"], gate.outputs["labeled-by"]) == ("true", "alice")
    status = run_cli(
        ["gpu-status"],
        {
            **env,
            "INPUT_GATE_RUN": gate.outputs["run"],
            "INPUT_GATE_REASON": gate.outputs["reason"],
            "INPUT_LABELED_BY": gate.outputs["labeled-by"],
        },
        event=payload,
        event_name="pull_request_target",
    )
    assert status.returncode == 0, status.stdout
    (posted,) = github.repos[REPO].statuses[HEAD]
    assert posted["description"] == f"Approved by @alice for {HEAD[:12]}: GPU run queued."
