"""Issue 25 item 5, the smaller findings, each against the strict test server: a long
Retry-After against the retry policy, artifact downloads retried, the billing 404 text."""

from __future__ import annotations

import json

import pytest

from gpu_ci.github import spend
from gpu_ci.github.client import ApiError, ClientSettings, RestClient
from testkit.github.runs import watchdog_env
from testkit.github_server import PullRequest

REPO = "octo/repo"


def client(github, **kw) -> RestClient:
    settings = dict(timeout=2.0, retries=3, backoff=0.01, max_wait=0.5)
    settings.update(kw)
    return RestClient("t", ClientSettings(api_url=github.url, **settings))


@pytest.mark.parametrize("status", [429, 403])
def test_a_retry_after_past_the_policys_longest_wait_fails_naming_the_wait(github, status):
    """GitHub asks for 3 s; the policy allows 0.5 s: the call fails at once and says both,
    instead of sleeping 3 s (or a minute of a secondary rate limit) in a job."""
    github.add_repo(REPO)
    github.add_pull(REPO, PullRequest(7, "a" * 40))
    github.inject("GET", r"/pulls/7$", status, retry_after=3)
    with pytest.raises(ApiError) as info:
        client(github).get(f"/repos/{REPO}/pulls/7")
    assert len(github.requests("GET", "/pulls/7")) == 1
    text = str(info.value)
    assert "Retry-After" in text and "3" in text and "0.5" in text, text


def test_a_retry_after_within_the_policy_is_waited_for(github):
    github.add_repo(REPO)
    github.add_pull(REPO, PullRequest(7, "a" * 40))
    github.inject("GET", r"/pulls/7$", 429, retry_after=0)
    assert client(github).get(f"/repos/{REPO}/pulls/7")["number"] == 7
    assert len(github.requests("GET", "/pulls/7")) == 2


@pytest.mark.parametrize("status", [500, 502, 503])
def test_an_artifact_download_is_retried(github, status):
    github.add_repo(REPO)
    art = github.add_artifact(REPO, "ledger", {"a.txt": b"hello"})
    github.inject("GET", rf"/actions/artifacts/{art.id}/zip$", status, times=2)
    blob = client(github).download(f"/repos/{REPO}/actions/artifacts/{art.id}/zip", 1 << 20)
    assert blob == art.data
    assert len(github.requests("GET", f"/artifacts/{art.id}/zip")) == 3


def test_an_artifact_download_that_keeps_failing_is_an_api_error(github):
    github.add_repo(REPO)
    art = github.add_artifact(REPO, "ledger", {"a.txt": b"hello"})
    github.inject("GET", rf"/actions/artifacts/{art.id}/zip$", 503, times=10)
    with pytest.raises(ApiError) as info:
        client(github, retries=2).download(f"/repos/{REPO}/actions/artifacts/{art.id}/zip", 1 << 20)
    assert info.value.status == 503
    assert len(github.requests("GET", f"/artifacts/{art.id}/zip")) == 3


def test_the_billing_404_does_not_say_personal_accounts_have_no_usage_api():
    text = spend.billing_error(404, "octocat")
    assert "not available to the API" not in text
    assert "/users/octocat/settings/billing/usage" in text


def test_a_cancel_github_accepts_but_does_not_do_is_not_called_cancelled(run_cli, github, tmp_path):
    """GitHub answers 202 to a cancel and cancels later, or never (a run that ignores
    cancel): the watchdog re-reads the run and says what it saw, and posts no status that
    says the run was cancelled."""
    from datetime import datetime, timedelta, timezone

    from testkit.github_server import Job, WorkflowRun

    def ago(minutes):
        return (datetime.now(timezone.utc) - timedelta(minutes=minutes)).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )

    github.add_repo(REPO)
    run = WorkflowRun(
        github.next_id(),
        "CUDA CI",
        ".github/workflows/cuda-ci.yml",
        "e" * 40,
        status="in_progress",
        created_at=ago(91),
    )
    run.jobs.append(Job(github.next_id(), "tests", ["gpu"], created_at=ago(90)))
    github.add_run(REPO, run)
    github.inject("POST", rf"/actions/runs/{run.id}/cancel$", 202, body={})
    env = watchdog_env(github, REPO, "w", INPUT_REPORT_FILE=str(tmp_path / "q.json"))
    result = run_cli(["gpu-watchdog"], env)
    assert result.returncode == 0, result.stdout
    assert run.status == "in_progress"
    assert json.loads(result.outputs["cancelled"]) == []
    assert "cancel-unconfirmed" in result.summary and "still in_progress" in result.summary
    assert github.repos[REPO].statuses == {}
    assert github.requests("GET", f"/actions/runs/{run.id}")  # the run re-read
