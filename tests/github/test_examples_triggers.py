"""No example runs pull request code in a workflow GitHub starts from the default branch.

``issue_comment``, ``pull_request_target`` and ``workflow_run`` runs get the default
branch's cache scope, secrets and a token that can write; anyone can trigger them. Their
jobs may only run our actions and a few well-known ones that run no checked-out code; no
job in them checks out a ref an event names, runs a shell after a checkout, downloads
another run's artifacts, calls a reusable workflow or runs on the GPU runners. A
``schedule`` run names no pull request, so it may check out only default-branch code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.shared import ROOT

PRIVILEGED = ("issue_comment", "pull_request_target", "workflow_run")
#: Actions that run no code of the repository they are used in.
INERT_ACTIONS = (
    "gpu-ci-actions/gpu-ci-actions/actions/",
    "actions/create-github-app-token@",
    "actions/upload-artifact@",
)
#: What a schedule run's checkout may not name: anything of a pull request.
PULL_REFS = ("pull", "workflow_run", "comment", "head_ref", "head.sha", "head_sha")


def triggers(workflow: dict[Any, Any]) -> list[str]:
    on = workflow.get(True, workflow.get("on"))  # YAML 1.1 reads the key `on` as true
    if isinstance(on, str):
        return [on]
    return list(on or [])


def pr_code(workflow: dict[Any, Any], events: list[str]) -> list[str]:
    """Why jobs of ``workflow`` would run pull request code under ``events``."""
    found = []
    privileged = any(event in PRIVILEGED for event in events)
    for name, job in (workflow.get("jobs") or {}).items():
        if privileged and "uses" in job:
            found.append(f"job {name} calls the reusable workflow {job['uses']}")
        if privileged and "needs." in str(job.get("runs-on", "")):
            found.append(f"job {name} runs on runners a gate chose: {job['runs-on']}")
        checked_out = False
        for step in job.get("steps") or []:
            uses = str(step.get("uses") or "")
            ref = str((step.get("with") or {}).get("ref") or "")
            if uses.startswith("actions/checkout@"):
                checked_out = True
                if privileged and "${{" in ref:
                    found.append(f"job {name} checks out {ref}")
                if "schedule" in events and any(word in ref for word in PULL_REFS):
                    found.append(f"job {name} checks out {ref} on schedule")
            elif privileged and "run" in step and checked_out:
                found.append(f"job {name} runs a shell after a checkout")
            elif privileged and uses and not uses.startswith(INERT_ACTIONS):
                found.append(f"job {name} uses {uses}, which may run checked-out code")
    return found


EXAMPLES = sorted((ROOT / "examples").glob("*.yml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_no_example_runs_pull_request_code_in_a_default_branch_workflow(path: Path):
    workflow = yaml.safe_load(path.read_text(encoding="utf-8"))
    events = [e for e in triggers(workflow) if e in (*PRIVILEGED, "schedule")]
    assert pr_code(workflow, events) == []


def test_the_rule_catches_the_comment_workflow_that_ran_the_gpu_job():
    """The comment example as it was (gate, then the GPU job at the gate's SHA) fails."""
    old = {
        True: {"issue_comment": {"types": ["created"]}},
        "jobs": {
            "gate": {"runs-on": "ubuntu-latest", "steps": [{"uses": INERT_ACTIONS[0] + "x@v2"}]},
            "tests": {
                "runs-on": "${{ fromJSON(needs.gate.outputs.runs-on) }}",
                "steps": [
                    {
                        "uses": "actions/checkout@v4",
                        "with": {"ref": "${{ needs.gate.outputs.sha }}"},
                    },
                    {"uses": "gpu-ci-actions/gpu-ci-actions/actions/setup-conda-from-lock@v2"},
                    {"run": "python -m pytest"},
                ],
            },
        },
    }
    assert pr_code(old, ["issue_comment"]) == [
        "job tests runs on runners a gate chose: ${{ fromJSON(needs.gate.outputs.runs-on) }}",
        "job tests checks out ${{ needs.gate.outputs.sha }}",
        "job tests runs a shell after a checkout",
    ]
    scheduled = {
        "jobs": {
            "t": {
                "steps": [
                    {
                        "uses": "actions/checkout@v4",
                        "with": {"ref": "${{ github.event.pull_request.head.sha }}"},
                    }
                ]
            }
        }
    }
    assert pr_code(scheduled, ["schedule"]) == [
        "job t checks out ${{ github.event.pull_request.head.sha }} on schedule"
    ]
    assert pr_code({"jobs": {"r": {"uses": "o/r/.github/workflows/x.yml@v2"}}}, ["workflow_run"])
    other = {"jobs": {"j": {"steps": [{"uses": "someone/runs-make@v2"}]}}}
    assert pr_code(other, ["pull_request_target"]) == [
        "job j uses someone/runs-make@v2, which may run checked-out code"
    ]


def test_the_comment_example_is_a_relay_with_an_app_token_and_no_gpu_job():
    workflow = yaml.safe_load((ROOT / "examples" / "cuda-ci-comment.yml").read_text("utf-8"))
    assert triggers(workflow) == ["issue_comment"]
    assert workflow["permissions"] == {}
    (job,) = workflow["jobs"].values()
    assert job["permissions"] == {"pull-requests": "read"}
    app, gate = job["steps"]
    assert app["uses"].startswith("actions/create-github-app-token@")
    assert len(app["uses"].split("@")[1].split()[0]) == 40  # pinned by SHA
    assert app["with"]["permission-pull-requests"] == "write"
    assert gate["with"]["relay-token"] == "${{ steps.app.outputs.token }}"
    assert gate["with"]["relay-bot"] == "${{ steps.app.outputs.app-slug }}[bot]"


#: Examples that say they serve no fork: gpu-cloud-runner needs secrets a fork's run lacks.
NO_FORKS = ("gpu-cloud-runner.yml",)


def gated_vars(workflow: dict[Any, Any]) -> list[str]:
    """The jobs after a gate that read repository variables (``vars``)."""
    return [
        name
        for name, job in (workflow.get("jobs") or {}).items()
        if "needs" in job and "vars." in str(job)
    ]


def serves_forks(path: Path) -> bool:
    workflow = yaml.safe_load(path.read_text(encoding="utf-8"))
    return "pull_request" in triggers(workflow) and path.name not in NO_FORKS


FORK_RUNS = [p for p in EXAMPLES if serves_forks(p)]


@pytest.mark.parametrize("path", FORK_RUNS, ids=[p.name for p in FORK_RUNS])
def test_no_gated_job_of_a_pull_request_reads_repository_variables(path: Path):
    """A fork's ``pull_request`` run gets no ``vars``: a job reading one breaks there."""
    workflow = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert gated_vars(workflow) == [], path.name


def test_the_variables_rule_catches_an_image_digest_kept_in_vars():
    image = "ml-build@sha256:${{ vars.ML_BUILD_DIGEST }}"
    workflow = {"jobs": {"gate": {}, "gpu": {"needs": "gate", "container": {"image": image}}}}
    assert gated_vars(workflow) == ["gpu"]
