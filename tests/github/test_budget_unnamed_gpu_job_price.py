"""The budget against GPU jobs that name no kind they ran on.

A job that asks only for generic labels (``runs-on: self-hosted``) counts as a GPU job,
since GitHub may give it any GPU runner. Which runner took it decides what it cost: its
``runner_name`` names it, and the repository's runner list gives that runner's labels.
"""

from __future__ import annotations

import json

from testkit.github.runs import assert_refused_at, gate, hostile_gpu_hours

#: gpu-gate README's own example of gpu-runner-kinds: no gpu-price, every kind priced.
KINDS = json.dumps(
    {
        "b200": {"group": "gpu-b200", "price": "6.50/h"},
        "h100x8": {"labels": ["linux", "h100x8"], "price": "24/h"},
    }
)
ONLY_KINDS = {"INPUT_GPU_RUNS_ON": "", "INPUT_GPU_RUNNER_KINDS": KINDS}
MONEY = ["--monthly-budget", "$2000", "--gpu-price", "", "--reserve-minutes", "60"]
H100_BOX = ("self-hosted", "linux", "x64", "h100x8")


def test_a_forks_self_hosted_job_on_the_dearest_kind_is_priced_as_that_kind(run_cli, server):
    """A fork's `runs-on: self-hosted` job, 200 h on an h100x8 box, is priced as a b200."""
    # the h100x8 boxes are not in the b200 group
    hostile_gpu_hours(server, ("self-hosted",), H100_BOX, "Default", "pull_request_review")
    result = gate(run_cli, server, MONEY, env=ONLY_KINDS)
    # 200 h on an h100x8 at $24/h is $4,800, not 200 h at the b200's $6.50/h ($1,300)
    assert_refused_at(result, "4800.00")


def test_a_forks_group_alone_job_on_a_kind_without_a_group_is_counted(run_cli, server):
    """A fork's `runs-on: {group: Default}` job, 200 h on the h100x8 box, costs $0."""
    # a repository's own runners are all in its group "Default"
    hostile_gpu_hours(server, (), H100_BOX, "Default", "pull_request_review")
    result = gate(run_cli, server, MONEY, env=ONLY_KINDS)
    assert result.returncode == 0, result.stdout
    assert result.outputs["budget-spent"] != "0.00", result.stdout
    assert result.outputs["run"] == "false", result.stdout
