"""gpu-status: the commit-status state machine, and the command against the local server."""

from __future__ import annotations

import json

import pytest

from gpu_ci.errors import UsageError
from gpu_ci.github import status as statuses
from testkit.github.approvals import CLOCK, checks_url, post_approval, ts
from testkit.github.runs import played_run, run_event
from testkit.github_server import Job, PullRequest, WorkflowRun
from testkit.shared import webhook

REPO = "Codertocat/Hello-World"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
NOW = CLOCK
CONFIG = statuses.make_config("GPU CI", "CUDA CI", "write", ["tests"])


def ours(description: str, state: str = "pending", context: str = "GPU CI") -> dict:
    return {
        "context": context,
        "state": state,
        "description": description,
        "created_at": ts(35),
        "creator": {"login": "github-actions[bot]"},
    }


def wf_run(event="pull_request", actor="maintainer", head_repo="contributor/Hello-World"):
    return {
        "id": 5,
        "head_sha": HEAD,
        "event": event,
        "html_url": "https://x/actions/runs/5",
        "triggering_actor": {"login": actor},
        "head_repository": {"full_name": head_repo},
        "path": ".github/workflows/cuda-ci.yml",
        "created_at": ts(36),
        "run_attempt": 1,
    }


def job(conclusion="success", name="tests", created=30, started=20):
    return {
        "name": name,
        "status": "completed",
        "conclusion": conclusion,
        "created_at": ts(created),
        "started_at": ts(started),
        "runner_name": "gpu-1",
    }


# -- pull_request_target ----------------------------------------------------------------------


@pytest.mark.parametrize("action", ["opened", "reopened", "synchronize"])
def test_new_heads_wait_for_approval(action):
    out = statuses.for_pull_event(
        CONFIG,
        action,
        webhook(f"pull_request.{action}")
        if action != "reopened"
        else webhook("pull_request.reopened"),
        statuses.GateOutputs(),
        "https://github.com",
        REPO,
    )
    assert out.status is not None
    assert out.status.state == "pending" and out.status.sha == HEAD
    assert "'CUDA CI'" in out.status.description and "write" in out.status.description
    assert out.status.target_url == f"https://github.com/{REPO}/pull/2/checks"
    if action == "synchronize":
        assert out.status.description.startswith("New push (was f95f852bd8fc)")


def labeled(name="CUDA CI"):
    event = webhook("pull_request.labeled")
    event["label"]["name"] = name
    return event


def test_an_approval_names_the_approver_and_a_refusal_the_reason():
    ok = statuses.for_pull_event(
        CONFIG,
        "labeled",
        labeled(),
        statuses.GateOutputs(True, "ok", "octocat"),
        "https://github.com",
        REPO,
    ).status
    assert ok is not None and ok.description == (
        f"Approved by @octocat for {HEAD[:12]}: GPU run queued."
    )
    reason = "the monthly GPU budget of $500 is spent ($512.40 used)"
    no = statuses.for_pull_event(
        CONFIG,
        "labeled",
        labeled(),
        statuses.GateOutputs(False, reason),
        "https://github.com",
        REPO,
    ).status
    assert no is not None and no.state == "pending"
    assert no.description == f"Not approved: {reason}"


def test_other_labels_and_missing_gate_outputs():
    assert (
        statuses.for_pull_event(
            CONFIG, "labeled", labeled("bug"), statuses.GateOutputs(), "", REPO
        ).status
        is None
    )
    with pytest.raises(UsageError, match="gate-run"):
        statuses.for_pull_event(CONFIG, "labeled", labeled(), statuses.GateOutputs(), "", REPO)


def test_descriptions_fit_githubs_140_characters():
    out = statuses.after_gate(CONFIG, HEAD, False, "x " * 200, "")
    assert len(out.description) == 140 and out.description.endswith("…")


@pytest.mark.parametrize(
    "value, fragment",
    [("", "is empty"), ("  ", "is empty"), ("c" * 256, "at most 255"), ("a\nb", "one line")],
)
def test_bad_contexts(value, fragment):
    with pytest.raises(UsageError, match=fragment):
        statuses.validate_context(value)
    assert statuses.validate_context("c" * 255) == "c" * 255


# -- workflow_run -----------------------------------------------------------------------------


APPROVED = [
    dict(ours(f"Approved by @maintainer for {HEAD[:12]}: GPU run queued."), target_url=checks_url())
]


def run_outcome(action, run, jobs, listed):
    return statuses.for_workflow_run(CONFIG, action, run, jobs, listed, REPO, NOW)


