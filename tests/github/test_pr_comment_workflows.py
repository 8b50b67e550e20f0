"""The example workflows that write gpu-status's pull-request comment: only the inert
privileged ones, with the permission it needs, and one comment configuration."""

from __future__ import annotations

from typing import Any

import yaml

from gpu_ci.github.status.pr_comment import DEFAULT_COMMAND
from gpu_ci.specs import GPU_GATE, GPU_STATUS
from testkit.shared import ROOT

EXAMPLES = ROOT / "examples"
#: The inert privileged workflows (no checkout, no run: step; tests/github/test_status_workflows.py)
INERT = ("cuda-ci-remove-label.yml", "cuda-ci-status.yml")
#: gpu-gate's own default for the command (once it has the input; issue 31 item 1).
GATE_DEFAULT = next(
    (i.default for i in GPU_GATE.inputs if i.name == "comment-command"), DEFAULT_COMMAND
)
COMMENT_INPUTS = ("comment", "comment-command", "comment-help", "comment-on-close")


def steps_of(name: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(job, step) of every step of examples/<name>."""
    flow = yaml.safe_load((EXAMPLES / name).read_text())
    return [(job, step) for job in flow["jobs"].values() for step in job.get("steps", [])]


def status_steps(name: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [
        (job, step)
        for job, step in steps_of(name)
        if "/actions/gpu-status@" in str(step.get("uses", ""))
    ]


def comment_inputs(step: dict[str, Any]) -> dict[str, str]:
    """The step's comment inputs, defaults filled in (YAML's true as 'true')."""
    given = step.get("with") or {}
    defaults = {i.name: i.default for i in GPU_STATUS.inputs}
    out = {k: str(given.get(k, defaults[k])) for k in COMMENT_INPUTS}
    out["comment"] = out["comment"].lower()
    return out


def test_only_the_inert_workflows_write_the_comment_and_they_may():
    commenting = []
    for path in sorted(EXAMPLES.glob("*.yml")):
        for job, step in status_steps(path.name):
            if comment_inputs(step)["comment"] != "true":
                continue
            commenting.append(path.name)
            assert path.name in INERT, path.name
            assert job["permissions"].get("pull-requests") == "write", path.name
    assert sorted(set(commenting)) == sorted(INERT)


def test_both_workflows_write_the_same_comment():
    """The comment is written by both workflows (state changes come from both): a help text
    or command set in one only would flip at each event."""
    (first,), (second,) = (status_steps(name) for name in INERT)
    assert comment_inputs(first[1]) == comment_inputs(second[1])


def test_the_comment_names_the_command_the_gate_accepts():
    for name in INERT:
        gate = [s for _, s in steps_of(name) if "/actions/gpu-gate@" in str(s.get("uses", ""))]
        for _, step in status_steps(name):
            named = comment_inputs(step)["comment-command"]
            for g in gate:
                accepted = str((g.get("with") or {}).get("comment-command", GATE_DEFAULT))
                assert named == accepted, name


def test_the_remover_handles_closed_for_the_comment():
    flow = yaml.safe_load((EXAMPLES / "cuda-ci-remove-label.yml").read_text())
    assert "closed" in flow[True]["pull_request_target"]["types"]
    assert "label.name" in flow["jobs"]["remove-label"]["if"]  # no label removal on close
