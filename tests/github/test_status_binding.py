"""Issue 26: the "GPU CI" status is bound to the run the approval started (attacks as tests).

Each test plays one attack of the issue against the pure state machine; the docstring says
who attacks and how. See the module docstring of ``gpu_ci.github.status`` for the rule.
"""

from __future__ import annotations

import pytest

from gpu_ci.github import jobs as jobs_rule
from gpu_ci.github import status as statuses
from testkit.github.approvals import (
    CLOCK,
    COVERED,
    checks_url,
    pr_run,
    queued,
    running,
    status,
    ts,
)
from testkit.shared import ROOT

REPO = "Codertocat/Hello-World"
FORK = "contributor/Hello-World"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
NOW = CLOCK
CONFIG = statuses.make_config("GPU CI", "CUDA CI", "write", ["tests"])
RUNS = f"https://github.com/{REPO}/actions/runs"


def ours(description: str, state: str = "pending", url: str = "", at: float = 0) -> dict:
    return status(description, state, url=url, created_at=ts(at))


def approval(
    at: float = 50, number: int = 2, by: str = "maintainer", covers: tuple[str, ...] = COVERED
) -> dict:
    return ours(queued(by), url=checks_url(number, covers=covers), at=at)


def in_progress(run_id: int = 5, attempt: int = 1, at: float = 49) -> dict:
    return ours(running(), url=f"{RUNS}/{run_id}/attempts/{attempt}", at=at)


run = pr_run


def job(conclusion: str = "success", name: str = "tests") -> dict:
    return {
        "name": name,
        "status": "completed",
        "conclusion": conclusion,
        "created_at": ts(40),
        "started_at": ts(30),
        "runner_name": "gpu-1",
    }


def done(wf_run: dict, listed: list, conclusion: str = "success") -> statuses.Outcome:
    return statuses.for_workflow_run(
        CONFIG, "completed", wf_run, [job(conclusion)], listed, REPO, NOW, statuses.Asked([])
    )


# -- forged success ---------------------------------------------------------------------------


def test_a_forged_run_of_another_file_from_a_deleted_fork_posts_nothing():
    """A fork adds `name: CUDA CI` on pull_request_review with a job `tests` that sleeps on
    ubuntu-latest, reviews its own PR and deletes the fork: `head_repository` is null."""
    forged = run(
        event="pull_request_review",
        actor="contributor",
        head_repo=None,
        path=".github/workflows/fake.yml",
    )
    out = done(forged, [])
    assert out.status is None
    assert (
        statuses.for_workflow_run(CONFIG, "requested", forged, None, [], REPO, NOW).status is None
    )


@pytest.mark.parametrize("head_repo", [None, FORK, ""])
def test_a_run_is_trusted_only_for_an_allowed_event_from_this_repository(head_repo):
    """Null (a deleted fork) or another repository is untrusted, whatever the event."""
    for event in ("push", "pull_request_review", "issue_comment", "workflow_run"):
        assert done(run(event=event, head_repo=head_repo, actor="contributor"), []).status is None
    for event in ("pull_request_review", "issue_comment", "check_suite"):
        assert done(run(event=event, head_repo=REPO, actor="contributor"), []).status is None
    for event in ("push", "schedule", "workflow_dispatch", "merge_group"):
        out = done(run(event=event, head_repo=REPO), []).status
        assert out is not None and out.state == "success", event


def test_a_run_of_another_workflow_file_does_not_count_even_when_approved():
    """The approver's own event runs every workflow of the fork that listens to it:
    `workflow_run: workflows: [CUDA CI]` matches names, the file path does not lie."""
    listed = [approval()]
    other = run(path=".github/workflows/fake.yml")
    assert done(other, listed).status is None
    assert (
        statuses.for_workflow_run(CONFIG, "requested", other, None, listed, REPO, NOW).status
        is None
    )
    named = statuses.make_config(
        "GPU CI", "CUDA CI", "write", ["tests"], workflow=".github/workflows/gpu.yml"
    )
    gpu = run(path=".github/workflows/gpu.yml")
    # gpu-status follows gpu.yml, but this approval covers cuda-ci.yml only (its record)
    out = statuses.for_workflow_run(
        named, "completed", gpu, [job()], listed, REPO, NOW, statuses.Asked([])
    )
    assert out.status is None
    assert "gpu.yml is not a GPU workflow file the approval of ec26c3e57ca3 covers" in out.note
    covering = [approval(covers=(".github/workflows/gpu.yml",))]
    out = statuses.for_workflow_run(
        named, "completed", gpu, [job()], covering, REPO, NOW, statuses.Asked([])
    )
    assert out.status is not None and out.status.state == "success"