def test_a_fork_run_without_approval_posts_nothing():
    """The fork's workflow file decides its jobs' names and conclusions: no approval, no
    result, whatever the run says."""
    out = run_outcome("completed", wf_run(actor="contributor"), [job()], [])
    assert out.status is None and "carries no approval" in out.note
    refused = [ours("Not approved: Approved by @mallory for x")]
    assert run_outcome("completed", wf_run(), [job()], refused).status is None


def test_the_approved_run_links_then_passes_with_its_queue_time():
    started = run_outcome("requested", wf_run(), None, APPROVED).status
    assert started is not None and started.state == "pending"
    assert started.description == "Approved by @maintainer: GPU run in progress."
    assert started.target_url == "https://x/actions/runs/5/attempts/1"
    done = run_outcome("completed", wf_run(), [job(created=30, started=20)], APPROVED).status
    assert done is not None and done.state == "success"
    assert done.description == (
        f"GPU tests passed on {HEAD[:12]} (approved by @maintainer); waited 10 min for a runner."
    )


def test_a_run_by_someone_else_does_not_take_over_the_link():
    assert run_outcome("requested", wf_run(actor="other"), None, APPROVED).status is None


@pytest.mark.parametrize(
    "conclusion, state", [("failure", "failure"), ("timed_out", "failure"), ("cancelled", "error")]
)
def test_failed_and_cancelled_gpu_jobs(conclusion, state):
    jobs = [
        job(name="tests (3.11)"),
        job(conclusion, name="tests (3.12)"),
        job("failure", name="lint"),
    ]
    out = statuses.for_workflow_run(
        CONFIG, "completed", wf_run(), jobs, APPROVED, REPO, NOW, statuses.Asked([])
    ).status
    assert out is not None and out.state == state
    if state == "failure":
        assert "tests (3.12): " + conclusion in out.description


def test_a_run_cancelled_for_a_newer_one_leaves_the_status_to_it():
    jobs = [job("cancelled")]
    assert run_outcome("completed", wf_run(), jobs, APPROVED).need_siblings
    newer = [{"id": 6, "workflow_id": None, "status": "in_progress"}]
    out = statuses.for_workflow_run(
        CONFIG, "completed", wf_run(), jobs, APPROVED, REPO, NOW, statuses.Asked(newer)
    )
    assert out.status is None and "run 6" in out.note


def test_the_watchdogs_status_survives_the_cancelled_run():
    listed = [ours(statuses.WATCHDOG_PREFIX + " in 61 minutes", "error"), *APPROVED]
    assert run_outcome("completed", wf_run(), [job("cancelled")], listed).status is None


def test_an_approved_run_whose_gate_skipped_the_job_fails_the_status():
    first = run_outcome("completed", wf_run(), [job("skipped")], APPROVED)
    assert first.status is None and first.need_siblings
    # another run of the GPU workflow for this commit is still going: it decides
    siblings = [
        {"id": 5, "workflow_id": 9, "status": "completed"},
        {"id": 6, "workflow_id": 9, "status": "in_progress"},
        {"id": 7, "workflow_id": 1, "status": "in_progress"},
    ]
    run = {**wf_run(), "workflow_id": 9}
    waiting = statuses.for_workflow_run(
        CONFIG, "completed", run, [job("skipped")], APPROVED, REPO, NOW, statuses.Asked(siblings)
    )
    assert waiting.status is None and "run 6" in waiting.note
    out = statuses.for_workflow_run(
        CONFIG,
        "completed",
        run,
        [job("skipped")],
        APPROVED,
        REPO,
        NOW,
        statuses.Asked(siblings[::2]),
    ).status
    assert out is not None and out.state == "failure"
    assert "gate skipped the job" in out.description
    # a run for another label, by someone else, changes nothing
    assert (
        run_outcome("completed", wf_run(actor="triager"), [job("skipped")], APPROVED).status is None
    )


def test_push_runs_of_the_repository_itself_post_without_approval():
    out = run_outcome("completed", wf_run("push", head_repo=REPO), [job()], []).status
    assert out is not None and out.state == "success" and "approved" not in out.description


# -- the command ------------------------------------------------------------------------------


@pytest.fixture
def env(github):
    github.add_repo(REPO, roles={"maintainer": "write"})
    github.add_pull(REPO, PullRequest(2, HEAD, head_repo="contributor/Hello-World"))
    return {
        "GITHUB_API_URL": github.url,
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_TOKEN": "t",
        "GITHUB_SERVER_URL": "https://github.com",
    }


