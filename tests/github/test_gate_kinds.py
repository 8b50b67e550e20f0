"""gpu-gate's gpu-runner-kinds: a runs-on per kind, and the budget at each kind's price."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from gpu_ci.errors import UsageError
from gpu_ci.github import gate
from testkit.github.runs import gate as gate_cli
from testkit.github.runs import gpu_run

KINDS = {
    "b200": {"group": "gpu-b200", "price": "6/h"},
    "h100x8": {"labels": ["linux", "h100x8"], "price": "0.5"},
}
NO_RUNS_ON = {"INPUT_GPU_RUNS_ON": "", "INPUT_GPU_RUNNER_KINDS": json.dumps(KINDS)}
BUDGET = ["--monthly-budget", "$100", "--reserve-minutes", "10", "--gpu-workflows", "cuda-ci.yml"]


def test_each_kind_gets_its_own_runs_on(run_cli, server):
    result = gate_cli(run_cli, server, env=NO_RUNS_ON)
    assert result.returncode == 0, result.stdout
    out = result.outputs
    assert out["run"] == "true"
    assert json.loads(out["runs-on-kinds"]) == {
        "b200": {"group": "gpu-b200"},
        "h100x8": {"labels": ["linux", "h100x8"]},
    }
    assert json.loads(out["kinds"]) == ["b200", "h100x8"]
    assert "gpu-runs-on is not set" not in result.stdout  # no notice with kinds


def test_a_refusal_sends_every_kind_to_the_cpu_runner(run_cli, server):
    server.repos["Codertocat/Hello-World"].pulls[2].state = "closed"
    out = gate_cli(run_cli, server, env=NO_RUNS_ON).outputs
    assert out["run"] == "false"
    assert json.loads(out["runs-on-kinds"]) == {"b200": "ubuntu-latest", "h100x8": "ubuntu-latest"}


def test_the_budget_counts_each_kind_at_its_price(run_cli, server):
    day = datetime(2026, 11, 3, 10, tzinfo=timezone.utc)
    gpu_run(server, day, 10, labels=("self-hosted", "b200"))  # no kind: not a GPU job
    b200 = gpu_run(server, day, 10, labels=())
    b200.jobs[-1].runner_group_name = "gpu-b200"  # 10 min at $0.10 = $1.00
    gpu_run(server, day, 20, labels=("linux", "h100x8"))  # 20 min at $0.50 = $10.00
    result = gate_cli(run_cli, server, BUDGET, env=NO_RUNS_ON)
    assert result.returncode == 0, result.stdout
    out = result.outputs
    assert out["run"] == "true" and out["budget-spent"] == "11.00"
    # the reservation: 10 minutes on each kind, $1.00 + $5.00
    assert "| this run reserves | $6.00 |" in result.summary
    assert "| price of kind b200 | $0.1/min |" in result.summary
    assert "| price of kind h100x8 | $0.5/min |" in result.summary


def test_a_reservation_over_the_budget_refuses_across_kinds(run_cli, server):
    day = datetime(2026, 11, 3, 10, tzinfo=timezone.utc)
    gpu_run(server, day, 20, labels=("linux", "h100x8"))  # $10.00
    out = gate_cli(run_cli, server, ["--monthly-budget", "$15.99", *BUDGET[2:]], env=NO_RUNS_ON)
    assert out.outputs["run"] == "false"  # $10 + $6 reserved > $15.99
    assert "reserves $6.00 (20 min)" in out.outputs["reason"]


def test_an_unpriced_kind_with_a_money_budget_needs_gpu_price(run_cli, server):
    kinds = {"b200": {"group": "gpu-b200"}, "h100x8": {"labels": ["h100x8"], "price": "0.5"}}
    env = {**NO_RUNS_ON, "INPUT_GPU_RUNNER_KINDS": json.dumps(kinds)}
    result = gate_cli(run_cli, server, BUDGET, env=env)
    assert result.returncode == 2
    assert "'gpu-price' is needed" in result.stdout  # h100x8's price prices no b200 job
    assert server.log == []
    priced = gate_cli(run_cli, server, [*BUDGET, "--gpu-price", "0.2"], env=env)
    assert priced.outputs["run"] == "true", priced.stdout
    assert "| price of kind b200 | $0.2/min |" in priced.summary


def test_a_bad_kind_price_is_exit_2_before_any_call(run_cli, server):
    kinds = {"b200": {"group": "gpu-b200", "price": "cheap"}}
    env = {**NO_RUNS_ON, "INPUT_GPU_RUNNER_KINDS": json.dumps(kinds)}
    result = gate_cli(run_cli, server, BUDGET, env=env)
    assert result.returncode == 2
    assert "input 'gpu-runner-kinds', kind 'b200': 'cheap' is neither" in result.stdout
    assert server.log == []


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[1]", "must be a JSON object"),
        ('{"a b": "gpu"}', "names a kind 'a b'"),
        ('{"b200": {"price": "1"}}', "no 'group', no 'labels' and no 'label-prefix'"),
        ('{"b200": {"group": "g", "runs-on": "x"}}', "the key(s) runs-on"),
        ("{", "is not JSON"),
    ],
)
def test_bad_kinds_say_what_to_write(text, says):
    with pytest.raises(UsageError) as err:
        gate.parse_kinds(text)
    assert says in err.value.message and '"b200": {"group"' in err.value.message


def test_a_label_prefix_kind_counts_gpu_cloud_runner_vms_at_its_price(run_cli, server):
    """gpu-cloud-runner's GPU job asks for its VM's own label, gpu-ci-<run>-…: a kind with
    that label prefix counts it, completed or waiting for its VM; no runs-on of its own."""
    from testkit.github_server import Job

    kinds = {"cloud": {"label-prefix": "gpu-ci-", "price": "1.2/h"}}  # $0.02/min
    env = {"INPUT_GPU_RUNS_ON": "", "INPUT_GPU_RUNNER_KINDS": json.dumps(kinds)}
    day = datetime(2026, 11, 3, 10, tzinfo=timezone.utc)
    gpu_run(server, day, 50, labels=("gpu-ci-4242-1-tests-20261103t100000",))  # $1.00
    waiting = gpu_run(server, day, 0, status="in_progress", labels=("x",))
    waiting.jobs[-1] = Job(
        server.next_id(),
        "tests",
        ["gpu-ci-4343-1-tests-20261130t135900"],
        status="queued",
        created_at="2026-11-30T13:59:00Z",
    )  # this repository's run waits for its VM: it reserves 10 minutes, $0.20
    result = gate_cli(run_cli, server, BUDGET, env=env)
    assert result.returncode == 0, result.stdout
    out = result.outputs
    assert out["run"] == "true" and out["budget-spent"] == "1.20", result.summary
    assert json.loads(out["runs-on-kinds"]) == {}  # the VM's label comes from its start job
    assert json.loads(out["kinds"]) == ["cloud"]
    assert "| GPU jobs | kind cloud (labels starting gpu-ci- at $0.02/min) |" in result.summary
    # the example's former gpu-runs-on counted none of it
    old = {"INPUT_GPU_RUNS_ON": "gpu-ci-cloud", "INPUT_GPU_PRICE": "1.2/h"}
    assert gate_cli(run_cli, server, BUDGET, env=old).outputs["budget-spent"] == "0.00"


@pytest.mark.parametrize(
    ("runner", "says"),
    [
        ({"label-prefix": "gpu-ci-", "group": "g"}, "both 'label-prefix' and a group or labels"),
        ({"label-prefix": "g"}, "a 'label-prefix' shorter than 3 characters"),
    ],
)
def test_a_bad_label_prefix_kind_says_what_to_write(runner, says):
    with pytest.raises(UsageError) as err:
        gate.parse_kinds(json.dumps({"cloud": runner}))
    assert says in err.value.message