def test_a_trusted_event_of_a_pull_request_event_name_is_not_trusted():
    """`pull_request_review` etc. run the pull request's code: never trusted."""
    out = done(run(event="pull_request_target", head_repo=REPO, actor="contributor"), [])
    assert out.status is None


# -- a real failure overwritten ---------------------------------------------------------------


def test_a_final_failure_is_not_replaced_by_a_later_run_of_the_approver():
    """Approved, GPU tests failed; the maintainer later labels 'bug' or reviews: the fork's
    own CUDA CI jobs run as the maintainer and pass. The failure stays."""
    failed = ours(
        f"GPU tests failed on {HEAD[:12]} (approved by @maintainer): tests: failure.",
        "failure",
        f"{RUNS}/5/attempts/1",
        at=10,
    )
    listed = [failed, in_progress(), approval()]
    for event in ("pull_request", "pull_request_review"):
        later = run(run_id=7, event=event, created=5)
        assert (
            statuses.for_workflow_run(CONFIG, "requested", later, None, listed, REPO, NOW).status
            is None
        )
        assert done(later, listed).status is None
    # a re-run of the failed run reuses the gate's old outputs: approve again instead
    assert done(run(attempt=2), listed).status is None
    # a newer approval's run replaces it
    newer = [approval(at=4), *listed]
    out = done(run(run_id=8, created=4.5), newer).status
    assert out is not None and out.state == "success"


def test_only_the_run_the_approval_started_passes():
    listed = [in_progress(5), approval()]
    assert done(run(5), listed).status is not None
    # another run of the approver, even of the right file, does not take over the link
    assert done(run(6, created=40), listed).status is None
    # started long before the approval (another label of the approver, an hour earlier)
    assert done(run(5, created=120), [approval()]).status is None
    # started after the approval was posted: not the approval's run
    assert done(run(5, created=20), [approval()]).status is None
    # a run GitHub lists for another pull request
    assert done(run(5, pulls=(9,)), [approval()]).status is None
    assert done(run(5, pulls=(2,)), [approval()]).status is not None
    # a run whose requested event came before the approval was posted still counts
    out = done(run(5), [approval()]).status
    assert out is not None and out.state == "success"
    assert out.target_url == f"{RUNS}/5/attempts/1"


def test_the_requested_run_is_recorded_with_its_id_and_attempt():
    out = statuses.for_workflow_run(
        CONFIG, "requested", run(5), None, [approval()], REPO, NOW
    ).status
    assert out is not None and out.target_url == f"{RUNS}/5/attempts/1"
    # a second run asking later does not replace the first one's record
    assert (
        statuses.for_workflow_run(
            CONFIG, "requested", run(6, created=50.5), None, [out_dict(out), approval()], REPO, NOW
        ).status
        is None
    )


def out_dict(status: statuses.Status) -> dict:
    return {
        **status.body("GPU CI"),
        "created_at": ts(49),
        "creator": {"login": "github-actions[bot]"},
    }


# -- approval voided by a stranger ------------------------------------------------------------


@pytest.mark.parametrize("action", ["opened", "reopened", "synchronize"])
def test_a_pull_request_of_someone_else_at_the_approved_head_keeps_the_approval(action):
    """Anyone opens a pull request (#9) at the approved head of #2 while its run is in
    flight: 'Waiting for approval' would void the approval and the run's result."""
    payload = {
        "action": action,
        "before": "b" * 40,
        "pull_request": {"number": 9, "state": "open", "head": {"sha": HEAD}},
    }
    listed = [in_progress(), approval()]
    out = statuses.for_pull_event(
        CONFIG, action, payload, statuses.GateOutputs(), "https://github.com", REPO, listed
    )
    assert out.status is None and "#2" in out.note
    assert done(run(5), listed).status is not None
    # the approved pull request's own push back to this head still revokes it
    own = {**payload, "pull_request": {**payload["pull_request"], "number": 2}}
    again = statuses.for_pull_event(
        CONFIG, action, own, statuses.GateOutputs(), "https://github.com", REPO, listed
    )
    assert again.status is not None and again.status.state == "pending"


# -- triage resets ----------------------------------------------------------------------------


