"""Recordings and reports for gpu-monitor's truth tests.

The report-math and the Pushgateway tests share them."""

from __future__ import annotations

import json
from typing import Any

from gpu_ci.cuda.monitor import recording as mr_recording
from gpu_ci.cuda.monitor import report as mr
from gpu_ci.cuda.monitor import results
from testkit.gpu_monitor_env import EPOCH

GiB = 2**30
MiB = 2**20


def recording(
    samples: list[tuple[float, list[dict[str, Any]]]],
    *,
    interval: float = 1.0,
    gpus: list[dict[str, Any]] | None = None,
    stop: float | None = None,
    events: list[dict[str, Any]] = (),
) -> mr_recording.Recording:
    """A sample file's text, parsed: ``samples`` are (seconds after EPOCH, GPU entries)."""
    gpus = gpus or [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-0", "memory_total": 140 * GiB}]
    lines = [
        {"kind": "start", "version": 1, "ts": EPOCH, "interval": interval, "pid": 1, "gpus": gpus}
    ]
    lines += [{"kind": "sample", "ts": EPOCH + t, "gpus": g} for t, g in samples]
    lines += [{"kind": "event", "ts": EPOCH + 1, **e} for e in events]
    end = stop if stop is not None else (samples[-1][0] + interval if samples else 0)
    lines.append({"kind": "stop", "ts": EPOCH + end, "reason": "signal", "samples": len(samples)})
    return mr_recording.parse_recording("\n".join(json.dumps(x) for x in lines))


def gpu(util: int | None, **extra: Any) -> dict[str, Any]:
    return {
        "index": 0,
        "util": util,
        "mem_util": 0,
        "mem_used": GiB,
        "power_mw": 100000,
        "temp": 40,
        "sm_mhz": 1980,
        "throttle": 0,
        "procs": [],
        **extra,
    }


def report_of(rec: mr_recording.Recording, **kw: Any) -> results.Report:
    end = rec.stop["ts"] if rec.stop else EPOCH
    return mr.compute(rec, end=end, **kw)


# -- 1. busy by NVML's definition -----------------------------------------------------------


SLICE = {
    "index": 0,
    "name": "NVIDIA H200 MIG 3g.71gb",
    "uuid": "MIG-aaaa",
    "memory_total": 71 * GiB,
    "mig": True,
    "slice": 1,
    "gi": 1,
    "ci": 0,
    "parent_uuid": "GPU-0",
    "util_source": "gpm",
}


def slice_sample(util: float | None, mem_mib: int, **extra: Any) -> dict[str, Any]:
    return {
        "index": 0,
        "slice": 1,
        "util": util,
        "mem_util": None,
        "mem_used": mem_mib * MiB,
        "power_mw": None,
        "board_power_mw": 400000,
        "temp": 50,
        "sm_mhz": 1980,
        "throttle": 0,
        "procs": [[4242, mem_mib * MiB, "python"]],
        **extra,
    }
