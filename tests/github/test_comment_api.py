"""Comment commands and trusted authors through the CLI and the loopback GitHub server: the
REST calls each decision costs, the outputs and the summary, the budget."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from testkit.events import on_pull_request, pull_request_labeled
from testkit.github.runs import BUDGET, GPU_RUNS_ON, NOW, gpu_run, month_of_runs, spend
from testkit.github_server import Commit, PullRequest
from testkit.shared import webhook

REPO = "Codertocat/Hello-World"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"


RELAY_BOT = "gpu-ci-relay[bot]"
RELAY_TOKEN = "ghs_relay_app_token"


def run_gate(run_cli, server, event_name, event, args=(), relay_token=RELAY_TOKEN):
    server.token_users[RELAY_TOKEN] = RELAY_BOT
    env = {
        "GITHUB_API_URL": server.url,
        "GITHUB_REPOSITORY": REPO,
        "INPUT_GITHUB_TOKEN": "ghs_secret",
        "GITHUB_SHA": "d" * 40,  # an issue_comment run's GITHUB_SHA: the default branch
        "GPU_CI_NOW": NOW,
        "INPUT_TIERS": "mini, full",
        "INPUT_COMMENT_COMMAND": "/gpu-ci run",
        "INPUT_RELAY_BOT": RELAY_BOT,
        "INPUT_RELAY_TOKEN": relay_token,
        **GPU_RUNS_ON,
    }
    return run_cli(["gpu-gate", *args], env, event=event, event_name=event_name)


def command(body, commenter="Codertocat"):
    return on_pull_request(webhook("issue_comment.created"), body=body, commenter=commenter)


def relayed_label(sender=RELAY_BOT, label="CUDA CI"):
    """The ``labeled`` event the relay's label makes (act does not chain events)."""
    return pull_request_labeled(label, sender)


def test_a_maintainers_command_is_relayed_as_the_label_with_the_relay_token(run_cli, server):
    """The issue_comment run never runs: it applies the label with the App's token."""
    result = run_gate(run_cli, server, "issue_comment", command(f"/gpu-ci run {HEAD[:10]} full"))
    assert result.returncode == 0, result.stdout
    out = result.outputs
    assert (out["run"], out["relayed"], out["approval"]) == ("false", "CUDA CI", "")
    assert out["runs-on"] == '"ubuntu-latest"'
    assert "relayed as 'CUDA CI' by gpu-ci-relay[bot]" in out["reason"]
    # the label was on #2: taken off and applied again, so that GitHub sends 'labeled'
    assert server.label_writes == [
        ("DELETE", 2, "CUDA CI", RELAY_BOT),
        ("POST", 2, "CUDA CI", RELAY_BOT),
    ]
    assert [(r.method, r.path) for r in server.log] == [
        ("GET", f"/repos/{REPO}/collaborators/Codertocat/permission"),
        ("GET", f"/repos/{REPO}/pulls/2"),
        ("DELETE", f"/repos/{REPO}/issues/2/labels/CUDA%20CI"),
        ("POST", f"/repos/{REPO}/issues/2/labels"),
    ]
    assert [r.headers.get("Authorization") for r in server.log[2:]] == [f"token {RELAY_TOKEN}"] * 2
    assert "| relayed as label | CUDA CI |" in result.summary
    assert "| decision | skip |" in result.summary


def test_the_relayed_label_runs_the_head_in_the_commenters_name_with_their_tier(run_cli, server):
    server.add_issue_comment(REPO, 2, "Codertocat", f"/gpu-ci run {HEAD[:10]} full")
    result = run_gate(run_cli, server, "pull_request", relayed_label())
    assert result.returncode == 0, result.stdout
    out = result.outputs
    assert (out["run"], out["sha"], out["pr-number"]) == ("true", HEAD, "2")
    assert (out["labeled-by"], out["permission"], out["approval"]) == (
        "Codertocat",
        "write",
        "comment",
    )
    assert json.loads(out["tiers"]) == ["full"]
    assert out["runs-on"] == '["self-hosted","gpu"]'
    assert "(relayed by gpu-ci-relay[bot] as 'CUDA CI')" in out["reason"]
    assert out["base-ref"] == "main"  # the branch #2 targets
    assert "| approver | Codertocat |" in result.summary


