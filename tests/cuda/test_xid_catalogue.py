"""``data/xid-catalogue.json`` against the contracts it copies from: NVIDIA's Xid catalogue
workbook (its immediate-action buckets, sheet 'Resolution Buckets'), nvml.h's
``nvmlDeviceGpuRecoveryAction_t`` and NVIDIA's k8s-device-plugin's application Xids; and
the findings gpu-monitor builds from each row (issue 28: "the newer event types with
NVIDIA's Xid catalogue's action for each")."""

from __future__ import annotations

import re

import pytest

from gpu_ci.cuda.monitor import findings as mr_findings
from gpu_ci.cuda.monitor import recording
from gpu_ci.cuda.monitor import report as mr
from testkit.cuda_env import require_nvml_header

#: The 'Guidance Class' column of the workbook's sheet 'Resolution Buckets' (Xid-Catalog.xlsx,
#: sha256 7f70ce96...d5a5, as the JSON's ``workbook`` names it): every bucket a row's
#: immediate action may be. Written here apart from the JSON so that a misspelt or invented
#: bucket in the JSON fails.
CATALOGUE_BUCKETS = {
    "CONTACT_SUPPORT",
    "RESTART_APP",
    "IGNORE",
    "WORKFLOW_XID_45",
    "RESET_GPU",
    "WORKFLOW_XID_48",
    "CHECK_MECHANICALS",
    "WORKFLOW_NVLINK_ERR",
    "UPDATE_SWFW",
    "RESTART_BM",
    "WORKFLOW_NVLINK5_ERR",
    "RESTART_VM",
    "XID_154",
    "CHECK_UVM",
    "CHECK_APP/CUDA",
    "WORKFLOW_XID_13",
    "WORKFLOW_XID_31",
    "INVESTIGATE_SW",
    "IGNORE (sympathetic)",
    "XID_137_FLOW",
    "INVESTIGATE_LINK_SI",
    "N/A Informational only regarding another Xid",
    "INVESTIGATE_SW_USER",
    "SYMPATHETIC_REPORT_SOLO",
    "XID_154_EVAL",
    "CHECK_NVLINK_FAILURE_FLOW",
    "INVESTIGATE_SW_USER_LINK_SI",
    "INVESTIGATE_PEER_DEVICE",
    "INVESTIGATE_HOST",
    "INVESTIGATE_LINK_SI_AND_CABLES",
}
#: NVIDIA/k8s-device-plugin internal/rm/health.go: applicationErrorXids, "Application errors:
#: the GPU should still be healthy".
DEVICE_PLUGIN_APPLICATION_XIDS = {13, 31, 43, 45, 68}
WORKBOOK_SHA256 = "7f70ce9684be0c9d98a367770341ccc1d8bca4465cebe42dab7e23d57df5d5a5"


def test_every_row_is_sourced_confirmed_and_its_action_is_a_catalogue_bucket():
    doc = mr_findings.catalogue()
    assert doc["workbook"]["sha256"] == WORKBOOK_SHA256
    assert doc["workbook"]["url"].startswith("https://docs.nvidia.com/deploy/xid-errors/")
    assert set(doc["buckets"]) <= CATALOGUE_BUCKETS
    for code, row in doc["xids"].items():
        assert row["action"] in doc["buckets"], (code, row["action"])
        # the row's reset is its bucket's, never a second opinion
        assert row["reset"] is doc["buckets"][row["action"]]["reset"], code
        assert row["investigatory"], code
        assert row["confirmed"] is True, f"Xid {code}: no primary source read"
        sheet = [s for s in row["sources"] if s["url"] == doc["workbook"]["url"]]
        assert sheet and f"(Xid {code}," in sheet[0]["says"], code
        assert f"Immediate Action) {row['action']};" in sheet[0]["says"], code
    assert doc["buckets"]["RESTART_APP"]["reset"] is False
    assert doc["buckets"]["IGNORE"]["reset"] is False
    assert doc["buckets"]["RESET_GPU"]["reset"] is True
    assert doc["buckets"]["RESTART_BM"]["reset"] is True


@pytest.mark.parametrize(
    ("code", "action"),
    [
        (8, "RESTART_APP"),
        (13, "RESTART_APP"),
        (31, "RESTART_APP"),
        (43, "IGNORE"),
        (45, "WORKFLOW_XID_45"),
        (48, "WORKFLOW_XID_48"),
        (63, "IGNORE"),
        (64, "RESET_GPU"),
        (74, "WORKFLOW_NVLINK_ERR"),
        (79, "RESTART_BM"),
        (92, "IGNORE"),
        (94, "RESTART_APP"),
        (95, "RESET_GPU"),
        (109, "RESET_GPU"),
        (119, "RESET_GPU"),
        (120, "RESET_GPU"),
        (140, "RESET_GPU"),
        (154, "XID_154"),
    ],
)
def test_each_row_reads_as_the_workbook_says(code, action):
    assert mr_findings.XID_ACTION[code] == action