def test_cli_posts_the_waiting_status(run_cli, github, env):
    result = run_cli(
        ["gpu-status"], env, event=webhook("pull_request.opened"), event_name="pull_request_target"
    )
    assert result.returncode == 0, result.stdout
    assert [(r.method, r.path) for r in github.log] == [
        ("GET", f"/repos/{REPO}/commits/{HEAD}/statuses"),
        ("POST", f"/repos/{REPO}/statuses/{HEAD}"),
    ]
    (posted,) = github.repos[REPO].statuses[HEAD]
    assert posted["context"] == "GPU CI" and posted["state"] == "pending"
    assert result.outputs["state"] == "pending"


def test_cli_long_refusal_is_clipped_so_github_accepts_it(run_cli, github, env):
    result = run_cli(
        ["gpu-status"],
        {**env, "INPUT_GATE_RUN": "false", "INPUT_GATE_REASON": "budget " * 40},
        event=labeled(),
        event_name="pull_request_target",
    )
    assert result.returncode == 0, result.stdout
    assert len(github.repos[REPO].statuses[HEAD][0]["description"]) == 140


def test_cli_bad_context_exits_2_before_any_call(run_cli, github, env):
    result = run_cli(
        ["gpu-status"],
        {**env, "INPUT_CONTEXT": "x" * 300},
        event=webhook("pull_request.opened"),
        event_name="pull_request_target",
    )
    assert result.returncode == 2
    assert "at most 255" in result.errors[0]
    assert github.log == []


def test_cli_other_events_are_refused(run_cli, env):
    result = run_cli(["gpu-status"], env, event=webhook("push"), event_name="push")
    assert result.returncode == 2 and "workflow_run" in result.errors[0]


def test_cli_completed_run_posts_success_and_writes_queue_times(run_cli, github, env, tmp_path):
    repo = github.repos[REPO]
    post_approval(github, created_at=ts(39), url=checks_url())
    gate, gpu = (ts(40), ts(40), ts(39)), (ts(39), ts(30), ts(5))
    run = played_run(github, gate, gpu, pull_requests=[], actor="maintainer")
    event = run_event(
        run,
        event="pull_request",
        created_at=ts(40),
        triggering_actor={"login": "maintainer"},
        head_repository={"full_name": "contributor/Hello-World"},
    )
    report = tmp_path / "q.json"
    result = run_cli(
        ["gpu-status"],
        {**env, "INPUT_REPORT_FILE": str(report)},
        event=event,
        event_name="workflow_run",
    )
    assert result.returncode == 0, result.stdout
    assert [r.path for r in github.log] == [
        f"/repos/{REPO}/commits/{HEAD}/statuses",
        f"/repos/{REPO}/actions/runs/{run.id}/attempts/1/jobs",
        f"/repos/{REPO}/statuses/{HEAD}",
    ]
    assert repo.statuses[HEAD][0]["state"] == "success"
    assert result.outputs["queued-seconds"] == "540"
    data = json.loads(report.read_text())
    assert data["schema"] == "gpu-ci/queue-times/v1" and data["source"] == "gpu-status"
    assert [(j["name"], j["queued_seconds"]) for j in data["jobs"]] == [("tests", 540.0)]


def test_cli_skipped_approved_run_checks_the_other_runs_first(run_cli, github, env):
    repo = github.repos[REPO]
    post_approval(github, created_at=ts(39), url=checks_url())
    skipped = WorkflowRun(
        github.next_id(), "CUDA CI", ".github/workflows/cuda-ci.yml", HEAD, actor="maintainer"
    )
    skipped.jobs = [
        Job(github.next_id(), "gate", ["ubuntu-latest"], created_at=ts(3)),
        Job(
            github.next_id(),
            "tests",
            ["gpu"],
            status="completed",
            conclusion="skipped",
            created_at=ts(2),
        ),
    ]
    other = WorkflowRun(
        github.next_id(), "CUDA CI", ".github/workflows/cuda-ci.yml", HEAD, status="in_progress"
    )
    github.add_run(REPO, skipped)
    github.add_run(REPO, other)
    github.start_job(skipped.jobs[0].id, ts(3))
    github.complete_job(skipped.jobs[0].id, ts(2))
    event = webhook("workflow_run.completed.with-pull-requests")
    event["workflow_run"].update(
        id=skipped.id,
        head_sha=HEAD,
        event="pull_request",
        workflow_id=skipped.workflow_id,
        path=skipped.path,
        created_at=ts(40),
        triggering_actor={"login": "maintainer"},
        head_repository={"full_name": "contributor/Hello-World"},
    )
    result = run_cli(["gpu-status"], env, event=event, event_name="workflow_run")
    assert result.returncode == 0, result.stdout
    assert github.requests("POST") == []
    assert f"run {other.id} of the same workflow" in result.outputs["description"]
    other.status = "completed"
    result = run_cli(["gpu-status"], env, event=event, event_name="workflow_run")
    assert repo.statuses[HEAD][0]["state"] == "failure"
    assert len(github.log) == 7  # each time: statuses, jobs, runs for the sha; then the POST


