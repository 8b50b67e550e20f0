"""The test GitHub server speaks GitHub's contract (issue 25 item 1).

Every request the tests make and every answer the server gives is validated against GitHub's
OpenAPI description (npm ``@octokit/openapi``; testkit/openapi_contract.py): these tests prove
that the validation fails on a missing required field, a wrong type and an unknown path, that
every shape the server serves passes it, and that the server has GitHub's documented limits.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from urllib.parse import quote, urlsplit

import pytest

from testkit import openapi_contract
from testkit.github.runs import usage_item
from testkit.github_server import FakeGitHub, Job, PullRequest, WorkflowRun

REPO = "octo-org/octo-repo"
FORK = "contributor/octo-repo"
SHA = "a" * 40

needs_description = pytest.mark.skipif(
    openapi_contract.missing_reason() is not None, reason=str(openapi_contract.missing_reason())
)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return None


def call(url, method="GET", body=None, token="t", follow=False):
    data = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": f"token {token}"} if token else {}
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    opener = urllib.request.build_opener() if follow else urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(req) as resp:
            raw = resp.read()
            status, head = resp.status, dict(resp.headers)
    except urllib.error.HTTPError as exc:
        raw, status, head = exc.read(), exc.code, dict(exc.headers)
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = raw
    return status, parsed, head


def run(gh, created="2026-11-02T10:00:00Z", **kwargs):
    run = WorkflowRun(
        gh.next_id(), "CUDA CI", ".github/workflows/cuda-ci.yml", SHA, created_at=created, **kwargs
    )
    run.jobs.append(Job(gh.next_id(), "tests", ["self-hosted", "gpu"], created_at=created))
    return gh.add_run(REPO, run)


@pytest.fixture
def gh():
    with FakeGitHub() as server:
        server.add_repo(REPO)
        server.add_repo(FORK)
        server.add_pull(
            REPO,
            PullRequest(
                7,
                SHA,
                head_repo=FORK,
                labels=["gpu"],
                files=["src/a.cu"],
                reviews=[("maintainer", "APPROVED", SHA)],
            ),
        )
        yield server


# -- the validation itself --------------------------------------------------------------------
@needs_description
def test_a_missing_required_field_fails_the_test(monkeypatch):
    server = FakeGitHub().start()
    server.add_repo(REPO)
    real = server.run_json

    def without_node_id(repo, r):
        body = real(repo, r)
        del body["node_id"]
        return body

    monkeypatch.setattr(server, "run_json", without_node_id)
    run(server)
    status, body, _ = call(f"{server.url}/repos/{REPO}/actions/runs")
    assert status == 500 and "'node_id' is a required property" in body["message"]
    assert "workflow_runs/0" in body["message"]  # names where
    with pytest.raises(AssertionError, match="node_id"):
        server.stop()


@needs_description
def test_a_wrong_type_fails_the_test(monkeypatch):
    server = FakeGitHub().start()
    server.add_repo(REPO)
    real = server.user_json
    monkeypatch.setattr(server, "user_json", lambda login: {**real(login), "id": str(7)})
    server.add_pull(REPO, PullRequest(7, SHA))
    status, body, _ = call(f"{server.url}/repos/{REPO}/pulls/7")
    assert status == 500 and "is not of type 'integer'" in body["message"]
    with pytest.raises(AssertionError, match="user/id"):
        server.stop()


@needs_description
def test_a_request_to_no_operation_is_a_test_bug():
    server = FakeGitHub().start()
    server.add_repo(REPO)
    status, body, _ = call(f"{server.url}/repos/{REPO}/actions/runz")
    assert status == 500 and "no operation" in body["message"]
    status, body, _ = call(f"{server.url}/repos/{REPO}/actions/runs?colour=blue")
    assert status == 500 and "colour" in body["message"]
    with pytest.raises(AssertionError, match="2 violation"):
        server.stop()


def test_openapi_nullable_is_translated_to_a_union():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string", "nullable": True, "enum": ["x"]}},
    }
    out = openapi_contract._nullable_to_union(schema)
    assert out["properties"]["a"] == {
        "anyOf": [{"type": "null"}, {"type": "string", "enum": ["x"]}]
    }


def test_without_the_description_validation_is_off_with_a_reason(monkeypatch, tmp_path):
    monkeypatch.setattr(openapi_contract, "DESCRIPTION", tmp_path / "absent.json")
    reason = openapi_contract.missing_reason()
    assert reason is not None and "npm ci --prefix tests/openapi" in reason
    monkeypatch.setattr(openapi_contract, "_LOADED", False)
    monkeypatch.setattr(openapi_contract, "_CONTRACT", None)
    with pytest.warns(UserWarning, match="not validated against GitHub's REST contract"):
        assert openapi_contract.contract() is None
    with FakeGitHub() as server:  # still serves, unvalidated
        server.add_repo(REPO)
        assert server.contract is None
        assert call(f"{server.url}/repos/{REPO}/actions/runz")[0] == 404


@needs_description
def test_the_description_is_githubs():
    contract = openapi_contract.contract()
    assert contract is not None
    op = contract.operation("GET", f"/repos/{REPO}/actions/runs/5/jobs")
    assert op is not None and op.operation_id == "actions/list-jobs-for-workflow-run"
    op = contract.operation("GET", f"/api/v3/repos/{REPO}/compare/main...feature/x")
    assert op is not None and op.template == "/repos/{owner}/{repo}/compare/{basehead}"


@needs_description
def test_every_shape_served_validates(gh):
    """Each endpoint, with every kind of state it can show, answers inside the contract (a
    violation answers 500 and fails at stop)."""
    r = run(gh, pull_requests=[7])
    r.jobs[0].steps = []
    gh.start_job(r.jobs[0].id, "2026-11-02T10:01:00Z", group=(3, "gpu"))
    gh.complete_job(r.jobs[0].id, "2026-11-02T10:09:00Z")
    run(gh, status="queued", head_repo=FORK, pull_requests=[7])
    run(gh, fork_deleted=True)
    gh.add_artifact(REPO, "ledger", {"a.json": b"{}"})
    gh.repos[REPO].compares["1" * 40 + "..." + "2" * 40] = ["src/a.cu"]
    gh.repos[REPO].roles["maintainer"] = "maintain"
    gh.repos[REPO].legacy_only.add("old")
    gh.add_org(
        "octo-org",
        usage_items=[
            usage_item(
                "octo-org/octo-repo", 9, 0.468, sku="linux_4_core_gpu", date="2026-11-02T00:00:00Z"
            )
        ],
    )
    api = f"{gh.url}/repos/{REPO}"
    art = gh.repos[REPO].artifacts[0]
    for method, url, body, expected in [
        ("GET", api, None, 200),
        ("GET", f"{api}/pulls/7", None, 200),
        ("GET", f"{api}/pulls/7/files", None, 200),
        ("GET", f"{api}/pulls/7/reviews", None, 200),
        ("GET", f"{api}/pulls/99", None, 404),
        ("GET", f"{api}/issues/7/labels", None, 200),
        ("POST", f"{api}/issues/7/labels", {"labels": ["ok"]}, 200),
        ("DELETE", f"{api}/issues/7/labels/ok", None, 200),
        ("DELETE", f"{api}/issues/7/labels/absent", None, 404),
        ("GET", f"{api}/collaborators/maintainer/permission", None, 200),
        ("GET", f"{api}/compare/{'1' * 40}...{'2' * 40}", None, 200),
        ("POST", f"{api}/statuses/{SHA}", {"state": "pending", "context": "gpu"}, 201),
        ("POST", f"{api}/statuses/{SHA}", {"state": "nope"}, 422),
        ("GET", f"{api}/commits/{SHA}/statuses", None, 200),
        ("GET", f"{api}/commits/{SHA}/status", None, 200),
        ("GET", f"{api}/actions/runs", None, 200),
        ("GET", f"{api}/actions/runs?status=completed&created=%3E%3D2026-11-01", None, 200),
        ("GET", f"{api}/actions/workflows/cuda-ci.yml/runs", None, 200),
        ("GET", f"{api}/actions/runs/{r.id}", None, 200),
        ("GET", f"{api}/actions/runs/{r.id}/jobs?filter=all", None, 200),
        ("GET", f"{api}/actions/runs/{r.id}/attempts/1/jobs", None, 200),
        ("GET", f"{api}/actions/jobs/{r.jobs[0].id}", None, 200),
        ("POST", f"{api}/actions/runs/{r.id}/cancel", None, 409),
        ("GET", f"{api}/actions/artifacts?name=ledger", None, 200),
        ("GET", f"{api}/actions/artifacts/{art.id}", None, 200),
        ("GET", f"{api}/actions/artifacts/{art.id}/zip", None, 302),
        ("GET", f"{gh.url}/organizations/octo-org/settings/billing/usage?year=2026", None, 200),
        ("GET", f"{gh.url}/rate_limit", None, 200),
    ]:
        status, answer, _ = call(url, method, body)
        assert status == expected, (method, url, answer)
    status, answer, _ = call(f"{api}/collaborators/old/permission")
    # Older GHES leave role_name out: served, and listed as deliberately outside the contract.
    assert status == 200 and "role_name" not in answer
    assert gh.outside_contract == [
        "GET /repos/octo-org/octo-repo/collaborators/old/permission: an older GHES omits role_name"
    ]
    assert gh.contract_violations == []


# -- GitHub's documented behaviour ------------------------------------------------------------
def test_filtered_run_listings_stop_at_1000_results(gh):
    """actions/list-workflow-runs-for-repo: "This endpoint will return up to 1,000 results
    for each search when using the following parameters: actor, branch, check_suite_id,
    created, event, head_sha, status." total_count stays the true count."""
    repo = gh.repos[REPO]
    repo.runs.extend(
        WorkflowRun(
            10_000 + i,
            "CUDA CI",
            ".github/workflows/cuda-ci.yml",
            SHA,
            status="completed",
            conclusion="success",
        )
        for i in range(1205)
    )
    api = f"{gh.url}/repos/{REPO}/actions/runs"
    status, body, head = call(f"{api}?status=completed&per_page=100&page=10")
    assert status == 200 and len(body["workflow_runs"]) == 100
    assert body["total_count"] == 1205
    assert 'rel="next"' not in head["Link"] and "page=10" in head["Link"]
    status, body, _ = call(f"{api}?status=completed&per_page=100&page=11")
    assert status == 200 and body["workflow_runs"] == [] and body["total_count"] == 1205
    status, body, _ = call(f"{api}?created=%3E%3D2026-01-01&per_page=100&page=11")
    assert body["workflow_runs"] == []
    # Unfiltered, every run is reachable.
    status, body, _ = call(f"{api}?per_page=100&page=13")
    assert len(body["workflow_runs"]) == 5
    status, body, _ = call(
        f"{gh.url}/repos/{REPO}/actions/workflows/cuda-ci.yml/runs"
        "?event=pull_request&per_page=100&page=11"
    )
    assert body["workflow_runs"] == [] and body["total_count"] == 1205


