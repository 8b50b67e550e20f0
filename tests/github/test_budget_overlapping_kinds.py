"""The budget against GPU runner kinds whose labels one another's runners share.

An admin's T4 boxes carry ``gpu``; the H100 box carries ``gpu`` and ``h100x8``. GitHub gives
a job asking for ``gpu`` any of them, and a job asking for ``[gpu, h100x8]`` the H100 box, so
the cheaper kind's labels do not say which runner took the job.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from testkit.github.runs import REPO, gate, gpu_run
from testkit.github_server import add_runner

HOSTILE = ".github/workflows/miner.yml"
KINDS = json.dumps(
    {
        "t4": {"labels": ["self-hosted", "gpu"], "price": "0.50/h"},
        "h100x8": {"labels": ["self-hosted", "gpu", "h100x8"], "price": "24/h"},
    }
)
ONLY_KINDS = {"INPUT_GPU_RUNS_ON": "", "INPUT_GPU_RUNNER_KINDS": KINDS}
MONEY = ["--monthly-budget", "$2000", "--gpu-price", "", "--reserve-minutes", "60"]


@pytest.mark.parametrize(
    "labels",
    [
        pytest.param(("gpu",), id="the-shared-label"),
        pytest.param(("self-hosted", "gpu", "h100x8"), id="the-dear-kinds-own-labels"),
    ],
)
def test_a_job_on_the_dear_kinds_runner_is_not_priced_as_the_cheap_kind(run_cli, server, labels):
    """A fork's `runs-on: gpu` job, 200 h on the h100x8 box, is priced as a T4."""
    add_runner(
        server,
        REPO,
        "gpu-1",
        labels=["self-hosted", "linux", "x64", "gpu", "h100x8"],
        status="online",
    )
    gpu_run(
        server,
        datetime(2026, 11, 20, 1, tzinfo=timezone.utc),
        200 * 60,
        path=HOSTILE,
        labels=labels,  # GitHub gives it gpu-1, the idle h100x8 runner
    )
    result = gate(run_cli, server, MONEY, env=ONLY_KINDS)
    assert result.returncode == 0, result.stdout
    # 200 h on an h100x8 at $24/h is $4,800, not 200 h at the T4's $0.50/h ($100)
    assert result.outputs["budget-spent"] == "4800.00", result.stdout
    assert result.outputs["run"] == "false", result.stdout


def test_kinds_written_as_the_readme_asks_price_the_shared_label_at_the_dearest(run_cli, server):
    """The README's rule: a kind lists every label its runners carry (`gpu` on the H100 too)."""
    kinds = {"t4": {"labels": "gpu", "price": "0.50/h"}}
    kinds["h100x8"] = {"labels": ["gpu", "h100x8"], "price": "24/h"}
    env = {"INPUT_GPU_RUNS_ON": "", "INPUT_GPU_RUNNER_KINDS": json.dumps(kinds)}
    gpu_run(server, datetime(2026, 11, 20, 1, tzinfo=timezone.utc), 200 * 60, labels=("gpu",))
    result = gate(run_cli, server, MONEY, env=env)
    assert result.returncode == 0, result.stdout
    assert result.outputs["budget-spent"] == "4800.00", result.stdout
    assert result.outputs["run"] == "false", result.stdout