def test_cli_a_read_only_token_explains_the_three_workflows(run_cli, github, env):
    github.read_only_tokens.add("t")
    result = run_cli(
        ["gpu-status"], env, event=webhook("pull_request.opened"), event_name="pull_request"
    )
    assert result.returncode == 1
    assert "HTTP 403" in result.errors[0] and "pull_request_target" in result.errors[0]
    assert github.repos[REPO].statuses == {}


# -- review (attacks on the merged status) ----------------------------------------------------


def test_the_contributors_own_run_ending_after_the_approval_posts_nothing():
    """Fork pushes X; its own run of X (the fork's workflow file, triggered by the fork's
    author) is still going when a maintainer approves X; it ends with a passing 'tests' job:
    only the run the approval started may turn the status green."""
    out = run_outcome("completed", wf_run(actor="contributor"), [job()], APPROVED)
    assert out.status is None and "not by the approver" in out.note
    failed = run_outcome("completed", wf_run(actor="contributor"), [job("failure")], APPROVED)
    assert failed.status is None


def test_pushing_an_approved_commit_again_revokes_its_approval():
    """Approve X, push Y, force-push X back: X shows 'waiting' again, and the old approval
    (still listed below it) no longer lets a run post a result for X."""
    again = statuses.waiting(CONFIG, HEAD, "synchronize", "a" * 40)
    listed = [ours(again.description), *APPROVED]
    assert statuses.approval_of(listed, "GPU CI") == ""
    assert run_outcome("completed", wf_run(), [job()], listed).status is None
    reopened = statuses.waiting(CONFIG, HEAD, "reopened")
    assert statuses.approval_of([ours(reopened.description), *APPROVED], "GPU CI") == ""
    plain = statuses.waiting(CONFIG, HEAD, "synchronize")
    assert statuses.approval_of([ours(plain.description), *APPROVED], "GPU CI") == ""
    # approving again after the push counts
    assert statuses.approval_of([*APPROVED, ours(again.description)], "GPU CI") == "maintainer"


@pytest.mark.parametrize("head_repo", ["", REPO])
def test_a_pull_request_run_needs_an_approval_even_without_a_fork(head_repo):
    """A pull request's run is never 'trusted', even when its head repository is this one (a
    branch pushed here) or unknown (the fork was deleted: head_repository is null)."""
    out = run_outcome("completed", wf_run(actor="contributor", head_repo=head_repo), [job()], [])
    assert out.status is None and "carries no approval" in out.note


@pytest.mark.parametrize("action", ["opened", "reopened", "synchronize"])
def test_a_new_pull_request_at_a_tested_commit_does_not_reset_its_result(action):
    """Anyone can open a pull request from a fork at another pull request's head: 'waiting'
    posted on that commit would turn its passed GPU CI pending again (a denial of service
    repeatable at will). A final result of exactly this commit stays."""
    payload = {
        "action": action,
        "before": "b" * 40,
        "pull_request": {"number": 9, "state": "open", "head": {"sha": HEAD}},
    }
    passed = [
        ours(f"GPU tests passed on {HEAD[:12]} (approved by @maintainer).", "success"),
        *APPROVED,
    ]
    out = statuses.for_pull_event(
        CONFIG, action, payload, statuses.GateOutputs(), "https://x", REPO, passed
    )
    assert out.status is None and "already has a final" in out.note
    # still running: the new head waits (and revokes the approval of the unfinished run)
    unlinked = [ours(f"Approved by @maintainer for {HEAD[:12]}: GPU run queued.")]
    out = statuses.for_pull_event(
        CONFIG, action, payload, statuses.GateOutputs(), "https://x", REPO, unlinked
    )
    assert out.status is not None and out.status.description.startswith(("Waiting", "New"))
