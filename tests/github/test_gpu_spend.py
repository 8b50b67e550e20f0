"""gpu-spend: the month's GPU minutes and cost by workflow, pull request, approver and runner,
the budget line, a Mermaid chart mermaid's parser accepts, JSON and CSV that add up."""

from __future__ import annotations

import csv
import json
import re
from datetime import datetime, timezone
from decimal import Decimal

import pytest

from testkit.github.runs import GPU_RUNS_ON, REPO, gpu_run, month_of_runs, spend
from testkit.mermaid_check import assert_charts_parse, require_mermaid


@pytest.fixture
def month(server):
    month_of_runs(server, per_day=3, days=5)  # 15 × 12 min, alice/bob
    gpu_run(
        server,
        datetime(2026, 11, 7, 9, tzinfo=timezone.utc),
        30,
        event="push",
        pr=None,
        who="carol",
        labels=("self-hosted", "gpu", "a100"),
    )
    gpu_run(
        server, datetime(2026, 11, 30, 11, 30, tzinfo=timezone.utc), 0, status="in_progress"
    )  # reserved: 60 min
    return server


def test_report_breaks_down_spend_and_adds_up(run_cli, month, tmp_path):
    result = spend(run_cli, month, tmp_path, ["--monthly-budget", "$50"])
    assert result.returncode == 0, result.stdout
    out = result.outputs
    assert out["minutes"] == str(15 * 12 + 30 + 60)
    assert out["cost"] == "14.04"  # 270 min × $0.052
    assert out["budget-left"] == "35.96"
    doc = json.loads((tmp_path / "out" / "spend.json").read_text())
    assert doc["minutes"] == 270 and doc["reserved_minutes"] == 60
    for rows in doc["by"].values():  # every breakdown adds up
        assert sum(r["minutes"] for r in rows) == 270
        assert sum(Decimal(r["usd"]) for r in rows) == Decimal("14.04")
    approvers = {r["key"]: r["minutes"] for r in doc["by"]["approver"]}
    assert approvers == {"alice": 10 * 12, "bob": 5 * 12, "carol": 30, "Codertocat": 60}
    prs = {r["key"] for r in doc["by"]["pull request"]}
    assert {"#100", "#101", "#102", "#2", "(push)"} == prs
    assert {r["key"] for r in doc["by"]["runner"]} == {"gpu,self-hosted", "a100,gpu,self-hosted"}
    assert doc["days"][-1] == {"day": "2026-11-30", "cumulative": "14.040"}
    assert len(doc["days"]) == 30
    rows = list(csv.DictReader((tmp_path / "out" / "spend.csv").open()))
    assert len(rows) == 17 and sum(int(r["minutes"]) for r in rows) == 270
    assert {r["state"] for r in rows} == {"completed", "reserved"}
    s = result.summary
    assert "### gpu-spend: Codertocat/Hello-World, 2026-11" in s
    assert "| budget | $50.00 |" in s and "| left | $35.96 |" in s
    for title in ("workflow", "pull request", "approver", "runner"):
        assert f"#### By {title}" in s
    assert "| alice | 120 | $6.24 | 10 |" in s


def test_chart_of_cumulative_spend_against_the_budget(run_cli, month, tmp_path):
    result = spend(run_cli, month, tmp_path, ["--monthly-budget", "$50"])
    block = re.search(r"```mermaid\n(.*?)```", result.summary, re.S)
    assert block, result.summary
    text = block.group(1)
    assert "xychart-beta" in text and 'y-axis "USD" 0 --> 55' in text
    lines = [line.strip() for line in text.splitlines() if line.strip().startswith("line")]
    assert len(lines) == 2 and lines[1] == "line [" + ", ".join(["50"] * 30) + "]"
    spendline = [float(x) for x in lines[0][6:-1].split(", ")]
    assert spendline == sorted(spendline) and spendline[-1] == pytest.approx(14.04)
    require_mermaid()  # skips with a reason where node or the npm packages are missing
    assert_charts_parse(block.group(0) + "\n", expect=1)  # mermaid's own parser


def test_past_month_writes_no_ledger_and_minutes_only_without_price(run_cli, month, tmp_path):
    gpu_run(month, datetime(2026, 10, 5, 9, tzinfo=timezone.utc), 20)
    result = run_cli(
        [
            "gpu-spend",
            "--output-dir",
            str(tmp_path / "oct"),
            "--month",
            "2026-10",
            "--gpu-workflows",
            "cuda-ci.yml",
        ],
        {
            **GPU_RUNS_ON,
            "GITHUB_API_URL": month.url,
            "GITHUB_REPOSITORY": REPO,
            "GITHUB_TOKEN": "t",
            "GPU_CI_NOW": "2026-11-30T12:00:00Z",
        },
    )
    assert result.returncode == 0, result.stdout
    assert result.outputs["minutes"] == "20" and result.outputs["cost"] == ""
    assert result.outputs["ledger"] == ""
    assert not (tmp_path / "oct" / "gpu-spend-ledger.json").exists()
    assert "(no gpu-price)" in result.summary


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--month", "2026-13"], "YYYY-MM"),
        (["--monthly-budget", "$50", "--gpu-price", ""], "'gpu-price' is needed"),
        (["--monthly-budget", "50"], "no unit"),
    ],
)
def test_bad_inputs(run_cli, server, tmp_path, args, words):
    result = spend(run_cli, server, tmp_path, args)
    assert result.returncode == 2 and words in "".join(result.errors), result.stdout
    assert server.log == []


def test_unwritable_output_is_an_error_and_leaves_no_temporary_file(run_cli, month, tmp_path):
    out = tmp_path / "out"
    (out / "spend.json").mkdir(parents=True)  # what a file cannot replace, even as root
    result = spend(run_cli, month, tmp_path)
    assert result.returncode == 1 and "writable path for 'output-dir'" in "".join(result.errors)
    assert sorted(p.name for p in out.iterdir()) == ["spend.json"]
    blocked = tmp_path / "file"
    blocked.write_text("")
    result = run_cli(
        ["gpu-spend", "--output-dir", str(blocked / "sub")],
        {
            **GPU_RUNS_ON,
            "GITHUB_API_URL": month.url,
            "GITHUB_REPOSITORY": REPO,
            "GITHUB_TOKEN": "t",
        },
    )
    assert result.returncode == 1 and "cannot be created" in "".join(result.errors)


def test_token_without_actions_read_names_the_permission(run_cli, month, tmp_path):
    month.forbid("GET", r"/actions/runs$")
    result = spend(run_cli, month, tmp_path)
    assert result.returncode == 1
    assert "actions: read" in "".join(result.errors)


def test_gpu_ci_spend_is_the_same_command(run_cli, month, tmp_path):
    result = run_cli(
        ["spend", "--output-dir", str(tmp_path / "o"), "--gpu-workflows", "cuda-ci.yml"],
        {
            **GPU_RUNS_ON,
            "GITHUB_API_URL": month.url,
            "GITHUB_REPOSITORY": REPO,
            "GITHUB_TOKEN": "t",
            "GPU_CI_NOW": "2026-11-30T12:00:00Z",
        },
    )
    assert result.returncode == 0, result.stdout
    assert result.outputs["minutes"] == "270"
