"""GitHub's documented limits (issue 25, item 2): every listing complete or honestly
incomplete, against the strict test server (1,000 results per filtered run listing, 100 per
page, compare's 300 files, every job state)."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone

import pytest

from gpu_ci.github import spend
from gpu_ci.github.client import ClientSettings, RestClient
from testkit.github.approvals import checks_url, post_approval
from testkit.github.runs import finished_jobs, gpu_job, run_event, watchdog_env
from testkit.github_server import FakeGitHub, Job, WorkflowRun
from testkit.shared import webhook

REPO = "Codertocat/Hello-World"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
WF = ".github/workflows/cuda-ci.yml"


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def ago(minutes: float) -> str:
    return iso(datetime.now(timezone.utc) - timedelta(minutes=minutes))


def client(gh: FakeGitHub) -> RestClient:
    return RestClient("ghs_secret", ClientSettings(gh.url, timeout=5, retries=0, backoff=0))


def bare_run(gh, created: str, *, status="completed", jobs=()) -> WorkflowRun:
    run = WorkflowRun(
        gh.next_id(),
        "CUDA CI",
        WF,
        HEAD,
        status=status,
        conclusion="success" if status == "completed" else None,
        created_at=created,
    )
    run.jobs.extend(jobs)
    return gh.add_run(REPO, run)


# -- the 1,000-result cap of filtered run listings --------------------------------------------


def test_a_month_of_more_than_1000_runs_is_listed_whole(github):
    github.add_repo(REPO)
    start = datetime(2026, 11, 1, tzinfo=timezone.utc)
    for n in range(1050):
        bare_run(github, iso(start + timedelta(minutes=41 * n)))
    runs = spend.list_runs(
        client(github), REPO, ["cuda-ci.yml"], date(2026, 10, 31), date(2026, 11, 30)
    )
    assert len(runs) == len({r["id"] for r in runs}) == 1050


def test_a_window_that_still_hits_the_cap_says_so():
    with FakeGitHub(run_search_cap=5) as gh:
        gh.add_repo(REPO)
        for _ in range(8):  # eight runs in the same second: no window can split them
            bare_run(gh, "2026-11-10T10:00:00Z")
        notes: list[str] = []
        runs = spend.list_runs(
            client(gh), REPO, ["cuda-ci.yml"], date(2026, 11, 1), date(2026, 11, 30), notes=notes
        )
    assert len(runs) == 5
    assert notes and "incomplete" in notes[0] and "1,000" not in notes[0] and "5" in notes[0]


@pytest.mark.slow
def test_a_second_with_more_than_1000_runs_is_read_as_far_as_github_goes(github):
    github.add_repo(REPO)
    for _ in range(1001):
        bare_run(github, "2026-11-10T10:00:00Z")
    notes: list[str] = []
    runs = spend.list_runs(
        client(github), REPO, ["cuda-ci.yml"], date(2026, 11, 1), date(2026, 11, 30), notes=notes
    )
    assert len(runs) == 1000  # every page GitHub serves, not the first one
    assert len(notes) == 1 and "1001 runs" in notes[0] and "at most 1000" in notes[0]


# -- job states and all job pages in the watchdog ---------------------------------------------


def _watchdog_env(github, tmp_path):
    github.add_repo(REPO)
    report = str(tmp_path / "queue.json")
    return watchdog_env(github, REPO, INPUT_REPORT_FILE=report, INPUT_MAX_CALLS="400")


def _stuck_run(github, minutes=90, extra=()) -> WorkflowRun:
    jobs = [Job(github.next_id(), "tests", ["self-hosted", "gpu"], created_at=ago(minutes))]
    return bare_run(github, ago(minutes + 1), status="in_progress", jobs=[*jobs, *extra])


def test_a_running_gpu_job_on_the_second_page_of_jobs_keeps_the_run(run_cli, github, tmp_path):
    env = _watchdog_env(github, tmp_path)
    cpu = finished_jobs(github, 100, (ago(95), ago(95), ago(94)), runner="GitHub Actions 2")
    running = gpu_job(github, ago(50), created=ago(95), name="tests (2)", labels=["gpu"])
    run = _stuck_run(github, extra=[*cpu, running])
    result = run_cli(["gpu-watchdog"], env)
    assert result.returncode == 0, result.stdout
    assert run.status == "in_progress", "cancelled a run whose GPU job runs (page 2)"
    assert "left-running-siblings" in result.summary


def test_an_old_stuck_run_behind_100_newer_queued_runs_is_found(run_cli, github, tmp_path):
    env = _watchdog_env(github, tmp_path)
    stuck = _stuck_run(github, minutes=300)
    for n in range(100):  # newer runs, old enough to look at, with no GPU job
        bare_run(
            github,
            ago(120 - n / 10),
            status="queued",
            jobs=[Job(github.next_id(), "lint", ["ubuntu-latest"], created_at=ago(100))],
        )
    result = run_cli(["gpu-watchdog"], env)
    assert result.returncode == 0, result.stdout
    assert stuck.conclusion == "cancelled"
    assert result.outputs["complete"] == "true"


def test_the_call_budget_makes_the_sweep_say_incomplete(run_cli, github, tmp_path):
    env = _watchdog_env(github, tmp_path)
    for minutes in (90, 95, 100):
        _stuck_run(github, minutes)
    result = run_cli(["gpu-watchdog"], {**env, "INPUT_MAX_CALLS": "5"})
    assert result.returncode == 0
    assert result.outputs["complete"] == "false"
    assert "incomplete" in result.summary
    assert json.loads((tmp_path / "queue.json").read_text())["complete"] is False


def test_jobs_waiting_for_reviewers_or_a_concurrency_group_are_not_cancelled(
    run_cli, github, tmp_path
):
    env = _watchdog_env(github, tmp_path)
    waiting = _stuck_run(github)
    waiting.jobs[0].status = "waiting"  # an environment's required reviewers
    pending = _stuck_run(github)
    pending.jobs[0].status = "pending"  # a concurrency group
    queued = _stuck_run(github)
    result = run_cli(["gpu-watchdog"], env)
    assert result.returncode == 0, result.stdout
    assert waiting.status == pending.status == "in_progress"
    assert queued.conclusion == "cancelled"
    assert json.loads(result.outputs["cancelled"]) == [queued.id]
    assert set(github.repos[REPO].statuses) == {queued.head_sha}


# -- gpu-status reads every page of jobs ------------------------------------------------------


def test_a_gpu_job_past_the_first_100_jobs_gets_its_status(run_cli, github):
    from testkit.github_server import PullRequest

    github.add_repo(REPO, roles={"maintainer": "write"})
    github.add_pull(REPO, PullRequest(2, HEAD, head_repo="contributor/Hello-World"))
    repo = github.repos[REPO]
    post_approval(github, url=checks_url())
    run = WorkflowRun(
        github.next_id(),
        "CUDA CI",
        WF,
        HEAD,
        pull_requests=[],
        actor="maintainer",
        status="completed",
        conclusion="success",
    )
    run.jobs = finished_jobs(github, 100, (ago(40), ago(40), ago(39)), runner="cpu")
    gpu = (ago(39), ago(30), ago(5))
    gpu_labels = ["self-hosted", "gpu"]
    run.jobs += finished_jobs(github, 1, gpu, runner="gpu-1", name="tests", labels=gpu_labels)
    github.add_run(REPO, run)
    # the approval's own run: the GPU workflow's file, attempt 1, created with the
    # approval, triggered by the approver
    event = run_event(
        run,
        event="pull_request",
        run_attempt=1,
        pull_requests=[],
        created_at=repo.statuses[HEAD][0]["created_at"],
        triggering_actor={"login": "maintainer"},
        head_repository={"full_name": "contributor/Hello-World"},
    )
    env = {
        "GITHUB_API_URL": github.url,
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_TOKEN": "t",
        "GITHUB_SERVER_URL": "https://github.com",
    }
    result = run_cli(["gpu-status"], env, event=event, event_name="workflow_run")
    assert result.returncode == 0, result.stdout
    assert repo.statuses[HEAD][0]["state"] == "success", result.outputs


# -- compare's 300 files ----------------------------------------------------------------------


def test_a_push_whose_301st_file_matches_paths_runs(run_cli, github):
    github.add_repo(REPO)
    payload = webhook("push")
    payload["before"], payload["after"] = "1" * 40, "2" * 40
    github.repos[REPO].compares["1" * 40 + "..." + "2" * 40] = [
        f"docs/p{i}.md" for i in range(300)
    ] + ["src/kernel.cu"]
    env = {
        "GITHUB_API_URL": github.url,
        "GITHUB_REPOSITORY": REPO,
        "INPUT_GITHUB_TOKEN": "ghs_secret",
        "GITHUB_SHA": "2" * 40,
        "INPUT_PATHS": "src/**",
    }
    result = run_cli(["gpu-gate"], env, event=payload, event_name="push")
    assert result.returncode == 0, result.stdout
    assert result.outputs["run"] == "true", result.outputs["reason"]
    assert "300" in result.outputs["reason"]


def test_a_full_list_at_the_cap_with_no_match_is_unknown_not_no():
    from gpu_ci.github.gate.paths import COMPARE_FILES_MAX, PULL_FILES_MAX, match_paths

    docs = [f"docs/p{i}.md" for i in range(COMPARE_FILES_MAX)]
    assert match_paths(["src/**"], docs, COMPARE_FILES_MAX).capped
    assert not match_paths(["src/**"], docs[:-1], COMPARE_FILES_MAX).capped
    assert not match_paths(["src/**"], docs, PULL_FILES_MAX).capped
    assert not match_paths(["docs/**"], docs, COMPARE_FILES_MAX).capped  # matched: known


# -- what the limits cost: the README's numbers, measured -------------------------------------


@pytest.mark.slow
def test_the_readme_states_the_rest_calls_at_300_runs_a_month(run_cli, server, tmp_path):
    """300 GPU runs in the month (10 a day), no ledger, no billing-token: the gate's budget
    and gpu-spend's report, as the README states them (1 call per 100 runs listed, 1 per run
    for its jobs; the gate's own calls and gpu-spend's artifact listing on top)."""
    from testkit.github.runs import BUDGET, GPU_RUNS_ON, api_calls, gate, month_of_runs, spend
    from testkit.shared import ROOT

    month_of_runs(server)
    before = len(server.log)
    decided = gate(run_cli, server, BUDGET)
    assert decided.returncode == 0, decided.stdout
    decision = api_calls(server, before)
    before = len(server.log)
    report = spend(run_cli, server, tmp_path, env=GPU_RUNS_ON)
    assert report.returncode == 0, report.stdout
    hourly = api_calls(server, before)
    listings = [r for r in decision if r.path.endswith("/runs")]
    jobs = [r for r in decision if r.path.endswith("/jobs")]
    assert (len(listings), len(jobs)) == (3, 300)
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"{len(decision)} REST calls per gate decision" in readme, [
        r.path for r in decision if not r.path.endswith(("/runs", "/jobs"))
    ]
    assert f"{len(hourly)} REST calls per gpu-spend report" in readme, len(hourly)