def refused_label(listed: list, reason: str) -> statuses.Outcome:
    """gpu-status on the gate label after the gate refused it for ``reason``."""
    gate = statuses.GateOutputs(False, reason)
    return statuses.for_pull_event(
        CONFIG, "labeled", labeled(), gate, "https://github.com", REPO, listed
    )


def labeled() -> dict:
    return {
        "action": "labeled",
        "label": {"name": "CUDA CI"},
        "sender": {"login": "triager"},
        "pull_request": {"number": 2, "state": "open", "head": {"sha": HEAD}},
    }


def test_a_refused_label_does_not_reset_a_passed_or_approved_head():
    """A triage user applies the label: the gate refuses (role). 'Not approved' must not
    replace a passed result, nor void an approval whose run is in flight."""
    passed = ours(
        f"GPU tests passed on {HEAD[:12]} (approved by @maintainer).",
        "success",
        f"{RUNS}/5/attempts/1",
        at=10,
    )
    for listed in ([passed, in_progress(), approval()], [in_progress(), approval()], [approval()]):
        out = refused_label(listed, "@triager has triage access; write is needed")
        assert out.status is None, listed[0]["description"]
    # nothing to protect: the refusal is shown
    out = refused_label([], "role")
    assert out.status is not None and out.status.description.startswith("Not approved")


def test_the_gpu_example_concurrency_group_keys_on_the_approver():
    """Re-applying the label as triage must not cancel the maintainer's run: the group
    names who labeled (the approval), not just the label event."""
    import yaml

    doc = yaml.safe_load((ROOT / "examples" / "cuda-ci.yml").read_text(encoding="utf-8"))
    group = doc["concurrency"]["group"]
    assert "github.event.sender.login" in group and "github.event.label.name" in group
    assert "github.event.pull_request.number" in group


# -- the race of requested and completed ------------------------------------------------------


def test_in_progress_landing_on_top_of_the_result_is_undone():
    """`requested` and `completed` of one run are handled concurrently: both read the
    approval; completed posts 'passed' first, then requested posts 'in progress' on top.
    After posting, requested reads the statuses again and restores the result."""
    passed = ours(
        f"GPU tests passed on {HEAD[:12]} (approved by @maintainer).",
        "success",
        f"{RUNS}/5/attempts/1",
        at=1,
    )
    listed = [in_progress(at=0.5), passed, approval()]
    fixed = statuses.settle(CONFIG, run(5), listed)
    assert fixed is not None and fixed.state == "success"
    assert fixed.description == passed["description"]
    assert fixed.target_url == passed["target_url"]
    # the normal order needs nothing
    assert statuses.settle(CONFIG, run(5), [passed, in_progress(), approval()]) is None
    assert statuses.settle(CONFIG, run(5), [in_progress(), approval()]) is None
    # another run's result below is not ours to restore
    other = {**passed, "target_url": f"{RUNS}/4/attempts/1"}
    assert statuses.settle(CONFIG, run(5), [in_progress(), other]) is None


# -- the reusable workflow --------------------------------------------------------------------


def test_gpu_jobs_of_a_reusable_call_match_only_the_named_called_job():
    """`gpu-jobs: gpu` matched every job of a reusable call with a matrix (`gpu (pool) /
    GPU CI results` too, which passes when the gate refused): a skipped test read as passed.
    A name matches segment by segment; `gpu / Test on GPU` names the test job only."""
    names = [
        "gpu (gpu-ci-whole-gpu, cuda>=12.4) / Approval (gpu-gate)",
        "gpu (gpu-ci-whole-gpu, cuda>=12.4) / Test on GPU",
        "gpu (gpu-ci-whole-gpu, cuda>=12.4) / GPU CI results",
        "gpu / Test on GPU",
        "other / Test on GPU",
    ]
    jobs = [{"name": n} for n in names]
    assert jobs_rule.named_gpu_jobs(jobs, ["gpu"]) == []
    assert [j["name"] for j in jobs_rule.named_gpu_jobs(jobs, ["gpu / Test on GPU"])] == [
        names[1],
        names[3],
    ]
    # plain jobs as before, matrix rows included
    plain = [{"name": "tests"}, {"name": "tests (3.12)"}, {"name": "tests-lint"}]
    assert [j["name"] for j in jobs_rule.named_gpu_jobs(plain, ["tests"])] == [
        "tests",
        "tests (3.12)",
    ]


