"""Push one job's GPU usage to a Prometheus Pushgateway (prometheus-client).

A fleet's dashboards already hold DCGM-exporter metrics; these gauges sit beside them, one
group per job (``repository``, ``workflow``, ``github_job``, ``run_id``, ``run_attempt``,
``runner``), per-GPU series labelled with the GPU's UUID, so usage and idle cost can be
summed per repository and workflow. Base units (seconds, bytes, joules, ratios) as
Prometheus' naming guide asks.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpu_ci.cuda.monitor_report import Report

PUSH_JOB = "gpu_ci_monitor"
"""The Pushgateway's own ``job`` label; the workflow's job is ``github_job``."""


def grouping_key(environ: Mapping[str, str]) -> dict[str, str]:
    return {
        "repository": environ.get("GITHUB_REPOSITORY", "") or "unknown",
        "workflow": environ.get("GITHUB_WORKFLOW", "") or "unknown",
        "github_job": environ.get("GITHUB_JOB", "") or "unknown",
        "run_id": environ.get("GITHUB_RUN_ID", "") or "0",
        "run_attempt": environ.get("GITHUB_RUN_ATTEMPT", "") or "1",
        "runner": environ.get("RUNNER_NAME", "") or "unknown",
    }


def push(url: str, report: Report, environ: Mapping[str, str], timeout: float = 10.0) -> None:
    """Replace this job's group on the gateway (PUT): a re-run report overwrites, never adds.
    Raises OSError (or prometheus-client's errors) when the gateway refuses or is away."""
    from prometheus_client import CollectorRegistry, Gauge, push_to_gateway

    registry = CollectorRegistry()
    labels = ["gpu_uuid", "gpu_index", "gpu_name"]

    def per_gpu(name: str, doc: str) -> Gauge:
        return Gauge(name, doc, labels, registry=registry)

    busy = per_gpu(
        "gpu_ci_job_gpu_busy_seconds",
        "Seconds with a kernel running during the job, by NVML's definition of "
        "utilisation (sum of utilisation x sampled time, or the driver's sample "
        "buffer; GPM on a MIG slice). Absent when the GPU has no utilisation "
        "counter.",
    )
    util = per_gpu(
        "gpu_ci_job_gpu_utilization_mean_ratio",
        "Mean GPU utilisation (0-1): share of time a kernel ran, per NVML.",
    )
    util95 = per_gpu("gpu_ci_job_gpu_utilization_p95_ratio", "p95 GPU utilisation (0-1).")
    peak = per_gpu("gpu_ci_job_gpu_memory_peak_bytes", "Peak GPU memory used.")
    total = per_gpu("gpu_ci_job_gpu_memory_total_bytes", "GPU memory size.")
    energy = per_gpu(
        "gpu_ci_job_gpu_energy_joules",
        "Energy the GPU drew during the job (the driver's energy counter where "
        "supported, else power x sampled time). Absent for a MIG slice and "
        "where power is unsupported.",
    )
    throttled = per_gpu("gpu_ci_job_gpu_throttled_seconds", "Time with clocks slowed down.")
    for g in report.gpus:
        key = (g.gpu.uuid, str(g.gpu.index), g.gpu.name)
        # an unknown figure is no sample at all (never 0): a query then finds no series
        for gauge, value in (
            (busy, g.busy_s),
            (peak, g.peak_memory),
            (total, g.gpu.memory_total),
            (throttled, g.throttled_s),
            (util, None if g.util_mean is None else g.util_mean / 100),
            (util95, None if g.util_p95 is None else g.util_p95 / 100),
            (energy, None if g.energy_wh is None else g.energy_wh * 3600),
        ):
            if value is not None:
                gauge.labels(*key).set(value)
    c = report.cost
    Gauge(
        "gpu_ci_job_paid_minutes", "Billed minutes of the job (rounded up).", registry=registry
    ).set(c.paid_minutes)
    Gauge("gpu_ci_job_gpu_minutes_paid", "Paid minutes times GPUs watched.", registry=registry).set(
        c.gpu_minutes_paid
    )
    if c.gpu_minutes_used is not None and c.idle_fraction is not None:
        Gauge(
            "gpu_ci_job_gpu_minutes_used",
            "GPU-minutes with a kernel running (busy seconds / 60, summed over GPUs).",
            registry=registry,
        ).set(c.gpu_minutes_used)
        Gauge(
            "gpu_ci_job_idle_ratio",
            "Share of paid GPU time with no kernel running by NVML's definition "
            "(1 - used / paid, 0-1). Absent when a GPU's busy time is unknown.",
            registry=registry,
        ).set(c.idle_fraction)
    if c.cost_usd is not None and c.idle_cost_usd is not None:
        Gauge("gpu_ci_job_cost_usd", "What the job's GPU minutes cost.", registry=registry).set(
            float(c.cost_usd)
        )
        Gauge("gpu_ci_job_idle_cost_usd", "Cost of the idle share.", registry=registry).set(
            float(c.idle_cost_usd)
        )
    push_to_gateway(
        url, job=PUSH_JOB, registry=registry, grouping_key=grouping_key(environ), timeout=timeout
    )
