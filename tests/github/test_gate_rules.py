"""gpu-gate's decision rules over GitHub's real webhook payloads and variations of them."""

from __future__ import annotations

import pytest

from gpu_ci.errors import GpuCiError, UsageError
from gpu_ci.github import gate
from testkit.github.gate import gate_inputs
from testkit.shared import webhook

HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"  # head.sha in the fixtures


def config(**overrides):
    values = dict(
        run_on=["push", "schedule", "workflow_dispatch", "merge_group"],
        gpu_runs_on='["self-hosted","gpu"]',
    )
    return gate.make_config(gate_inputs(**{**values, **overrides}))


def labeled(name="CUDA CI", variant="pull_request.labeled"):
    payload = webhook(variant)
    payload["label"]["name"] = name
    return payload


def pull_answer(sha=HEAD, state="open", draft=False):
    return {"number": 2, "state": state, "draft": draft, "head": {"sha": sha}}


def test_fixture_head_sha_is_what_the_tests_assume():
    assert webhook("pull_request.labeled")["pull_request"]["head"]["sha"] == HEAD


@pytest.mark.parametrize(
    "variant", ["pull_request.labeled", "pull_request.labeled.with-organization"]
)
@pytest.mark.parametrize("event", ["pull_request", "pull_request_target"])
def test_gate_label_needs_an_api_check(variant, event):
    step = gate.triage(event, labeled(variant=variant), config(), "f" * 40)
    assert isinstance(step, gate.PullCheck)
    assert (step.number, step.labeller, step.head_sha) == (2, "Codertocat", HEAD)
    assert step.fork is False


def test_label_is_compared_case_insensitively():
    assert isinstance(gate.triage("pull_request", labeled("cuda ci"), config(), ""), gate.PullCheck)


def test_fixture_label_bug_is_not_the_gate_label():
    decision = gate.triage("pull_request", webhook("pull_request.labeled"), config(), "")
    assert isinstance(decision, gate.Decision) and not decision.run
    assert "'bug', not the gate label 'CUDA CI'" in decision.reason


@pytest.mark.parametrize(
    "fixture",
    [
        "pull_request.opened",
        "pull_request.synchronize",
        "pull_request.reopened",
        "pull_request.unlabeled",
        "pull_request.closed",
    ],
)
def test_other_pull_request_actions_never_run(fixture):
    payload = webhook(fixture)
    payload["pull_request"]["labels"] = [{"name": "CUDA CI"}]  # label still on the PR
    decision = gate.triage("pull_request", payload, config(), "")
    assert isinstance(decision, gate.Decision) and not decision.run
    assert decision.sha == HEAD
    assert "new commits need a new approval" in decision.reason


def push_payload():
    payload = webhook("push")  # the fixture deletes a branch: make it an ordinary push
    payload["before"], payload["after"] = "1" * 40, "c" * 40
    return payload


def test_branch_deletion_push_does_not_run():
    decision = gate.triage("push", webhook("push"), config(), "c" * 40)
    assert isinstance(decision, gate.Decision) and not decision.run
    assert "deleted a branch" in decision.reason


@pytest.mark.parametrize(
    ("event", "payload"),
    [("push", push_payload), ("workflow_dispatch", lambda: webhook("workflow_dispatch"))],
)
def test_run_on_events_run_without_label_at_github_sha(event, payload):
    decision = gate.triage(event, payload(), config(), "c" * 40)
    assert isinstance(decision, gate.Decision) and decision.run
    assert decision.sha == "c" * 40


def test_event_not_in_run_on_does_not_run():
    decision = gate.triage("issue_comment", webhook("issue_comment.created"), config(), "")
    assert isinstance(decision, gate.Decision) and not decision.run
    assert "neither a labelled pull request nor listed in run-on" in decision.reason
    decision = gate.triage("push", push_payload(), config(run_on=["schedule"]), "")
    assert not decision.run


def test_push_with_paths_needs_the_compare_api():
    payload = webhook("push")
    payload["before"], payload["after"] = "1" * 40, "2" * 40
    step = gate.triage("push", payload, config(paths=["src/**"]), "2" * 40)
    assert step == gate.PushCheck(before="1" * 40, after="2" * 40, sha="2" * 40)
    assert gate.decide_push(step, config(paths=["src/**"]), ["src/a.py"]).run
    assert not gate.decide_push(step, config(paths=["src/**"]), ["README.md"]).run


def test_new_branch_push_counts_as_matching_paths():
    payload = push_payload()
    payload["before"] = gate.NULL_SHA
    decision = gate.triage("push", payload, config(paths=["src/**"]), "2" * 40)
    assert isinstance(decision, gate.Decision) and decision.run