def results(tmp_path, **env: str) -> tuple[int, str]:
    import os
    import subprocess

    import yaml

    doc = yaml.safe_load((ROOT / ".github" / "workflows" / "gpu-ci.yml").read_text("utf-8"))
    script = doc["jobs"]["results"]["steps"][0]["run"]
    full = {
        "PATH": os.environ["PATH"],
        "GITHUB_STEP_SUMMARY": str(tmp_path / "s.md"),
        "GATE": "success",
        "BUILD": "success",
        "TEST": "success",
        **env,
    }
    proc = subprocess.run(["bash", "-e", "-c", script], env=full, capture_output=True, text=True)
    return proc.returncode, proc.stdout


def skipped(tmp_path, run: str, reason: str, *, gate_attempt: str, attempt: str):
    """The results check once the build and test jobs were skipped."""
    return results(
        tmp_path,
        RUN=run,
        REASON=reason,
        BUILD="skipped",
        TEST="skipped",
        GATE_ATTEMPT=gate_attempt,
        GITHUB_RUN_ATTEMPT=attempt,
    )


def test_the_reusable_results_check_fails_when_the_gpu_tests_did_not_run(tmp_path):
    """The header said to require "GPU CI results"; it passed when the gate refused."""
    code, out = skipped(tmp_path, "false", "@x has triage access", gate_attempt="1", attempt="1")
    assert code == 1 and "did not run" in out


def test_a_rerun_of_failed_jobs_does_not_reuse_the_gates_decision(tmp_path):
    """'Re-run failed jobs' reuses the gate's outputs of attempt 1 (head, budget unchecked):
    the build and test jobs skip, and the results check fails, naming the fix."""
    import yaml

    doc = yaml.safe_load((ROOT / ".github" / "workflows" / "gpu-ci.yml").read_text("utf-8"))
    assert doc["jobs"]["gate"]["outputs"]["attempt"] == "${{ github.run_attempt }}"
    for job in ("build", "test"):
        assert "needs.gate.outputs.attempt == github.run_attempt" in doc["jobs"][job]["if"]
    code, out = skipped(tmp_path, "true", "approved", gate_attempt="1", attempt="2")
    assert code == 1 and "Re-run all jobs" in out
    assert (
        results(tmp_path, RUN="true", REASON="approved", GATE_ATTEMPT="2", GITHUB_RUN_ATTEMPT="2")[
            0
        ]
        == 0
    )


@pytest.mark.parametrize(
    "value, path",
    [
        ("cuda-ci.yml", ".github/workflows/cuda-ci.yml"),
        (".github/workflows/gpu.yaml", ".github/workflows/gpu.yaml"),
    ],
)
def test_the_workflow_input_names_a_file_under_github_workflows(value, path):
    assert statuses.workflow_path(value) == path


@pytest.mark.parametrize(
    "value, fragment",
    [
        ("", "is empty"),
        ("  ", "is empty"),
        ("CUDA CI", "file name"),
        ("src/cuda-ci.yml", "file name"),
        # an approval's link lists the file it covers, comma-separated: one file, no folder
        (".github/workflows/gpu/cuda-ci.yml", "directly under"),
        ("a,b.yml", "no comma"),
    ],
)
def test_a_workflow_input_that_is_no_file_is_refused(value, fragment):
    from gpu_ci.errors import UsageError

    with pytest.raises(UsageError, match=fragment):
        statuses.workflow_path(value)


def test_the_reusable_workflow_pins_its_nested_actions_like_the_privileged_examples():
    """`uses: .../gpu-ci.yml@<sha>` ran nested `@v2` actions: whatever v1 points at."""
    from gpu_ci.release import PINNED_WORKFLOWS, pin_uses, unpinned_uses

    assert ".github/workflows/gpu-ci.yml" in PINNED_WORKFLOWS
    text = (ROOT / ".github" / "workflows" / "gpu-ci.yml").read_text(encoding="utf-8")
    assert text.count("uses: gpu-ci-actions/gpu-ci-actions/actions/") >= 6
    assert unpinned_uses(text) == []
    repinned = pin_uses(text, "1.2.3", "b" * 40)
    assert repinned.count(f"@{'b' * 40}  # v1.2.3") == text.count(
        "uses: gpu-ci-actions/gpu-ci-actions/actions/"
    )


# -- two approvals of one commit (attack review) ----------------------------------------------


