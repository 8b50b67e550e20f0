"""gpu-watchdog re-runs a GPU run lost to infrastructure once (issue 32), against the test
GitHub server: real-shaped failed jobs, their check runs' annotations, gpu-monitor's report
artifacts; and what it does not re-run (a test failure, a second loss, a stale head, a
re-run the budget refuses), each with its reason; and force-cancel (issue 25)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from gpu_ci.errors import UsageError
from gpu_ci.github import watchdog
from gpu_ci.github.client import connect
from gpu_ci.github.jobs import GpuMatcher
from gpu_ci.github.spend import budget
from gpu_ci.pricing import load_table
from testkit.github.approvals import approved_pull, checks_url
from testkit.github.infra_jobs import (
    EXIT_1,
    LOST,
    REPO,
    failed_run,
    iso,
    monitor_report,
    steps,
    zipped,
)
from testkit.github.runs import retry_config, watchdog_env
from testkit.github_server import Job, WorkflowRun

HEAD = "a" * 40


def now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


def config(**kw) -> watchdog.WatchdogConfig:
    return retry_config(**kw)


@pytest.fixture
def gh(github):
    approved_pull(github, REPO, HEAD, url=checks_url(2, REPO))
    return github


def sweep(github, guard=None, **kw) -> watchdog.Sweep:
    rest = connect("watchdog-token", {"GITHUB_API_URL": github.url}, lambda _s: None)
    return watchdog.sweep(rest, REPO, config(**kw), now(), "https://github.com", guard)


def lose_again(github, run: WorkflowRun) -> None:
    """The re-run's GPU job is lost too: attempt 2 fails the same way."""
    start = now() - timedelta(minutes=20)
    for job in run.jobs:
        if job.run_attempt == run.run_attempt and job.status != "completed":
            job.status, job.conclusion, job.runner_name = "completed", "failure", "gpu-spot-9"
            job.started_at, job.completed_at = iso(start), iso(start + timedelta(minutes=12))
            job.steps, job.annotations = steps(start, "lost"), [("failure", LOST)]
    run.status, run.conclusion = "completed", "failure"


def test_a_lost_runner_is_re_run_once_and_the_status_says_so(gh):
    run = failed_run(gh, now() - timedelta(hours=2))
    result = sweep(gh)
    assert result.retried == [run.id] and run.run_attempt == 2
    (record,) = result.retries
    assert record.action == "retried" and record.code == "retry"
    assert record.links == (
        f"https://github.com/{REPO}/actions/runs/{run.id}/attempts/1",
        f"https://github.com/{REPO}/actions/runs/{run.id}/attempts/2",
    )
    status = gh.repos[REPO].statuses[HEAD][0]
    assert status["state"] == "pending" and status["context"] == "GPU CI"
    assert status["description"].startswith(
        "GPU run retried after the runner was lost (attempt 2); attempt 1: "
    )
    assert status["target_url"].endswith(f"/actions/runs/{run.id}/attempts/2")
    # The stated bound (README): 3 listings (queued, in progress, failed) + the failed run's
    # jobs + 1 annotation listing (no step failed) + 2 for the head (its statuses, the pull
    # request) + rerun-failed-jobs + the new attempt read back + the status.
    assert result.calls == 10 == len(gh.log)
    assert [r.path for r in gh.requests("POST")] == [
        f"/repos/{REPO}/actions/runs/{run.id}/rerun-failed-jobs",
        f"/repos/{REPO}/statuses/{HEAD}",
    ]
    doc = watchdog.infra_json(result)
    assert doc["schema"] == "gpu-ci/infra-failures/v1"
    assert doc["by_pool"] == [{"pool": "gpu,self-hosted,spot", "jobs": 1, "minutes": 30.0}]
    assert doc["failures"][0]["evidence"] == ["step-interrupted", "runner-lost"]

    # A second loss on the retry is not re-run again.
    lose_again(gh, run)
    again = sweep(gh)
    (second,) = again.retries
    assert again.retried == [] and run.run_attempt == 2
    assert second.code == "retries-spent" and second.reason.startswith(
        "a second loss on the retry: attempt 2, retry-infra-failures is 1"
    )
    assert [i.attempt for i in again.infra] == [2]  # its minutes are lost all the same
    assert gh.requests("POST", "rerun") and len(gh.requests("POST", "rerun")) == 1


def test_a_test_failure_is_not_re_run(gh):
    run = failed_run(gh, now() - timedelta(hours=2), "failed", annotations=(("failure", EXIT_1),))
    result = sweep(gh)
    (record,) = result.retries
    assert record.action == "not-retried" and record.code == "test"
    assert "step 3 'Run GPU tests' failed" in record.reason
    assert run.run_attempt == 1 and gh.requests("POST") == []
    assert gh.requests("GET", "/annotations") == []  # a failed step decides: no call for them


