"""gpu-monitor tells the truth (issue 28): busy time by NVML's definition of utilisation,
recorded timestamps instead of the nominal interval, "unknown" (never 0) for an unsupported
counter, the driver's energy counter, and a MIG slice that reports only its own figures.

The first half checks the report's math on recordings built here (no process, no clock); the
second half runs the real sampler against the fake libnvidia-ml, which plays each case as
nvml.h documents it (testkit/fake_nvml/fake_nvml.c)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_ci.cuda.monitor import findings as mr_findings
from gpu_ci.cuda.monitor import recording as mr_recording
from gpu_ci.cuda.monitor import report as mr
from gpu_ci.cuda.monitor import results, views
from testkit.cuda.monitor_truth import SLICE, gpu, recording, report_of, slice_sample

GiB = 2**30
MiB = 2**20


def test_three_percent_for_120_s_is_about_3_6_busy_seconds_and_97_percent_idle():
    # Failed before: every sample above 0 % counted a whole interval (120 busy s, 0 % idle).
    rep = report_of(recording([(i, [gpu(3)]) for i in range(120)]))
    assert rep.gpus[0].busy_s == pytest.approx(3.6, abs=0.05)
    assert rep.cost.paid_minutes == 2
    assert rep.cost.idle_fraction == pytest.approx(0.97, abs=0.001)
    text = views.markdown(rep)
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
    rep = report_of(
        recording([(i, [gpu(0, util_busy_s=0.25, util_span_s=1.0)]) for i in range(60)])
    )
    assert rep.gpus[0].busy_s == pytest.approx(15.0)


# -- unsupported is "unknown", never 0 --------------------------------------------------------


def test_unsupported_utilisation_reads_unknown_and_min_utilisation_is_not_evaluated():
    # Failed before: "0 %" utilisation, 100 % idle and a min-utilisation failure at "0.0 %".
    rep = report_of(
        recording([(i, [gpu(None, mem_util=None)]) for i in range(60)]),
        limits=results.Limits(min_utilisation=50),
    )
    g = rep.gpus[0]
    assert g.busy_s is None and g.util_mean is None
    assert rep.cost.idle_fraction is None and rep.cost.gpu_minutes_used is None
    assert rep.ok, rep.findings
    codes = {f.code: f for f in rep.findings}
    assert codes["min-utilisation-unknown"].level == "warning"
    assert "could not be evaluated" in codes["min-utilisation-unknown"].message
    text = views.markdown(rep)
    assert "unknown" in text and "0.0 %" not in text and "100 % idle" not in text
    doc = views.as_json(rep)
    assert doc["gpus"][0]["busy_s"] is None and doc["cost"]["idle_fraction"] is None
    assert doc["gpus"][0]["utilisation"] == {"mean": None, "p95": None, "max": None}


def test_an_unevaluated_check_fails_only_when_the_user_asked_for_it():
    rec = recording([(i, [gpu(None)]) for i in range(60)])
    rep = report_of(rec, limits=results.Limits(min_utilisation=50, unknown_fails=True))
    assert not rep.ok
    assert [f.level for f in rep.findings if f.code == "min-utilisation-unknown"] == ["error"]


def test_unsupported_power_and_throttle_read_unknown_not_zero():
    # Failed before: "0.00 Wh" and "throttled 0:00".
    rep = report_of(recording([(i, [gpu(50, power_mw=None, throttle=None)]) for i in range(60)]))
    g = rep.gpus[0]
    assert g.energy_wh is None and g.throttled_s is None
    row = next(line for line in views.markdown(rep).splitlines() if line.startswith("| 0 "))
    assert "0.00 Wh" not in row and "unknown" in row
    assert row.rstrip(" |").endswith("unknown")


def test_util_none_is_no_zero_in_means_and_charts():
    # half the readings unsupported: the mean is over the readings there are
    rec = recording([(i, [gpu(80 if i % 2 else None)]) for i in range(60)])
    rep = report_of(rec)
    assert rep.gpus[0].util_mean == pytest.approx(80.0)
    # the utilisation line holds the readings there are (failed before: a 0 for each None)
    util_line = next(
        line for line in views.charts(rep)[0].splitlines() if line.strip().startswith("line")
    )
    assert util_line.strip() == "line [" + ", ".join(["80"] * 30) + "]"


# -- 3. the energy counter ----------------------------------------------------------------------


def test_energy_comes_from_the_drivers_counter_where_there_is_one():
    # power readings say 100 W; the counter (mJ) says 360 J over the minute = 0.1 Wh
    rep = report_of(
        recording([(i, [gpu(50, energy_mj=10_000_000 + 6000 * i)]) for i in range(61)], stop=60)
    )
    assert rep.gpus[0].energy_wh == pytest.approx(0.1)


# -- 2. MIG ---------------------------------------------------------------------------------------


def test_a_mig_slice_reports_its_own_figures_and_board_power_is_not_charged():
    rec = recording([(i, [slice_sample(40, 2048)]) for i in range(60)], gpus=[SLICE])
    rep = report_of(rec, limits=results.Limits(min_utilisation=30, max_memory=4 * GiB))
    g = rep.gpus[0]
    assert rep.ok, rep.findings
    assert g.busy_s == pytest.approx(24.0) and g.util_mean == pytest.approx(40.0)
    assert g.peak_memory == 2048 * MiB
    assert g.energy_wh is None  # the board's power is not this slice's
    assert g.board_energy_wh == pytest.approx(400 * 60 / 3600)
    text = views.markdown(rep)
    assert "board-wide" in text and "MIG 3g.71gb" in text


def test_a_mig_slice_without_gpm_is_unknown_not_a_min_utilisation_failure():
    slice_nogpm = {**SLICE, "util_source": None}
    rec = recording([(i, [slice_sample(None, 2048)]) for i in range(60)], gpus=[slice_nogpm])
    rep = report_of(rec, limits=results.Limits(min_utilisation=30))
    assert rep.ok and rep.gpus[0].util_mean is None


def test_another_slices_xid_is_not_this_jobs_finding():
    rec = recording(
        [(i, [slice_sample(40, 2048)]) for i in range(10)],
        gpus=[SLICE],
        events=[
            {"gpu": 0, "type": "xid", "data": 13, "gi": 2, "ci": 0},
            {"gpu": 0, "type": "xid", "data": 31, "gi": 1, "ci": 0},
            {"gpu": 0, "type": "xid", "data": 79, "gi": 0xFFFFFFFF, "ci": 0xFFFFFFFF},
        ],
    )
    codes = [f.code for f in report_of(rec).findings]
    assert "xid-13" not in codes  # slice 2's (another tenant's) fault
    assert "xid-31" in codes and "xid-79" in codes  # ours, and the board's


# -- the real sampler against the fake driver -------------------------------------------------


def run_monitor(
    run_cli,
    tmp_path,
    script: str,
    samples: int,
    *,
    config_extra: str = "",
    config: dict[str, str] | None = None,
    env_extra: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
):
    from testkit.cuda_env import write_config
    from testkit.gpu_monitor_env import fake_gpu_env, wait_for_stop_line

    env = fake_gpu_env(tmp_path, script, samples=samples)
    env.update(env_extra or {})
    path = tmp_path / "nvml.cfg"
    if config is not None:
        write_config(path, config)
    path.write_text(path.read_text() + config_extra)
    started = run_cli(["gpu-monitor", "--mode", "start"], env)
    assert started.returncode == 0, started.stdout + started.stderr
    records = wait_for_stop_line(env)
    result = run_cli(["gpu-monitor", "--mode", "report", *args], env)
    path = result.outputs.get("report-file")
    report = json.loads(Path(path).read_text()) if path else None
    return result, report, records


THREE_PERCENT = "0 gpu.0.util=3 gpu.0.mem_used_mib=1024 gpu.0.procs=4242:1000:python\n"


def test_fake_gpu_at_3_percent_for_120_s_reports_3_6_busy_seconds(run_cli, tmp_path):
    result, report, _ = run_monitor(run_cli, tmp_path, THREE_PERCENT, 120)
    assert result.returncode == 0, result.stdout
    assert float(result.outputs["busy-seconds"]) == pytest.approx(3.6, abs=0.05)
    assert float(result.outputs["idle-fraction"]) == pytest.approx(0.97, abs=0.001)
    assert "(97 % idle" in result.summary


def test_the_sampler_reads_the_drivers_sample_buffer(run_cli, tmp_path):
    # Each reading says 0 %, but the buffer's six entries per second say 25 %: a kernel ran a
    # quarter of the time between readings (failed before: 0 busy seconds).
    script = "0 gpu.0.util=0 gpu.0.buf_util=25 gpu.0.procs=-\n"
    result, report, records = run_monitor(
        run_cli, tmp_path, script, 60, config_extra="gpu.0.util_samples=6\n"
    )
    assert result.returncode == 0, result.stdout
    first, second = [r for r in records if r["kind"] == "sample"][:2]
    assert first["gpus"][0]["util_busy_s"] is None  # the first call marks the start
    assert second["gpus"][0]["util_busy_s"] == pytest.approx(0.25)
    assert report["gpus"][0]["busy_s"] == pytest.approx(0.25 * 59, abs=0.01)


def test_unsupported_power_reads_unknown_energy(run_cli, tmp_path):
    result, report, _ = run_monitor(
        run_cli, tmp_path, THREE_PERCENT, 10, config_extra="fail.nvmlDeviceGetPowerUsage=3\n"
    )
    assert result.returncode == 0, result.stdout
    assert report["gpus"][0]["energy_wh"] is None and result.outputs["energy-wh"] == ""
    assert "0.00 Wh" not in result.summary


def test_before_r535_throttle_reasons_come_from_the_old_call(run_cli, tmp_path):
    # nvidia-ml-py raises FUNCTION_NOT_FOUND for ...EventReasons on such a driver; failed
    # before: the fallback was dead code and the report said "throttled 0:00".
    script = THREE_PERCENT + "5 gpu.0.throttle=0x20\n"
    result, report, _ = run_monitor(
        run_cli,
        tmp_path,
        script,
        10,
        config_extra="fail.nvmlDeviceGetCurrentClocksEventReasons=13\n",
    )
    assert result.returncode == 0, result.stdout
    assert report["gpus"][0]["throttled_s"] == pytest.approx(5.0)
    assert report["gpus"][0]["throttle_reasons_s"] == {"thermal (software)": 5.0}


def test_energy_comes_from_the_fake_drivers_counter(run_cli, tmp_path):
    # 100 W for the first 5 s, then 300 W: the counter's increase from the first sample on
    script = THREE_PERCENT + "0 gpu.0.power_mw=100000\n5 gpu.0.power_mw=300000\n"
    result, report, records = run_monitor(
        run_cli, tmp_path, script, 10, config_extra="gpu.0.energy_counter=1\n"
    )
    samples = [r for r in records if r["kind"] == "sample"]
    assert samples[0]["gpus"][0]["energy_mj"] is not None
    # steps 1-4 at 100 W, 5-9 at 300 W: (4 * 100 + 5 * 300) J
    assert report["gpus"][0]["energy_wh"] == pytest.approx((400 + 1500) / 3600)


MIG_OURS = "MIG-11111111-2222-3333-4444-555555555555"
TWO_TENANTS = """\
0 gpu.0.power_mw=400000 gpu.0.mig.0.util=40 gpu.0.mig.0.mem_used_mib=2048
0 gpu.0.mig.0.procs=4242:2000:python
0 gpu.0.mig.1.util=100 gpu.0.mig.1.mem_used_mib=30720 gpu.0.mig.1.procs=5555:30000:other
3 gpu.0.mig.1.xid=13
"""


def two_tenant_h200(cc: str = "9.0") -> dict[str, str]:
    from testkit.cuda_env import gpu_config, nvml_config

    return nvml_config(
        gpu_config(
            0,
            cc=cc,
            mig=1,
            mig__count=2,
            mig__0__uuid=MIG_OURS,
            mig__0__name="NVIDIA H200 MIG 3g.71gb",
            mig__0__memory_mib=71 * 1024,
            mig__1__uuid="MIG-99999999-2222-3333-4444-555555555555",
            mig__1__name="NVIDIA H200 MIG 3g.71gb",
            mig__1__memory_mib=71 * 1024,
        ),
        privileged=1,
    )


def test_a_mig_slice_reports_only_its_own_figures(run_cli, tmp_path):
    # Failed before: "100 % idle", min-utilisation failed at 0.0 %, max-memory charged the
    # other tenant's 30 GiB, the board's energy and the other slice's Xid 13 were the job's.
    result, report, _ = run_monitor(
        run_cli,
        tmp_path,
        TWO_TENANTS,
        20,
        config=two_tenant_h200(),
        env_extra={"CUDA_VISIBLE_DEVICES": MIG_OURS},
        args=("--min-utilisation", "30", "--max-memory", "4GiB"),
    )
    assert result.returncode == 0, result.stdout
    (gpu,) = report["gpus"]
    assert gpu["uuid"] == MIG_OURS and gpu["mig_slice"] == 0
    assert gpu["utilisation_source"] == "gpm"
    assert gpu["utilisation"]["mean"] == pytest.approx(40.0)
    assert gpu["busy_s"] == pytest.approx(0.4 * 19, abs=0.01)  # the first GPM sample pairs
    assert gpu["peak_memory_bytes"] == 2048 * MiB
    assert [p["pid"] for p in gpu["processes"]] == [4242]
    assert gpu["energy_wh"] is None and gpu["board_energy_wh"] > 0
    assert "xid-13" not in result.outputs["findings"]
    assert "board-wide" in result.summary


def test_a_mig_slice_without_gpm_reads_unknown_not_a_false_failure(run_cli, tmp_path):
    # an A100-class board (no GPM): utilisation unknown; min-utilisation is not evaluated
    result, report, _ = run_monitor(
        run_cli,
        tmp_path,
        TWO_TENANTS,
        10,
        config=two_tenant_h200(cc="8.0"),
        env_extra={"CUDA_VISIBLE_DEVICES": MIG_OURS},
        args=("--min-utilisation", "30"),
    )
    assert result.returncode == 0, result.stdout
    (gpu,) = report["gpus"]
    assert gpu["utilisation_source"] is None and gpu["busy_s"] is None
    assert gpu["peak_memory_bytes"] == 2048 * MiB
    assert "min-utilisation-unknown" in result.outputs["findings"]
    assert result.outputs["idle-fraction"] == ""


#: the board's counters: PCIe 10 / 4 MiB and NVLink 100 / 50 MiB a step, by step 5 three
#: corrected and one uncorrected ECC error (the board's, any tenant's)
BOARD_COUNTERS = """\
1 gpu.0.pcie_tx_mib=10 gpu.0.pcie_rx_mib=4 gpu.0.nvlink_tx_mib=100 gpu.0.nvlink_rx_mib=50
5 gpu.0.ecc_sbe=3 gpu.0.ecc_dbe=1
"""
BOARD_QUERIES = """\
import json, pynvml as n
n.nvmlInit()
parent = n.nvmlDeviceGetHandleByIndex(0)
slice_ = n.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
UNC, VOLATILE = n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC
PCIE_TX = n.NVML_FI_DEV_PCIE_COUNT_TX_BYTES
def ask(f, *a):
    try:
        got = f(*a)
    except n.NVMLError as e:
        return "error %d" % e.value
    return [int(x) for x in got] if isinstance(got, tuple) else int(got)
