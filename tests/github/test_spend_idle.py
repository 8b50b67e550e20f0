"""gpu-spend's idle column: gpu-monitor reports (made by the real report code) uploaded as
artifacts, found through the artifacts API of the loopback server, matched to counted GPU
jobs; bad, oversized or forged reports are skipped or bounded, never lowering the spend."""

from __future__ import annotations

import csv
import json
import os
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from testkit.github.runs import REPO, api_calls, gpu_run, monitor_report, spend, upload
from testkit.shared import ROOT

T0 = datetime(2026, 11, 10, 9, 0, tzinfo=timezone.utc)


#: Not about the ledger: counted without looking for one (reuse-ledger: none).
NO_LEDGER = ["--reuse-ledger", "none"]


def test_idle_cost_is_a_column_from_matched_reports(run_cli, server, monkeypatch, tmp_path):
    with_report = gpu_run(server, T0, 3)  # 3 min, PR #2
    report = monitor_report(monkeypatch, T0)
    fraction = Decimal(str(report["cost"]["idle_fraction"]))
    assert 0 < fraction < 1
    upload(server, with_report, report, head_branch="feature", fork=True)  # a fork's PR: read
    gpu_run(server, T0 + timedelta(days=1), 10, event="push", pr=None)  # no report
    other = gpu_run(server, T0 + timedelta(days=2), 3, who="carol")
    upload(
        server, other, monitor_report(monkeypatch, T0 + timedelta(days=2)), name="gpu-usage"
    )  # other name: not read
    late = gpu_run(server, T0 + timedelta(days=3), 3)
    upload(server, late, monitor_report(monkeypatch, T0 + timedelta(days=4)))  # not its window
    before = len(server.log)
    result = spend(run_cli, server, tmp_path, NO_LEDGER)
    assert result.returncode == 0, result.stdout
    calls = [r.path for r in api_calls(server, before)]
    assert len([p for p in calls if "/artifacts" in p]) == 3  # 1 listing + 2 downloads
    assert len(calls) == 1 + 4 + 3  # runs page + jobs of 4 runs
    doc = json.loads((tmp_path / "out" / "spend.json").read_text())
    assert doc["minutes"] == 19 and doc["usd"] == str(Decimal("0.052") * 19)
    idle_min = (fraction * 3).quantize(Decimal("0.01"))
    idle_usd = (fraction * Decimal("0.156")).quantize(Decimal("0.0001"))
    assert doc["idle"]["minutes"] == str(idle_min) and doc["idle"]["usd"] == str(idle_usd)
    assert doc["idle"]["jobs_with_report"] == 1 and doc["idle"]["reports_read"] == 2
    assert doc["idle"]["api_calls"] == 3
    for title, rows in doc["by"].items():  # every breakdown adds up
        assert sum(Decimal(r["idle_usd"]) for r in rows) == idle_usd, title
        assert sum(r["idle_reports"] for r in rows) == 1
    assert {r["key"]: r["idle_reports"] for r in doc["by"]["pull request"]} == {
        "#2": 1,
        "(push)": 0,
    }
    rows = list(csv.DictReader((tmp_path / "out" / "spend.csv").open()))
    assert [r["idle_minutes"] for r in rows] == [str(idle_min), "", "", ""]
    assert rows[0]["monitor_artifact"] != "" and rows[0]["minutes"] == "3"
    assert "no counted GPU job of run" in result.stdout  # the late report: a notice
    s = result.summary
    assert "idle (jobs with a report)" in s and "(no report)" in s
    assert f"{idle_min} min, ${idle_usd:.2f} in 1 of 4 completed GPU jobs" in s
    # the same report without the idle column: spend identical, no artifact call
    off = spend(run_cli, server, tmp_path / "off", ["--monitor-artifacts", ""])
    assert off.outputs["cost"] == result.outputs["cost"] == "0.99"
    assert "idle" not in json.loads((tmp_path / "off" / "out" / "spend.json").read_text())


