"""One reader of gpu-monitor's artifact zip, for the idle column and the watchdog alike."""

from __future__ import annotations

from gpu_ci.github.monitor_artifact import read_monitor_report
from gpu_ci.github.spend.idle import read_report
from testkit.github.infra_jobs import NOW, monitor_report, zip_bytes


def test_a_report_gpu_monitor_wrote_is_read():
    report = monitor_report(NOW, 600, lost_at=60)
    data, why = read_monitor_report(zip_bytes(report))
    assert why == "" and data == report


def test_a_report_that_breaks_the_schema_is_refused_for_both_readers():
    """Both readers check the whole report, not only its schema_version."""
    broken = {**monitor_report(NOW, 600, lost_at=60), "started": "yesterday"}
    data, why = read_monitor_report(zip_bytes(broken))
    assert data is None and why.startswith("not a gpu-monitor report") and "started" in why
    art = {"id": 1, "name": "gpu-monitor-tests", "workflow_run": {"id": 2}}
    report, said = read_report(zip_bytes(broken), art)
    assert report is None and said == f"artifact 'gpu-monitor-tests' #1: {why}"