def test_compare_lists_at_most_300_files_and_only_on_page_1(gh):
    """repos/compare-commits-with-basehead: "The list of changed files is only shown on the
    first page of results, and it includes up to 300 changed files for the entire
    comparison." """
    basehead = "1" * 40 + "..." + "2" * 40
    gh.repos[REPO].compares[basehead] = [f"src/f{i}.cu" for i in range(350)]
    api = f"{gh.url}/repos/{REPO}/compare/{basehead}"
    status, body, _ = call(api)
    assert status == 200 and len(body["files"]) == 300 and len(body["commits"]) == 1
    status, body, _ = call(f"{api}?per_page=100&page=1")
    assert len(body["files"]) == 300
    status, body, _ = call(f"{api}?per_page=100&page=2")
    assert status == 200 and "files" not in body


def test_per_page_above_100_is_served_as_100(gh):
    """ "The number of results per page (max 100)." (the per-page parameter)."""
    gh.repos[REPO].pulls[7].files = [f"f{i}" for i in range(150)]
    status, body, head = call(f"{gh.url}/repos/{REPO}/pulls/7/files?per_page=500")
    assert status == 200 and len(body) == 100
    assert "per_page=100&page=2" in head["Link"]


@pytest.mark.parametrize(
    ("created", "expected"),
    [
        ("2026-11-01T00:00:00Z..2026-11-30T23:59:59Z", {"11-01 08", "11-30 23"}),
        ("2026-11-01T09:00:00Z..2026-11-30", {"11-30 23"}),
        (">=2026-11-30T23:00:00Z", {"11-30 23", "12-01 00"}),
        ("<=2026-11-01T08:00:00Z", {"10-31 23", "11-01 08"}),
        ("<2026-11-01T08:00:00Z", {"10-31 23"}),
        (">2026-11-30", {"12-01 00"}),
        ("2026-11-30", {"11-30 23"}),
        ("2026-11-01T00:00:00Z..*", {"11-01 08", "11-30 23", "12-01 00"}),
    ],
)
def test_created_filters_take_a_time_part(gh, created, expected):
    """GitHub's search date syntax ("Query for dates"): YYYY-MM-DDTHH:MM:SSZ bounds, >=, <=,
    >, <, ranges with .. and *."""
    for at in (
        "2026-10-31T23:00:00Z",
        "2026-11-01T08:00:00Z",
        "2026-11-30T23:30:00Z",
        "2026-12-01T00:00:00Z",
    ):
        run(gh, created=at)
    status, body, _ = call(f"{gh.url}/repos/{REPO}/actions/runs?created={quote(created)}")
    assert status == 200
    got = {r["created_at"][5:13].replace("T", " ") for r in body["workflow_runs"]}
    assert got == expected


