"""gpu-spend and gpu-watchdog read gpu-gate's gpu-runner-kinds: each kind at its own price."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from testkit.github.approvals import approved_pull, checks_url
from testkit.github.infra_jobs import REPO, failed_run
from testkit.github.runs import gpu_run, spend, watchdog_env

KINDS = json.dumps(
    {"t4": {"labels": ["gpu-t4"], "price": "0.1"}, "h100": {"group": "gpu-h100", "price": "6/h"}}
)
ONLY_KINDS = {"INPUT_GPU_RUNS_ON": "", "INPUT_GPU_RUNNER_KINDS": KINDS}
DAY = datetime(2026, 11, 3, 10, tzinfo=timezone.utc)


def test_gpu_spend_prices_each_job_by_its_kind_and_breaks_the_month_down_by_kind(
    run_cli, server, tmp_path
):
    gpu_run(server, DAY, 10, labels=("gpu-t4",))  # 10 min at $0.10
    h100 = gpu_run(server, DAY, 20, labels=())
    h100.jobs[-1].runner_group_name = "gpu-h100"  # 20 min at $0.10 (6/h)
    gpu_run(server, DAY, 30, labels=("self-hosted", "cpu"))  # no kind: not a GPU job
    # no gpu-price: every kind has its own, which also prices the money budget
    args = ["--gpu-price", "", "--monthly-budget", "$10"]
    result = spend(run_cli, server, tmp_path, args, env=ONLY_KINDS)
    assert result.returncode == 0, result.stdout
    assert (result.outputs["minutes"], result.outputs["cost"]) == ("30", "3.00")
    assert result.outputs["budget-left"] == "7.00"
    doc = json.loads((tmp_path / "out" / "spend.json").read_text())
    assert [(r["key"], r["minutes"], r["usd"]) for r in doc["by"]["kind"]] == [
        ("h100", 20, "2.0"),
        ("t4", 10, "1.0"),
    ]
    assert doc["kind_prices"] == {"t4": "$0.1/min", "h100": "$0.1/min"}
    assert sorted(j["kind"] for j in doc["jobs"]) == ["h100", "t4"]
    assert "| cost | $3.00 at kind t4 $0.1/min, kind h100 $0.1/min |" in result.summary


def test_gpu_spend_without_runs_on_or_kinds_says_what_to_set(run_cli, server, tmp_path):
    result = spend(run_cli, server, tmp_path, env={"INPUT_GPU_RUNS_ON": ""})
    assert result.returncode == 2
    assert "gpu-spend needs 'gpu-runs-on' or 'gpu-runner-kinds'" in result.stdout


def test_an_unpriced_kind_needs_gpu_price_for_a_money_budget(run_cli, server, tmp_path):
    kinds = json.dumps({"t4": ["gpu-t4"], "h100": {"group": "gpu-h100", "price": "0.5"}})
    env = {**ONLY_KINDS, "INPUT_GPU_RUNNER_KINDS": kinds}
    args = ["--gpu-price", "", "--monthly-budget", "$10"]
    result = spend(run_cli, server, tmp_path, args, env=env)
    assert result.returncode == 2 and "'gpu-price' is needed" in result.stdout


def test_ledger_rows_written_before_kinds_still_read():
    from gpu_ci.github.spend.budget import JobCost

    row = JobCost(1, 1, 2, "t", "cuda-ci.yml", "push", "", "a", "gpu", "2026-11-03", 3, "", "x")
    old = {k: v for k, v in row.to_json().items() if k != "kind"}
    assert JobCost.from_json(old) == row


def test_the_watchdog_reserves_a_re_run_at_its_kinds_price(run_cli, github):
    """30 minutes spent on the spot kind at $1.00: a re-run reserves 60 more at $1.00.

    Priced by gpu-price ($0.10) the same re-run would fit the $80 budget."""
    approved_pull(github, REPO, "a" * 40, url=checks_url(2, REPO))
    start = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=2)
    run = failed_run(github, start)  # its GPU job asked for self-hosted, gpu, spot
    spot = json.dumps({"spot": {"labels": ["spot"], "price": "1.0"}})
    inputs = {
        "INPUT_RETRY_INFRA_FAILURES": "1",
        "INPUT_CONTEXT": "GPU CI",
        "INPUT_MONTHLY_BUDGET": "$80",
        "INPUT_GPU_PRICE": "0.1",
        "INPUT_RESERVE_MINUTES": "60",
        "INPUT_GPU_RUNS_ON": "",
    }
    refused = run_cli(
        ["gpu-watchdog"], watchdog_env(github, REPO, **inputs, INPUT_GPU_RUNNER_KINDS=spot)
    )
    assert refused.returncode == 0, refused.stdout
    assert json.loads(refused.outputs["retried"]) == [], refused.summary
    assert "this run reserves $60.00 (60 min): over the budget" in refused.summary
    assert run.run_attempt == 1
    cheap = run_cli(
        ["gpu-watchdog"], watchdog_env(github, REPO, **{**inputs, "INPUT_GPU_RUNS_ON": "spot"})
    )
    assert json.loads(cheap.outputs["retried"]) == [run.id], cheap.summary


def test_the_gate_reads_a_ledger_gpu_spend_wrote_with_the_same_kinds(run_cli, server, tmp_path):
    from testkit.github.runs import gate, upload_ledger

    gpu_run(server, DAY, 10, labels=("gpu-t4",))
    spend(run_cli, server, tmp_path, ["--gpu-price", ""], env=ONLY_KINDS)
    upload_ledger(server, (tmp_path / "out" / "gpu-spend-ledger.json").read_bytes())
    args = ["--monthly-budget", "$100", "--reserve-minutes", "10"]
    result = gate(run_cli, server, args, env=ONLY_KINDS)
    assert result.outputs["budget-spent"] == "1.00", result.stdout
    assert ": 1 runs reused |" in result.summary, result.summary