out = {}
for name, h in (("parent", parent), ("slice", slice_)):
    out[name] = {
        "ecc": ask(n.nvmlDeviceGetTotalEccErrors, h, UNC, VOLATILE),
        "remap": ask(n.nvmlDeviceGetRemappedRows, h),
        "fields": [int(v.nvmlReturn) for v in n.nvmlDeviceGetFieldValues(h, [PCIE_TX])],
    }
print(json.dumps(out))
"""


def test_the_fake_answers_board_queries_on_a_mig_board_as_nvml_h_documents(tmp_path):
    # nvml.h: nvmlDeviceGetRemappedRows "NVML_ERROR_NOT_SUPPORTED If MIG is enabled"; ECC
    # counts are "the total set of errors across the entire device" and field values take
    # "The device handle of the GPU" (neither documents a MIG device handle, as the calls
    # that accept one do): the parent answers, a MIG device handle NOT_SUPPORTED (3).
    import subprocess
    import sys

    from testkit.cuda_env import write_config
    from testkit.gpu_monitor_env import fake_gpu_env

    env = fake_gpu_env(tmp_path, BOARD_COUNTERS, samples=None)
    cfg = two_tenant_h200()
    cfg.update({"gpu.0.pcie_counters": "1", "gpu.0.nvlink": "1"})
    write_config(Path(env["FAKE_NVML_CONFIG"]), cfg)
    got = subprocess.run(
        [sys.executable, "-c", BOARD_QUERIES],
        env={**env, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    answers = json.loads(got.stdout)
    assert isinstance(answers["parent"]["ecc"], int)
    assert answers["parent"]["fields"] == [0]
    assert answers["parent"]["remap"] == "error 3"  # MIG enabled: not supported at all
    assert answers["slice"] == {"ecc": "error 3", "remap": "error 3", "fields": [3]}


def test_a_mig_slice_reports_the_boards_ecc_and_io_as_board_wide(run_cli, tmp_path):
    # Failed before: a MIG board's ECC and PCIe/NVLink were never read (the slice's handle
    # has none; the parent was not asked), so a double-bit ECC error on the board was silent.
    cfg = two_tenant_h200()
    cfg.update({"gpu.0.pcie_counters": "1", "gpu.0.nvlink": "1"})
    result, report, records = run_monitor(
        run_cli,
        tmp_path,
        TWO_TENANTS + BOARD_COUNTERS,
        10,
        config=cfg,
        env_extra={"CUDA_VISIBLE_DEVICES": MIG_OURS},
    )
    assert result.returncode == 0, result.stdout
    import jsonschema

    schema = json.loads(
        (mr_findings.CATALOGUE_PATH.parent / "monitor-report.schema.json").read_text()
    )
    jsonschema.validate(report, schema)
    (gpu,) = report["gpus"]
    # the slice's own: unknown (nvml.h has none per instance), never the board's as its own
    assert set(gpu["io_bytes"].values()) == {None}
    assert set(gpu["health"].values()) == {None}
    # the board's, read through the parent handle and marked as the whole GPU's
    assert gpu["board_io_bytes"] == {
        "pcie_tx": 90 * MiB,
        "pcie_rx": 36 * MiB,
        "nvlink_tx": 900 * MiB,
        "nvlink_rx": 450 * MiB,
    }
    assert gpu["board_health"]["ecc_corrected"] == 3
    assert gpu["board_health"]["ecc_uncorrected"] == 1
    # nvml.h: remapped rows are not supported while MIG is enabled: unknown, not 0
    assert gpu["board_health"]["rows_remapped"] is None
    found = {f["code"]: f["message"] for f in report["findings"]}
    assert "board-wide" in found["ecc-uncorrected"] and "1 uncorrected" in found["ecc-uncorrected"]
    assert "board-wide 90.0 MiB / 36.0 MiB" in result.summary
    sample = next(r for r in records if r["kind"] == "sample")["gpus"][0]
    assert "board_ecc" in sample and "ecc" not in sample
    # the CSV: the slice's own counter cells empty (unknown), the board's in board_* columns
    import csv
    import io

    text = Path(result.outputs["samples-csv"]).read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows[-1]["pcie_tx_bytes"] == "" and rows[-1]["ecc_uncorrected"] == ""
    assert rows[-1]["board_pcie_tx_bytes"] == str(90 * MiB)
    assert rows[-1]["board_ecc_uncorrected"] == "1"


# -- 3. violation counters and memory v2 -----------------------------------------------------


def test_throttle_time_by_reason_comes_from_the_violation_counters(run_cli, tmp_path):
    # No reading ever caught a throttle bit, but the thermal counter grew 0.2 s a second: a
    # short slowdown between readings (failed before: "throttled 0:00").
    script = THREE_PERCENT + "0 gpu.0.viol_thermal_ms=200\n"
    result, report, _ = run_monitor(
        run_cli, tmp_path, script, 10, config_extra="gpu.0.violation=1\n"
    )
    assert result.returncode == 0, result.stdout
    gpu = report["gpus"][0]
    assert gpu["throttled_s"] == pytest.approx(1.8)  # 9 increases of 0.2 s
    assert gpu["throttle_reasons_s"] == {"thermal (software)": pytest.approx(1.8)}


def test_memory_used_is_allocated_and_the_reservation_is_apart(run_cli, tmp_path):
    # v1's used is "Sum of Reserved and Allocated": a max-memory check charged the driver's
    # 500 MiB reservation to the job (failed before: peak 1524 MiB).
    result, report, _ = run_monitor(
        run_cli, tmp_path, THREE_PERCENT, 5, config_extra="gpu.0.reserved_mib=500\n"
    )
    assert result.returncode == 0, result.stdout
    gpu = report["gpus"][0]
    assert gpu["peak_memory_bytes"] == 1024 * MiB
    assert gpu["memory_reserved_bytes"] == 500 * MiB


def test_a_sampler_that_falls_behind_is_not_under_counted(run_cli, tmp_path):
    # interval 1, but each sample comes 2 s late (slow driver calls): 40 samples span 117 s
    # at 100 %. Failed before: 40 nominal seconds busy.
    script = "0 gpu.0.util=100 gpu.0.mem_used_mib=1024 gpu.0.procs=4242:1000:python\n"
    result, report, records = run_monitor(
        run_cli, tmp_path, script, 40, env_extra={"GPU_CI_MONITOR_FAKE_LAG": "2"}
    )
    assert result.returncode == 0, result.stdout
    times = [r["ts"] for r in records if r["kind"] == "sample"]
    assert times[1] - times[0] == 3
    assert report["gpus"][0]["busy_s"] == pytest.approx(1 + 39 * 3)


def test_fail_on_unknown_makes_an_unevaluated_min_utilisation_fail(run_cli, tmp_path):
    result, _, _ = run_monitor(
        run_cli,
        tmp_path,
        TWO_TENANTS,
        5,
        config=two_tenant_h200(cc="8.0"),
        env_extra={"CUDA_VISIBLE_DEVICES": MIG_OURS},
        args=("--min-utilisation", "30", "--fail-on-unknown", "true"),
    )
    assert result.returncode == 1 and result.outputs["ok"] == "false"
    assert "min-utilisation could not be evaluated" in result.stdout


def test_a_buffer_that_no_longer_reaches_back_is_not_stretched():
    from gpu_ci.cuda.monitor.reader import _buffer_busy_s

    # a full buffer: six entries a second, 50 % each, since the last read 1 s ago
    step = 1_000_000 // 6
    full = [(i * step, 50) for i in range(1, 7)]
    assert _buffer_busy_s(0, full) == pytest.approx(0.5, abs=0.01)
    # interval 60 s, but the driver kept only the last second: its 100 % first entry must
    # not stand for 59 s; the entries' mean (1/6) stands for the whole minute: 10 s
    late = [(59_000_000 + i * step, 100 if i == 1 else 0) for i in range(1, 7)]
    assert _buffer_busy_s(0, late) == pytest.approx(60 / 6, rel=0.02)


def test_csv_keeps_unknown_empty_and_has_the_slice_and_busy_columns():
    import csv
    import io

    rec = recording([(i, [slice_sample(40 if i else None, 2048)]) for i in range(3)], gpus=[SLICE])
    rows = list(csv.DictReader(io.StringIO(views.samples_csv(rec))))
    assert [r["uuid"] for r in rows] == ["MIG-aaaa"] * 3
    assert [r["busy_s"] for r in rows] == ["", "0.400", "0.400"]
    assert rows[0]["utilisation"] == "" and rows[0]["power_w"] == ""
    assert rows[1]["mig_slice"] == "1" and rows[1]["board_power_w"] == "400.000"


def test_time_after_the_sampler_died_is_not_counted_idle():
    # kill -9 at +10 s of a 100 s window: 10 s at 100 % were watched, 90 s were not. The idle
    # share (and idle cost, and gpu-spend's month) is unknown, not 90 %
    from decimal import Decimal

    from testkit.gpu_monitor_env import EPOCH

    gpus = [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-0", "memory_total": 2**34}]
    lines = [
        {"kind": "start", "version": 1, "ts": EPOCH, "interval": 1.0, "pid": 1, "gpus": gpus},
    ] + [{"kind": "sample", "ts": EPOCH + i, "gpus": [gpu(100)]} for i in range(10)]
    rec = mr_recording.parse_recording("\n".join(json.dumps(x) for x in lines))
    report = mr.compute(rec, end=EPOCH + 100, pricing=results.Pricing(Decimal("0.06"), "input"))
    assert report.cost.idle_fraction is None and report.cost.idle_cost_usd is None
    assert report.cost.gpu_minutes_used == round(10 / 60, 4)  # what was watched
    assert views.outputs(report)["idle-fraction"] == ""
    ended = next(f for f in report.findings if f.code == "sampler-ended-early")
    assert "+0:09 to +1:40 was not watched" in ended.message and "idle share" in ended.message
    # a sampler that stopped on its own (the report's signal) keeps its idle share
    stopped = lines + [{"kind": "stop", "ts": EPOCH + 10, "reason": "signal", "samples": 10}]
    rec = mr_recording.parse_recording("\n".join(json.dumps(x) for x in stopped))
    # (10 busy seconds of the one minute the job is billed)
    assert mr.compute(rec, end=EPOCH + 10).cost.idle_fraction == round(1 - 10 / 60, 4)


@pytest.mark.parametrize(
    "error",
    [
        {"code": 18, "name": "LIB_RM_VERSION_MISMATCH", "gap": True},  # a driver upgrade
        {"code": 15, "name": "GPU_IS_LOST", "gap": False},
    ],
)
def test_a_gpu_no_sample_covers_after_an_error_is_not_counted_idle(error):
    # the sampler ran to the end, but GPU 1 answered no sample after +10 s of 100 s: its
    # 90 s were not watched, so the job's idle share is unknown, not 45 %
    from testkit.gpu_monitor_env import EPOCH

    gpus = [
        {"index": i, "name": "NVIDIA H200", "uuid": f"GPU-{i}", "memory_total": 2**34}
        for i in (0, 1)
    ]
    samples = [
        {
            "kind": "sample",
            "ts": EPOCH + t,
            "gpus": [gpu(100)] + ([gpu(100, index=1)] if t < 10 else []),
        }
        for t in range(100)
    ]
    lines = [
        {"kind": "start", "version": 1, "ts": EPOCH, "interval": 1.0, "pid": 1, "gpus": gpus},
        *samples[:10],
        {
            "kind": "error",
            "ts": EPOCH + 10,
            "gpu": 1,
            "call": "nvmlDeviceGetUtilizationRates",
            **error,
        },
        *samples[10:],
        {"kind": "stop", "ts": EPOCH + 100, "reason": "signal", "samples": 100},
    ]
    rec = mr_recording.parse_recording("\n".join(json.dumps(x) for x in lines))
    report = mr.compute(rec, end=EPOCH + 100)
    assert report.cost.idle_fraction is None
    assert views.outputs(report)["idle-fraction"] == ""
    # both GPUs sampled to the end: the share is known again
    whole = [
        {"kind": "start", "version": 1, "ts": EPOCH, "interval": 1.0, "pid": 1, "gpus": gpus},
        *(
            {"kind": "sample", "ts": EPOCH + t, "gpus": [gpu(100), gpu(100, index=1)]}
            for t in range(100)
        ),
        {"kind": "stop", "ts": EPOCH + 100, "reason": "signal", "samples": 100},
    ]
    rec = mr_recording.parse_recording("\n".join(json.dumps(x) for x in whole))
    assert mr.compute(rec, end=EPOCH + 100).cost.idle_fraction is not None
