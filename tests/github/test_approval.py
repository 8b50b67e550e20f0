"""The approval record read from a head's statuses, as every feature sees it."""

from __future__ import annotations

from gpu_ci.github import approval

SHA = "a" * 40
BOT = {"login": "github-actions[bot]"}
PULL = "https://github.com/o/r/pull/7/checks"
RUN = "https://github.com/o/r/actions/runs/9/attempts/1"


def status(description: str, url: str = PULL, creator: dict | None = None, **kw) -> dict:
    return {
        "context": "GPU CI",
        "state": "pending",
        "description": description,
        "target_url": url,
        "creator": BOT if creator is None else creator,
        "created_at": "2026-11-30T12:00:00Z",
        **kw,
    }


def test_a_label_approval_reads_as_one_record():
    listed = [status(approval.queued_text("maint", SHA))]
    got = approval.current(approval.Source(), listed, SHA, "o/r")
    assert got == approval.Approval(
        "o/r", 7, SHA, "maint", approval.HOW_LABEL, "2026-11-30T12:00:00Z", listed[0]
    )
    assert approval.approved_pull(approval.Source(), listed) == 7


def test_a_comment_approval_names_its_pull_request_in_its_text():
    listed = [status(approval.comment_text("maint", 3, SHA), url=RUN)]
    got = approval.current(approval.Source(), listed, SHA)
    assert got is not None and (got.how, got.number, got.approver) == ("comment", 3, "maint")
    assert approval.comment_record(listed[0]) == ("maint", 3, SHA[:12])


def test_a_newer_push_revokes_and_another_writer_is_not_read():
    revoked = [status("Waiting for approval: ..."), status(approval.queued_text("maint", SHA))]
    assert approval.current(approval.Source(), revoked, SHA) is None
    planted = [status(approval.queued_text("maint", SHA), creator={"login": "ci-app"})]
    assert approval.current(approval.Source(), planted, SHA) is None


def test_a_result_without_its_approval_is_no_approval():
    """A result names its approver, but only the approval below it is one."""
    listed = [status(f"GPU tests passed on {SHA[:12]} (approved by @maint).", url=RUN)]
    assert approval.current(approval.Source(), listed, SHA) is None
    run = {"head_sha": SHA, "id": 9, "event": "pull_request", "actor": {"login": "maint"}}
    assert "no current approval" in approval.approved_run(approval.Source(), run, listed)
    held, why = approval.watchdog_hold(approval.Source(), run, listed)
    assert held is None and "no current approval" in why


def test_the_watchdog_holds_the_approval_for_the_approvers_run_only():
    covering = approval.approval_link(PULL, [".github/workflows/ci.yml"])
    listed = [status(approval.queued_text("maint", SHA), covering)]
    run = {
        "head_sha": SHA,
        "id": 9,
        "event": "pull_request",
        "path": ".github/workflows/ci.yml",
        "actor": {"login": "maint"},
    }
    held, why = approval.watchdog_hold(approval.Source(), run, listed)
    assert why == "" and held is not None and (held.number, held.approver) == (7, "maint")
    other = {**run, "actor": {"login": "fork"}}
    held, why = approval.watchdog_hold(approval.Source(), other, listed)
    assert held is None and "not by the approver @maint" in why
    # the approver's label also started the fork's miner.yml: not a file the approval covers
    miner = {**run, "path": ".github/workflows/miner.yml"}
    held, why = approval.watchdog_hold(approval.Source(), miner, listed)
    assert held is None and "miner.yml is not a GPU workflow file the approval" in why


def test_the_retry_record_wording_is_what_gpu_status_accepts():
    text = approval.retried_text("runner", 1, "runner-lost")
    assert text.startswith(approval.RETRIED_PREFIX)
    assert text == "GPU run retried after the runner was lost (attempt 2); attempt 1: runner-lost"


def test_the_record_names_the_runs_recorded_above_it_and_its_workflows():
    listed = [
        status(
            "GPU tests failed (approved by @maint).", url=RUN.replace("/1", "/2"), state="failure"
        ),
        status("Approved by @maint: GPU run in progress.", url=RUN),
        status(approval.queued_text("maint", SHA)),
    ]
    listed[-1]["target_url"] = approval.approval_link(PULL, [".github/workflows/ci.yml"])
    got = approval.current(approval.Source(), listed, SHA, "o/r")
    assert got is not None and got.number == 7
    assert got.runs == ((9, 1), (9, 2)) and got.workflows == (".github/workflows/ci.yml",)
    assert approval.claimed_by(got, 9) == ""
    assert "the approval started run 9" in approval.claimed_by(got, 10)


def test_the_closing_of_its_pull_request_ends_the_approval_for_every_reader():
    ended = status(approval.ended_text(7), state="error")
    listed = [ended, status(approval.queued_text("maint", SHA))]
    assert approval.current(approval.Source(), listed, SHA) is None
    assert approval.approval_status(listed, "GPU CI") is None
    assert approval.approved_pull(approval.Source(), listed) is None
    assert approval.approval_of(listed, "GPU CI") == ""


def test_an_approvals_link_names_the_files_it_covers_and_nothing_else():
    link = approval.approval_link(PULL, [".github/workflows/cuda ci.yml", "nightly.yaml"])
    assert link == f"{PULL}?gpu-ci-covers=cuda%20ci.yml,nightly.yaml"
    got = approval.current(approval.Source(), [status(approval.queued_text("m", SHA), link)], SHA)
    assert got is not None and got.number == 7
    assert got.workflows == (".github/workflows/cuda ci.yml", ".github/workflows/nightly.yaml")
    assert approval.not_covered(got, ".github/workflows/nightly.yaml") == ""
    assert "miner.yml is not a GPU workflow file" in approval.not_covered(
        got, ".github/workflows/miner.yml"
    )
    # a folder, a second list, no list: covers nothing
    for query in ("?gpu-ci-covers=a%2Fminer.yml", "?gpu-ci-covers=a.yml&gpu-ci-covers=b.yml", ""):
        assert approval.covered({"target_url": PULL + query}) == ()
    # a comment approval's record links its own run: it covers no pull_request workflow
    comment = approval.current(
        approval.Source(), [status(approval.comment_text("m", 3, SHA), RUN)], SHA
    )
    assert comment is not None and comment.workflows == ()
