"""Infrastructure vs test failures (issue 32): the verdict rules on real-shaped jobs, their
check runs' annotations and gpu-monitor's reports (made by gpu-monitor's own report code)."""

from __future__ import annotations

import pytest

from gpu_ci.github.monitor_artifact import report_versions
from gpu_ci.github.watchdog import infra
from testkit.github.infra_jobs import EXIT_1, LOST, NOW, REPO, SHUTDOWN, failed_run, monitor_report


@pytest.fixture
def served(github):
    github.add_repo(REPO)

    def job(how, annotations=()):
        run = failed_run(github, NOW, how, annotations=annotations)
        return github.job_json(github.repos[REPO], run, run.jobs[1]), run

    return job


def evidence_of(job, annotations=(), report=None):
    found = infra.step_evidence(job)
    found += infra.annotation_evidence([{"message": m} for m in annotations])
    if report is not None and infra.report_is_for(report, job):
        found += infra.monitor_evidence(report, "gpu-monitor-gpu-tests")
    return found


def test_a_runner_lost_mid_step_is_infrastructure_with_its_evidence(served):
    job, _run = served("lost")
    verdict = infra.classify(job, evidence_of(job, [LOST]))
    assert verdict.kind == "infrastructure"
    assert [e.code for e in verdict.evidence] == ["step-interrupted", "runner-lost"]
    assert "Run GPU tests' was still in_progress" in verdict.evidence[0].detail
    assert verdict.to_json()["evidence"][1]["source"] == "annotation"


def test_the_shutdown_signal_alone_is_infrastructure(served):
    job, _run = served("passed")  # every step recorded as passed, then the runner stopped
    verdict = infra.classify(job, evidence_of(job, [SHUTDOWN, "The operation was canceled."]))
    assert verdict.kind == "infrastructure" and verdict.reason.startswith("runner-shutdown")


def test_an_interrupted_step_alone_is_infrastructure(served):
    job, _run = served("lost")
    assert infra.classify(job, evidence_of(job)).kind == "infrastructure"


def test_a_failed_step_is_a_test_failure_whatever_the_annotations_say(served):
    job, _run = served("failed")
    verdict = infra.classify(job, evidence_of(job, [EXIT_1, LOST]))
    assert verdict.kind == "test"
    assert "step 3 'Run GPU tests' failed" in verdict.reason
    assert infra.needs_report(job, verdict.evidence)  # only a GPU lost could change it


def test_a_gpu_off_the_bus_explains_the_failed_step(served):
    job, _run = served("failed")
    report = monitor_report(NOW, 20 * 60, lost_at=600)
    verdict = infra.classify(job, evidence_of(job, [EXIT_1], report))
    assert verdict.kind == "infrastructure"
    (lost,) = [e for e in verdict.evidence if e.code == "gpu-lost"]
    assert lost.source == "monitor-report" and "xid-79, gpu-lost (GPU 0)" in lost.detail


def test_a_report_of_another_job_or_schema_says_nothing(served):
    job, _run = served("failed")
    later = monitor_report(NOW.replace(hour=15), 600, lost_at=60)
    assert not infra.report_is_for(later, job)
    other = {**monitor_report(NOW, 600, lost_at=60), "schema_version": 99}
    assert infra.monitor_evidence(other, "x") == []


def test_every_report_version_gpu_monitor_writes_is_read():
    """gpu-monitor's schema names the versions; a lost GPU in each is evidence (version 2
    reports were once ignored, so a GPU off the bus went unretried)."""
    assert report_versions() == (1, 2)
    for version in report_versions():
        report = {**monitor_report(NOW, 600, lost_at=60), "schema_version": version}
        assert [e.code for e in infra.monitor_evidence(report, "x")] == ["gpu-lost"]


def test_no_record_of_either_is_unknown_and_not_infrastructure(served):
    job, _run = served("passed")
    killed = monitor_report(NOW, 600, killed=True)  # supporting evidence only
    verdict = infra.classify(job, evidence_of(job, ["Some other annotation"], killed))
    assert verdict.kind == "unknown" and not verdict.infrastructure
    assert [e.code for e in verdict.evidence] == ["sampler-ended"]


def test_the_hosted_runners_wording_is_recognised():
    text = (
        "The hosted runner: GitHub Actions 9 lost communication with the server. Anything "
        "in your workflow that terminates the runner process, ..."
    )
    assert [e.code for e in infra.annotation_evidence([{"message": text}])] == ["runner-lost"]
    assert infra.annotation_evidence([{"message": None}, {"message": "lost communication"}]) == []