def test_the_relay_bots_label_without_a_valid_command_approves_nothing(run_cli, server):
    """A label the App applied counts only with a command for the head, by the role, unedited,
    read at decision time: a stranger's, an edited one or one naming another commit does not."""
    server.add_issue_comment(REPO, 2, "rando", f"/gpu-ci run {HEAD}")
    server.add_issue_comment(REPO, 2, "Codertocat", f"/gpu-ci run {'1' * 40}")
    edited = server.add_issue_comment(REPO, 2, "Codertocat", f"/gpu-ci run {HEAD}")
    edited.updated_at = "2026-11-02T11:00:00Z"
    result = run_gate(run_cli, server, "pull_request", relayed_label())
    assert result.returncode == 0, result.stdout
    assert result.outputs["run"] == "false"
    assert (
        "gpu-ci-relay[bot] applied 'CUDA CI', but no unedited comment on #2 by someone "
        "with the 'write' role or higher names the head"
    ) in result.outputs["reason"]
    # rando's role was read and refused; nobody else's command names the head unedited
    roles = [r.path for r in server.log if r.path.endswith("/permission")]
    assert roles == [f"/repos/{REPO}/collaborators/rando/permission"]


def test_the_relay_label_of_its_own_counts_only_from_the_relay_bot(run_cli, server):
    """With label: none, a maintainer's (or anyone's) label approves nothing, and the relay's
    label only from the relay bot with a command."""
    args = ["--label", "none", "--relay-label", "gpu-ci: comment"]
    server.add_issue_comment(REPO, 2, "Codertocat", f"/gpu-ci run {HEAD}")
    by_hand = run_gate(
        run_cli, server, "pull_request", relayed_label("Codertocat", "CUDA CI"), args
    )
    assert by_hand.outputs["run"] == "false"
    assert "labels approve nothing here (input 'label' is none)" in by_hand.outputs["reason"]
    assert "comments '/gpu-ci run <sha>'" in by_hand.outputs["reason"]
    assert "applies" not in by_hand.outputs["reason"]
    forged = relayed_label("Codertocat", "gpu-ci: comment")
    refused = run_gate(run_cli, server, "pull_request", forged, args)
    assert refused.outputs["run"] == "false"
    assert "'gpu-ci: comment' is the comment relay's label" in refused.outputs["reason"]
    assert server.log == []  # decided from the event alone
    relayed = run_gate(run_cli, server, "issue_comment", command(f"/gpu-ci run {HEAD}"), args)
    assert relayed.outputs["relayed"] == "gpu-ci: comment"
    assert server.label_writes[-1] == ("POST", 2, "gpu-ci: comment", RELAY_BOT)
    ran = run_gate(run_cli, server, "pull_request", relayed_label(label="gpu-ci: comment"), args)
    assert (ran.outputs["run"], ran.outputs["labeled-by"]) == ("true", "Codertocat")


def test_without_a_relay_token_a_command_approves_nothing_and_says_what_to_set_up(run_cli, server):
    result = run_gate(
        run_cli, server, "issue_comment", command(f"/gpu-ci run {HEAD}"), relay_token=""
    )
    assert result.returncode == 0, result.stdout
    assert (result.outputs["run"], result.outputs["relayed"]) == ("false", "")
    reason = result.outputs["reason"]
    assert "relay-token is empty, so it approves nothing" in reason
    assert "actions/create-github-app-token" in reason and "GITHUB_TOKEN starts no" in reason
    assert server.label_writes == []
    assert "::warning title=gpu-gate::" in result.stdout


def test_a_strangers_command_costs_one_call_and_says_why(run_cli, server):
    result = run_gate(run_cli, server, "issue_comment", command(f"/gpu-ci run {HEAD}", "rando"))
    assert result.returncode == 0, result.stdout
    assert (result.outputs["run"], result.outputs["tiers"], result.outputs["approval"]) == (
        "false",
        "[]",
        "",
    )
    assert (
        "rando has the 'read' role; a '/gpu-ci run' comment needs 'write'"
        in (result.outputs["reason"])
    )
    assert [r.path for r in server.log] == [f"/repos/{REPO}/collaborators/rando/permission"]
    assert "| decision | skip |" in result.summary
    assert "fork" not in result.stdout  # #2 is not read, so nothing is said about it


def test_the_budget_guard_refuses_a_comment_approval_as_a_label_one(run_cli, server):
    month_of_runs(server, per_day=2, days=10)  # $12.48 spent
    args = [BUDGET[0], "$15", *BUDGET[2:]]
    server.add_issue_comment(REPO, 2, "Codertocat", f"/gpu-ci run {HEAD}")
    result = run_gate(run_cli, server, "pull_request", relayed_label(), args)
    assert result.returncode == 0, result.stdout
    assert result.outputs["run"] == "false"
    assert "$12.48 of $15.00" in result.outputs["reason"]
    assert "| budget verdict | **over: refused** |" in result.summary