def test_fork_is_detected_and_gated_the_same_way():
    payload = labeled()
    payload["pull_request"]["head"]["repo"]["full_name"] = "someone/Hello-World"
    step = gate.triage("pull_request_target", payload, config(), "")
    assert isinstance(step, gate.PullCheck) and step.fork
    decision = gate.decide_pull(step, config(), {"role_name": "write"}, pull_answer(), None)
    assert decision.run and decision.fork and "from a fork" in decision.reason


def test_deleted_fork_counts_as_fork():
    payload = labeled()
    payload["pull_request"]["head"]["repo"] = None
    assert gate.triage("pull_request", payload, config(), "").fork


def check():
    return gate.triage("pull_request", labeled(), config(), "")


@pytest.mark.parametrize(
    ("answer", "minimum", "runs"),
    [
        ({"role_name": "admin", "permission": "admin"}, "write", True),
        ({"role_name": "maintain", "permission": "write"}, "maintain", True),
        ({"role_name": "write", "permission": "write"}, "maintain", False),
        ({"role_name": "triage", "permission": "read"}, "triage", True),
        ({"role_name": "triage", "permission": "read"}, "write", False),
        ({"role_name": "read", "permission": "read"}, "triage", False),
        ({"permission": "write"}, "write", True),  # legacy only
        ({"permission": "write"}, "maintain", False),  # maintain reads as write
        ({"role_name": "ci-bot-role", "permission": "admin"}, "admin", True),  # custom role
        ({"role_name": "none", "permission": "none"}, "triage", False),
    ],
)
def test_roles(answer, minimum, runs):
    cfg = config(min_permission=minimum)
    decision = gate.decide_pull(check(), cfg, answer, pull_answer(), None)
    assert decision.run is runs, decision.reason
    if not runs:
        assert f"needs '{minimum}' or higher" in decision.reason


def test_legacy_fallback_is_explained():
    decision = gate.decide_pull(
        check(), config(min_permission="maintain"), {"permission": "write"}, pull_answer(), None
    )
    assert "legacy permission field" in decision.reason


def test_stale_head_tells_the_maintainer_to_reapply():
    decision = gate.decide_pull(
        check(), config(), {"role_name": "write"}, pull_answer(sha="9" * 40), None
    )
    assert not decision.run
    assert "apply the label again" in decision.reason
    assert decision.current_head == "9" * 40


def test_stale_head_allowed_when_not_required_but_sha_is_the_labelled_one():
    decision = gate.decide_pull(
        check(),
        config(require_fresh_head=False),
        {"role_name": "write"},
        pull_answer(sha="9" * 40),
        None,
    )
    assert decision.run and decision.sha == HEAD


def test_closed_pull_request_does_not_run():
    decision = gate.decide_pull(
        check(), config(), {"role_name": "admin"}, pull_answer(state="closed"), None
    )
    assert not decision.run and "is closed" in decision.reason


def test_draft_skipped_only_with_skip_draft():
    answer = {"role_name": "write"}
    assert gate.decide_pull(check(), config(), answer, pull_answer(draft=True), None).run
    decision = gate.decide_pull(
        check(), config(skip_draft=True), answer, pull_answer(draft=True), None
    )
    assert not decision.run and "draft" in decision.reason


def test_paths_on_pull_request():
    cfg = config(paths=["**/*.cu", "!tests/**"])
    answer = {"role_name": "write"}
    yes = gate.decide_pull(check(), cfg, answer, pull_answer(), ["README.md", "k/a.cu"])
    assert yes.run and yes.paths_matched == "k/a.cu"
    no = gate.decide_pull(check(), cfg, answer, pull_answer(), ["tests/a.cu"])
    assert not no.run and no.paths_matched == "no"


def test_runs_on_follows_the_decision():
    cfg = config()
    assert gate.Decision(True, "", "push").runs_on(cfg) == '["self-hosted","gpu"]'
    assert gate.Decision(False, "", "push").runs_on(cfg) == '"ubuntu-latest"'


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("ubuntu-latest", '"ubuntu-latest"'),
        ('[ "self-hosted" , "gpu" ]', '["self-hosted","gpu"]'),
        ('{"group": "gpu-runners"}', '{"group":"gpu-runners"}'),
    ],
)
def test_runs_on_json(value, expected):
    assert gate.runs_on_json("gpu-runs-on", value) == expected


def test_bad_inputs_are_usage_errors():
    with pytest.raises(UsageError, match="min-permission"):
        config(min_permission="read")
    with pytest.raises(UsageError, match="gpu-runs-on.*does not parse"):
        config(gpu_runs_on='["self-hosted",')
    with pytest.raises(UsageError, match="'label' is none and neither"):
        config(label=" ")


def test_malformed_payload_names_the_variable():
    payload = labeled()
    del payload["pull_request"]["head"]
    with pytest.raises(GpuCiError, match="GITHUB_EVENT_PATH lacks pull_request.number"):
        gate.triage("pull_request", payload, config(), "")