def test_bad_oversized_and_forged_reports_never_lower_or_inflate(
    run_cli, server, monkeypatch, tmp_path
):
    runs = [gpu_run(server, T0 + timedelta(days=d), 3) for d in range(7)]
    good = monitor_report(monkeypatch, T0)
    wrong = dict(good, schema_version=99)  # not the schema
    forged = json.loads(json.dumps(good))
    forged["cost"]["idle_cost_usd"] = 1e9  # ignored: not trusted
    forged["cost"]["idle_fraction"] = 1
    day2 = (T0 + timedelta(days=2)).timestamp()
    forged["started"], forged["ended"] = day2 + 5, day2 + 100  # run 2's job window
    upload(server, runs[0], good)
    upload(server, runs[0], good, name="gpu-monitor-tests-copy")  # 2nd for one job
    upload(server, runs[1], wrong)
    upload(server, runs[2], forged, head_branch="evil", fork=True)
    server.add_artifact(
        REPO,
        "gpu-monitor-tests",
        {"notes.txt": b"hi"},
        run_id=runs[3].id,
        created_at=runs[3].created_at,
    )
    server.add_artifact(
        REPO,
        "gpu-monitor-tests",
        {"report.json": os.urandom(3 << 20)},
        run_id=runs[4].id,
        created_at=runs[4].created_at,
    )  # 3 MiB: not fetched
    torn = upload(server, runs[5], good)
    torn.data = torn.data[:40]  # a truncated zip
    server.add_artifact(
        REPO,
        "gpu-monitor-tests",
        {"report.json": b"[" * 200_000},
        run_id=runs[6].id,
        created_at=runs[6].created_at,
    )  # nesting bomb
    result = spend(run_cli, server, tmp_path)
    assert result.returncode == 0, result.stdout
    assert "Traceback" not in result.stdout
    out = result.stdout
    assert "not a gpu-monitor report" in out and "schema_version" in out
    assert "no report.json" in out and "over 2097152 bytes" in out
    assert "no counted GPU job of run" in out  # the duplicate
    assert out.count("not a readable zip of JSON") == 2
    doc = json.loads((tmp_path / "out" / "spend.json").read_text())
    assert doc["minutes"] == 21 and doc["usd"] == "1.092"  # spend unchanged
    assert doc["idle"]["jobs_with_report"] == 2
    per_job = {j["run_id"]: j for j in doc["jobs"]}
    assert Decimal(per_job[runs[2].id]["idle_usd"]) == Decimal("0.156")  # ≤ its own cost
    assert per_job[runs[1].id]["idle_usd"] == ""
    downloads = [r.path for r in api_calls(server) if r.path.endswith("/zip")]
    assert len(downloads) == 7  # not the 3 MiB one


def test_max_monitor_reports_caps_the_downloads(run_cli, server, monkeypatch, tmp_path):
    for d in range(3):
        upload(
            server,
            gpu_run(server, T0 + timedelta(days=d), 3),
            monitor_report(monkeypatch, T0 + timedelta(days=d)),
        )
    result = spend(run_cli, server, tmp_path, ["--max-monitor-reports", "2"])
    assert result.returncode == 0, result.stdout
    assert len([r for r in api_calls(server) if r.path.endswith("/zip")]) == 2
    assert "1 older gpu-monitor reports not read (max-monitor-reports is 2)" in result.stdout
    doc = json.loads((tmp_path / "out" / "spend.json").read_text())
    assert doc["idle"]["jobs_with_report"] == 2
    assert [j["idle_minutes"] != "" for j in doc["jobs"]] == [False, True, True]  # newest


def test_listing_failure_leaves_the_spend_report_without_idle(run_cli, server, tmp_path):
    gpu_run(server, T0, 3)
    server.forbid("GET", r"/actions/artifacts$")
    result = spend(run_cli, server, tmp_path)
    assert result.returncode == 0 and result.outputs["minutes"] == "3", result.stdout
    assert "could not be listed" in result.stdout
    assert "idle" not in json.loads((tmp_path / "out" / "spend.json").read_text())


