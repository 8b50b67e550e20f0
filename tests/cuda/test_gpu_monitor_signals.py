"""gpu-monitor's DCGM-level signals from NVML (issue 28 item 3) and its smaller truths: GPM
activity ratios (Hopper and newer, NOT_SUPPORTED before), PCIe/NVLink bytes (field values),
ECC and remapped-row growth, the newer event types with the Xid catalogue's action, a
transient NVML error as a gap (only GPU_IS_LOST drops a GPU), host PIDs in a container.

The fake driver plays each signal as nvml.h documents it; every expected number follows
from the script (one step is one sample and one second of the driver's clock)."""

from __future__ import annotations

import csv
import io
import json

import jsonschema

from gpu_ci.cuda.monitor import findings as mr_findings
from gpu_ci.cuda.monitor import recording, views
from gpu_ci.cuda.monitor import report as mr
from testkit.gpu_monitor_env import fake_gpu_env, monitor_dir, wait_for_stop_line

MIB = 2**20
SCHEMA = json.loads(
    (mr_findings.CATALOGUE_PATH.parent / "monitor-report.schema.json").read_text(encoding="utf-8")
)

#: 10 samples on an H200 (GPM, counters, the newer events): util 50 %, SM active 40 %,
#: tensor 20 %, DRAM 10 %; 10 MiB PCIe tx and 4 MiB rx and 100 MiB NVLink tx a step; an
#: Xid 13 at step 3; a DRAM retirement at step 4; steps 4-5 fail with UNKNOWN (999); by
#: step 6 3 corrected and 1 uncorrected ECC error, 1 uncorrectable row remapped (pending).
SIGNALS_SCRIPT = """\
0 gpu.0.util=50 gpu.0.sm=40 gpu.0.occupancy=30 gpu.0.tensor=20 gpu.0.dram=10 gpu.0.procs=-
1 gpu.0.pcie_tx_mib=10 gpu.0.pcie_rx_mib=4 gpu.0.nvlink_tx_mib=100 gpu.0.nvlink_rx_mib=50
3 gpu.0.xid=13
4 gpu.0.event=0x400 gpu.0.error=999
5 gpu.0.ecc_sbe=3 gpu.0.ecc_dbe=1 gpu.0.remap_unc=1 gpu.0.remap_pending=1
6 gpu.0.error=0
"""
HOPPER = {"pcie_counters": 1, "nvlink": 1, "event_types": "0xFF0B"}


def run_monitor(run_cli, tmp_path, script, *args, samples=10, machine=None, **gpu):
    env = fake_gpu_env(tmp_path, script, samples=samples, machine=machine, **gpu)
    started = run_cli(["gpu-monitor", "--mode", "start"], env)
    assert started.returncode == 0, started.stdout + started.stderr
    records = wait_for_stop_line(env)
    result = run_cli(["gpu-monitor", "--mode", "report", *args], env)
    report = json.loads((monitor_dir(env) / "report.json").read_text())
    return records, result, report, env


def test_hopper_signals_gaps_and_events_from_the_driver(run_cli, tmp_path):
    records, result, report, _env = run_monitor(run_cli, tmp_path, SIGNALS_SCRIPT, **HOPPER)
    assert result.returncode == 0, result.stdout + result.stderr
    # UNKNOWN at steps 4-5 is a gap written once: the GPU is asked again and answers at 6
    errors = [r for r in records if r["kind"] == "error"]
    assert [(e["name"], e["gap"]) for e in errors] == [("UNKNOWN", True)]
    assert len([r for r in records if r["kind"] == "sample" and r["gpus"]]) == 8
    jsonschema.validate(report, SCHEMA)
    assert report["schema_version"] == 2
    g = report["gpus"][0]
    assert g["lost_at_s"] is None  # a gap is no loss
    # GPM: the first sample only opens the pair; every later one reads the script's ratios
    assert g["activity"] == {"sm": 40.0, "occupancy": 30.0, "tensor": 20.0, "dram": 10.0}
    # the counters at step 0 and step 9: 9 steps of 10 / 4 MiB PCIe, 100 / 50 MiB NVLink
    assert g["io_bytes"] == {
        "pcie_tx": 90 * MIB,
        "pcie_rx": 36 * MIB,
        "nvlink_tx": 900 * MIB,
        "nvlink_rx": 450 * MIB,
    }
    assert g["health"] == {
        "ecc_corrected": 3,
        "ecc_uncorrected": 1,
        "rows_remapped": 1,
        "remap_pending": 1,
        "remap_failure": 0,
    }
    found = {f["code"]: f["message"] for f in report["findings"]}
    assert "catalogue action RESTART_APP; the GPU needs no reset" in found["xid-13"]
    assert "drain" not in found["xid-13"]
    assert "reset the GPU when it is idle" in found["dram-retirement"]
    assert "1 uncorrected ECC error(s)" in found["ecc-uncorrected"]
    assert "3 corrected" in found["ecc-corrected"]
    assert "a remap is pending" in found["rows-remapped"]
    assert "no samples from +0:04 to +0:06; sampling resumed" in found["nvml-failed"]
    assert "gpu-lost" not in found
    summary = result.summary
    assert "| 40 % / 20 % / 10 % | 90.0 MiB / 36.0 MiB | 900.0 MiB / 450.0 MiB |" in summary
    assert "ECC +3 / +1, rows remapped +1 (pending)" in summary
    rows = list(csv.DictReader(io.StringIO((monitor_dir_csv(result)).read_text())))
    assert rows[1]["sm_active"] == "40" and rows[1]["pcie_tx_bytes"] == str(10 * MIB)
    assert rows[0]["sm_active"] == ""  # the first GPM sample has no pair yet: unknown