@pytest.mark.parametrize(
    "state", ["queued", "waiting", "pending", "requested", "in_progress", "completed"]
)
def test_job_states_are_githubs(gh, state):
    """The ``job`` schema's status enum: queued, in_progress, completed, waiting, requested,
    pending (each served and inside the contract)."""
    r = run(gh)
    r.jobs[0].status = state
    r.jobs[0].conclusion = "success" if state == "completed" else None
    status, body, _ = call(f"{gh.url}/repos/{REPO}/actions/runs/{r.id}/jobs")
    assert status == 200 and body["jobs"][0]["status"] == state
    assert gh.contract_violations == []


def test_a_run_from_a_deleted_fork_has_no_head_repository(gh):
    """GitHub serves ``head_repository: null`` once the fork is gone, though its description
    says otherwise (github/rest-api-description#1586; testkit/openapi_contract.py allows it)."""
    r = run(gh, fork_deleted=True)
    status, body, _ = call(f"{gh.url}/repos/{REPO}/actions/runs/{r.id}")
    assert status == 200 and body["head_repository"] is None
    assert body["repository"]["full_name"] == REPO
    assert gh.contract_violations == []


def test_a_fork_run_lists_no_pull_requests(gh):
    """workflow-run.pull_requests: "Pull requests that are open with a head_sha or
    head_branch that matches the workflow run" -- in the base repository, so a fork's run
    has [] even when it was triggered by a pull request."""
    fork_run = run(gh, head_repo=FORK, pull_requests=[7])
    own_run = run(gh, pull_requests=[7])
    api = f"{gh.url}/repos/{REPO}/actions/runs"
    _, body, _ = call(f"{api}/{fork_run.id}")
    assert body["pull_requests"] == [] and body["head_repository"]["full_name"] == FORK
    assert body["head_repository"]["fork"] is True
    _, body, _ = call(f"{api}/{own_run.id}")
    assert [p["number"] for p in body["pull_requests"]] == [7]


