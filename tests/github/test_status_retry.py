"""Issue 32: the result of gpu-watchdog's retry replaces its "retried" status (rule 7 of
``gpu_ci.github.status``), and no other re-run's result does.

The pure rules first, then the watchdog's real re-run against the test server followed by
``gpu-ci gpu-status`` on attempt 2's ``completed`` event, so the watchdog's wording and the
status's rule are tested together."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from gpu_ci.github import status as statuses
from gpu_ci.github import watchdog
from gpu_ci.github.client import connect
from testkit.github.approvals import (
    CLOCK,
    checks_url,
    post_approval,
    pr_run,
    queued,
    running,
    status,
    ts,
)
from testkit.github.infra_jobs import REPO, failed_run, iso
from testkit.github.runs import retry_config
from testkit.shared import webhook

HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
NOW = CLOCK
CONFIG = statuses.make_config("GPU CI", "CUDA CI", "write", ["tests"])
RUNS = f"https://github.com/{REPO}/actions/runs"
BOT = "github-actions[bot]"


def ours(description: str, state: str = "pending", url: str = "", at: float = 0, by=BOT):
    return status(description, state, url=url, created_at=ts(at), creator=by)


APPROVAL = ours(queued(), url=checks_url(repo=REPO), at=50)
IN_PROGRESS = ours(running(), url=f"{RUNS}/5/attempts/1")
LOST = ours(
    f"GPU tests failed on {HEAD[:12]} (approved by @maintainer): tests: failure.",
    "failure",
    f"{RUNS}/5/attempts/1",
    at=20,
)


def retried(run_id: int = 5, attempt: int = 2, by: str = BOT) -> dict:
    return ours(
        f"GPU run retried after the runner was lost (attempt {attempt}); attempt "
        f"{attempt - 1}: the job ended while step 3 was still running",
        url=f"{RUNS}/{run_id}/attempts/{attempt}",
        at=10,
        by=by,
    )


def run(attempt: int = 2, trigger: str = BOT, actor: str = "maintainer", run_id: int = 5):
    return pr_run(run_id, actor=actor, trigger=trigger, started=9, attempt=attempt, repo=REPO)


def done(
    wf_run: dict, listed: list, action: str = "completed", rerun: tuple | None = None
) -> statuses.Outcome:
    job = {
        "name": "tests",
        "status": "completed",
        "conclusion": "success",
        "created_at": ts(9),
        "started_at": ts(8),
        "runner_name": "gpu-2",
    }
    return statuses.for_workflow_run(
        CONFIG, action, wf_run, [job], listed, REPO, NOW, statuses.Asked([], rerun)
    )


def done_rerun(wf_run: dict, listed: list, facts: tuple, action: str = "completed"):
    """gpu-status's second reading, with GitHub's pull request and permission answers."""
    return done(wf_run, listed, action, facts)


def test_the_watchdogs_retry_posts_its_result_over_the_retried_status():
    listed = [retried(), LOST, IN_PROGRESS, APPROVAL]
    out = done(run(), listed).status
    assert out is not None and out.state == "success"
    assert out.target_url == f"{RUNS}/5/attempts/2"
    assert out.description.startswith(f"GPU tests passed on {HEAD[:12]} (approved by @maintainer)")
    # requested / in_progress of attempt 2 leave the retry record (it says what happened)
    for action in ("requested", "in_progress"):
        assert done(run(), listed, action).status is None
    # attempt 1's late `completed`, handled after the retry, leaves it too
    assert done(run(attempt=1, trigger="maintainer"), listed).status is None


def test_a_bots_re_run_nobody_retried_posts_nothing():
    """gpu-watchdog's account re-running without its retry record (any workflow with
    ``actions: write`` can): it reuses the gate's old decision unchecked."""
    out = done(run(trigger=BOT), [LOST, IN_PROGRESS, APPROVAL])
    assert out.status is None and "no re-run gpu-watchdog recorded" in out.note
    assert out.rerun_of is None


OPEN = {"number": 2, "state": "open", "head": {"sha": HEAD}}
WRITE = {"permission": "write", "role_name": "write"}
READ = {"permission": "read", "role_name": "read"}


