"""gpu-spend reuses its own ledger and re-runs count in the month they ran (issue 25 items 3
and 4), measured against the test server: the README's REST calls per gate decision and per
hourly report at 300 runs a month, with the bound the issue sets (at most 10)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from testkit.github.runs import (
    BUDGET,
    GATE_CALLS,
    REPO,
    api_calls,
    gate,
    gpu_job,
    gpu_run,
    month_of_runs,
    spend,
    upload_ledger,
)
from testkit.shared import ROOT

#: gpu-spend's hourly run: on a schedule, so on the default branch (no call to ask which).
HOURLY = {"GITHUB_EVENT_NAME": "schedule", "GITHUB_REF_NAME": "master"}
#: The issue's goal for both, at 300 runs a month.
GOAL = 10


def _rerun(server, run, start: str, end: str) -> None:
    """Attempt 2 of ``run``: its GPU job ran from ``start`` to ``end``."""
    run.run_attempt, run.updated_at, run.run_started_at = 2, end, start
    run.jobs.append(gpu_job(server, start, end, attempt=2))


def test_a_rerun_this_month_of_a_run_created_last_month_counts(run_cli, server, tmp_path):
    """Created on 25 October (attempt 1, 5 min, October's), re-run on 10 November for 600
    GPU minutes: November's, for the gate and for gpu-spend."""
    old = gpu_run(server, datetime(2026, 10, 25, 10, tzinfo=timezone.utc), 5)
    _rerun(server, old, "2026-11-10T10:00:00Z", "2026-11-10T20:00:00Z")
    gpu_run(server, datetime(2026, 10, 20, 10, tzinfo=timezone.utc), 7)  # not re-run: no call
    budget = [*BUDGET[:-2], "--gpu-workflows", "cuda-ci.yml", "--monthly-budget", "9000 minutes"]
    before = len(server.log)
    result = gate(run_cli, server, budget)
    assert result.outputs["budget-spent"] == "600", result.stdout
    jobs = [r.path for r in api_calls(server, before) if r.path.endswith("/jobs")]
    assert jobs == [f"/repos/{REPO}/actions/runs/{old.id}/jobs"]
    report = spend(run_cli, server, tmp_path)
    assert report.outputs["minutes"] == "600", report.stdout


@pytest.mark.slow
def test_the_readme_states_the_rest_calls_with_the_ledger(run_cli, server, tmp_path):
    """300 GPU runs in the month and one since gpu-spend's last hourly ledger: a gate
    decision and the next hourly report, each within the issue's goal of 10 REST calls,
    counting what a full count does, and the README says how many. Then a run of 5 November
    re-run after that report's ledger: the next report fetches its jobs alone (the new
    ledger kept every run the old one counted) and counts its new attempt."""
    month_of_runs(server)  # 300 GPU runs, $187.20
    first = spend(run_cli, server, tmp_path / "first", env=HOURLY)
    assert first.outputs["cost"] == "187.20", first.stdout
    upload_ledger(server, (tmp_path / "first" / "out" / "gpu-spend-ledger.json").read_bytes())
    gpu_run(server, datetime(2026, 11, 30, 13, 0, tzinfo=timezone.utc), 11.5)  # since then
    before = len(server.log)
    decided = gate(run_cli, server, BUDGET)
    assert decided.outputs["budget-spent"] == "187.82", decided.stdout  # 301 × $0.624
    decision = api_calls(server, before)
    before = len(server.log)
    report = spend(run_cli, server, tmp_path / "hourly", env=HOURLY)
    assert report.outputs["cost"] == "187.82", report.stdout
    assert "| ledger | ledger artifact #" in report.summary
    hourly = api_calls(server, before)
    assert len(decision) <= GOAL + GATE_CALLS and len(hourly) <= GOAL, (
        [r.path for r in decision],
        [r.path for r in hourly],
    )
    # the new run's and the ledger-writing run's (another workflow: every workflow counts)
    assert len([r for r in hourly if r.path.endswith("/jobs")]) == 2
    readme = " ".join((ROOT / "README.md").read_text().split())
    budget_calls = len(decision) - GATE_CALLS
    assert f"{len(decision)} REST calls per gate decision with the ledger" in readme, len(decision)
    assert f"{budget_calls} of them the budget's" in readme, budget_calls
    assert f"{len(hourly)} REST calls per hourly gpu-spend report" in readme, len(hourly)

    upload_ledger(
        server,
        (tmp_path / "hourly" / "out" / "gpu-spend-ledger.json").read_bytes(),
        created_at="2026-11-30T13:30:00Z",
    )
    early = server.repos[REPO].runs[40]
    _rerun(server, early, "2026-11-30T13:40:00Z", "2026-11-30T13:50:00Z")
    before = len(server.log)
    again = spend(run_cli, server, tmp_path / "again", env=HOURLY)
    assert again.outputs["cost"] == "188.34", again.stdout  # + 10 min at $0.052
    jobs = [r.path for r in api_calls(server, before) if r.path.endswith("/jobs")]
    wrote = max(r.id for r in server.repos[REPO].runs if r.path.endswith("gpu-spend.yml"))
    # the re-run's, and the run that wrote the ledger (every workflow's GPU jobs count)
    assert sorted(jobs) == sorted(f"/repos/{REPO}/actions/runs/{i}/jobs" for i in (early.id, wrote))


def test_a_listing_still_over_the_cap_is_said_in_both_summaries(run_cli, tmp_path):
    """Eight runs in one second, GitHub serving 5 of a filtered listing (the cap, scaled
    down): no window splits them, and the gate's and gpu-spend's summaries say so."""
    from testkit.github.runs import HEAD
    from testkit.github_server import FakeGitHub, PullRequest

    with FakeGitHub(run_search_cap=5) as gh:
        gh.add_repo(REPO, roles={"Codertocat": "write"})
        gh.add_pull(REPO, PullRequest(2, HEAD, labels=["CUDA CI"]))
        for _ in range(8):
            gpu_run(gh, datetime(2026, 11, 10, 10, tzinfo=timezone.utc), 3)
        decided = gate(run_cli, gh, BUDGET)
        report = spend(run_cli, gh, tmp_path)
    assert decided.returncode == 0, decided.stdout
    assert "incomplete:" in decided.summary and "at most 5" in decided.summary
    assert report.returncode == 0, report.stdout
    assert "| listing | incomplete:" in report.summary
    assert "::warning title=gpu-spend listing::incomplete:" in report.stdout
