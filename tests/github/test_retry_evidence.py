"""gpu-watchdog's re-run weighs where its evidence came from.

A job's own evidence (annotations, steps, its gpu-monitor report) is the job's code's to
forge; a record kept outside the job (the cloud's, ARC's, another OS user's hook: here a
stand-in for gpu-cloud-runner's) is not. The reason names the evidence in words and where it
came from; the job's own evidence buys one re-run per run at most.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta, timezone

import pytest

from gpu_ci.github import watchdog
from gpu_ci.github.client import connect
from gpu_ci.github.watchdog import infra, machine
from testkit.github.approvals import checks_url
from testkit.github.infra_jobs import (
    EXIT_1,
    LOST,
    REPO,
    SHUTDOWN,
    failed_run,
    iso,
    monitor_report,
    steps,
    zipped,
)
from testkit.github.runs import retry_config
from testkit.github_server import PullRequest, WorkflowRun

HEAD = "a" * 40
OWN = "from the job itself, which its code could have written"
SPOT = "Server.SpotInstanceTermination: Spot instance termination"


def now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


@pytest.fixture
def gh(github):
    github.add_repo(REPO)
    github.add_pull(REPO, PullRequest(2, HEAD))
    repo = github.repos[REPO]
    repo.statuses[HEAD] = [
        github.status_json(
            repo,
            HEAD,
            {
                "context": "GPU CI",
                "state": "pending",
                "description": f"Approved by @maintainer for {HEAD[:12]}: GPU run queued.",
                "target_url": checks_url(2, REPO),
            },
            "github-actions[bot]",
        )
    ]
    return github


def sweep(github, records=(), retries="3") -> watchdog.Sweep:
    """A sweep allowing ``retries`` re-runs, with ``records`` handed over from outside."""
    rest = connect("watchdog-token", {"GITHUB_API_URL": github.url}, lambda _s: None)
    config = dataclasses.replace(retry_config(retry_infra_failures=retries), machines=records)
    return watchdog.sweep(rest, REPO, config, now(), "https://github.com")


def lose_again(run: WorkflowRun, how: str, annotations) -> datetime:
    """Attempt 2 fails too, on runner gpu-spot-7: returns when it started."""
    start = now() - timedelta(minutes=20)
    for job in run.jobs:
        if job.run_attempt == run.run_attempt and job.status != "completed":
            job.status, job.conclusion, job.runner_name = "completed", "failure", "gpu-spot-7"
            job.started_at, job.completed_at = iso(start), iso(start + timedelta(minutes=12))
            job.steps, job.annotations = steps(start, how), list(annotations)
    run.status, run.conclusion = "completed", "failure"
    return start


def spot(at: datetime) -> machine.MachineRecord:
    """gpu-cloud-runner's record of a spot reclaim of the runner's instance (stand-in)."""
    doc = {
        "schema": machine.SCHEMA,
        "records": [
            {
                "source": "cloud",
                "runner_name": "gpu-spot-7",
                "at": iso(at),
                "code": "machine-lost",
                "detail": SPOT,
            }
        ],
    }
    (record,) = machine.parse_records(json.loads(json.dumps(doc)))
    return record


def test_a_forged_shutdown_and_a_hanging_step_are_named_the_jobs_own(gh):
    """A forged shutdown message and a hanging step: one re-run, named the job's own.

    PR code prints the runner's shutdown message and hangs its test step until the job
    ends: re-run once, its reason saying the evidence came from the job; lost again the same
    way, not re-run, though retry-infra-failures is 3."""
    run = failed_run(gh, now() - timedelta(hours=2), "lost", annotations=(("failure", SHUTDOWN),))
    first = sweep(gh)
    (record,) = first.retries
    assert first.retried == [run.id]
    assert record.reason.startswith("runner-shutdown: the runner received a shutdown signal (")
    assert OWN in record.reason
    assert record.verdicts[0].outside is False
    lose_again(run, "lost", [("failure", SHUTDOWN)])
    (second,) = sweep(gh).retries
    assert second.code == "retries-spent" and run.run_attempt == 2
    assert second.reason == (
        "a second loss on the retry: attempt 2, retry-infra-failures is 3; the evidence came "
        "from the job itself, so 1 re-run at most"
    )


def test_a_rewritten_gpu_monitor_report_is_named_the_jobs_own(gh):
    """A failed test step and a gpu-monitor report rewritten to say gpu-lost: re-run once
    (bounded), named as the GPU falling off the bus on the job's own word."""
    start = now() - timedelta(hours=2)
    run = failed_run(gh, start, "failed", annotations=(("failure", EXIT_1),))
    gh.add_artifact(
        REPO,
        "gpu-monitor-gpu-tests",
        zipped(monitor_report(start, 900, lost_at=400)),
        run_id=run.id,
    )
    result = sweep(gh)
    (record,) = result.retries
    assert result.retried == [run.id]
    assert record.reason.startswith(
        "gpu-lost: the GPU was lost during the job: it fell off the bus"
    )
    assert f"({OWN}: gpu-monitor-gpu-tests:" in record.reason
    verdict = record.verdicts[0]
    decision = infra.retry_decision({"run_attempt": 2}, [verdict], {verdict.job_id}, 3)
    assert decision.code == "retries-spent" and "from the job itself" in decision.reason


