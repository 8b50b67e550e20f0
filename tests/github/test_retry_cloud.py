"""gpu-watchdog re-runs the whole run when the lost GPU job ran on a cloud runner.

"Re-run failed jobs" leaves the start job, which succeeded, as it was: the GPU job would
wait for a runner nobody starts. So the watchdog asks for ``rerun``: every job queued again,
the start job included, which launches a new VM (on-demand: a later attempt's choice).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from gpu_ci.github import watchdog
from gpu_ci.github.client import connect
from testkit.github.approvals import checks_url
from testkit.github.infra_jobs import REPO, failed_run
from testkit.github.runs import retry_config
from testkit.github_server import PullRequest

HEAD = "a" * 40
LABEL = "gpu-ci-8812345678-1-1796538608-f2c8c756a201ac6e-gpu"


def _approved(github):
    github.add_repo(REPO)
    github.add_pull(REPO, PullRequest(2, HEAD))
    repo = github.repos[REPO]
    body = {
        "context": "GPU CI",
        "state": "pending",
        "description": f"Approved by @maintainer for {HEAD[:12]}: GPU run queued.",
        "target_url": checks_url(2, REPO),
    }
    repo.statuses[HEAD] = [github.status_json(repo, HEAD, body, "github-actions[bot]")]


def _sweep(github) -> watchdog.Sweep:
    rest = connect("watchdog-token", {"GITHUB_API_URL": github.url}, lambda _s: None)
    now = datetime.now(timezone.utc).replace(microsecond=0)
    return watchdog.sweep(rest, REPO, retry_config(), now, "https://github.com", None)


def test_a_lost_cloud_runner_job_re_runs_every_job(github):
    _approved(github)
    start = datetime.now(timezone.utc) - timedelta(hours=2)
    run = failed_run(github, start, labels=(LABEL,))
    result = _sweep(github)
    assert result.retried == [run.id] and run.run_attempt == 2
    posts = [r.path for r in github.requests("POST")]
    assert f"/repos/{REPO}/actions/runs/{run.id}/rerun" in posts
    assert not any(p.endswith("/rerun-failed-jobs") for p in posts)
    again = [j for j in run.jobs if j.run_attempt == 2]
    assert again and all(j.status == "queued" for j in again)  # the gate/start job too
    assert github.contract_violations == []


def test_a_lost_self_hosted_job_still_re_runs_only_the_failed_jobs(github):
    _approved(github)
    run = failed_run(github, datetime.now(timezone.utc) - timedelta(hours=2))
    _sweep(github)
    posts = [r.path for r in github.requests("POST")]
    assert f"/repos/{REPO}/actions/runs/{run.id}/rerun-failed-jobs" in posts
    carried = [j for j in run.jobs if j.run_attempt == 2 and j.status == "completed"]
    assert [j.name for j in carried] == ["gate"]
