"""gpu-monitor tells the truth (issue 28): busy time by NVML's definition of utilisation,
recorded timestamps instead of the nominal interval, "unknown" (never 0) for an unsupported
counter, the driver's energy counter, and a MIG slice that reports only its own figures.

The first half checks the report's math on recordings built here (no process, no clock); the
second half runs the real sampler against the fake libnvidia-ml, which plays each case as
nvml.h documents it (tests/fake_nvml/fake_nvml.c)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpu_ci.cuda import monitor_report as mr
from tests.gpu_monitor_env import EPOCH

GiB = 2**30
MiB = 2**20


def recording(samples: list[tuple[float, list[dict[str, Any]]]], *, interval: float = 1.0,
              gpus: list[dict[str, Any]] | None = None, stop: float | None = None,
              events: list[dict[str, Any]] = ()) -> mr.Recording:
    """A sample file's text, parsed: ``samples`` are (seconds after EPOCH, GPU entries)."""
    gpus = gpus or [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-0",
                     "memory_total": 140 * GiB}]
    lines = [{"kind": "start", "version": 1, "ts": EPOCH, "interval": interval, "pid": 1,
              "gpus": gpus}]
    lines += [{"kind": "sample", "ts": EPOCH + t, "gpus": g} for t, g in samples]
    lines += [{"kind": "event", "ts": EPOCH + 1, **e} for e in events]
    end = stop if stop is not None else (samples[-1][0] + interval if samples else 0)
    lines.append({"kind": "stop", "ts": EPOCH + end, "reason": "signal",
                  "samples": len(samples)})
    return mr.parse_recording("\n".join(json.dumps(x) for x in lines))


def gpu(util: int | None, **extra: Any) -> dict[str, Any]:
    return {"index": 0, "util": util, "mem_util": 0, "mem_used": GiB, "power_mw": 100000,
            "temp": 40, "sm_mhz": 1980, "throttle": 0, "procs": [], **extra}


def report_of(rec: mr.Recording, **kw: Any) -> mr.Report:
    end = rec.stop["ts"] if rec.stop else EPOCH
    return mr.compute(rec, end=end, **kw)


# -- 1. busy by NVML's definition -----------------------------------------------------------


def test_three_percent_for_120_s_is_about_3_6_busy_seconds_and_97_percent_idle():
    # Failed before: every sample above 0 % counted a whole interval (120 busy s, 0 % idle).
    rep = report_of(recording([(i, [gpu(3)]) for i in range(120)]))
    assert rep.gpus[0].busy_s == pytest.approx(3.6, abs=0.05)
    assert rep.cost.paid_minutes == 2
    assert rep.cost.idle_fraction == pytest.approx(0.97, abs=0.001)
    text = mr.markdown(rep)
    assert "(97 % idle" in text


def test_a_reading_at_interval_10_stands_for_its_share_of_10_s():
    # 12 readings at 3 % every 10 s: 3 % of 120 s, not 120 s.
    rep = report_of(recording([(10 * i, [gpu(3)]) for i in range(12)], interval=10))
    assert rep.gpus[0].busy_s == pytest.approx(3.6, abs=0.05)


def test_time_comes_from_recorded_timestamps_when_the_sampler_falls_behind():
    # interval 1, but the sampler only managed a sample every 3 s: 40 readings cover 120 s.
    # Failed before: 40 * 1 s nominal = 40 busy seconds for a GPU at 100 % for 120 s.
    rep = report_of(recording([(3 * i, [gpu(100)]) for i in range(40)], stop=120))
    assert rep.gpus[0].busy_s == pytest.approx(118, abs=0.5)
    # energy too: 100 W over the recorded time, not over 40 nominal seconds
    assert rep.gpus[0].energy_wh == pytest.approx(100 * 118 / 3600, rel=0.01)


def test_the_driver_sample_buffer_covers_the_whole_interval():
    # The single reading says 0 %, but the driver's buffer (nvmlDeviceGetSamples) saw a kernel
    # for 0.25 s of each second: busy comes from the buffer.
    rep = report_of(recording([(i, [gpu(0, util_busy_s=0.25, util_span_s=1.0)])
                               for i in range(60)]))
    assert rep.gpus[0].busy_s == pytest.approx(15.0)


# -- unsupported is "unknown", never 0 --------------------------------------------------------


def test_unsupported_utilisation_reads_unknown_and_min_utilisation_is_not_evaluated():
    # Failed before: "0 %" utilisation, 100 % idle and a min-utilisation failure at "0.0 %".
    rep = report_of(recording([(i, [gpu(None, mem_util=None)]) for i in range(60)]),
                    limits=mr.Limits(min_utilisation=50))
    g = rep.gpus[0]
    assert g.busy_s is None and g.util_mean is None
    assert rep.cost.idle_fraction is None and rep.cost.gpu_minutes_used is None
    assert rep.ok, rep.findings
    codes = {f.code: f for f in rep.findings}
    assert codes["min-utilisation-unknown"].level == "warning"
    assert "could not be evaluated" in codes["min-utilisation-unknown"].message
    text = mr.markdown(rep)
    assert "unknown" in text and "0.0 %" not in text and "100 % idle" not in text
    doc = mr.as_json(rep)
    assert doc["gpus"][0]["busy_s"] is None and doc["cost"]["idle_fraction"] is None
    assert doc["gpus"][0]["utilisation"] == {"mean": None, "p95": None, "max": None}


