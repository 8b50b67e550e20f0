"""gpu-watchdog re-runs only the approval's own run (issue 32 against a fork author and the
comment path): attacks on the retry's head check, against the test server."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from gpu_ci.github import watchdog
from gpu_ci.github.client import connect
from testkit.github.approvals import approved_pull, checks_url
from testkit.github.infra_jobs import REPO, failed_run
from testkit.github.runs import retry_config

HEAD = "a" * 40


def now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


@pytest.fixture
def gh(github):
    """Pull request #2 at HEAD, approved by @maintainer (gpu-status's wording and writer)."""
    approved_pull(github, REPO, HEAD, url=checks_url(2, REPO))
    return github


def sweep(github, creators: tuple[str, ...] = ()) -> watchdog.Sweep:
    config = retry_config(creators=creators)
    rest = connect("watchdog-token", {"GITHUB_API_URL": github.url}, lambda _s: None)
    return watchdog.sweep(rest, REPO, config, now(), "https://github.com")


def test_a_comment_run_is_not_re_run_and_gets_no_status_on_the_default_branch(gh):
    """Attack: a comment approval's run (issue_comment) runs from the default branch, so its
    ``head_sha`` is that branch's commit, not the approved one. Re-running it checked no
    head at all (it passed as a trusted event) and posted "retried" on the default branch's
    commit. The watchdog cannot tell that run's approved head: it is not re-run, and says so."""
    main = "c" * 40
    run = failed_run(gh, now() - timedelta(hours=2), event="issue_comment", head_sha=main, pr=None)
    (record,) = sweep(gh).retries
    assert record.action == "not-retried" and record.code == "stale-head"
    assert "issue_comment" in record.reason and "approve again" in record.reason
    assert run.run_attempt == 1 and gh.requests("POST") == []
    assert main not in gh.repos[REPO].statuses


def test_a_run_of_the_approved_head_that_the_approver_did_not_start_is_not_re_run(gh):
    """Attack (fork author): the head is approved, so the fork's own ``pull_request`` run of
    its edited workflow may use GPU runners too (admission checks the commit, not the run).
    Its GPU job "loses" its runner (the job's code kills the runner). Re-running it spent
    GPU budget on the fork's workflow and put "GPU run retried" over the approved run's
    result, a pending that nothing would ever resolve (gpu-status binds only the approver's
    run). Only the approval's run, started by the approver, is re-run."""
    run = failed_run(gh, now() - timedelta(hours=2))
    run.actor = run.triggering_actor = "contributor"
    (record,) = sweep(gh).retries
    assert record.action == "not-retried" and record.code == "stale-head"
    assert "started by @contributor, not by the approver @maintainer" in record.reason
    assert run.run_attempt == 1 and gh.requests("POST") == []


def test_the_retry_believes_the_approvals_of_the_configured_trusted_creators(gh):
    """gpu-status posts with an App token as ``my-app[bot]`` (its ``trusted-creators``): the
    watchdog's head check read approvals with the default writer only, so it never retried
    (safe, but the feature did nothing). It takes the same input; an approval from any
    other writer is still not believed."""
    repo = gh.repos[REPO]
    (approval,) = repo.statuses[HEAD]
    repo.statuses[HEAD] = [{**approval, "creator": gh.user_json("my-app[bot]")}]
    run = failed_run(gh, now() - timedelta(hours=2))
    (refused,) = sweep(gh).retries
    assert refused.code == "stale-head" and "no current approval" in refused.reason
    assert run.run_attempt == 1
    assert sweep(gh, creators=("my-app[bot]",)).retried == [run.id]
    assert run.run_attempt == 2
