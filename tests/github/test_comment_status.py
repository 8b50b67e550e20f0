"""The "GPU CI" status for a trusted author's head: approved from the gate's decision on the
new head (in the privileged pull_request_target workflow), then bound to the author's own
pull_request run as a label's approval is bound to the labeller's."""

from __future__ import annotations

from gpu_ci.github import status as statuses
from testkit.github.approvals import CLOCK, checks_url, pr_run, ts
from testkit.shared import webhook

REPO = "Codertocat/Hello-World"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
NOW = CLOCK
CONFIG = statuses.make_config("GPU CI", "CUDA CI", "write", ["tests"])


def push(action="synchronize"):
    payload = webhook("pull_request.synchronize")
    payload["action"] = action
    payload["pull_request"]["head"]["sha"] = HEAD
    payload["pull_request"]["number"] = 2
    payload["pull_request"]["state"] = "open"
    return payload


def event(gate_run, action="synchronize", listed=()):
    return statuses.for_pull_event(
        CONFIG,
        action,
        push(action),
        statuses.GateOutputs(
            gate_run,
            "alice (maintain) is a trusted author and the head ...",
            "alice" if gate_run else "",
        ),
        "https://github.com",
        REPO,
        list(listed),
    )


def test_a_trusted_authors_head_is_approved_in_their_name_and_others_wait():
    for action in ("opened", "synchronize", "reopened", "ready_for_review"):
        out = event(True, action).status
        assert out is not None and out.state == "pending"
        assert out.description == f"Approved by @alice for {HEAD[:12]}: GPU run queued."
        assert out.target_url == checks_url(2, REPO)
    for refused in (False, None):  # an untrusted push, or no gate in the status job
        out = event(refused).status
        assert out is not None and "waiting for approval" in out.description.lower()


def test_the_trusted_authors_run_binds_to_that_approval_and_posts_its_result():
    approved = event(True).status
    assert approved is not None
    listed = [
        {
            "context": "GPU CI",
            "state": approved.state,
            "description": approved.description,
            "target_url": approved.target_url,
            "created_at": ts(50),
            "creator": {"login": "github-actions[bot]"},
        }
    ]

    def run(actor):
        return pr_run(actor=actor, head_repo="alice/Hello-World")

    job = {
        "name": "tests",
        "status": "completed",
        "conclusion": "success",
        "created_at": ts(40),
        "started_at": ts(30),
        "runner_name": "gpu-1",
    }
    out = statuses.for_workflow_run(
        CONFIG, "completed", run("alice"), [job], listed, REPO, NOW, statuses.Asked([])
    ).status
    assert out is not None and out.state == "success"
    # someone else's run of that head (a fork collaborator who pushed) is not the approval's
    other = statuses.for_workflow_run(
        CONFIG, "completed", run("mallory"), [job], listed, REPO, NOW, statuses.Asked([])
    )
    assert other.status is None


def test_cli_the_privileged_status_job_approves_a_trusted_authors_push(run_cli, github):
    """As in cuda-ci-remove-label.yml's status job with trusted-authors set in its gate (and
    the gate step run on new heads too): gpu-gate, then gpu-status with its outputs."""
    from testkit.github_server import Commit, PullRequest

    github.add_repo(REPO, roles={"alice": "maintain"})
    github.add_pull(REPO, PullRequest(2, HEAD, user="alice", head_repo="alice/Hello-World"))
    github.repos[REPO].commits[HEAD] = Commit(HEAD, author="alice", committer="alice")
    payload = push()
    payload["pull_request"]["user"]["login"] = "alice"
    env = {
        "GITHUB_API_URL": github.url,
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_TOKEN": "t",
        "GITHUB_SERVER_URL": "https://github.com",
    }
    gate = run_cli(
        ["gpu-gate", "--trusted-authors", "write", "--gpu-runs-on", "gpu"],
        env,
        event=payload,
        event_name="pull_request_target",
    )
    assert gate.returncode == 0, gate.stdout
    assert (gate.outputs["run"], gate.outputs["labeled-by"]) == ("true", "alice")
    status = run_cli(
        ["gpu-status"],
        {
            **env,
            "INPUT_GATE_RUN": gate.outputs["run"],
            "INPUT_GATE_REASON": gate.outputs["reason"],
            "INPUT_LABELED_BY": gate.outputs["labeled-by"],
        },
        event=payload,
        event_name="pull_request_target",
    )
    assert status.returncode == 0, status.stdout
    (posted,) = github.repos[REPO].statuses[HEAD]
    assert posted["description"] == f"Approved by @alice for {HEAD[:12]}: GPU run queued."


