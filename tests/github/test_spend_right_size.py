"""gpu-spend's right-size advice per workflow: gpu-monitor reports with a ``right_size``
object (made by the real report and right-size code) uploaded as artifacts; the month's
summary and spend.json say which size would have done and what it would have cost."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal

from gpu_ci.cuda.monitor import right_size as rs
from gpu_ci.cuda.monitor import views as mr
from testkit.github.runs import gpu_run, monitor_report, spend, upload

T0 = datetime(2026, 11, 10, 9, 0, tzinfo=timezone.utc)
GiB = 2**30
MiB = 2**20


def with_advice(
    report: dict, name: str, memory: int, peak: int | None, activity: float | None, prices=None
) -> dict:
    sizes = rs.load_sizes().with_prices(prices or {})
    advice = rs.advise(name, memory, peak, activity, sizes, paid_minutes=3)
    return dict(report, right_size=mr.right_size_json(advice))


def a10g_run(server, monkeypatch):
    """A 5-minute run on an A10G that used 2 GiB, its report advising a priced T4."""
    run = gpu_run(server, T0, 5)
    report = monitor_report(monkeypatch, T0)
    t4 = {"Tesla T4 16GB": Decimal("0.04")}
    upload(server, run, with_advice(report, "NVIDIA A10G", 23028 * MiB, 2 * GiB, 3.0, t4))
    return run


def test_month_names_the_size_that_would_have_held_each_workflow(
    run_cli, server, monkeypatch, tmp_path
):
    h100 = ("NVIDIA H100 80GB HBM3", 81559 * MiB)
    first = gpu_run(server, T0, 3)
    upload(server, first, with_advice(monitor_report(monkeypatch, T0), *h100, 2 * GiB, 7.0))
    day2 = T0 + timedelta(days=1)
    second = gpu_run(server, day2, 4)
    upload(server, second, with_advice(monitor_report(monkeypatch, day2), *h100, 5 * GiB, 13.0))
    gpu_run(server, T0 + timedelta(days=2), 10)  # no report: not in the advice
    result = spend(run_cli, server, tmp_path)
    assert result.returncode == 0, result.stdout
    doc = json.loads((tmp_path / "out" / "spend.json").read_text())
    [row] = doc["right_size"]
    # the larger need (5 GiB x 1.25) decides; activity is the mean of the two reports
    assert row["suggestion"] == "H100 80GB MIG 1g.10gb" and row["reports"] == 2
    assert row["peak_memory_bytes"] == 5 * GiB and row["activity"] == 10.0
    assert row["minutes"] == 7 and row["usd"] == str(Decimal("0.052") * 7)
    assert row["usd_at_suggestion"] is None  # no GitHub SKU for a slice
    line = row["line"]
    assert line.startswith(f"{row['workflow']}: peak 5.0 GiB on H100 80GB, 10 % busy")
    assert "H100 80GB MIG 1g.10gb would do; cost at that size unknown (no price)" in line
    assert "#### Right size" in result.summary and line in result.summary


def test_largest_need_on_the_smallest_size_gives_no_advice(run_cli, server, monkeypatch, tmp_path):
    a10g_run(server, monkeypatch)
    big = gpu_run(server, T0 + timedelta(days=1), 2)  # already the smallest
    upload(
        server,
        big,
        with_advice(
            monitor_report(monkeypatch, T0 + timedelta(days=1)),
            "Tesla T4",
            15360 * MiB,
            10 * GiB,
            None,
        ),
    )
    result = spend(run_cli, server, tmp_path)
    assert result.returncode == 0, result.stdout
    [row] = json.loads((tmp_path / "out" / "spend.json").read_text())["right_size"]
    # the T4 job's 10 GiB is the larger need, and nothing smaller holds it: no advice
    assert row["suggestion"] is None and "already the smallest size that fits" in row["line"]
    assert row["activity"] == 3.0  # the known one only


def test_priced_suggestion_costs_the_counted_minutes(run_cli, server, monkeypatch, tmp_path):
    a10g_run(server, monkeypatch)
    result = spend(run_cli, server, tmp_path)
    assert result.returncode == 0, result.stdout
    [row] = json.loads((tmp_path / "out" / "spend.json").read_text())["right_size"]
    assert row["suggestion"] == "Tesla T4 16GB"
    # 5 counted minutes at the T4's $0.04 of the 5 minutes at $0.052 counted
    assert row["usd_at_suggestion"] == "0.2000" and row["usd"] == "0.260"
    assert "Tesla T4 16GB would do; $0.20 of $0.26" in result.summary


def test_reports_without_advice_add_no_section(run_cli, server, monkeypatch, tmp_path):
    run = gpu_run(server, T0, 3)
    upload(server, run, monitor_report(monkeypatch, T0))  # right_size null
    result = spend(run_cli, server, tmp_path)
    assert result.returncode == 0, result.stdout
    doc = json.loads((tmp_path / "out" / "spend.json").read_text())
    assert doc["right_size"] == [] and doc["idle"]["jobs_with_report"] == 1
    assert "#### Right size" not in result.summary