def test_the_artifact_zip_is_a_redirect_to_another_host_without_the_token(gh):
    """actions/download-artifact: 302, "Look for Location: in the response header to find
    the URL for the download"; the URL is signed storage on another host, needing no token
    (and refusing one, as blob stores refuse a second authentication)."""
    art = gh.add_artifact(REPO, "ledger", {"ledger.json": b'{"ok": true}'})
    status, _, head = call(f"{gh.url}/repos/{REPO}/actions/artifacts/{art.id}/zip")
    assert status == 302
    location = head["Location"]
    assert urlsplit(location).hostname != urlsplit(gh.url).hostname
    assert urlsplit(location).hostname == "127.0.0.2"
    status, data, _ = call(location, token="")
    assert status == 200 and data == art.data
    status, _, _ = call(location, token="t")
    assert status == 400
    status, _, _ = call(location.replace("sig=", "sig=forged"), token="")
    assert status == 403
    assert [r.status for r in gh.storage.log] == [200, 400, 403]
    assert not any(r.path.startswith("/actions-results") for r in gh.log)  # not the API


def test_secondary_rate_limit_on_demand(gh):
    """ "you will receive a 403 or 429 response and an error message that indicates that you
    exceeded a secondary rate limit. If the retry-after response header is present, you
    should not retry your request until after that many seconds has elapsed." (GitHub's docs,
    Rate limits for the REST API)."""
    gh.secondary_rate_limit("GET", r"/pulls/7$", times=1, retry_after=30)
    status, body, head = call(f"{gh.url}/repos/{REPO}/pulls/7")
    assert status == 403 and head["Retry-After"] == "30"
    assert body["message"].startswith("You have exceeded a secondary rate limit.")
    assert "secondary-rate-limits" in body["documentation_url"]
    assert call(f"{gh.url}/repos/{REPO}/pulls/7")[0] == 200


def test_secondary_rate_limit_on_content_creation():
    """ "no more than 80 content-generating requests per minute" (here: 2, to test it)."""
    with FakeGitHub(writes_per_minute=2) as server:
        server.add_repo(REPO)
        server.add_pull(REPO, PullRequest(7, SHA))
        url = f"{server.url}/repos/{REPO}/issues/7/labels"
        assert [call(url, "POST", {"labels": [n]})[0] for n in "abc"] == [200, 200, 403]
        status, body, head = call(url, "POST", {"labels": ["d"]})
        assert status == 403 and head["Retry-After"] == "60"
        assert "secondary rate limit" in body["message"]
        assert call(url)[0] == 200  # reads are not content creation
