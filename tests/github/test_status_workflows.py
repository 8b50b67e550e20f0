"""The example workflows of the GPU CI status and the watchdog: inert where privileged,
permissions exactly as the README's table says, and one gate configuration."""

from __future__ import annotations

import re

import yaml

from testkit.shared import ROOT

EXAMPLES = ROOT / "examples"
PRIVILEGED = ("cuda-ci-remove-label.yml", "cuda-ci-status.yml", "cuda-ci-watchdog.yml")


def load(name: str) -> dict:
    return yaml.safe_load((EXAMPLES / name).read_text())


def test_privileged_workflows_run_no_code_of_the_pull_request():
    for name in PRIVILEGED:
        flow = load(name)
        assert flow["permissions"] == {}, name
        for job_id, job in flow["jobs"].items():
            for step in job["steps"]:
                assert "run" not in step, (name, job_id, step)
                uses = step["uses"]
                assert uses.startswith("gpu-ci-actions/gpu-ci-actions/actions/"), (name, uses)


def readme_permissions() -> dict[str, set[str]]:
    """examples/<file> -> every permission its jobs have, from the README's table."""
    text = (ROOT / "README.md").read_text()
    table = {}
    for line in text.splitlines():
        match = re.match(r"\| `examples/([\w.-]+)` \|[^|]*\| ([^|]*) \|", line)
        if match:
            table[match.group(1)] = set(re.findall(r"`([a-z-]+: (?:read|write))`", match.group(2)))
    return table


def test_permissions_match_the_readme_table():
    table = readme_permissions()
    assert set(PRIVILEGED) <= set(table)
    for name in PRIVILEGED:
        granted = {
            f"{scope}: {level}"
            for job in load(name)["jobs"].values()
            for scope, level in job.get("permissions", {}).items()
        }
        assert granted == table[name], name
    # statuses: write is the only write the status adds to the label remover, and
    # pull-requests: write the one its comment adds (tests/github/test_pr_comment_workflows.py)
    remover = load("cuda-ci-remove-label.yml")["jobs"]
    assert remover["status"]["permissions"] == {"pull-requests": "write", "statuses": "write"}


def test_the_status_workflow_follows_the_gpu_workflow_by_name():
    gpu = load("cuda-ci.yml")
    status = load("cuda-ci-status.yml")
    assert status[True]["workflow_run"]["workflows"] == [gpu["name"]]
    gpu_jobs = status["jobs"]["status"]["steps"][0]["with"]["gpu-jobs"]
    assert gpu_jobs in gpu["jobs"]


def test_the_privileged_gate_decides_like_the_gpu_workflows_gate():
    """The status says 'approved' from the remover's gate; the GPU job runs from the GPU
    workflow's gate: their decision inputs must be the same (runner labels aside)."""
    runner_only = {"gpu-runs-on", "cpu-runs-on", "github-token"}

    def gate_inputs(flow: dict) -> dict:
        for job in flow["jobs"].values():
            for step in job["steps"]:
                if "/actions/gpu-gate@" in step.get("uses", ""):
                    return {
                        k: v for k, v in (step.get("with") or {}).items() if k not in runner_only
                    }
        raise AssertionError("no gpu-gate step")

    assert gate_inputs(load("cuda-ci-remove-label.yml")) == gate_inputs(load("cuda-ci.yml"))
    events = load("cuda-ci-remove-label.yml")[True]["pull_request_target"]["types"]
    assert {"labeled", "opened", "synchronize", "reopened"} <= set(events)
