"""The budget against GPU runner kinds whose labels one another's runners share.

An admin's T4 boxes carry ``gpu``; the H100 box carries ``gpu`` and ``h100x8``. GitHub gives
a job asking for ``gpu`` any of them, and a job asking for ``[gpu, h100x8]`` the H100 box, so
the cheaper kind's labels do not say which runner took the job.
"""

from __future__ import annotations

import json

import pytest

from testkit.github.runs import assert_refused_at, gate, hostile_gpu_hours

H100_BOX = ("self-hosted", "linux", "x64", "gpu", "h100x8")
MONEY = ["--monthly-budget", "$2000", "--reserve-minutes", "60"]


def _env(kinds: dict[str, object], runs_on: str = "") -> dict[str, str]:
    return {"INPUT_GPU_RUNS_ON": runs_on, "INPUT_GPU_RUNNER_KINDS": json.dumps(kinds)}


@pytest.mark.parametrize(
    "labels",
    [
        pytest.param(("gpu",), id="the-shared-label"),
        pytest.param(("self-hosted", "gpu", "h100x8"), id="the-dear-kinds-own-labels"),
    ],
)
def test_a_job_on_the_dear_kinds_runner_is_not_priced_as_the_cheap_kind(run_cli, server, labels):
    """A fork's `runs-on: gpu` job, 200 h on the h100x8 box, is priced as a T4."""
    kinds = {
        "t4": {"labels": ["self-hosted", "gpu"], "price": "0.50/h"},
        "h100x8": {"labels": ["self-hosted", "gpu", "h100x8"], "price": "24/h"},
    }
    hostile_gpu_hours(server, labels, H100_BOX)
    result = gate(run_cli, server, [*MONEY, "--gpu-price", ""], env=_env(kinds))
    # 200 h on an h100x8 at $24/h is $4,800, not 200 h at the T4's $0.50/h ($100)
    assert_refused_at(result, "4800.00")


def test_a_job_on_the_gpu_runs_on_runner_is_not_priced_as_a_cheaper_kind(run_cli, server):
    """A fork's `runs-on: gpu` job, 200 h on the gpu-runs-on H100, is priced as a T4."""
    kinds = {"t4": {"labels": ["self-hosted", "gpu"], "price": "0.50/h"}}
    env = _env(kinds, json.dumps(["self-hosted", "gpu", "h100x8"]))
    hostile_gpu_hours(server, ("gpu",), H100_BOX)
    result = gate(run_cli, server, [*MONEY, "--gpu-price", "24/h"], env=env)
    assert_refused_at(result, "4800.00")  # the H100 at gpu-price $24/h, not the T4's $100


def test_kinds_written_as_the_readme_asks_price_the_shared_label_at_the_dearest(run_cli, server):
    """The README's rule: a kind lists every label its runners carry (`gpu` on the H100 too)."""
    kinds = {
        "t4": {"labels": "gpu", "price": "0.50/h"},
        "h100x8": {"labels": ["gpu", "h100x8"], "price": "24/h"},
    }
    hostile_gpu_hours(server, ("gpu",), H100_BOX)
    result = gate(run_cli, server, [*MONEY, "--gpu-price", ""], env=_env(kinds))
    assert_refused_at(result, "4800.00")