def test_unusable_cap_is_exit_2_before_any_call(run_cli, server, tmp_path):
    result = spend(run_cli, server, tmp_path, ["--max-monitor-reports", "ten"])
    assert result.returncode == 2 and "max-monitor-reports" in "".join(result.errors)
    assert server.log == []


def test_schema_checker_agrees_with_jsonschema(monkeypatch):
    import jsonschema

    from gpu_ci.github.monitor_artifact import schema_errors

    root = ROOT
    shipped = root / "actions" / "gpu-monitor" / "report.schema.json"
    packaged = root / "src" / "gpu_ci" / "data" / "monitor-report.schema.json"
    assert packaged.read_bytes() == shipped.read_bytes()  # one schema, packaged for the CLI
    schema = json.loads(shipped.read_text())
    good = monitor_report(monkeypatch, T0)
    broken = []
    for path, value in [
        (("schema_version",), 99),
        (("cost", "idle_fraction"), 1.5),
        (("cost", "idle_fraction"), "0.5"),
        (("interval_s",), 0),
        (("gpus", 0, "utilisation", "p95"), -1),
        (("phases_from",), "x"),
        (("cost", "extra"), 1),
        (("samples",), True),
        (("ok",), None),
    ]:
        doc = json.loads(json.dumps(good))
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        broken.append(doc)
    missing = json.loads(json.dumps(good))
    del missing["cost"]["idle_fraction"]
    validator = jsonschema.Draft202012Validator(schema)
    for doc in [good, *broken, missing, [], "x"]:
        ours = schema_errors(doc, schema)
        assert (ours == []) == validator.is_valid(doc), doc if isinstance(doc, str) else ours
    assert schema_errors(good, schema) == []
    with pytest.raises(ValueError, match="not supported"):
        schema_errors({}, {"pattern": "x"})


@pytest.mark.slow
def test_a_month_of_300_reports_costs_406_calls(run_cli, server, monkeypatch, tmp_path):
    from testkit.github.runs import month_of_runs

    month_of_runs(server)  # 300 GPU runs of 12 min
    for run in list(server.repos[REPO].runs):
        start = datetime.fromisoformat(run.created_at.replace("Z", "+00:00"))
        upload(server, run, monitor_report(monkeypatch, start))
    result = spend(run_cli, server, tmp_path, NO_LEDGER)
    assert result.returncode == 0, result.stdout
    calls = [r.path for r in api_calls(server)]
    assert len(calls) == 303 + 3 + 100 == 406  # the README's number
    assert sum(p.split("?")[0].endswith("/actions/artifacts") for p in calls) == 3
    assert "200 older gpu-monitor reports not read (max-monitor-reports is 100)" in result.stdout
    doc = json.loads((tmp_path / "out" / "spend.json").read_text())
    assert doc["idle"]["jobs_with_report"] == 100 and doc["idle"]["api_calls"] == 103
    assert doc["usd"] == "187.200"  # spend as without reports
    assert {j["day"] for j in doc["jobs"] if j["idle_usd"]} == {
        f"2026-11-{d}" for d in range(21, 31)
    }  # the newest 100: days 21-30