def synchronize(author):
    payload = webhook("pull_request.synchronize")
    payload["pull_request"]["user"]["login"] = author
    payload["pull_request"]["head"]["sha"] = HEAD
    return payload


def test_a_trusted_authors_push_runs_and_an_untrusted_push_on_top_does_not(run_cli, server):
    server.repos[REPO].roles["alice"] = "maintain"
    server.repos[REPO].pulls[2] = PullRequest(2, HEAD, user="alice")
    args = ["--trusted-authors", "write"]
    server.repos[REPO].commits[HEAD] = Commit(HEAD, author="alice", committer="alice")
    own = run_gate(run_cli, server, "pull_request", synchronize("alice"), args)
    assert own.returncode == 0, own.stdout
    assert (own.outputs["run"], own.outputs["sha"], own.outputs["approval"]) == (
        "true",
        HEAD,
        "trusted-author",
    )
    assert [r.path for r in server.log] == [
        f"/repos/{REPO}/collaborators/alice/permission",
        f"/repos/{REPO}/pulls/2",
        f"/repos/{REPO}/commits/{HEAD}",
    ]
    # a collaborator of the fork pushes on top of alice's pull request
    server.repos[REPO].commits[HEAD] = Commit(HEAD, author="mallory", committer="mallory")
    pushed = run_gate(run_cli, server, "pull_request", synchronize("alice"), args)
    assert pushed.outputs["run"] == "false"
    assert (
        "authored by mallory, not by the pull request's author alice" in (pushed.outputs["reason"])
    )
    # (verified heads: tests/github/test_comment_rules.py, no server needed)


def test_an_author_below_the_trusted_role_costs_one_call(run_cli, server):
    result = run_gate(
        run_cli, server, "pull_request", synchronize("rando"), ["--trusted-authors", "write"]
    )
    assert result.outputs["run"] == "false"
    assert (
        "the author rando has the 'read' role, below trusted-authors ('write')"
        in (result.outputs["reason"])
    )
    assert [r.path for r in server.log] == [f"/repos/{REPO}/collaborators/rando/permission"]


def test_gpu_spend_counts_a_comment_runs_gpu_job_for_the_commenter(run_cli, server, tmp_path):
    """A comment's run is an ``issue_comment`` run of the comment workflow whose triggering
    actor is the commenter: gpu-spend's approver column (and the budget, which reads the same
    rows) names them, as it names the labeller of a label's run."""
    start = datetime(2026, 11, 20, 9, 0, tzinfo=timezone.utc)
    gpu_run(server, start, 11.5, who="Codertocat")  # a label's run
    gpu_run(
        server,
        start,
        29.5,
        pr=None,  # GitHub lists no pull request for an issue_comment run
        who="maint",
        event="issue_comment",
        path=".github/workflows/cuda-ci-comment.yml",
    )
    result = spend(
        run_cli, server, tmp_path, ["--gpu-workflows", "cuda-ci.yml, cuda-ci-comment.yml"]
    )
    assert result.returncode == 0, result.stdout
    doc = json.loads((tmp_path / "out" / "spend.json").read_text())
    approvers = {r["key"]: r["minutes"] for r in doc["by"]["approver"]}
    assert approvers == {"Codertocat": 12, "maint": 30}
    workflows = {r["key"]: r["minutes"] for r in doc["by"]["workflow"]}
    assert workflows == {"cuda-ci.yml": 12, "cuda-ci-comment.yml": 30}


