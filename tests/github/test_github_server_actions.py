"""The loopback server's Actions, statuses and billing endpoints answer in GitHub's shapes,
so that the features built on them are tested against something that behaves like GitHub."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from testkit.github.runs import usage_item
from testkit.github_server import Job, PullRequest, Step, WorkflowRun

REPO = "octo-org/octo-repo"
SHA = "a" * 40


def call(github, method, path, body=None, token="t"):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        github.url + path, data=data, method=method, headers={"Authorization": f"token {token}"}
    )
    try:
        with urllib.request.urlopen(req) as resp:
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else None), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null"), dict(exc.headers)


@pytest.fixture
def gh(github):
    github.add_repo(REPO)
    github.add_pull(REPO, PullRequest(7, SHA))
    return github


def add_run(gh, created, status="queued", labels=("self-hosted", "gpu")):
    run = WorkflowRun(
        gh.next_id(),
        "CUDA CI",
        ".github/workflows/cuda-ci.yml",
        SHA,
        created_at=created,
        status=status,
        pull_requests=[7],
    )
    run.jobs.append(
        Job(gh.next_id(), "tests", list(labels), created_at=created, steps=[Step("Set up job", 1)])
    )
    return gh.add_run(REPO, run)


def test_runs_filter_paginate_and_keep_filters_in_links(gh):
    for day in range(1, 8):
        add_run(gh, f"2026-11-0{day}T10:00:00Z")
    add_run(gh, "2026-10-31T23:59:59Z")
    status, body, headers = call(
        gh, "GET", f"/repos/{REPO}/actions/runs?created=%3E%3D2026-11-01&per_page=3"
    )
    assert status == 200 and body["total_count"] == 7 and len(body["workflow_runs"]) == 3
    assert body["workflow_runs"][0]["created_at"].startswith("2026-11-07")  # newest first
    assert "created=%3E%3D2026-11-01" in headers["Link"] and 'rel="next"' in headers["Link"]
    status, body, _ = call(gh, "GET", f"/repos/{REPO}/actions/workflows/cuda-ci.yml/runs")
    assert body["total_count"] == 8


def test_job_moves_queued_in_progress_completed_and_run_follows(gh):
    run = add_run(gh, "2026-11-02T10:00:00Z")
    job = run.jobs[0]
    _, body, _ = call(gh, "GET", f"/repos/{REPO}/actions/runs/{run.id}/jobs")
    assert body["jobs"][0]["status"] == "queued" and body["jobs"][0]["runner_name"] is None
    gh.start_job(job.id, "2026-11-02T10:07:00Z", group=(3, "gpu-pool"))
    _, body, _ = call(gh, "GET", f"/repos/{REPO}/actions/jobs/{job.id}")
    assert (body["status"], body["runner_group_name"]) == ("in_progress", "gpu-pool")
    gh.complete_job(job.id, "2026-11-02T10:20:00Z", "failure")
    _, body, _ = call(gh, "GET", f"/repos/{REPO}/actions/runs/{run.id}")
    assert (body["status"], body["conclusion"]) == ("completed", "failure")


def test_cancel_queued_run_then_conflict_when_completed(gh):
    run = add_run(gh, "2026-11-02T10:00:00Z")
    status, _, _ = call(gh, "POST", f"/repos/{REPO}/actions/runs/{run.id}/cancel", {})
    assert status == 202 and run.jobs[0].conclusion == "cancelled"
    status, body, _ = call(gh, "POST", f"/repos/{REPO}/actions/runs/{run.id}/cancel", {})
    assert status == 409 and "completed" in body["message"]
    gh.read_only_tokens.add("ro")
    other = add_run(gh, "2026-11-02T11:00:00Z")
    status, _, _ = call(gh, "POST", f"/repos/{REPO}/actions/runs/{other.id}/cancel", {}, token="ro")
    assert status == 403 and other.status == "queued"


def test_commit_statuses_and_combined_state(gh):
    status, body, _ = call(
        gh,
        "POST",
        f"/repos/{REPO}/statuses/{SHA}",
        {"state": "pending", "context": "GPU CI", "description": "waiting"},
    )
    assert status == 201 and body["context"] == "GPU CI"
    call(gh, "POST", f"/repos/{REPO}/statuses/{SHA}", {"state": "success", "context": "GPU CI"})
    status, body, _ = call(gh, "POST", f"/repos/{REPO}/statuses/{SHA}", {"state": "bogus"})
    assert status == 422
    _, body, _ = call(gh, "GET", f"/repos/{REPO}/commits/{SHA}/status")
    assert body["state"] == "success" and body["total_count"] == 1
    _, listed, _ = call(gh, "GET", f"/repos/{REPO}/commits/{SHA}/statuses")
    assert [s["state"] for s in listed] == ["success", "pending"]


def test_billing_usage_by_month_org_only_and_token_scope(gh):
    gh.add_org(
        "octo-org",
        billing_tokens={"billing"},
        usage_items=[
            usage_item("octo-org/octo-repo", 12, 0.624, sku="linux_4_core_gpu", unit="minutes"),
            usage_item(
                "octo-org/octo-repo",
                5,
                0.26,
                sku="linux_4_core_gpu",
                date="2026-10-30T00:00:00Z",
                unit="minutes",
            ),
        ],
    )
    path = "/organizations/octo-org/settings/billing/usage?year=2026&month=11"
    status, body, _ = call(gh, "GET", path, token="billing")
    assert status == 200 and [i["quantity"] for i in body["usageItems"]] == [12]
    assert call(gh, "GET", path, token="t")[0] == 403
    assert call(gh, "GET", "/organizations/someuser/settings/billing/usage")[0] == 404