def test_listing_stops_before_the_month_and_after_ten_pages(run_cli, server, monkeypatch, tmp_path):
    run = gpu_run(server, T0, 3)
    upload(server, run, monitor_report(monkeypatch, T0))  # created on Nov 10
    for i in range(150):
        server.add_artifact(
            REPO, f"build-{i}", {"a.txt": b"x"}, run_id=1, created_at="2026-11-20T10:00:00Z"
        )
    for i in range(100):
        server.add_artifact(
            REPO, f"old-{i}", {"a.txt": b"x"}, run_id=1, created_at="2026-09-20T10:00:00Z"
        )
    result = spend(run_cli, server, tmp_path, NO_LEDGER)
    listings = [r for r in api_calls(server) if r.path.split("?")[0].endswith("/artifacts")]
    assert len(listings) == 2  # page 2 reaches September
    assert (
        json.loads((tmp_path / "out" / "spend.json").read_text())["idle"]["jobs_with_report"] == 1
    )
    for i in range(900):
        server.add_artifact(
            REPO, f"more-{i}", {"a.txt": b"x"}, run_id=1, created_at="2026-11-21T10:00:00Z"
        )
    before = len(server.log)
    result = spend(run_cli, server, tmp_path / "again", NO_LEDGER)
    assert result.returncode == 0, result.stdout
    listings = [r for r in api_calls(server, before) if r.path.split("?")[0].endswith("/artifacts")]
    assert len(listings) == 10
    assert "artifact listing stopped after 10 pages" in result.stdout
    assert (
        json.loads((tmp_path / "again" / "out" / "spend.json").read_text())["idle"][
            "jobs_with_report"
        ]
        == 0
    )  # its report was on page 11


def test_a_report_that_reuses_its_ledger_keeps_the_idle_column(
    run_cli, server, monkeypatch, tmp_path
):
    """The ledger keeps the counted jobs' windows: the hourly report that reuses it (and
    fetches no job of those runs) still matches their gpu-monitor reports."""
    from testkit.github.runs import upload_ledger

    server.repos[REPO].default_branch = "master"  # the ledger's branch, asked of the API
    run = gpu_run(server, T0, 3)
    upload(server, run, monitor_report(monkeypatch, T0))
    first = spend(run_cli, server, tmp_path / "first")
    doc = json.loads((tmp_path / "first" / "out" / "spend.json").read_text())
    assert first.returncode == 0 and doc["idle"]["jobs_with_report"] == 1, first.stdout
    upload_ledger(server, (tmp_path / "first" / "out" / "gpu-spend-ledger.json").read_bytes())
    before = len(server.log)
    again = spend(run_cli, server, tmp_path / "again")
    assert again.returncode == 0, again.stdout
    fetched = [r.path for r in api_calls(server, before) if r.path.endswith("/jobs")]
    assert f"/runs/{run.id}/jobs" not in " ".join(fetched)  # reused
    assert len(fetched) == 1  # the run that wrote the ledger: every workflow's jobs count
    doc = json.loads((tmp_path / "again" / "out" / "spend.json").read_text())
    assert doc["idle"]["jobs_with_report"] == 1


@pytest.mark.parametrize("field", ["idle_fraction", "started", "started-overflow"])
def test_a_report_with_nan_or_infinity_is_skipped_by_spend_and_watchdog(monkeypatch, field):
    import io
    import zipfile

    from gpu_ci.github.monitor_artifact import read_monitor_report
    from gpu_ci.github.spend.idle import read_report

    # Python's json reads NaN and Infinity; no comparison with NaN fails, so the schema's
    # minimum/maximum let it through and the month's idle sum became NaN
    doc = monitor_report(monkeypatch, T0)
    if field == "started":
        doc["started"] = float("inf")
    else:
        doc["cost"]["idle_fraction"] = float("nan")
    text = json.dumps(doc)
    if field == "started-overflow":  # a plain JSON number that float() reads as infinity
        doc["cost"]["idle_fraction"] = 0.5
        text = json.dumps(doc).replace(
            f'"started": {json.dumps(doc["started"])}', '"started": 1e999'
        )
        assert "1e999" in text
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("report.json", text)
    report, why = read_report(buf.getvalue(), {"id": 1, "name": "m", "workflow_run": {"id": 2}})
    assert report is None and "not a readable zip of JSON" in why, why
    assert {"idle_fraction": "NaN", "started": "Infinity"}.get(field, "1e999") in why
    data, why = read_monitor_report(buf.getvalue())
    assert data is None and "not a readable zip of JSON" in why