def test_the_device_plugins_application_xids_never_ask_a_reset():
    for code in DEVICE_PLUGIN_APPLICATION_XIDS:
        message = mr_findings.xid_finding(code, 0, 1.0).message
        assert (
            "drain" not in message and mr_findings.catalogue()["xids"][str(code)]["reset"] is False
        )
        assert any(
            "k8s-device-plugin" in s["url"]
            for s in mr_findings.catalogue()["xids"][str(code)]["sources"]
        )


def test_a_workflow_bucket_neither_drains_nor_promises_no_reset():
    # Xid 74 (WORKFLOW_NVLINK_ERR): the Xid's registers decide; Xid 154: the driver's action
    for code in (74, 154):
        message = mr_findings.xid_finding(code, 0, 1.0).message
        assert f"catalogue action {mr_findings.XID_ACTION[code]}" in message
        assert "drain this runner" not in message and "needs no reset" not in message
    assert "decode the Xid's registers" in mr_findings.xid_finding(74, 0, 1.0).message
    assert "NODE_REBOOT (reboot the node)" in mr_findings.xid_finding(154, 0, 1.0, 2).message
    assert "recovery action unknown" in mr_findings.xid_finding(154, 0, 1.0).message
    # Xid 48 alone is a reset; Xid 63 (a remap recorded) is IGNORE in the catalogue
    assert "drain this runner" in mr_findings.xid_finding(48, 0, 1.0).message
    assert "IGNORE; the GPU needs no reset" in mr_findings.xid_finding(63, 0, 1.0).message


def test_recovery_actions_are_nvml_h_s():
    header = (require_nvml_header() / "nvml.h").read_text(encoding="utf-8", errors="replace")
    body = re.search(
        r"typedef\s+enum\s+\w*\s*\{(.*?)\}\s*nvmlDeviceGpuRecoveryAction_t", header, re.S
    )
    assert body, "nvml.h has no nvmlDeviceGpuRecoveryAction_t"
    declared = {
        int(v): name
        for name, v in re.findall(r"(NVML_GPU_RECOVERY_ACTION_\w+)\s*=\s*(\d+)", body.group(1))
    }
    ours = {int(k): v["name"] for k, v in mr_findings.catalogue()["recovery_actions"].items()}
    assert ours == declared


#: nvml.h's nvmlEventType* macro for each event type the sampler registers.
NVML_EVENT_MACROS = {
    "xid": "nvmlEventTypeXidCriticalError",
    "ecc-sbe": "nvmlEventTypeSingleBitEccError",
    "ecc-dbe": "nvmlEventTypeDoubleBitEccError",
    "ecc-sbe-storm": "nvmlEventTypeSingleBitEccErrorStorm",
    "dram-retirement": "nvmlEventTypeDramRetirementEvent",
    "dram-retirement-failure": "nvmlEventTypeDramRetirementFailure",
    "poison-nonfatal": "nvmlEventTypeNonFatalPoisonError",
    "poison-fatal": "nvmlEventTypeFatalPoisonError",
    "gpu-unavailable": "nvmlEventTypeGpuUnavailableError",
    "recovery-action": "nvmlEventTypeGpuRecoveryAction",
}


def test_each_event_type_is_nvml_h_s_bit_and_has_an_action():
    import json

    from gpu_ci.cuda.monitor.reader import EVENT_TYPES

    header = (require_nvml_header() / "nvml.h").read_text(encoding="utf-8", errors="replace")
    bits = {
        name: int(value, 16)
        for name, value in re.findall(r"#define\s+(nvmlEventType\w+)\s+(0x[0-9A-Fa-f]+)LL", header)
    }
    assert {name: bits[NVML_EVENT_MACROS[name]] for name in NVML_EVENT_MACROS} == {
        name: bit for bit, name in EVENT_TYPES.items()
    }
    # every type but the Xid (its row decides) has the catalogue's meaning, level and action,
    # and the report says them: one finding per event of this job's GPU
    events = [n for n in EVENT_TYPES.values() if n != "xid"]
    assert set(mr_findings.EVENT_ACTIONS) == set(events)
    lines = [
        {
            "kind": "start",
            "ts": 0,
            "interval": 1,
            "gpus": [{"index": 0, "name": "G", "uuid": "GPU-1", "memory_total": 1}],
        },
        {"kind": "sample", "ts": 1, "gpus": [{"index": 0, "util": 5, "mem_used": 0}]},
    ] + [{"kind": "event", "ts": 1, "gpu": 0, "type": n, "data": 0} for n in events]
    rec = recording.parse_recording("\n".join(json.dumps(x) for x in lines))
    found = {f.code: f for f in mr.compute(rec, end=2).findings}
    for name in events:
        known = mr_findings.EVENT_ACTIONS[name]
        assert found[name].level == known["level"], name
        assert known["action"] in found[name].message, name