def _verdict(kind, job_id=2):
    return infra.Verdict(job_id, "gpu-tests", kind, (), f"{kind} reason")


@pytest.mark.parametrize(
    "attempt, retries, verdicts, code",
    [
        (1, 1, [_verdict("infrastructure")], "retry"),
        (2, 1, [_verdict("infrastructure")], "retries-spent"),
        (1, 0, [_verdict("infrastructure")], "retries-spent"),
        (1, 1, [_verdict("infrastructure"), _verdict("test", 3)], "test"),
        (1, 1, [_verdict("unknown")], "unknown"),
        (1, 1, [_verdict("infrastructure", 3)], "no-gpu-job"),
        (1, 1, [_verdict("infrastructure"), _verdict("cancelled", 3)], "retry"),
        (1, 1, [_verdict("cancelled")], "no-gpu-job"),
    ],
)
def test_the_run_level_rule(attempt, retries, verdicts, code):
    decision = infra.retry_decision({"run_attempt": attempt}, verdicts, {2}, retries)
    assert decision.code == code and decision.retry == (code == "retry")
    if attempt == 2:
        assert decision.reason.startswith("a second loss on the retry: attempt 2")


def test_a_sibling_cancelled_by_fail_fast_is_neither_cause_nor_test_failure(served):
    job, _run = served("passed")
    job = {**job, "conclusion": "cancelled", "steps": job["steps"][:2]}
    verdict = infra.classify(job, evidence_of(job, ["The operation was canceled."]))
    assert verdict.kind == "cancelled" and not verdict.infrastructure


OOM_NOTE = (
    "tests/test_model.py::test_train: out of memory (torch.OutOfMemoryError); "
    "still failing after 1 rerun"
)


@pytest.mark.parametrize("how", ["failed", "lost"])
def test_a_gpu_out_of_memory_failure_is_never_infrastructure(served, how):
    """The pytest plugin's annotation of an OOM that stayed: a test failure, even with the
    GPU reported lost or the step interrupted (never retried as the machine's fault)."""
    job, _run = served(how)
    report = monitor_report(NOW, 20 * 60, lost_at=600)
    verdict = infra.classify(job, evidence_of(job, [OOM_NOTE, LOST], report))
    assert verdict.kind == "test"
    assert verdict.reason.startswith("GPU out of memory: tests/test_model.py::test_train")
    assert infra.retry_decision({"run_attempt": 1}, [verdict], {verdict.job_id}, 1).retry is False


def test_the_plugins_message_is_the_one_the_watchdog_reads():
    """The annotation gpu_ci.pytest_plugin writes for an OOM that stayed is evidence; one
    for an OOM that passed on its rerun, or another tool's title, is not."""
    from gpu_ci.pytest_plugin import report

    test = {"nodeid": "t.py::test_a", "oom": "torch.OutOfMemoryError", "oom_reruns": 1}
    stayed = report.rerun_detail({**test, "outcome": "failed"})
    passed = report.rerun_detail({**test, "outcome": "passed"})
    notes = [
        {"message": f"t.py::test_a: {stayed}", "title": "gpu-ci pytest"},
        {"message": f"t.py::test_a: {passed}", "title": "gpu-ci pytest"},
        {"message": f"t.py::test_a: {stayed}", "title": "someone else"},
    ]
    assert [e.code for e in infra.annotation_evidence(notes)] == ["gpu-oom"]


def test_a_test_id_quoting_the_message_is_not_an_oom_that_stayed():
    """Only the annotation's own ending counts: a test id (parametrize ids are the job's)
    that quotes "still failing after 1 rerun", in the annotation of an OOM that passed on its
    rerun or of a leak, is no OOM that stayed (and cannot turn a lost GPU into a test failure)."""
    from gpu_ci.pytest_plugin import report

    nodeid = "t.py::test_a[out of memory (x); still failing after 1 rerun]"
    test = {"nodeid": nodeid, "oom": "torch.OutOfMemoryError", "oom_reruns": 1}
    passed = report.rerun_detail({**test, "outcome": "passed"})
    notes = [
        {"message": f"{nodeid}: {passed}", "title": "gpu-ci pytest"},
        {
            "message": f"{nodeid} left 500 MiB of GPU memory after teardown",
            "title": "gpu-ci pytest",
        },
    ]
    assert infra.annotation_evidence(notes) == []