def test_a_gpu_off_the_bus_is_re_run_on_the_monitor_reports_word(gh):
    start = now() - timedelta(hours=2)
    run = failed_run(gh, start, "failed", annotations=(("failure", EXIT_1),))
    gh.add_artifact(
        REPO,
        "gpu-monitor-gpu-tests",
        zipped(monitor_report(start, 900, lost_at=400)),
        run_id=run.id,
    )
    result = sweep(gh)
    assert result.retried == [run.id]
    assert "the GPU was lost" in result.retries[0].reason
    status = gh.repos[REPO].statuses[HEAD][0]
    assert status["description"].startswith("GPU run retried after the GPU was lost (attempt 2)")


@pytest.mark.parametrize("field", [{"findings": 5}, {"gpus": 5}, {"findings": [5, "x"]}])
def test_a_monitor_artifact_of_the_wrong_shape_is_absent_evidence_not_a_crash(gh, field):
    """PR code can upload any artifact under the monitor's name: the sweep goes on."""
    start = now() - timedelta(hours=2)
    run = failed_run(gh, start, "failed", annotations=(("failure", EXIT_1),))
    report = {**monitor_report(start, 900), **field}
    gh.add_artifact(REPO, "gpu-monitor-gpu-tests", zipped(report), run_id=run.id)
    (record,) = sweep(gh).retries
    assert record.code == "test" and run.run_attempt == 1


def test_a_failure_reading_one_artifact_is_a_note(gh, monkeypatch):
    start = now() - timedelta(hours=2)
    run = failed_run(gh, start, "failed", annotations=(("failure", EXIT_1),))
    gh.add_artifact(
        REPO, "gpu-monitor-gpu-tests", zipped(monitor_report(start, 900)), run_id=run.id
    )

    def broken(report, artifact):
        raise TypeError("bad field")

    monkeypatch.setattr(watchdog.infra, "monitor_evidence", broken)
    result = sweep(gh)
    assert result.retries[0].code == "test"
    assert any("gpu-monitor-gpu-tests': unreadable report (TypeError" in n for n in result.notes)


def test_a_head_that_is_no_longer_the_approved_one_is_not_re_run(gh):
    gh.repos[REPO].pulls[2].head_sha = "b" * 40  # pushed since the approval
    run = failed_run(gh, now() - timedelta(hours=2))
    (record,) = sweep(gh).retries
    assert record.code == "stale-head" and run.run_attempt == 1
    assert "#2 is open at bbbbbbbbbbbb, not at the approved head aaaaaaaaaaaa" in record.reason
    assert gh.requests("POST") == []


def test_without_a_context_a_pull_requests_run_is_not_re_run(gh):
    """Approvals live in the context's statuses: without one the approval and its approver
    cannot be checked, so an open pull request at that head is not enough."""
    run = failed_run(gh, now() - timedelta(hours=2))
    (record,) = sweep(gh, context="").retries  # the input `none` reads as empty
    assert record.code == "stale-head" and run.run_attempt == 1
    assert "no context: approvals cannot be read" in record.reason
    assert gh.requests("POST") == []


@pytest.mark.parametrize("hours", ["inf", "1e8", "nan", "0", "-1", "721", "a day"])
def test_retry_window_hours_must_be_finite_and_within_github_s_30_days(hours):
    with pytest.raises(UsageError, match="input 'retry-window-hours' must be a number of hours"):
        config(retry_window_hours=hours)
    assert config(retry_window_hours="720").retry_window_hours == 720


def test_a_failed_run_older_than_the_retry_window_is_not_examined(gh):
    run = failed_run(gh, now() - timedelta(hours=3))
    assert sweep(gh, retry_window_hours="2").retries == []
    assert run.run_attempt == 1 and gh.requests("POST") == []
    assert [r.run_id for r in sweep(gh, retry_window_hours="4").retries] == [run.id]


def guard(amount: str) -> watchdog.RetryBudget:
    table = load_table()
    written = budget.BudgetInputs(amount, "", "60", "refuse", "repository", ["cuda-ci.yml"], "")
    cfg = budget.make_budget_config(written, table, now().date())
    assert cfg is not None
    return watchdog.RetryBudget(cfg, GpuMatcher(frozenset({"gpu"})), table)


def test_a_re_run_the_budget_would_refuse_is_not_made(gh):
    run = failed_run(gh, now() - timedelta(hours=2))  # 30 GPU minutes spent
    (record,) = sweep(gh, guard("60 minutes")).retries
    assert record.code == "over-budget" and run.run_attempt == 1
    assert "this run reserves 60 min (60 min): over the budget" in record.reason
    assert gh.requests("POST") == []
    within = sweep(gh, guard("100 minutes"))
    assert within.retried == [run.id]


