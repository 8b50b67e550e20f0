"""Tiers that select runner kinds: ``/test mini,rocm <sha>`` runs both tiers' kinds only."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from gpu_ci.errors import UsageError
from gpu_ci.github import comment, gate
from testkit.events import on_pull_request, pull_request_labeled
from testkit.github.gate import gate_inputs
from testkit.github.runs import NOW, gpu_run
from testkit.shared import webhook

REPO = "Codertocat/Hello-World"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
RELAY_BOT = "gpu-ci-relay[bot]"
RELAY_TOKEN = "ghs_relay_app_token"
KINDS = {
    "t4": {"labels": ["gpu-t4"], "price": "0.1"},
    "h100": {"group": "gpu-h100", "price": "0.5"},
    "mi300": {"labels": ["rocm-mi300"], "price": "0.3"},
}
TIERS = "mini: t4, full: t4 h100, rocm: mi300, docs"


def inputs(**kw):
    values = dict(
        gpu_runs_on="",
        comment_command="/test",
        tiers=[e.strip() for e in TIERS.split(",")],
        relay_bot=RELAY_BOT,
        runner_kinds=json.dumps(KINDS),
    )
    return gate_inputs(**{**values, **kw})


def test_a_tier_names_the_kinds_it_selects():
    config = gate.make_config(inputs())
    assert config.tiers == ("mini", "full", "rocm", "docs")
    assert config.selected_kinds(("mini", "rocm")) == ("t4", "mi300")
    assert config.selected_kinds(("full", "mini")) == ("t4", "h100")  # once each, kinds' order
    assert config.selected_kinds(("docs",)) == ()  # a tier without kinds: only the tiers output
    assert config.selected_kinds(()) == ("t4", "h100", "mi300")  # a label: every kind
    assert config.tier_kinds(("rocm", "docs")) == {"rocm": ["mi300"], "docs": []}


def test_plain_tiers_leave_every_kind_selected():
    config = gate.make_config(inputs(tiers=["mini, full"]))
    assert config.selected_kinds(("mini",)) == ("t4", "h100", "mi300")


@pytest.mark.parametrize(
    ("tiers", "says"),
    [
        (["mini: t4 a100"], "gives the tier 'mini' the runner kind 'a100', which gpu-runner-kinds"),
        (["full: t4", "h100"], "lists 'h100', a runner kind, as a tier: separate a tier's kinds"),
        (["mi/ni: t4"], "a tier is one word"),
    ],
)
def test_a_tier_naming_an_unknown_kind_says_what_to_fix(tiers, says):
    with pytest.raises(UsageError) as err:
        gate.make_config(inputs(tiers=tiers))
    assert says in err.value.message
    assert err.value.message.startswith("input 'tiers' ")


@pytest.mark.parametrize(
    "body", [f"/test mini,rocm {HEAD}", f"/test {HEAD} mini,rocm", f"/test mini {HEAD} rocm"]
)
def test_the_sha_may_come_before_or_after_the_tiers(body):
    command = comment.parse_command(body, "/test", ("mini", "rocm", "full"))
    assert command == comment.Command(HEAD, ("mini", "rocm"))


def test_a_second_sha_or_an_unknown_tier_is_refused():
    two = comment.parse_command(f"/test {HEAD} {HEAD[:8]}", "/test", ("mini",))
    assert two is not None and two.problem.startswith("a second SHA 'ec26c3e5'")
    odd = comment.parse_command(f"/test huge {HEAD}", "/test", ("mini",))
    assert odd is not None and odd.problem == (
        "unknown tier 'huge' in the command: the tiers are mini."
    )


def test_a_moved_head_hint_keeps_the_tiers():
    config = gate.make_config(inputs())
    event = on_pull_request(
        webhook("issue_comment.created"), body=f"/test mini,rocm {'1' * 40}", commenter="mai"
    )
    step = gate.triage("issue_comment", event, config, "")
    assert isinstance(step, gate.CommentCheck)
    pull = {"state": "open", "head": {"sha": HEAD}}
    decision = gate.decide_comment(step, config, {"role_name": "write"}, pull, None)
    assert not decision.run
    assert "comment '/test <sha> mini rocm' again with its SHA" in decision.reason


# -- through the CLI and the loopback server ------------------------------------------------


def run_gate(run_cli, server, event_name, event, args=(), tiers=TIERS, kinds=KINDS):
    server.token_users[RELAY_TOKEN] = RELAY_BOT
    env = {
        "GITHUB_API_URL": server.url,
        "GITHUB_REPOSITORY": REPO,
        "INPUT_GITHUB_TOKEN": "ghs_secret",
        "GITHUB_SHA": "d" * 40,
        "GPU_CI_NOW": NOW,
        "INPUT_TIERS": tiers,
        "INPUT_COMMENT_COMMAND": "/test",
        "INPUT_RELAY_BOT": RELAY_BOT,
        "INPUT_RELAY_TOKEN": RELAY_TOKEN,
        "INPUT_GPU_RUNS_ON": "",
        "INPUT_GPU_RUNNER_KINDS": json.dumps(kinds) if kinds else "",
    }
    return run_cli(["gpu-gate", *args], env, event=event, event_name=event_name)


BUDGET = ["--monthly-budget", "$100", "--reserve-minutes", "10"]


def test_test_mini_rocm_runs_both_tiers_kinds_and_reserves_only_them(run_cli, server):
    """The relayed label's run re-reads '/test mini,rocm <sha>': t4 and mi300, not h100."""
    day = datetime(2026, 11, 3, 10, tzinfo=timezone.utc)
    gpu_run(server, day, 20, labels=("rocm-mi300",))  # 20 min at $0.30 = $6.00
    comment_event = on_pull_request(
        webhook("issue_comment.created"), body=f"/test mini,rocm {HEAD}", commenter="Codertocat"
    )
    relayed = run_gate(run_cli, server, "issue_comment", comment_event)
    assert relayed.outputs["relayed"] == "CUDA CI", relayed.stdout
    assert relayed.outputs["selected-kinds"] == "[]"  # the comment's run runs nothing
    server.add_issue_comment(REPO, 2, "Codertocat", f"/test mini,rocm {HEAD}")
    result = run_gate(
        run_cli, server, "pull_request", pull_request_labeled("CUDA CI", RELAY_BOT), BUDGET
    )
    assert result.returncode == 0, result.stdout
    out = result.outputs
    assert out["run"] == "true", out["reason"]
    assert json.loads(out["tiers"]) == ["mini", "rocm"]
    assert json.loads(out["selected-kinds"]) == ["t4", "mi300"]
    assert json.loads(out["tier-kinds"]) == {"mini": ["t4"], "rocm": ["mi300"]}
    assert json.loads(out["matrix"]) == {
        "include": [
            {"kind": "t4", "runs-on": {"labels": ["gpu-t4"]}},
            {"kind": "mi300", "runs-on": {"labels": ["rocm-mi300"]}},
        ]
    }
    runs_on = json.loads(out["runs-on-kinds"])
    assert (runs_on["t4"], runs_on["mi300"]) == ({"labels": ["gpu-t4"]}, {"labels": ["rocm-mi300"]})
    assert out["budget-spent"] == "6.00"
    # 10 min on t4 at $0.10 and 10 min on mi300 at $0.30; nothing for h100
    assert "| this run reserves | $4.00 |" in result.summary
    assert "| reservation | 10 min per kind (t4, mi300) |" in result.summary
    assert "price of kind h100" not in result.summary