def test_a_record_from_outside_the_job_is_named_and_allows_the_configured_retries(gh):
    """The cloud's record of a spot reclaim during the job: infrastructure even though the
    killed test step failed, named as the cloud's record; lost again with a new record,
    re-run again (retry-infra-failures 3)."""
    start = now() - timedelta(hours=2)
    run = failed_run(gh, start, "failed", annotations=(("failure", EXIT_1),))
    records = (spot(start + timedelta(minutes=10)),)
    first = sweep(gh, records)
    (record,) = first.retries
    assert first.retried == [run.id]
    assert record.reason.startswith(
        "machine-lost: the machine went away (reclaimed, stopped or evicted) "
        f"(from outside the job, the cloud's record of the machine: {SPOT})"
    )
    assert record.verdicts[0].outside is True
    status = gh.repos[REPO].statuses[HEAD][0]["description"]
    assert status.startswith("GPU run retried after the runner was lost (attempt 2); attempt 1: ")
    assert gh.requests("GET", "/annotations") == []  # a failed step: none read, none needed
    again = lose_again(run, "failed", [("failure", EXIT_1)])
    second = sweep(gh, (*records, spot(again + timedelta(minutes=5))))
    assert [r.action for r in second.retries] == ["retried"] and run.run_attempt == 3


def test_a_record_of_another_runner_or_time_is_not_evidence(gh):
    """Records of another runner or time speak for nothing.

    A record of another runner, or one long after the job: the failed step is a test
    failure."""
    start = now() - timedelta(hours=2)
    failed_run(gh, start, "failed", annotations=(("failure", EXIT_1),))
    other = dataclasses.replace(spot(start + timedelta(minutes=10)), runner_name="gpu-spot-8")
    later = spot(start + timedelta(hours=1))
    (record,) = sweep(gh, (other, later)).retries
    assert record.code == "test" and record.action == "not-retried"


def test_a_lost_runner_is_named_as_lost(gh):
    """The server's 'lost communication' and a step left in progress: the reason says the
    runner was lost, not that a step was still in progress."""
    failed_run(gh, now() - timedelta(hours=2), "lost", annotations=(("failure", LOST),))
    (record,) = sweep(gh).retries
    assert record.reason.startswith("runner-lost: the runner lost communication with the server (")
    assert "The self-hosted runner: gpu-spot-7 lost communication" in record.reason
    assert not record.reason.startswith("step-interrupted")


def test_a_hanging_step_alone_is_named_in_words(gh):
    failed_run(gh, now() - timedelta(hours=2), "lost", annotations=())
    (record,) = sweep(gh).retries
    assert record.reason.startswith(
        "step-interrupted: the runner stopped reporting mid-step "
        f"({OWN}: step 3 'Run GPU tests' was still in_progress when the job ended)"
    )


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ([], "not a gpu-ci/machine-records/v1 document"),
        ({"schema": machine.SCHEMA, "records": {}}, "'records' must be a list"),
        ({"schema": machine.SCHEMA, "records": [{"source": "job"}]}, "records[0].source"),
        (
            {"schema": machine.SCHEMA, "records": [{"source": "arc", "code": "oops"}]},
            "records[0].code",
        ),
        (
            {"schema": machine.SCHEMA, "records": [{"source": "hook", "code": "gpu-lost"}]},
            "records[0].at",
        ),
    ],
)
def test_a_bad_records_document_is_named(doc, words):
    with pytest.raises(machine.RecordError, match=words.replace("[", r"\[").replace("]", r"\]")):
        machine.parse_records(doc)


def test_the_watchdog_refuses_an_unreadable_records_file(run_cli, tmp_path):
    path = tmp_path / "records.json"
    path.write_text('{"schema": "gpu-ci/machine-records/v1", "records": [{"source": "x"}]}')
    result = run_cli(
        ["gpu-watchdog", "--machine-records", str(path)],
        {"GITHUB_REPOSITORY": REPO, "INPUT_GITHUB_TOKEN": "t", "INPUT_GPU_LABELS": "gpu"},
    )
    assert result.returncode == 2, result.stdout
    assert "input 'machine-records'" in "".join(result.errors)