# -- a comment approval (issue 31 item 5): the comment workflow's status and result jobs -----

RUNS = f"https://github.com/{REPO}/actions/runs"
THIS_RUN = f"{RUNS}/77/attempts/1"


def listed_status(status, minutes_ago: float = 10, by: str = "github-actions[bot]") -> dict:
    return {
        "context": "GPU CI",
        "state": status.state,
        "description": status.description,
        "target_url": status.target_url,
        "created_at": ts(minutes_ago),
        "creator": {"login": by},
    }


def record(link: str = THIS_RUN, sha: str = HEAD, by: str = "maint") -> statuses.Status:
    out = statuses.comment_approved(CONFIG, sha, 2, True, by, link).status
    assert out is not None
    return out


def test_a_comment_approval_posts_its_record_and_its_run_posts_the_result_over_it():
    mine = record()
    assert mine.state == "pending" and mine.sha == HEAD and mine.target_url == THIS_RUN
    assert mine.description == (
        f"Approved by @maint on #2 for {HEAD[:12]} by comment: GPU run in progress."
    )
    assert statuses.comment_approved(CONFIG, HEAD, 2, False, "", THIS_RUN).status is None
    listed = [listed_status(mine)]
    expected = {
        "success": ("success", "GPU tests passed"),
        "failure": ("failure", "GPU tests failed"),
        "cancelled": ("error", "GPU run cancelled"),
        "skipped": ("failure", "the GPU job was skipped"),
    }
    for result, (state, words) in expected.items():
        out = statuses.comment_result(CONFIG, HEAD, result, THIS_RUN, listed).status
        assert out is not None and (out.state, out.sha, out.target_url) == (state, HEAD, THIS_RUN)
        assert words in out.description and "@maint" in out.description


def test_a_comment_runs_result_posts_only_over_its_own_record():
    """A second comment (another run's record on top), a label approval, a push, this run's
    other attempt, another commit's record, a record planted by another writer: the result
    of this run does not replace any of them."""
    later = listed_status(record(f"{RUNS}/78/attempts/1", by="other-maint"), 1)
    label = {
        **listed_status(statuses.after_gate(CONFIG, HEAD, True, "", "maint"), 1),
        "target_url": checks_url(2, REPO),
    }
    push = listed_status(statuses.waiting(CONFIG, HEAD, "synchronize", "b" * 40), 1)
    own = listed_status(record())
    for top in (later, label, push):
        assert statuses.comment_result(CONFIG, HEAD, "success", THIS_RUN, [top, own]).status is None
    retry = f"{RUNS}/77/attempts/2"
    assert statuses.comment_result(CONFIG, HEAD, "success", retry, [own]).status is None
    other_sha = listed_status(record(sha="b" * 40))
    assert statuses.comment_result(CONFIG, HEAD, "success", THIS_RUN, [other_sha]).status is None
    planted = listed_status(record(), by="some-ci-app[bot]")
    assert statuses.comment_result(CONFIG, HEAD, "success", THIS_RUN, [planted]).status is None
    # and its own final result is final: a second result of the run posts nothing
    passed = statuses.comment_result(CONFIG, HEAD, "success", THIS_RUN, [own]).status
    assert passed is not None
    again = [listed_status(passed, 1), own]
    assert statuses.comment_result(CONFIG, HEAD, "failure", THIS_RUN, again).status is None


