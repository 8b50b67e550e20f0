"""gpu-spend's minutes lost to infrastructure, by pool (issue 32): gpu-watchdog's infra-file
(written by the watchdog's own writer) joined with the minutes gpu-spend counts itself."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from gpu_ci.github import watchdog
from testkit.github.runs import gpu_run, month_of_runs, spend

NOW = datetime(2026, 11, 30, 12, tzinfo=timezone.utc)


def infra_file(path, records) -> str:
    """An infra-file as gpu-watchdog writes it (:func:`watchdog.infra_json`)."""
    config = watchdog.make_config(
        watchdog.WatchdogInputs([], ["gpu"], "60", True, "", "200", "0", "1")
    )
    sweep = watchdog.Sweep("Codertocat/Hello-World", config, NOW, infra=records)
    path.write_text(json.dumps(watchdog.infra_json(sweep)))
    return str(path)


def lost(run, job, minutes=999.0) -> watchdog.InfraRecord:
    return watchdog.InfraRecord(
        run.id, 1, job.id, job.name, "ignored", tuple(job.labels), "r", "", minutes, ("x",), True
    )


def test_minutes_lost_to_infrastructure_by_pool(run_cli, server, tmp_path):
    month_of_runs(server, per_day=2, days=2)  # 4 × 12 min on gpu,self-hosted
    a100 = gpu_run(
        server,
        datetime(2026, 11, 7, 9, tzinfo=timezone.utc),
        30,
        labels=("self-hosted", "gpu", "a100"),
    )
    small = server.repos["Codertocat/Hello-World"].runs[0]
    october = gpu_run(server, datetime(2026, 10, 30, 9, tzinfo=timezone.utc), 20)
    one = infra_file(tmp_path / "a.json", [lost(a100, a100.jobs[1]), lost(small, small.jobs[1])])
    again = infra_file(tmp_path / "b.json", [lost(a100, a100.jobs[1])])  # a later sweep
    other = infra_file(tmp_path / "c.json", [lost(october, october.jobs[1])])
    bad = tmp_path / "d.json"
    bad.write_text('{"schema": "gpu-ci/queue-times/v1"}')
    result = spend(
        run_cli, server, tmp_path, ["--infra-files", "\n".join([one, again, other, str(bad)])]
    )
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads((tmp_path / "out" / "spend.json").read_text())
    infra = doc["infra"]
    # gpu-spend's own minutes (30 and 12), never the file's (999): the October job and the
    # duplicate add nothing
    assert infra["minutes"] == 42 and infra["jobs"] == 2 and infra["listed"] == 3
    assert [(r["pool"], r["minutes"], r["jobs"]) for r in infra["by_pool"]] == [
        ("a100,gpu,self-hosted", 30, 1),
        ("gpu,self-hosted", 12, 1),
    ]
    assert "not a gpu-watchdog infra-file" in infra["notes"][0]
    assert "#### Lost to infrastructure (gpu-watchdog): 42 GPU minutes in 2 jobs" in (
        result.summary
    )
    assert "| a100,gpu,self-hosted | 30 | $" in result.summary


def test_an_unreadable_infra_file_is_a_usage_error(run_cli, server, tmp_path):
    result = spend(run_cli, server, tmp_path, ["--infra-files", str(tmp_path / "missing.json")])
    assert result.returncode == 2
    assert "input 'infra-files': " in result.stdout + result.stderr


def test_infra_files_of_the_wrong_shape_are_notes_not_crashes():
    from gpu_ci.github.spend.report import INFRA_SCHEMA, read_infra

    texts = {
        "a.json": json.dumps({"schema": INFRA_SCHEMA, "failures": 5}),
        "b.json": json.dumps({"schema": INFRA_SCHEMA, "failures": [{"job_id": 7, "evidence": 3}]}),
        "c.json": json.dumps(
            {"schema": INFRA_SCHEMA, "failures": [{"job_id": 8, "evidence": ["lost"]}]}
        ),
    }
    lost, notes = read_infra(texts)
    assert lost == {8: "lost"}
    assert notes == [
        "a.json: 'failures' is not a list, skipped",
        "b.json: job 7's evidence is not a list, skipped",
    ]