def test_the_re_runs_of_one_sweep_add_up_and_the_month_is_read_once(gh, monkeypatch):
    older, newer = (failed_run(gh, now() - timedelta(hours=h)) for h in (3, 2))  # 60 min spent
    reads = []
    real = watchdog.retry.month.month_spend
    monkeypatch.setattr(
        watchdog.retry.month, "month_spend", lambda *a, **k: reads.append(1) or real(*a, **k)
    )
    result = sweep(gh, guard("150 minutes"))  # 60 spent: room for one reservation of 60
    assert result.retried == [older.id] and newer.run_attempt == 1
    (refused,) = [r for r in result.retries if r.run_id == newer.id]
    assert refused.code == "over-budget"
    assert refused.reason.startswith("with this sweep's earlier re-runs (60 min): ")
    assert "this run reserves 120 min" in refused.reason
    assert reads == [1] and result.reserved_minutes == 60


def test_retries_off_examines_no_failed_run(gh):
    failed_run(gh, now() - timedelta(hours=2))
    result = sweep(gh, retry_infra_failures="0")
    assert result.retries == [] and result.calls == 2


def test_a_run_that_ignores_cancel_is_force_cancelled_after_the_grace(gh):
    def queued(minutes: float) -> WorkflowRun:
        run = WorkflowRun(
            gh.next_id(),
            "CUDA CI",
            ".github/workflows/cuda-ci.yml",
            f"{gh.next_id():040d}",
            status="in_progress",
            created_at=iso(now() - timedelta(minutes=minutes)),
            ignores_cancel=True,
        )
        run.jobs.append(
            Job(
                gh.next_id(),
                "gpu-tests",
                ["gpu"],
                created_at=iso(now() - timedelta(minutes=minutes)),
            )
        )
        return gh.add_run(REPO, run)

    young, old = queued(70), queued(90)
    result = sweep(gh, force_cancel_minutes="20", retry_infra_failures="0")
    actions = {j.run_id: j.action for j in result.jobs}
    assert actions == {young.id: "cancel-unconfirmed", old.id: "force-cancelled"}
    assert old.conclusion == "cancelled" and young.status == "in_progress"
    assert result.cancelled == [old.id]
    assert len(gh.requests("POST", "/force-cancel")) == 1
    status = gh.repos[REPO].statuses[old.head_sha][0]
    assert status["state"] == "error"
    # without the input, a run that ignores cancel stays unconfirmed
    plain = sweep(gh, retry_infra_failures="0")
    assert {j.action for j in plain.jobs} == {"cancel-unconfirmed"}


def test_the_cli_writes_the_infra_file_and_the_retried_output(run_cli, gh, tmp_path):
    run = failed_run(gh, now() - timedelta(hours=2))
    env = watchdog_env(gh, REPO, INPUT_INFRA_FILE=str(tmp_path / "infra.json"))
    result = run_cli(["gpu-watchdog"], env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.outputs["retried"]) == [run.id]
    doc = json.loads((tmp_path / "infra.json").read_text())
    assert doc["by_pool"][0]["pool"] == "gpu,self-hosted,spot"
    assert "| retried | retry |" in result.summary
    assert f"[attempt 2](https://github.com/{REPO}/actions/runs/{run.id}/attempts/2)" in (
        result.summary
    )


def test_a_matrix_sibling_cancelled_by_fail_fast_is_re_run_with_the_lost_job(gh):
    run = failed_run(gh, now() - timedelta(hours=2))
    lost = run.jobs[1]
    sibling = Job(
        gh.next_id(),
        "gpu-tests (py3.12)",
        list(lost.labels),
        status="completed",
        conclusion="cancelled",
        created_at=lost.created_at,
        started_at=lost.started_at,
        completed_at=lost.completed_at,
        runner_name="gpu-spot-8",
        steps=steps(now() - timedelta(hours=2), "passed")[:2],
        annotations=[("failure", "The operation was canceled.")],
    )
    run.jobs.append(sibling)
    result = sweep(gh)
    assert result.retried == [run.id]
    kinds = {v.job: v.kind for v in result.retries[0].verdicts}
    assert kinds == {"gpu-tests": "infrastructure", "gpu-tests (py3.12)": "cancelled"}
    again = [j for j in run.jobs if j.run_attempt == 2]
    assert sorted((j.name, j.status) for j in again) == [
        ("gate", "completed"),
        ("gpu-tests", "queued"),
        ("gpu-tests (py3.12)", "queued"),
    ]
    assert [i.job_id for i in result.infra] == [lost.id]  # the sibling lost nothing itself