def test_a_run_does_not_replace_the_record_of_another_run():
    """Approved (run 5 recorded), the maintainer re-applies the label: a second approval,
    run 6 recorded above it. Run 5 then completes: its result must not replace run 6's
    record (and so shut out run 6's own result); only the recorded run posts."""
    listed = [in_progress(6, at=9), approval(at=10), in_progress(5, at=19), approval(at=20)]
    assert done(run(5, created=21), listed, "failure").status is None
    out = done(run(6, created=11), listed).status
    assert out is not None and out.state == "success"
    assert out.target_url == f"{RUNS}/6/attempts/1"


def test_the_run_of_an_older_approval_does_not_count_for_a_newer_one():
    """The first approval's run (5) completes after the label was re-applied (second
    approval posted, its run 6 not yet recorded): run 5 was started by the first approval,
    so it is not the second approval's run and posts nothing; run 6 then claims it."""
    listed = [approval(at=10), in_progress(5, at=19), approval(at=20)]
    assert done(run(5, created=21), listed).status is None
    assert (
        statuses.for_workflow_run(
            CONFIG, "requested", run(5, created=21), None, listed, REPO, NOW
        ).status
        is None
    )
    out = statuses.for_workflow_run(
        CONFIG, "requested", run(6, created=11), None, listed, REPO, NOW
    ).status
    assert out is not None and out.target_url == f"{RUNS}/6/attempts/1"
    # a revoked older approval still owns the runs it started
    revoked = [approval(at=10), ours("Waiting for approval: x", at=15), approval(at=20)]
    assert done(run(5, created=21), revoked).status is None


def test_the_approvals_run_requested_before_the_approval_still_posts_over_another_record():
    """The label event creates run 5 before the privileged job posts the approval, so its
    `requested` found no approval; a second run of the approver (another label, seconds
    after) claimed the record. Run 5 is still the approval's run: its result is posted."""
    listed = [in_progress(6, at=49.5), approval(at=50)]
    out = done(run(5, created=51), listed).status
    assert out is not None and out.state == "success"


def test_an_approval_planted_by_another_creator_binds_no_run():
    """A third-party status writer whose context the pull request's own config names (a CI
    app that builds forks and lets the pipeline file set `context: GPU CI`) plants
    "Approved by @maintainer for <sha>: GPU run queued." right after the maintainer's
    unrelated label started the fork's own cuda-ci.yml; that run would bind to it and
    github-actions[bot] would post its forged pass, which a check pinned to the GitHub
    Actions source accepts."""
    planted = {**approval(at=50), "creator": {"login": "ci-app[bot]"}}
    assert done(run(5, created=51), [planted]).status is None


def test_a_planted_record_cannot_widen_what_the_approval_covers():
    """Another status writer re-approves the head over the maintainer's approval, its link
    naming the fork's gpu.yml: only the trusted creators' record counts, and it covers
    cuda-ci.yml alone."""
    gpu_path = ".github/workflows/gpu.yml"
    named = statuses.make_config("GPU CI", "CUDA CI", "write", ["tests"], workflow=gpu_path)
    planted = {**approval(at=49, covers=(gpu_path,)), "creator": {"login": "ci-app[bot]"}}
    listed = [planted, approval(at=50)]
    out = statuses.for_workflow_run(
        named, "completed", run(5, path=gpu_path), [job()], listed, REPO, NOW, statuses.Asked([])
    )
    assert out.status is None and "gpu.yml is not a GPU workflow file" in out.note


def test_a_run_the_relay_bot_started_binds_only_where_relay_bot_is_set():
    """A comment approval arrives as the relay App's label: its ``pull_request`` run is the
    App's, in the commenter's place. Only the configured account counts, and only as the
    starter of the approval's run: any other actor's run still binds to nothing."""
    bot = "gpu-ci-relay[bot]"
    listed = [approval(by="maint")]
    assert done(run(5, actor=bot), listed).status is None  # relay-bot unset
    relayed = statuses.make_config("GPU CI", "CUDA CI", "write", ["tests"], relays=[bot])
    out = statuses.for_workflow_run(
        relayed, "completed", run(5, actor=bot), [job()], listed, REPO, NOW, statuses.Asked([])
    )
    assert out.status is not None and out.status.state == "success"
    other = statuses.for_workflow_run(
        relayed, "completed", run(5, actor="author"), [job()], listed, REPO, NOW, statuses.Asked([])
    )
    assert other.status is None
