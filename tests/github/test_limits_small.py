"""Issue 25 item 5, the smaller findings, each against the strict test server: a long
Retry-After against the retry policy, artifact downloads retried, the billing 404 text."""

from __future__ import annotations

import pytest

from gpu_ci.github import spend
from gpu_ci.github.client import ApiError, ClientSettings, RestClient
from tests.github_server import PullRequest

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
        client(github, retries=2).download(f"/repos/{REPO}/actions/artifacts/{art.id}/zip",
                                           1 << 20)
    assert info.value.status == 503
    assert len(github.requests("GET", f"/artifacts/{art.id}/zip")) == 3


def test_the_billing_404_does_not_say_personal_accounts_have_no_usage_api():
    text = spend.billing_error(404, "octocat")
    assert "not available to the API" not in text
    assert "/users/octocat/settings/billing/usage" in text