def monitor_dir_csv(result):
    from pathlib import Path

    return Path(result.outputs["samples-csv"])


def test_before_hopper_and_without_ecc_the_signals_read_unknown(run_cli, tmp_path):
    _records, result, report, _env = run_monitor(
        run_cli,
        tmp_path,
        SIGNALS_SCRIPT.replace("gpu.0.error=999", ""),
        samples=6,
        name="NVIDIA A10G",
        cc="8.6",
        ecc=0,
        remap=0,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    g = report["gpus"][0]
    # nvml.h: GPM is "For Hopper or newer fully supported devices"; field values answer
    # NOT_SUPPORTED per value; a board without ECC answers NOT_SUPPORTED: unknown, never 0
    assert g["activity"] == {}
    assert set(g["io_bytes"].values()) == {None}
    assert set(g["health"].values()) == {None}
    assert views.SIGNALS_UNKNOWN in result.summary
    codes = {f["code"] for f in report["findings"]}
    assert not codes & {"ecc-uncorrected", "ecc-corrected", "rows-remapped"}
    # only registered types arrive: the DRAM retirement event is not an A10G's to send
    assert "dram-retirement" not in codes


def test_host_pids_in_a_container_are_not_the_jobs_gpu_use(run_cli, tmp_path):
    script = "0 gpu.0.util=60 gpu.0.mem_used_mib=2048 gpu.0.procs=4242:2000:python\n"
    records, result, report, env = run_monitor(
        run_cli, tmp_path, script, "--expect-gpu-use", "true", samples=4, machine={"container": 1}
    )
    sample = next(r for r in records if r["kind"] == "sample")
    # NVML lists the host's PID, which this namespace cannot name: marked, never "pid N"
    assert sample["gpus"][0]["procs"] == [[3004242, 2000 * MIB, "", False]]
    g = report["gpus"][0]
    assert g["processes"] == [] and g["foreign_pids"] == [3004242]
    assert report["gpu_used"] is False  # busy time next to a foreign process is not ours
    found = {f["code"]: f for f in report["findings"]}
    assert found["gpu-use-unknown"]["level"] == "warning" and "3004242" in result.summary
    assert "gpu-not-used" not in found and result.returncode == 0
    strict = run_cli(
        [
            "gpu-monitor",
            "--mode",
            "report",
            "--expect-gpu-use",
            "true",
            "--fail-on-unknown",
            "true",
        ],
        env,  # a second report of the same job
    )
    assert strict.returncode == 1 and "gpu-use-unknown" in strict.stdout + strict.stderr


def test_the_catalogue_names_an_action_and_asks_a_reset_only_where_it_does():
    # the workbook's immediate actions: 43 is IGNORE there, the others RESTART_APP
    for code, action in (
        (13, "RESTART_APP"),
        (31, "RESTART_APP"),
        (43, "IGNORE"),
        (94, "RESTART_APP"),
    ):
        f = mr_findings.xid_finding(code, 0, 1.0)
        assert f"{action}; the GPU needs no reset" in f.message and "drain" not in f.message
    for code in (48, 79, 95, 119):
        assert "drain this runner" in mr_findings.xid_finding(code, 0, 1.0).message
    unknown = mr_findings.xid_finding(150, 0, 1.0)
    assert "see NVIDIA's Xid catalogue" in unknown.message
    assert "docs.nvidia.com/deploy/xid-errors" in unknown.message
    assert mr_findings.catalogue()["source"].startswith("https://docs.nvidia.com/")


def test_gpu_is_lost_is_not_always_called_xid_79():
    rec = recording.parse_recording(
        "\n".join(
            json.dumps(r)
            for r in (
                {
                    "kind": "start",
                    "ts": 0,
                    "interval": 1,
                    "gpus": [{"index": 0, "name": "G", "uuid": "GPU-1", "memory_total": 1}],
                },
                {"kind": "sample", "ts": 1, "gpus": [{"index": 0, "util": 5, "mem_used": 0}]},
                {"kind": "error", "ts": 2, "gpu": 0, "code": 15, "name": "GPU_IS_LOST"},
            )
        )
    )
    report = mr.compute(rec, end=3)
    lost = next(f for f in report.findings if f.code == "gpu-lost")
    assert "the kernel log's Xid says which" in lost.message
    assert "(Xid 79 in the kernel log)" not in lost.message
    assert report.gpus[0].lost_at_s == 2


def test_a_version_1_report_is_still_a_valid_report():
    from gpu_ci.github.monitor_artifact import schema_errors
    from testkit.gpu_monitor_env import example_report

    doc = views.as_json(example_report())
    for g in doc["gpus"]:
        for key in ("activity", "io_bytes", "health", "foreign_pids"):
            del g[key]
    doc["schema_version"] = 1
    jsonschema.validate(doc, SCHEMA)
    assert schema_errors(doc, SCHEMA) == []
    assert schema_errors(dict(doc, schema_version=3), SCHEMA)


def test_a_recovery_action_names_the_action_the_driver_asks_for(run_cli, tmp_path):
    # GPU 0's driver asks NODE_REBOOT (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 2) with the
    # recovery-action event, then an Xid 154; GPU 1's driver (older) does not support the
    # field: its action is unknown, never a list of what it might be
    script = (
        "0 gpu.0.util=10 gpu.0.procs=- gpu.1.util=10 gpu.1.procs=-\n"
        "1 gpu.0.recovery_action=2 gpu.0.event=0x8000 gpu.1.event=0x8000\n"
        "3 gpu.0.xid=154 gpu.1.xid=154\n"
    )
    records, result, report, _env = run_monitor(
        run_cli, tmp_path, script, samples=6, gpus=2, event_types="0xFF0B"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    events = sorted(
        ((r["gpu"], r["type"], r["recovery_action"]) for r in records if r["kind"] == "event"),
    )
    assert events == [
        (0, "recovery-action", 2),
        (0, "xid", 2),
        (1, "recovery-action", None),
        (1, "xid", None),
    ]
    found = [f["message"] for f in report["findings"]]
    ours = [m for m in found if m.startswith("GPU 0:")]
    theirs = [m for m in found if m.startswith("GPU 1:")]
    assert len(ours) == 2 and all("NODE_REBOOT (reboot the node)" in m for m in ours), ours
    assert len(theirs) == 2 and all("recovery action unknown" in m for m in theirs), theirs
    for m in found:  # nvml.h's list of possible actions is no longer printed
        assert "GPU_RESET, NODE_REBOOT" not in m and "SYSTEM_REBOOT" not in m


def test_an_unreadable_process_list_is_unknown_not_no_process(run_cli, tmp_path):
    # nvml.h (nvmlDeviceGetComputeRunningProcesses_v3): "NVML_ERROR_NO_PERMISSION if the user
    # doesn't have permission to perform this operation". The job's python holds 4 GiB at
    # 0 % utilisation (between kernels): without the list, its use is unknown, never "no
    # process used a GPU"
    script = "0 gpu.0.util=0 gpu.0.mem_used_mib=4096 gpu.0.procs=4242:4000:python\n"
    records, result, report, _env = run_monitor(
        run_cli,
        tmp_path,
        script,
        "--expect-gpu-use",
        "true",
        samples=4,
        machine={"fail": {"nvmlDeviceGetComputeRunningProcesses_v3": 4}},
    )
    sample = next(r for r in records if r["kind"] == "sample")
    assert sample["gpus"][0]["procs"] is None  # unknown, not []
    found = {f["code"]: f for f in report["findings"]}
    assert "gpu-not-used" not in found, found
    assert found["gpu-use-unknown"]["level"] == "warning"
    assert "process list could not be read" in found["gpu-use-unknown"]["message"]
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_broken_event_set_says_events_went_unwatched(run_cli, tmp_path):
    # nvml.h (nvmlEventSetWait): besides TIMEOUT, "NVML_ERROR_GPU_IS_LOST if the target GPU
    # has fallen off the bus" and "NVML_ERROR_UNKNOWN on any unexpected error". The sampler
    # keeps sampling without the set; the report must say Xids went unwatched from then on,
    # not let the missing Xid 13 read as "no Xid"
    script = "0 gpu.0.util=50 gpu.0.procs=-\n2 gpu.0.xid=13\n"
    records, result, report, _env = run_monitor(
        run_cli, tmp_path, script, samples=4, machine={"fail": {"nvmlEventSetWait_v2": 999}}
    )
    assert result.returncode == 0, result.stdout + result.stderr
    errors = [r for r in records if r["kind"] == "error"]
    assert [(e["call"], e["name"]) for e in errors] == [("nvmlEventSetWait", "UNKNOWN")]
    assert len([r for r in records if r["kind"] == "sample"]) == 4  # sampling went on
    found = {f["code"]: f["message"] for f in report["findings"]}
    assert "nvml-failed" not in found and "gpu-lost" not in found
    assert "Xid and ECC events from +0:01 on were not watched" in found["events-unwatched"]
    assert "events-unwatched" in result.summary
