"""gpu-monitor pushes no 0 for a figure it could not measure (issue 28): an unknown busy time,
utilisation, energy or idle share is no series at all on the real Pushgateway, and the help
text says what busy and idle measure."""

from __future__ import annotations

from testkit.cuda.monitor_truth import SLICE, recording, report_of, slice_sample
from testkit.pushgateway import job_env, metrics, needs_pushgateway, pushgateway

pytestmark = needs_pushgateway

ENV = job_env("556", "1", "gpu-runner-2")


def test_unknown_figures_are_not_pushed_as_zero():
    from gpu_ci.cuda.monitor.push import push

    # a MIG slice without GPM: busy, utilisation, energy and idle share are unknown
    rec = recording(
        [(i, [slice_sample(None, 2048)]) for i in range(30)], gpus=[{**SLICE, "util_source": None}]
    )
    report = report_of(rec)
    known = report_of(recording([(i, [slice_sample(40, 2048)]) for i in range(30)], gpus=[SLICE]))
    with pushgateway() as url:
        push(url, report, ENV)
        push(url, known, {**ENV, "GITHUB_RUN_ID": "557"})
        text = metrics(url)
    mine = [line for line in text.splitlines() if 'run_id="556"' in line]
    names = {line.split("{", 1)[0] for line in mine}
    # failed before: gpu_ci_job_gpu_busy_seconds 0 and gpu_ci_job_idle_ratio 1
    assert "gpu_ci_job_gpu_busy_seconds" not in names
    assert "gpu_ci_job_gpu_utilization_mean_ratio" not in names
    assert "gpu_ci_job_gpu_energy_joules" not in names
    assert "gpu_ci_job_idle_ratio" not in names
    assert "gpu_ci_job_gpu_memory_peak_bytes" in names  # what was measured still is
    assert (
        "# HELP gpu_ci_job_gpu_busy_seconds Seconds with a kernel running during the "
        "job, by NVML's definition of utilisation" in text
    )
    assert "gpu_ci_job_gpu_busy_seconds{" in text and 'run_id="557"' in text