def test_a_maintainers_re_run_asks_github_then_posts_its_result():
    """Someone with the role presses "Re-run" on the approval's run: it is that approval's
    run again, as the admission hook admits it (one rule: approval.rerun_refusal)."""
    listed = [LOST, IN_PROGRESS, APPROVAL]
    asked = done(run(trigger="maint2"), listed)
    assert asked.status is None and asked.rerun_of == ("maint2", 2)
    out = done_rerun(run(trigger="maint2"), listed, (OPEN, WRITE))
    assert out.status is not None and out.status.state == "success", out.note
    assert out.status.target_url == f"{RUNS}/5/attempts/2"
    assert "(approved by @maintainer)" in out.status.description
    # its start is recorded over attempt 1's result, and its result over that record
    started = done_rerun(run(trigger="maint2"), listed, (OPEN, WRITE), "requested").status
    assert started is not None and started.state == "pending"
    assert started.target_url == f"{RUNS}/5/attempts/2"
    record = ours(started.description, url=started.target_url, at=5)
    out = done_rerun(run(trigger="maint2"), [record, *listed], (OPEN, WRITE))
    assert out.status is not None and out.status.state == "success"
    # the approver's own re-run counts the same way
    out = done_rerun(run(trigger="maintainer"), listed, (OPEN, WRITE))
    assert out.status is not None and out.status.state == "success"


def test_a_re_run_without_the_role_or_of_a_closed_or_moved_pull_request_posts_nothing():
    listed = [LOST, IN_PROGRESS, APPROVAL]
    out = done_rerun(run(trigger="contributor"), listed, (OPEN, READ))
    assert out.status is None
    assert "started by @contributor (read); a re-run needs write" in out.note
    closed = dict(OPEN, state="closed")
    out = done_rerun(run(trigger="maint2"), listed, (closed, WRITE))
    assert out.status is None and "#2 is closed" in out.note
    moved = dict(OPEN, head={"sha": "b" * 40})
    out = done_rerun(run(trigger="maint2"), listed, (moved, WRITE))
    assert out.status is None and f"the approval was of {HEAD[:12]}" in out.note


def test_a_re_run_after_a_push_or_the_end_of_the_approval_or_of_another_run_posts_nothing():
    pushed = ours(f"New push (was {'b' * 12}): waiting for approval; ...", at=5)
    ended = ours("Approval ended: #2 was closed. A pull request at this commit needs ...", at=5)
    for top in (pushed, ended):
        out = done(run(trigger="maint2"), [top, LOST, IN_PROGRESS, APPROVAL])
        assert out.status is None and out.rerun_of is None and "no approval" in out.note
    # run 6 is not the run the approval started (run 5 is recorded above it)
    other = run(trigger="maint2", run_id=6)
    out = done_rerun(other, [LOST, IN_PROGRESS, APPROVAL], (OPEN, WRITE))
    assert out.status is None and "the approval started run 5" in out.note
    # a run the approver did not start first is no re-run of the approval's run
    out = done(run(trigger="maint2", actor="contributor"), [LOST, IN_PROGRESS, APPROVAL])
    assert out.status is None and out.rerun_of is None
    # attempt 2's late result does not replace attempt 3's
    third = ours("GPU tests passed on ...", "success", f"{RUNS}/5/attempts/3", at=1)
    out = done_rerun(run(trigger="maint2"), [third, LOST, IN_PROGRESS, APPROVAL], (OPEN, WRITE))
    assert out.status is None and "stays" in out.note


def test_a_retry_record_binds_only_its_own_run_attempt_and_writer():
    # another attempt of the run, another run, a record planted by another status writer
    assert done(run(attempt=3), [retried(), LOST, IN_PROGRESS, APPROVAL]).status is None
    assert done(run(), [retried(run_id=6), LOST, IN_PROGRESS, APPROVAL]).status is None
    planted = [retried(by="some-ci-app[bot]"), LOST, IN_PROGRESS, APPROVAL]
    assert done(run(), planted).status is None
    # the record names the attempt, but someone else than the watchdog's account re-ran it
    out = done(run(trigger="maintainer"), [retried(), LOST, IN_PROGRESS, APPROVAL])
    assert out.status is None and "not by gpu-watchdog's account" in out.note
    # the run itself must still be the approval's: its first actor is the approver
    assert done(run(actor="contributor"), [retried(), LOST, IN_PROGRESS, APPROVAL]).status is None


def test_a_retry_below_a_newer_approval_or_push_does_not_bind():
    newer = ours(
        f"Approved by @maintainer for {HEAD[:12]}: GPU run queued.",
        url=checks_url(2, REPO),
        at=5,
    )
    assert done(run(), [newer, retried(), LOST, IN_PROGRESS, APPROVAL]).status is None
    pushed = ours(f"New push (was {'b' * 12}): waiting for approval; ...", at=5)
    assert done(run(), [pushed, retried(), LOST, IN_PROGRESS, APPROVAL]).status is None
    # and once attempt 2's result is posted, nothing of attempt 2 replaces it again
    passed = ours("GPU tests passed on ...", "success", f"{RUNS}/5/attempts/2", at=1)
    assert done(run(), [passed, retried(), LOST, IN_PROGRESS, APPROVAL]).status is None