def test_an_unevaluated_check_fails_only_when_the_user_asked_for_it():
    rec = recording([(i, [gpu(None)]) for i in range(60)])
    rep = report_of(rec, limits=mr.Limits(min_utilisation=50, unknown_fails=True))
    assert not rep.ok
    assert [f.level for f in rep.findings if f.code == "min-utilisation-unknown"] == ["error"]


def test_unsupported_power_and_throttle_read_unknown_not_zero():
    # Failed before: "0.00 Wh" and "throttled 0:00".
    rep = report_of(recording([(i, [gpu(50, power_mw=None, throttle=None)])
                               for i in range(60)]))
    g = rep.gpus[0]
    assert g.energy_wh is None and g.throttled_s is None
    row = next(line for line in mr.markdown(rep).splitlines() if line.startswith("| 0 "))
    assert "0.00 Wh" not in row and "unknown" in row
    assert row.rstrip(" |").endswith("unknown")


def test_util_none_is_no_zero_in_means_and_charts():
    # half the readings unsupported: the mean is over the readings there are
    rec = recording([(i, [gpu(80 if i % 2 else None)]) for i in range(60)])
    rep = report_of(rec)
    assert rep.gpus[0].util_mean == pytest.approx(80.0)
    # the utilisation line holds the readings there are (failed before: a 0 for each None)
    util_line = next(line for line in mr.charts(rep)[0].splitlines()
                     if line.strip().startswith("line"))
    assert util_line.strip() == "line [" + ", ".join(["80"] * 30) + "]"


# -- 3. the energy counter ----------------------------------------------------------------------


def test_energy_comes_from_the_drivers_counter_where_there_is_one():
    # power readings say 100 W; the counter (mJ) says 360 J over the minute = 0.1 Wh
    rep = report_of(recording([(i, [gpu(50, energy_mj=10_000_000 + 6000 * i)])
                               for i in range(61)], stop=60))
    assert rep.gpus[0].energy_wh == pytest.approx(0.1)


# -- 2. MIG ---------------------------------------------------------------------------------------


SLICE = {"index": 0, "name": "NVIDIA H200 MIG 3g.71gb", "uuid": "MIG-aaaa",
         "memory_total": 71 * GiB, "mig": True, "slice": 1, "gi": 1, "ci": 0,
         "parent_uuid": "GPU-0", "util_source": "gpm"}


def slice_sample(util: float | None, mem_mib: int, **extra: Any) -> dict[str, Any]:
    return {"index": 0, "slice": 1, "util": util, "mem_util": None, "mem_used": mem_mib * MiB,
            "power_mw": None, "board_power_mw": 400000, "temp": 50, "sm_mhz": 1980,
            "throttle": 0, "procs": [[4242, mem_mib * MiB, "python"]], **extra}


def test_a_mig_slice_reports_its_own_figures_and_board_power_is_not_charged():
    rec = recording([(i, [slice_sample(40, 2048)]) for i in range(60)], gpus=[SLICE])
    rep = report_of(rec, limits=mr.Limits(min_utilisation=30, max_memory=4 * GiB))
    g = rep.gpus[0]
    assert rep.ok, rep.findings
    assert g.busy_s == pytest.approx(24.0) and g.util_mean == pytest.approx(40.0)
    assert g.peak_memory == 2048 * MiB
    assert g.energy_wh is None                   # the board's power is not this slice's
    assert g.board_energy_wh == pytest.approx(400 * 60 / 3600)
    text = mr.markdown(rep)
    assert "board-wide" in text and "MIG 3g.71gb" in text


def test_a_mig_slice_without_gpm_is_unknown_not_a_min_utilisation_failure():
    slice_nogpm = {**SLICE, "util_source": None}
    rec = recording([(i, [slice_sample(None, 2048)]) for i in range(60)], gpus=[slice_nogpm])
    rep = report_of(rec, limits=mr.Limits(min_utilisation=30))
    assert rep.ok and rep.gpus[0].util_mean is None


def test_another_slices_xid_is_not_this_jobs_finding():
    rec = recording([(i, [slice_sample(40, 2048)]) for i in range(10)], gpus=[SLICE],
                    events=[{"gpu": 0, "type": "xid", "data": 13, "gi": 2, "ci": 0},
                            {"gpu": 0, "type": "xid", "data": 31, "gi": 1, "ci": 0},
                            {"gpu": 0, "type": "xid", "data": 79, "gi": 0xFFFFFFFF,
                             "ci": 0xFFFFFFFF}])
    codes = [f.code for f in report_of(rec).findings]
    assert "xid-13" not in codes               # slice 2's (another tenant's) fault
    assert "xid-31" in codes and "xid-79" in codes   # ours, and the board's
