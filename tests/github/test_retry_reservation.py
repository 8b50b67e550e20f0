"""gpu-watchdog's retry reserves budget for every GPU job it queues again.

When a lost GPU job ran on a gpu-cloud-runner VM, gpu-watchdog re-runs the *whole* run
(``rerun``: the start jobs must launch new VMs), so every GPU job of the run runs again, the
ones that passed included, each on a VM of its own. "Re-run failed jobs" runs the failed
jobs and the jobs that depend on them (skipped after the failure). The budget guard must
reserve for all of them, not only for the failed GPU jobs: an approved run of four
cloud-runner matrix legs, one of which prints the "shutdown signal" annotation (the job's
own evidence buys one re-run), must not get four GPU jobs queued again under a reservation
for one. Against the test GitHub server, as tests/github/test_retry_cloud.py drives the
sweep.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from gpu_ci.github import watchdog
from gpu_ci.github.client import connect
from gpu_ci.github.jobs import GpuMatcher
from gpu_ci.github.spend import budget
from gpu_ci.pricing import load_table
from testkit.github.approvals import approved_pull, checks_url
from testkit.github.infra_jobs import REPO, failed_run, iso
from testkit.github.runs import retry_config
from testkit.github_server import Job

HEAD = "a" * 40


def _label(leg: int) -> str:
    return f"gpu-ci-8812345678-1-1796538608-f2c8c756a201ac6{leg}-gpu-{leg}"


def _guard(amount: str, now: datetime) -> watchdog.RetryBudget:
    table = load_table()
    written = budget.BudgetInputs(amount, "", "60", "refuse", "repository", ["cuda-ci.yml"], "")
    cfg = budget.make_budget_config(written, table, now.date())
    assert cfg is not None
    return watchdog.RetryBudget(cfg, GpuMatcher(frozenset({"gpu"})), table)


def test_a_whole_run_re_run_reserves_for_every_gpu_job_it_queues_again(github):
    """Three legs passed, one forged a lost runner: four VMs relaunch under one reservation."""
    now = datetime.now(timezone.utc).replace(microsecond=0)
    approved_pull(github, REPO, HEAD, url=checks_url(2, REPO))
    start = now - timedelta(hours=2)
    run = failed_run(github, start, labels=(_label(0),))
    for leg in (1, 2, 3):  # the matrix legs that passed, each on its own VM
        run.jobs.append(
            Job(
                github.next_id(),
                f"gpu-tests ({leg})",
                [_label(leg)],
                status="completed",
                conclusion="success",
                created_at=iso(start),
                started_at=iso(start),
                completed_at=iso(start + timedelta(minutes=30)),
                runner_name=f"gpu-ci-vm-{leg}",
            )
        )
    rest = connect("watchdog-token", {"GITHUB_API_URL": github.url}, lambda _s: None)
    # room for one GPU job's reservation (60 min), not for four
    result = watchdog.sweep(
        rest, REPO, retry_config(), now, "https://github.com", _guard("100 minutes", now)
    )
    queued_again = [
        j for j in run.jobs if j.run_attempt == 2 and j.labels and j.labels[0].startswith("gpu-ci-")
    ]
    assert result.reserved_minutes >= 60 * len(queued_again), (
        f"{len(queued_again)} GPU jobs queued again under {result.reserved_minutes} reserved min"
    )


def test_re_running_failed_jobs_reserves_for_their_skipped_gpu_dependents(github):
    """A GPU job skipped after the lost one runs again too: two reservations."""
    now = datetime.now(timezone.utc).replace(microsecond=0)
    approved_pull(github, REPO, HEAD, url=checks_url(2, REPO))
    start = now - timedelta(hours=2)
    run = failed_run(github, start)
    for name, conclusion in (("gpu-report", "skipped"), ("gpu-other", "success")):
        run.jobs.append(
            Job(
                github.next_id(),
                name,
                ["self-hosted", "gpu"],
                status="completed",
                conclusion=conclusion,
                created_at=iso(start),
                started_at=iso(start),
                completed_at=iso(start + timedelta(minutes=30)),
            )
        )
    rest = connect("watchdog-token", {"GITHUB_API_URL": github.url}, lambda _s: None)
    result = watchdog.sweep(
        rest, REPO, retry_config(), now, "https://github.com", _guard("100000 minutes", now)
    )
    assert [r.action for r in result.retries] == ["retried"]
    assert github.requests("POST", "/rerun-failed-jobs")
    # the lost job and its skipped dependent, not the GPU job that passed
    assert result.reserved_minutes == 2 * 60
