"""gpu-watchdog: the pure selection and schedule checks, and sweeps against the local server."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from gpu_ci.github import watchdog
from gpu_ci.github.commit_status import WATCHDOG_PREFIX
from testkit.github.runs import gpu_job, stuck_run, watchdog_config, watchdog_env
from testkit.github_server import WorkflowRun

REPO = "octo-org/octo-repo"
NOW = datetime(2026, 11, 2, 12, 0, tzinfo=timezone.utc)


def ago(minutes: float, now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    return (now - timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def config(**kw) -> watchdog.WatchdogConfig:
    return watchdog_config(**kw)


# -- pure -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cron, interval",
    [
        ("*/15 * * * *", 15),
        ("0 * * * *", 60),
        ("5,35 * * * *", 30),
        ("0 */6 * * *", 360),
        ("10 3 * * *", 1440),
        ("0,10 * * * *", 50),
        ("*/7 * * * *", 7),
        ("0 0 * * 1", None),
        ("@hourly", None),
        ("61 * * * *", None),
    ],
)
def test_cron_interval(cron, interval):
    assert watchdog.cron_interval_minutes(cron) == interval


def test_schedule_warning_names_the_longest_wait():
    text = watchdog.schedule_warning(30, 60)
    assert "below the schedule's interval (60 min)" in text and "up to 90 minutes" in text
    assert watchdog.schedule_warning(60, 60) == ""
    assert watchdog.schedule_warning(10, None) == ""


def test_stale_selection_takes_gpu_jobs_queued_past_the_limit():
    run = {
        "id": 7,
        "path": ".github/workflows/cuda-ci.yml",
        "event": "pull_request",
        "head_sha": "a" * 40,
    }
    jobs = [
        {
            "id": 1,
            "name": "tests",
            "labels": ["self-hosted", "GPU"],
            "status": "queued",
            "created_at": ago(61, NOW),
        },
        {
            "id": 2,
            "name": "tests2",
            "labels": ["gpu"],
            "status": "queued",
            "created_at": ago(59, NOW),
        },
        {
            "id": 3,
            "name": "lint",
            "labels": ["ubuntu-latest"],
            "status": "queued",
            "created_at": ago(600, NOW),
        },
        {
            "id": 4,
            "name": "tests3",
            "labels": ["gpu"],
            "status": "in_progress",
            "created_at": ago(200, NOW),
            "started_at": ago(100, NOW),
            "runner_name": "r",
        },
    ]
    seen, stale = watchdog.stale_jobs(run, jobs, config(), NOW)
    assert [j.job_id for j in seen] == [1, 2, 4]
    assert [j.job_id for j in stale] == [1]
    assert stale[0].queued_seconds == 61 * 60
    assert seen[2].queued_seconds == 100 * 60  # created -> started


@pytest.mark.parametrize(
    "kw, fragment",
    [
        ({"max_queue_minutes": "soon"}, "'max-queue-minutes' must be a number"),
        ({"max_queue_minutes": "0"}, "above 0"),
        ({"labels": []}, "'gpu-labels' is empty"),
        ({"max_calls": "3"}, "'max-calls' must be a whole number of at least 4"),
        ({"workflows": [".github/workflows/x.yml"]}, "not a workflow file name"),
        ({"context": "x" * 256}, "at most 255"),
    ],
)
def test_bad_configuration_is_refused(kw, fragment):
    with pytest.raises(watchdog.config.UsageError, match=fragment.replace("(", r"\(")):
        config(**kw)


# -- sweeps against the server ------------------------------------------------------------------


def add_run(
    github,
    *,
    minutes: float,
    labels=("self-hosted", "gpu"),
    status="queued",
    path=".github/workflows/cuda-ci.yml",
    extra_jobs=(),
) -> WorkflowRun:
    return stuck_run(
        github,
        ago(minutes + 1),
        ago(minutes),
        sha=None,
        labels=labels,
        status=status,
        path=path,
        extra_jobs=extra_jobs,
        repo=REPO,
    )


@pytest.fixture
def env(github, tmp_path):
    github.add_repo(REPO)
    return watchdog_env(github, REPO, INPUT_REPORT_FILE=str(tmp_path / "queue.json"))


def test_a_job_no_runner_took_is_cancelled_and_the_commit_says_so(run_cli, github, env, tmp_path):
    stale = add_run(github, minutes=75)
    fresh = add_run(github, minutes=5)
    result = run_cli(["gpu-watchdog"], env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert stale.status == "completed" and stale.conclusion == "cancelled"
    assert fresh.status == "in_progress"
    assert json.loads(result.outputs["cancelled"]) == [stale.id]
    assert result.outputs["stale"] == "1"
    (status,) = github.repos[REPO].statuses[stale.head_sha]
    assert status["state"] == "error" and status["context"] == "GPU CI"
    assert status["description"].startswith(f"{WATCHDOG_PREFIX} in 75 minutes")
    assert status["target_url"].endswith(f"/actions/runs/{stale.id}")
    # the stated bound: 2 lists + 1 jobs list per old-enough run + 1 re-read + cancel + the
    # run re-read to see it cancelled (issue 25) + status + the listing of failed runs
    # (retry-infra-failures: 1 by default, issue 32)
    assert result.outputs["rest-calls"] == "8" == str(len(github.log))
    report = json.loads((tmp_path / "queue.json").read_text())
    assert report["schema"] == "gpu-ci/queue-times/v1" and report["complete"] is True
    assert [(j["run_id"], j["action"]) for j in report["jobs"]] == [(stale.id, "cancelled")]
    assert 74 * 60 < report["jobs"][0]["queued_seconds"] < 80 * 60
    assert "| cancelled |" in result.summary


def test_cancel_false_only_reports(run_cli, github, env):
    stale = add_run(github, minutes=90)
    result = run_cli(["gpu-watchdog"], {**env, "INPUT_CANCEL": "false"})
    assert result.returncode == 0
    assert stale.status == "in_progress"
    assert github.requests("POST") == []
    assert result.outputs["stale"] == "1" and result.outputs["cancelled"] == "[]"
    assert "reported" in result.summary


def test_a_job_that_starts_between_listing_and_cancelling_is_left_alone(run_cli, github, env):
    stale = add_run(github, minutes=90)
    gpu_job = stale.jobs[1]
    # The runner picks the job up right after the jobs listing: the re-read sees it running.
    github.on_request(
        "GET", rf"/actions/jobs/{gpu_job.id}$", lambda _path: github.start_job(gpu_job.id, ago(0))
    )
    result = run_cli(["gpu-watchdog"], env)
    assert result.returncode == 0, result.stdout
    assert gpu_job.status == "in_progress" and stale.conclusion is None
    assert github.requests("POST") == []
    assert "started-before-cancel" in result.summary


def test_without_the_re_read_the_race_would_cancel_a_running_job(github):
    """The check above fails without the re-read: the listing alone still says queued."""
    github.add_repo(REPO)
    stale = add_run(github, minutes=90)
    page = {
        "jobs": [
            {
                "id": j.id,
                "name": j.name,
                "labels": j.labels,
                "status": j.status,
                "created_at": j.created_at,
            }
            for j in stale.jobs
        ]
    }
    github.start_job(stale.jobs[1].id, ago(0))
    _seen, listed_stale = watchdog.stale_jobs(
        {"id": stale.id}, page["jobs"], config(), datetime.now(timezone.utc)
    )
    assert [j.job_id for j in listed_stale] == [stale.jobs[1].id]


def test_running_siblings_keep_the_run(run_cli, github, env):
    sibling = gpu_job(github, ago(50), created=ago(100), name="tests (2)", labels=["gpu"])
    stale = add_run(github, minutes=90, extra_jobs=[sibling])
    sibling.id = github.next_id()
    result = run_cli(["gpu-watchdog"], env)
    assert result.returncode == 0
    assert stale.status == "in_progress"
    assert "left-running-siblings" in result.summary


def test_api_errors_while_cancelling_are_reported_and_the_sweep_goes_on(
    run_cli, github, env, tmp_path
):
    first = add_run(github, minutes=90)
    second = add_run(github, minutes=80)
    github.inject("POST", rf"/actions/runs/{first.id}/cancel$", 500, times=10)
    result = run_cli(["gpu-watchdog"], env)
    assert result.returncode == 1
    assert first.status == "in_progress"
    assert second.conclusion == "cancelled"
    assert any(
        f"did not answer cancelling run {first.id} after retries" in e and "500" in e
        for e in result.errors
    ), result.stdout
    report = json.loads((tmp_path / "queue.json").read_text())
    assert report["complete"] is False
    assert {j["run_id"]: j["action"] for j in report["jobs"]} == {
        first.id: "cancel-failed",
        second.id: "cancelled",
    }
    assert "error: GitHub API did not answer cancelling run" in result.summary


def test_a_read_only_token_explains_the_permission(run_cli, github, env):
    add_run(github, minutes=90)
    github.read_only_tokens.add("watchdog-token")
    result = run_cli(["gpu-watchdog"], env)
    assert result.returncode == 1
    assert any("HTTP 403" in e and "actions: write" in e for e in result.errors)


def test_a_run_completed_meanwhile_is_not_an_error(run_cli, github, env):
    stale = add_run(github, minutes=90)
    github.on_request(
        "POST",
        rf"/actions/runs/{stale.id}/cancel$",
        lambda _p: setattr(stale, "status", "completed"),
    )
    result = run_cli(["gpu-watchdog"], env)
    assert result.returncode == 0, result.stdout
    assert "already-completed" in result.summary
    assert github.repos[REPO].statuses == {}


def test_the_call_budget_stops_the_sweep_with_a_summary(run_cli, github, env):
    for minutes in (90, 95, 100):
        add_run(github, minutes=minutes)
    result = run_cli(["gpu-watchdog"], {**env, "INPUT_MAX_CALLS": "5"})
    assert result.returncode == 0
    assert len(github.log) == 5 == int(result.outputs["rest-calls"])
    assert "Stopped early: the budget of 5 REST calls is spent" in result.summary


def test_a_low_rate_limit_stops_the_sweep(run_cli, github, env):
    add_run(github, minutes=90)
    github.rate_remaining = 60
    result = run_cli(["gpu-watchdog"], {**env, "INPUT_RATE_RESERVE": "100"})
    assert result.returncode == 0
    assert len(github.log) == 1
    assert "X-RateLimit-Remaining is 59, below rate-reserve 100" in result.summary


def test_max_queue_below_the_schedule_interval_is_said(run_cli, github, env):
    event = {"schedule": "0 * * * *"}
    result = run_cli(
        ["gpu-watchdog"],
        {**env, "INPUT_MAX_QUEUE_MINUTES": "30"},
        event=event,
        event_name="schedule",
    )
    assert result.returncode == 0
    assert (
        "::warning title=gpu-watchdog::max-queue-minutes (30) is below the schedule's "
        "interval (60 min)" in result.stdout
    )
    explicit = run_cli(
        ["gpu-watchdog"], {**env, "INPUT_MAX_QUEUE_MINUTES": "10", "INPUT_SCHEDULE_MINUTES": "15"}
    )
    assert "interval (15 min)" in explicit.stdout


def test_bad_inputs_exit_2(run_cli, env):
    result = run_cli(["gpu-watchdog"], {**env, "INPUT_MAX_QUEUE_MINUTES": "an hour"})
    assert result.returncode == 2
    assert "max-queue-minutes" in result.errors[0]


def test_without_workflows_every_workflow_is_watched(run_cli, github, env):
    stale = add_run(github, minutes=90, path=".github/workflows/other-gpu.yml")
    result = run_cli(["gpu-watchdog"], {**env, "INPUT_WORKFLOWS": ""})
    assert result.returncode == 0, result.stdout
    assert stale.conclusion == "cancelled"
    assert [r.path for r in github.log[:2]] == [f"/repos/{REPO}/actions/runs"] * 2
    assert {r.query["status"][0] for r in github.log[:2]} == {"queued", "in_progress"}


def test_a_label_that_merely_contains_a_gpu_label_is_not_watched():
    """Labels match whole (case-folded): 'nogpu', 'gpu-large' or 'cpu,gpu' are other runners,
    and their queued jobs are never cancelled as GPU jobs."""
    run = {"id": 8, "event": "push", "head_sha": "b" * 40}
    jobs = [
        {
            "id": n,
            "name": f"j{n}",
            "labels": [label],
            "status": "queued",
            "created_at": ago(600, NOW),
        }
        for n, label in enumerate(["nogpu", "gpu-large", "cpu,gpu", " gpu", "GPU"])
    ]
    seen, stale = watchdog.stale_jobs(run, jobs, config(), NOW)
    assert [j.job_id for j in stale] == [j.job_id for j in seen] == [4]


def test_a_job_name_cannot_plant_a_link_in_the_summary():
    from gpu_ci.commands.gpu_watchdog import summarize

    name = "tests](https://evil.example/approve) [x"
    record = watchdog.JobRecord(
        1,
        2,
        name,
        "cuda-ci.yml",
        "pull_request",
        "a" * 40,
        ("gpu",),
        "queued",
        ago(90, NOW),
        None,
        5400.0,
        "https://github.com/o/r/actions/runs/1/job/2",
    )
    sweep = watchdog.Sweep(REPO, config(), NOW, jobs=[record])
    text = summarize(sweep, "")
    assert "](https://evil.example" not in text
    assert "[tests&#93;(https\u2060://evil.example/approve) &#91;x](https://github.com/" in text


def test_a_link_planted_at_report_file_is_replaced_not_written_through(
    run_cli, github, env, tmp_path
):
    add_run(github, minutes=75)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (tmp_path / "queue.json").symlink_to(victim)
    result = run_cli(["gpu-watchdog"], env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert victim.read_text() == "keep me\n"
    assert not (tmp_path / "queue.json").is_symlink()
    assert json.loads((tmp_path / "queue.json").read_text())["schema"] == "gpu-ci/queue-times/v1"
