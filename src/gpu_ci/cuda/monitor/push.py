"""Push one job's GPU usage to a Prometheus Pushgateway (prometheus-client).

A fleet's dashboards already hold DCGM-exporter metrics; these gauges sit beside them, one
group per job (``repository``, ``workflow``, ``github_job``, ``run_id``, ``run_attempt``,
``runner``), per-GPU series labelled as dcgm-exporter labels its own (``gpu`` the index,
``UUID``, ``modelName``, ``Hostname``; ``GPU_I_ID`` the MIG GPU instance, "" for a whole
GPU), so a query can join the two on the same names; usage and idle cost can be summed per
repository and workflow. Base units (seconds, bytes, joules, ratios) as Prometheus' naming
guide asks.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any

from gpu_ci.cuda.monitor.results import Cost, GpuUsage, Report

#: Per-GPU label names: dcgm-exporter's where they mean the same thing.
LABELS = ("gpu", "UUID", "modelName", "Hostname", "GPU_I_ID")
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


#: Per-GPU gauges, in the order they are registered: key, metric name, help text.
GPU_GAUGES: tuple[tuple[str, str, str], ...] = (
    (
        "busy",
        "gpu_ci_job_gpu_busy_seconds",
        "Seconds with a kernel running during the job, by NVML's definition of "
        "utilisation (sum of utilisation x sampled time, or the driver's sample "
        "buffer; GPM on a MIG slice). Absent when the GPU has no utilisation "
        "counter.",
    ),
    (
        "util",
        "gpu_ci_job_gpu_utilization_mean_ratio",
        "Mean GPU utilisation (0-1): share of time a kernel ran, per NVML.",
    ),
    ("util95", "gpu_ci_job_gpu_utilization_p95_ratio", "p95 GPU utilisation (0-1)."),
    ("peak", "gpu_ci_job_gpu_memory_peak_bytes", "Peak GPU memory used."),
    ("total", "gpu_ci_job_gpu_memory_total_bytes", "GPU memory size."),
    (
        "energy",
        "gpu_ci_job_gpu_energy_joules",
        "Energy the GPU drew during the job (the driver's energy counter where "
        "supported, else power x sampled time). Absent for a MIG slice and "
        "where power is unsupported.",
    ),
    ("throttled", "gpu_ci_job_gpu_throttled_seconds", "Time with clocks slowed down."),
    *(
        (
            name,
            f"gpu_ci_job_gpu_{name}_ratio",
            f"Mean GPM {what} during the job (0-1; Hopper and newer, as DCGM_FI_PROF_*).",
        )
        for name, what in (
            ("sm_active", "SM activity (NVML_GPM_METRIC_SM_UTIL)"),
            ("sm_occupancy", "SM occupancy"),
            ("tensor_active", "tensor activity (ANY_TENSOR_UTIL)"),
            ("dram_active", "DRAM bandwidth use (DRAM_BW_UTIL)"),
        )
    ),
    *(
        (k, f"gpu_ci_job_gpu_{k}_bytes", f"Bytes of {k.replace('_', ' ')} during the job.")
        for k in ("pcie_tx", "pcie_rx", "nvlink_tx", "nvlink_rx")
    ),
    *(
        (k, f"gpu_ci_job_gpu_{k}", f"{k.replace('_', ' ')} during the job.")
        for k in ("ecc_corrected_errors", "ecc_uncorrected_errors", "rows_remapped")
    ),
)
#: GPM activity gauges and the report's activity keys.
ACTIVITY = {
    "sm_active": "sm",
    "sm_occupancy": "occupancy",
    "tensor_active": "tensor",
    "dram_active": "dram",
}


def gpu_values(g: GpuUsage) -> dict[str, float | int | None]:
    """One GPU's figure for each per-GPU gauge; None where unknown."""
    values: dict[str, float | int | None] = {
        name: None if g.activity.get(key) is None else (g.activity[key] or 0) / 100
        for name, key in ACTIVITY.items()
    }
    values.update({k: g.io.get(k) for k in ("pcie_tx", "pcie_rx", "nvlink_tx", "nvlink_rx")})
    values["ecc_corrected_errors"] = g.health.get("ecc_corrected")
    values["ecc_uncorrected_errors"] = g.health.get("ecc_uncorrected")
    values["rows_remapped"] = g.health.get("rows_remapped")
    values["busy"] = g.busy_s
    values["peak"] = g.peak_memory
    values["total"] = g.gpu.memory_total
    values["throttled"] = g.throttled_s
    values["util"] = None if g.util_mean is None else g.util_mean / 100
    values["util95"] = None if g.util_p95 is None else g.util_p95 / 100
    values["energy"] = None if g.energy_wh is None else g.energy_wh * 3600
    return values


def _job_gauges(registry: Any, cost: Cost) -> None:
    """The job's paid and used minutes, idle share and cost, where known."""
    from prometheus_client import Gauge

    def gauge(name: str, doc: str, value: float) -> None:
        Gauge(name, doc, registry=registry).set(value)

    gauge("gpu_ci_job_paid_minutes", "Billed minutes of the job (rounded up).", cost.paid_minutes)
    gauge("gpu_ci_job_gpu_minutes_paid", "Paid minutes times GPUs watched.", cost.gpu_minutes_paid)
    if cost.gpu_minutes_used is not None and cost.idle_fraction is not None:
        gauge(
            "gpu_ci_job_gpu_minutes_used",
            "GPU-minutes with a kernel running (busy seconds / 60, summed over GPUs).",
            cost.gpu_minutes_used,
        )
        gauge(
            "gpu_ci_job_idle_ratio",
            "Share of paid GPU time with no kernel running by NVML's definition "
            "(1 - used / paid, 0-1). Absent when a GPU's busy time is unknown.",
            cost.idle_fraction,
        )
    if cost.cost_usd is not None and cost.idle_cost_usd is not None:
        gauge("gpu_ci_job_cost_usd", "What the job's GPU minutes cost.", float(cost.cost_usd))
        gauge("gpu_ci_job_idle_cost_usd", "Cost of the idle share.", float(cost.idle_cost_usd))


def push(url: str, report: Report, environ: Mapping[str, str], timeout: float = 10.0) -> None:
    """Replace this job's group on the gateway (PUT).

    A re-run report overwrites, never adds. Raises OSError (or prometheus-client's errors)
    when the gateway refuses or is away.
    """
    from prometheus_client import CollectorRegistry, Gauge, push_to_gateway

    registry = CollectorRegistry()
    host = environ.get("RUNNER_HOSTNAME") or socket.gethostname()
    gauges = {
        key: Gauge(name, doc, list(LABELS), registry=registry) for key, name, doc in GPU_GAUGES
    }
    for g in report.gpus:
        gi = "" if g.gpu.gi is None else str(g.gpu.gi)
        labels = (str(g.gpu.index), g.gpu.uuid, g.gpu.name, host, gi)
        # an unknown figure is no sample at all (never 0): a query then finds no series
        for key, value in gpu_values(g).items():
            if value is not None:
                gauges[key].labels(*labels).set(value)
    _job_gauges(registry, report.cost)
    push_to_gateway(
        url, job=PUSH_JOB, registry=registry, grouping_key=grouping_key(environ), timeout=timeout
    )