def test_the_watchdog_cancels_a_comment_run_and_sets_no_status_on_the_default_branch(
    run_cli, server
):
    """A comment's run has the default branch's commit as head_sha: cancelled like a label's
    run, but its "no runner" status would land on that commit, so none is set."""
    stuck = datetime.now(timezone.utc) - timedelta(minutes=75)
    label_run = gpu_run(server, stuck, 0, status="queued")
    comment_run = gpu_run(
        server,
        stuck,
        0,
        pr=None,
        who="maint",
        status="queued",
        event="issue_comment",
        path=".github/workflows/cuda-ci-comment.yml",
    )
    comment_run.head_sha = "d" * 40  # the default branch's head
    for run in (label_run, comment_run):
        run.status = "in_progress"
        run.jobs[-1].started_at = run.jobs[-1].runner_name = None
    env = {
        "GITHUB_API_URL": server.url,
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_TOKEN": "watchdog-token",
        "INPUT_WORKFLOWS": "cuda-ci.yml, cuda-ci-comment.yml",
    }
    result = run_cli(["gpu-watchdog"], env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(json.loads(result.outputs["cancelled"])) == sorted([label_run.id, comment_run.id])
    assert "d" * 40 not in server.repos[REPO].statuses
    assert [s["context"] for s in server.repos[REPO].statuses[HEAD]] == ["GPU CI"]


# -- require-approved-review holds on every approval path, not only labels -------------------

REVIEW = ["--require-approved-review", "true"]


def test_a_comment_approval_needs_an_approved_review_of_that_commit(run_cli, server):
    server.repos[REPO].roles["rev"] = "maintain"
    server.repos[REPO].pulls[2].reviews = [("rev", "APPROVED", "1" * 40)]  # an older commit
    body = command(f"/gpu-ci run {HEAD} full")
    refused = run_gate(run_cli, server, "issue_comment", body, REVIEW)
    assert refused.returncode == 0, refused.stdout
    assert refused.outputs["run"] == "false"
    assert "require-approved-review is true" in refused.outputs["reason"]
    # the hint keeps the tier the maintainer named
    assert "post the '/gpu-ci run <sha> full' command again" in refused.outputs["reason"]
    server.repos[REPO].pulls[2].reviews = [("rev", "APPROVED", HEAD)]
    relayed = run_gate(run_cli, server, "issue_comment", body, REVIEW)
    assert relayed.outputs["relayed"] == "CUDA CI", relayed.stdout
    server.add_issue_comment(REPO, 2, "Codertocat", f"/gpu-ci run {HEAD}")
    ran = run_gate(run_cli, server, "pull_request", relayed_label(), REVIEW)
    assert ran.outputs["run"] == "true", ran.stdout
    assert "rev (maintain) approved that commit" in ran.outputs["reason"]


def test_a_trusted_author_needs_an_approved_review_of_that_commit(run_cli, server):
    server.repos[REPO].roles["alice"] = "maintain"
    server.repos[REPO].pulls[2] = PullRequest(2, HEAD, user="alice")
    server.repos[REPO].commits[HEAD] = Commit(HEAD, author="alice", committer="alice")
    args = ["--trusted-authors", "write", *REVIEW]
    refused = run_gate(run_cli, server, "pull_request", synchronize("alice"), args)
    assert refused.returncode == 0, refused.stdout
    assert refused.outputs["run"] == "false"
    assert "require-approved-review is true" in refused.outputs["reason"]
    server.repos[REPO].pulls[2].reviews = [("alice", "APPROVED", HEAD)]
    ran = run_gate(run_cli, server, "pull_request", synchronize("alice"), args)
    assert ran.outputs["run"] == "true", ran.stdout
    assert "alice (maintain) approved that commit" in ran.outputs["reason"]


def test_an_unreadable_head_commit_of_a_trusted_author_is_a_refusal_not_a_failed_job(
    run_cli, server
):
    """GitHub answers 404 for the head commit (a force-push raced the gate, a deleted fork):
    whose commit it is cannot be known, so it needs an approval; the gate job passes."""
    server.repos[REPO].roles["alice"] = "maintain"
    server.repos[REPO].pulls[2] = PullRequest(2, HEAD, user="alice")
    result = run_gate(
        run_cli, server, "pull_request", synchronize("alice"), ["--trusted-authors", "write"]
    )
    assert result.returncode == 0, result.stdout
    assert result.outputs["run"] == "false"
    reason = result.outputs["reason"]
    assert f"the head commit {HEAD[:12]} cannot be read (HTTP 404: Not Found)" in reason
    assert reason.endswith("a maintainer applies 'CUDA CI' or comments '/gpu-ci run <sha>'."), (
        reason
    )


def test_refusals_name_only_the_ways_this_repository_approves(run_cli, server):
    """Without comment-command (the default), no refusal offers a comment."""
    server.repos[REPO].roles["alice"] = "maintain"
    server.repos[REPO].pulls[2] = PullRequest(2, HEAD, user="alice")
    server.repos[REPO].commits[HEAD] = Commit(HEAD, author="mallory", committer="mallory")
    env_off = ["--trusted-authors", "write", "--comment-command", "none", "--relay-bot", ""]
    result = run_gate(run_cli, server, "pull_request", synchronize("alice"), env_off)
    assert result.outputs["run"] == "false", result.stdout
    assert result.outputs["reason"].endswith("(a maintainer applies 'CUDA CI'.)")
    assert "comment" not in result.outputs["reason"]
    opened = webhook("pull_request.opened")
    closed = run_gate(run_cli, server, "pull_request", opened, ["--comment-command", "none"])
    assert "a maintainer applies 'CUDA CI' (new commits" in closed.outputs["reason"]
    assert "comment" not in closed.outputs["reason"]


def test_the_comment_command_is_off_unless_configured(run_cli, server):
    env = {"GITHUB_API_URL": server.url, "GITHUB_REPOSITORY": REPO, "INPUT_GITHUB_TOKEN": "t"}
    result = run_cli(
        ["gpu-gate"], env, event=command(f"/gpu-ci run {HEAD}"), event_name="issue_comment"
    )
    assert result.returncode == 0, result.stdout
    assert result.outputs["run"] == "false"
    assert "'issue_comment' is neither a labelled pull request" in result.outputs["reason"]
    assert server.log == [] and server.label_writes == []


def test_approvers_lists_logins_and_organisation_members_beside_the_role(run_cli, server):
    """CuPy's OWNER/MEMBER: members of an organisation (read through the API at decision
    time) and listed logins approve although their repository role is below min-permission."""
    server.add_org("cupy", members={"member1"})
    args = ["--approvers", "listed-user, @cupy"]
    by_member = run_gate(
        run_cli, server, "issue_comment", command(f"/gpu-ci run {HEAD}", "member1"), args
    )
    assert by_member.outputs["relayed"] == "CUDA CI", by_member.stdout
    assert "member1 (read; approvers: @cupy member) commented" in by_member.outputs["reason"]
    assert [r.path for r in server.log][:2] == [
        f"/repos/{REPO}/collaborators/member1/permission",
        "/orgs/cupy/members/member1",
    ]
    listed = run_gate(
        run_cli, server, "pull_request", relayed_label("listed-user", "CUDA CI"), args
    )
    assert listed.outputs["run"] == "true", listed.stdout
    assert listed.outputs["reason"].startswith("listed-user (read; approvers: listed-user)")
    server.log.clear()
    stranger = run_gate(
        run_cli, server, "issue_comment", command(f"/gpu-ci run {HEAD}", "rando"), args
    )
    assert stranger.outputs["relayed"] == ""
    assert stranger.outputs["reason"] == (
        "rando has the 'read' role; a '/gpu-ci run' comment needs 'write' or higher, or to be "
        "listed in approvers (listed-user, @cupy)."
    )
    assert [r.path for r in server.log] == [
        f"/repos/{REPO}/collaborators/rando/permission",
        "/orgs/cupy/members/rando",
    ]


def test_tiers_are_read_from_a_file_of_the_default_branch_never_the_pull_requests(run_cli, server):
    event = command(f"/gpu-ci run {HEAD} mini,rocm")
    branch = event["repository"]["default_branch"]
    server.repos[REPO].files = {
        branch: {".github/gpu-tiers.txt": "# CuPy's tiers\nmini\nrocm, cuda13  # AMD\n"},
        "feature": {".github/gpu-tiers.txt": "anything\n"},  # the pull request's copy
    }
    args = ["--tiers", "file:.github/gpu-tiers.txt"]
    result = run_gate(run_cli, server, "issue_comment", event, args)
    assert result.outputs["relayed"] == "CUDA CI", result.stdout
    assert "(tiers: mini, rocm)" in result.outputs["reason"]
    first = server.log[0]
    assert (first.path, first.query) == (
        f"/repos/{REPO}/contents/.github/gpu-tiers.txt",
        {"ref": [branch]},
    )
    unknown = run_gate(
        run_cli, server, "issue_comment", command(f"/gpu-ci run {HEAD} anything"), args
    )
    assert unknown.outputs["relayed"] == ""
    assert (
        "unknown tier 'anything' in the command: the tiers are mini, rocm, cuda13"
        in (unknown.outputs["reason"])
    )
    server.repos[REPO].files = {}
    missing = run_gate(run_cli, server, "issue_comment", event, args)
    assert missing.returncode == 1 and missing.outputs["run"] == "false"
    assert "the tiers file .github/gpu-tiers.txt on" in missing.outputs["reason"]
