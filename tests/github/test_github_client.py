"""PyGithub against the loopback GitHub server: pagination, GHES URLs, retries, faults."""

from __future__ import annotations

import pytest

from gpu_ci.errors import GpuCiError
from gpu_ci.github.client import ClientSettings, RestClient, describe_api_failure
from testkit.github_server import PullRequest

FAST = dict(timeout=1.0, retries=3, backoff=0.05, max_wait=5.0)


def client(github, token="t", prefix=""):
    return RestClient(token, ClientSettings(api_url=github.url + prefix, **FAST))


def make_repo(github):
    github.add_repo("octo/repo", roles={"alice": "maintain"})
    github.add_pull(
        "octo/repo", PullRequest(7, "a" * 40, files=[f"src/f{i}.py" for i in range(250)])
    )


def test_pull_request_shape_and_token(github):
    make_repo(github)
    pr = client(github, token="tok").get("/repos/octo/repo/pulls/7")
    assert pr["head"]["sha"] == "a" * 40 and pr["state"] == "open"
    assert github.log[-1].headers["Authorization"] == "token tok"


def test_pagination_follows_link_headers(github):
    make_repo(github)
    files = client(github).get_pages("/repos/octo/repo/pulls/7/files")
    assert [f["filename"] for f in files] == [f"src/f{i}.py" for i in range(250)]
    assert [r.query["page"] for r in github.requests("GET", "/files")[1:]] == [["2"], ["3"]]


def test_ghes_base_url_with_api_prefix(github):
    make_repo(github)
    rest = client(github, prefix="/api/v3")
    assert rest.get("/repos/octo/repo/collaborators/alice/permission")["role_name"] == "maintain"
    assert github.log[-1].path.startswith("/api/v3/repos/")


@pytest.mark.parametrize("status", [500, 502, 503])
def test_server_error_is_retried(github, status):
    make_repo(github)
    github.inject("GET", r"/pulls/7$", status, times=2)
    assert client(github).get("/repos/octo/repo/pulls/7")["number"] == 7
    assert [r.status for r in github.requests("GET", "/pulls/7")] == [status, status, 200]


def test_secondary_rate_limit_honours_retry_after(github):
    make_repo(github)
    github.inject("GET", r"/pulls/7$", 403, retry_after=1)
    client(github).get("/repos/octo/repo/pulls/7")
    first, second = github.requests("GET", "/pulls/7")
    assert (first.status, second.status) == (403, 200)
    assert second.at - first.at >= 0.95


def test_429_is_retried(github):
    make_repo(github)
    github.inject("GET", r"/pulls/7$", 429, retry_after=0)
    assert client(github).get("/repos/octo/repo/pulls/7")["number"] == 7
    assert len(github.requests("GET", "/pulls/7")) == 2


def test_slow_response_times_out_and_is_retried(github):
    make_repo(github)
    github.inject("GET", r"/pulls/7$", 0, delay=1.5)  # longer than the 1 s timeout
    assert client(github).get("/repos/octo/repo/pulls/7")["number"] == 7
    assert len(github.requests("GET", "/pulls/7")) == 2


def test_persistent_fault_becomes_a_clear_error(github):
    make_repo(github)
    github.inject("GET", r"/pulls/7$", 500, times=100)
    with pytest.raises(Exception) as info:
        client(github).get("/repos/octo/repo/pulls/7")
    error = describe_api_failure(info.value, "GET pulls/7")
    assert isinstance(error, GpuCiError)
    assert "did not answer GET pulls/7 after retries" in error.message
    assert len(github.requests("GET", "/pulls/7")) == 4  # 1 + 3 retries


def test_not_found_is_not_retried(github):
    make_repo(github)
    with pytest.raises(Exception) as info:
        client(github).get("/repos/octo/repo/pulls/99")
    assert "HTTP 404" in describe_api_failure(info.value, "GET pulls/99").message
    assert len(github.requests("GET", "/pulls/99")) == 1


def test_a_refusal_is_the_clients_own_error_with_githubs_answer(github):
    from gpu_ci.github.client import ApiError
    from testkit.github_server import DOCS

    make_repo(github)
    with pytest.raises(ApiError) as info:
        client(github).get("/repos/octo/repo/pulls/99")
    assert info.value.status == 404 and info.value.message == "Not Found"
    assert info.value.documentation_url == DOCS
    assert info.value.request == "GET /repos/octo/repo/pulls/99"
    assert "HTTP 404: Not Found" in str(info.value)


def test_no_answer_is_the_clients_own_error_with_the_reason(github):
    from gpu_ci.github.client import ApiError

    make_repo(github)
    github.inject("GET", r"/pulls/7$", 500, times=100)
    with pytest.raises(ApiError) as info:
        client(github).get("/repos/octo/repo/pulls/7")
    assert info.value.status is None and info.value.kind and "500" in info.value.reason


def test_parse_time_reads_z_offsets_and_fractions_as_utc():
    from datetime import datetime, timezone

    from gpu_ci.github.jobs import parse_time, queue_seconds

    utc = datetime(2026, 11, 2, 10, 0, tzinfo=timezone.utc)
    assert parse_time("2026-11-02T10:00:00Z") == utc
    assert parse_time("2026-11-02T12:00:00+02:00") == utc  # issue 25: offsets were refused
    assert parse_time("2026-11-02T10:00:00.000Z") == utc
    assert parse_time("2026-11-02T10:00:00") == utc  # no zone: GitHub's times are UTC
    assert parse_time(None) is None and parse_time("") is None and parse_time("soon") is None
    job = {
        "status": "completed",
        "runner_name": "r",
        "created_at": "2026-11-02T10:00:00Z",
        "started_at": "2026-11-02T12:05:00+02:00",
    }
    assert queue_seconds(job, utc) == 300.0