def _status_on_completed(github, run_cli, repo, run):
    """gpu-status's CLI on ``run``'s ``workflow_run.completed``, against the test server."""
    event = webhook("workflow_run.completed.with-pull-requests")
    event["workflow_run"] = github.run_json(repo, run)
    env = {
        "GITHUB_API_URL": github.url,
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_TOKEN": "t",
        "GITHUB_SERVER_URL": "https://github.com",
        "INPUT_GPU_JOBS": "gpu-tests",
    }
    result = run_cli(["gpu-status"], env, event=event, event_name="workflow_run")
    assert result.returncode == 0, result.stdout
    return result


def test_cli_the_watchdogs_real_retry_then_gpu_status_on_attempt_2(github, run_cli):
    """The watchdog re-runs a lost run on the test server and writes its status; attempt 2
    passes; gpu-status, handling attempt 2's `completed`, replaces "retried" by "passed"."""
    from testkit.github_server import PullRequest

    sha = "a" * 40
    github.add_repo(REPO)
    github.add_pull(REPO, PullRequest(2, sha))
    now = datetime.now(timezone.utc).replace(microsecond=0)
    start = now - timedelta(hours=2)
    lost = failed_run(github, start)
    lost.actor = "maintainer"  # the labeller's pull_request run
    repo = github.repos[REPO]
    approval = post_approval(github, repo=REPO, sha=sha, url=checks_url(repo=REPO))
    approval["created_at"] = approval["updated_at"] = iso(start + timedelta(minutes=2))
    rest = connect("watchdog-token", {"GITHUB_API_URL": github.url}, lambda _s: None)
    config = retry_config()
    assert watchdog.sweep(rest, REPO, config, now).retried == [lost.id]
    assert repo.statuses[sha][0]["description"].startswith(statuses.RETRIED_PREFIX)
    # GitHub records who re-ran it as the triggering actor (the token's user; actor stays)
    served = github.run_json(repo, lost)
    assert served["triggering_actor"]["login"] == BOT and served["actor"]["login"] == "maintainer"
    for job in lost.jobs:
        if job.run_attempt == 2 and job.status != "completed":
            job.status, job.conclusion, job.runner_name = "completed", "success", "gpu-spot-8"
            job.started_at, job.completed_at = iso(now - timedelta(minutes=9)), iso(now)
    lost.status, lost.conclusion = "completed", "success"
    result = _status_on_completed(github, run_cli, repo, lost)
    top = repo.statuses[sha][0]
    assert top["state"] == "success", result.stdout
    assert top["target_url"] == f"https://github.com/{REPO}/actions/runs/{lost.id}/attempts/2"
    assert [s["state"] for s in repo.statuses[sha]] == ["success", "pending", "pending"]


@pytest.mark.parametrize(
    ("who", "role", "posted"), [("maint2", "write", True), ("fork", "read", False)]
)
def test_cli_a_re_run_by_hand_reads_the_pull_request_and_the_role(
    github, run_cli, who, role, posted
):
    """gpu-status on attempt 2's ``completed``, against the test server: it asks GitHub for
    the approved pull request and the re-runner's role, then posts (or not) over attempt 1."""
    from testkit.github_server import PullRequest

    sha = "a" * 40
    github.add_repo(REPO, roles={"maintainer": "write", who: role})
    github.add_pull(REPO, PullRequest(2, sha))
    now = datetime.now(timezone.utc).replace(microsecond=0)
    lost = failed_run(github, now - timedelta(hours=2))
    lost.actor, lost.run_attempt, lost.triggering_actor = "maintainer", 2, who
    lost.status, lost.conclusion = "completed", "success"
    repo = github.repos[REPO]
    approval = post_approval(github, repo=REPO, sha=sha, url=checks_url(repo=REPO))
    approval["created_at"] = iso(now - timedelta(hours=2) + timedelta(minutes=2))
    record = {"state": "failure", "description": "GPU tests failed on aaaaaaaaaaaa: tests."}
    link = f"https://github.com/{REPO}/actions/runs/{lost.id}/attempts/1"
    repo.statuses[sha].insert(
        0, github.status_json(repo, sha, dict(record, context="GPU CI", target_url=link), BOT)
    )
    for job in lost.jobs:
        job.run_attempt = 2
        job.status, job.conclusion = "completed", "success"
        job.started_at, job.completed_at = iso(now - timedelta(minutes=9)), iso(now)
    result = _status_on_completed(github, run_cli, repo, lost)
    assert github.requests("GET", f"/repos/{REPO}/pulls/2")
    assert github.requests("GET", f"/collaborators/{who}/permission")
    top = repo.statuses[sha][0]
    if posted:
        assert top["state"] == "success", result.stdout
        assert top["target_url"] == link.replace("/attempts/1", "/attempts/2")
    else:
        assert top["target_url"] == link and "re-run needs write" in result.stdout
