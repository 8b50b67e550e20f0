"""The budget guard and the spend report under act, against the loopback server."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import pytest

from testkit.github.runs import HEAD, REPO, labeled, month_of_runs
from testkit.github_server import PullRequest
from testkit.shared import ROOT

pytestmark = pytest.mark.e2e

WORKFLOW = ROOT / "tests" / "e2e" / "workflows" / "budget.yml"


@pytest.fixture
def server(github):
    github.add_repo(REPO, roles={"Codertocat": "maintain"})
    github.add_pull(REPO, PullRequest(2, HEAD, labels=["CUDA CI"]))
    month_of_runs(github, per_day=2, days=10)  # 20 GPU runs × 12 min: $12.48
    return github


def env(server):
    return {
        "GITHUB_API_URL": server.url,
        "GPU_CI_NOW": "2026-11-30T14:00:00Z",
        "GPU_CI_PRINT_SUMMARY": "1",
    }


def test_gate_refuses_over_budget_with_summary(act, server):
    event = labeled()
    result = act(WORKFLOW, "pull_request", event, job="gate", repository=REPO, env=env(server))
    assert result.returncode == 0, result.log
    out = result.outputs
    assert out["run"] == "false" and out["spent"] == "12.48" and out["left"] == "2.52"
    assert "over the budget" in out["reason"]
    assert "| budget verdict | **over: refused** |" in result.log
    # every workflow's runs: a pull request's own workflow file is counted too
    assert any(r.path == f"/repos/{REPO}/actions/runs" for r in server.log)


def test_spend_report(act, server, monkeypatch):
    from testkit.github.runs import iso, monitor_report, upload

    first = server.repos[REPO].runs[0]  # a gpu-monitor report for one job
    start = datetime.fromisoformat(first.created_at.replace("Z", "+00:00"))
    assert iso(start) == first.created_at
    upload(server, first, monitor_report(monkeypatch, start))
    result = act(
        WORKFLOW, "workflow_dispatch", {"inputs": {}}, job="spend", repository=REPO, env=env(server)
    )
    assert result.returncode == 0, result.log
    out = result.outputs
    assert (out["minutes"], out["cost"]) == ("240", "12.48")
    assert Decimal(out["doc"]["budget"]["left"]) == Decimal("2.52")
    assert out["ledger"].endswith("gpu-spend-ledger.json")
    assert "#### By approver" in result.log and "xychart-beta" in result.log
    idle = out["doc"]["idle"]
    assert idle["jobs_with_report"] == 1 and idle["completed_jobs"] == 20
    assert Decimal(idle["usd"]) > 0 and "idle (jobs with a report)" in result.log