def test_a_comment_record_is_an_approval_others_keep_and_a_newer_one_than_a_labels():
    """An older label approval below the record binds no pull_request run any more (the
    comment's own run reports); a refused label and another pull request opened at the
    commit keep the record; a push to the pull request revokes it."""
    label = {
        **listed_status(statuses.after_gate(CONFIG, HEAD, True, "", "maint"), 50),
        "target_url": checks_url(2, REPO),
    }
    listed = [listed_status(record(), 5), label]
    pr_run = {
        "id": 5,
        "head_sha": HEAD,
        "event": "pull_request",
        "path": ".github/workflows/cuda-ci.yml",
        "html_url": f"{RUNS}/5",
        "run_attempt": 1,
        "created_at": ts(51),
        "triggering_actor": {"login": "maint"},
        "actor": {"login": "maint"},
        "head_repository": {"full_name": "contributor/Hello-World"},
        "pull_requests": [],
        "workflow_id": 9,
    }
    job = {"name": "tests", "status": "completed", "conclusion": "success"}
    assert (
        statuses.for_workflow_run(
            CONFIG, "completed", pr_run, [job], listed, REPO, NOW, statuses.Asked([])
        ).status
        is None
    )
    assert statuses.for_workflow_run(CONFIG, "completed", pr_run, [job], [label], REPO, NOW).status
    refused = labeled_payload()
    out = statuses.for_pull_event(
        CONFIG,
        "labeled",
        refused,
        statuses.GateOutputs(False, "triager has triage"),
        "https://github.com",
        REPO,
        listed,
    )
    assert out.status is None and "stays" in out.note
    other = push("opened")
    other["pull_request"]["number"] = 3
    out = statuses.for_pull_event(
        CONFIG, "opened", other, statuses.GateOutputs(), "https://github.com", REPO, listed
    )
    assert out.status is None and "carries an approval of #2" in out.note
    own = statuses.for_pull_event(
        CONFIG, "synchronize", push(), statuses.GateOutputs(), "https://github.com", REPO, listed
    )
    assert own.status is not None and "waiting for approval" in own.status.description.lower()


def labeled_payload() -> dict:
    payload = push("labeled")
    payload["label"] = {"name": "CUDA CI"}
    return payload


def test_cli_a_comment_approval_then_its_result_and_a_stale_runs_result(run_cli, github):
    """As the comment workflow's status and result jobs run them: run 77 approved by a
    comment posts its record and its result; run 76 (an older comment's run, cancelled or
    slower) ends after run 78's record was posted and posts nothing over it."""
    from testkit.events import on_pull_request
    from testkit.github_server import PullRequest
    from testkit.shared import webhook as hook

    github.add_repo(REPO, roles={"maint": "maintain"})
    github.add_pull(REPO, PullRequest(2, HEAD, head_repo="contributor/Hello-World"))
    event = on_pull_request(
        hook("issue_comment.created"), body=f"/gpu-ci run {HEAD}", commenter="maint"
    )
    env = {
        "GITHUB_API_URL": github.url,
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_TOKEN": "t",
        "GITHUB_SERVER_URL": "https://github.com",
        "INPUT_SHA": HEAD,
    }

    def job(run_id: int, **inputs: str):
        extra = {f"INPUT_{k.upper()}": v for k, v in inputs.items()}
        out = run_cli(
            ["gpu-status"],
            {**env, "GITHUB_RUN_ID": str(run_id), "GITHUB_RUN_ATTEMPT": "1", **extra},
            event=event,
            event_name="issue_comment",
        )
        assert out.returncode == 0, out.stdout
        return out

    approve = {"gate_run": "true", "pr_number": "2", "labeled_by": "maint"}
    job(77, **approve)
    job(77, gpu_result="success")
    posted = github.repos[REPO].statuses[HEAD]
    assert [(s["state"], s["target_url"]) for s in posted] == [
        ("success", f"{RUNS}/77/attempts/1"),
        ("pending", f"{RUNS}/77/attempts/1"),
    ]
    assert posted[0]["description"] == (
        f"GPU tests passed on {HEAD[:12]} (approved by @maint by comment)."
    )
    job(78, **approve)
    stale = job(76, gpu_result="failure")
    assert (
        stale.outputs["state"] == ""
        and "not this run's comment approval" in (stale.outputs["description"])
    )
    assert github.repos[REPO].statuses[HEAD][0]["target_url"] == f"{RUNS}/78/attempts/1"
    bad = run_cli(
        ["gpu-status"],
        {**env, "GITHUB_RUN_ID": "77", "INPUT_GPU_RESULT": "passed"},
        event=event,
        event_name="issue_comment",
    )
    assert bad.returncode == 2 and "needs.<job>.result" in bad.stdout