def test_a_label_without_tiers_selects_every_kind(run_cli, server):
    result = run_gate(
        run_cli, server, "pull_request", pull_request_labeled("CUDA CI", "Codertocat")
    )
    out = result.outputs
    assert out["run"] == "true", result.stdout
    assert json.loads(out["selected-kinds"]) == ["t4", "h100", "mi300"]
    assert json.loads(out["tier-kinds"]) == {}


def test_a_tiers_file_carries_the_mapping_and_an_unknown_kind_fails_closed(run_cli, server):
    labeled = pull_request_labeled("CUDA CI", RELAY_BOT)
    branch = labeled["repository"]["default_branch"]
    server.repos[REPO].files = {branch: {".github/tiers.txt": "mini: t4  # T4s\nrocm: mi300\n"}}
    server.add_issue_comment(REPO, 2, "Codertocat", f"/test rocm {HEAD}")
    ok = run_gate(run_cli, server, "pull_request", labeled, tiers="file:.github/tiers.txt")
    assert json.loads(ok.outputs["selected-kinds"]) == ["mi300"], ok.stdout
    server.repos[REPO].files = {branch: {".github/tiers.txt": "rocm: mi250\n"}}
    bad = run_gate(run_cli, server, "pull_request", labeled, tiers="file:.github/tiers.txt")
    assert bad.returncode == 1 and bad.outputs["run"] == "false"
    assert bad.outputs["reason"].startswith(
        f"the tiers file .github/tiers.txt on {branch} gives the tier 'rocm' the runner kind "
        "'mi250', which gpu-runner-kinds does not name (its kinds: t4, h100, mi300)"
    )


def test_the_relay_needs_no_kinds_but_the_gpu_workflow_does(run_cli, server):
    """The comment workflow runs no job: its gate may leave gpu-runner-kinds out."""
    body = f"/test mini,rocm {HEAD}"
    event = on_pull_request(webhook("issue_comment.created"), body=body, commenter="Codertocat")
    relayed = run_gate(run_cli, server, "issue_comment", event, kinds=None)
    assert relayed.outputs["relayed"] == "CUDA CI", relayed.stdout
    server.log.clear()
    labeled = pull_request_labeled("CUDA CI", RELAY_BOT)
    refused = run_gate(run_cli, server, "pull_request", labeled, kinds=None)
    assert refused.returncode == 2 and server.log == []
    assert (
        "input 'tiers' gives the tier 'mini' the runner kind 't4', which gpu-runner-kinds does "
        "not name (its kinds: none: gpu-runner-kinds is empty)"
    ) in refused.stdout
