"""gpu-monitor's findings: what in a report deserves a warning or an error.

Xid codes, ECC events and recovery actions are read through the Xid catalogue
(``data/xid-catalogue.json``), so each finding names the action NVIDIA documents.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpu_ci.cuda.monitor.recording import MIB, GpuInfo, Recording, unwatched
from gpu_ci.cuda.monitor.results import Finding, Limits, Report

CATALOGUE_PATH = Path(__file__).resolve().parent.parent.parent / "data" / "xid-catalogue.json"


def catalogue() -> dict[str, Any]:
    """Load the Xid catalogue that findings quote.

    NVIDIA's Xid catalogue's rows gpu-monitor names, and the event types' actions
    (``data/xid-catalogue.json``, which cites its sources).
    """
    return dict(json.loads(CATALOGUE_PATH.read_text(encoding="utf-8")))


_CATALOGUE = catalogue()
XID_MEANING = {int(k): str(v["meaning"]) for k, v in _CATALOGUE["xids"].items()}
"""What each catalogued Xid means; its action is ``XID_ACTION``."""
XID_ACTION = {int(k): str(v["action"]) for k, v in _CATALOGUE["xids"].items()}
XID_RESET = {int(k) for k, v in _CATALOGUE["xids"].items() if v["reset"]}
XID_NO_RESET = {int(k) for k, v in _CATALOGUE["xids"].items() if v["reset"] is False}
"""Xids whose bucket needs no reset; one in neither set is a workflow (its own text decides)."""
BUCKET_GUIDANCE = {str(k): str(v["guidance"]) for k, v in _CATALOGUE["buckets"].items()}
RECOVERY_ACTIONS = {
    int(k): str(v["name"]).removeprefix("NVML_GPU_RECOVERY_ACTION_")
    for k, v in _CATALOGUE["recovery_actions"].items()
}
"""nvml.h's nvmlDeviceGpuRecoveryAction_t, short names (the action an Xid 154 names)."""
RECOVERY_GUIDANCE = {int(k): str(v["guidance"]) for k, v in _CATALOGUE["recovery_actions"].items()}


def recovery_action_text(value: object) -> str:
    """Describe the recovery action the driver asked for.

    The action the driver asked for (the event's NVML_FI_DEV_GET_GPU_RECOVERY_ACTION), or "unknown"
    where it was not read (a driver without the field, a sampler before it): never a list of the
    actions it might be.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value in RECOVERY_ACTIONS:
        return f"recovery action {RECOVERY_ACTIONS[value]} ({RECOVERY_GUIDANCE[value]})"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"recovery action {value} (not in nvml.h's nvmlDeviceGpuRecoveryAction_t)"
    return (
        "recovery action unknown (the driver did not answer "
        "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION; 'nvidia-smi -q' shows it)"
    )


EVENT_ACTIONS: dict[str, dict[str, str]] = dict(_CATALOGUE["events"])


def clock_text(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = max(0, int(round(seconds)))
    if s >= 3600:
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
    return f"{s // 60}:{s % 60:02d}"


ALL_INSTANCES = 0xFFFFFFFF
"""nvmlEventData_t's gpuInstanceId/computeInstanceId for an event of the whole board."""


def _ours(event: dict[str, Any], gpus: Sequence[GpuInfo]) -> bool:
    """Whether an event belongs to the job's GPUs or slices.

    An event is the job's unless it names a GPU instance other than the watched slices of that GPU
    (another tenant's Xid on a MIG board is not this job's finding).
    """
    gis = {
        g.gi
        for g in gpus
        if g.index == event.get("gpu") and g.slot is not None and g.gi is not None
    }
    gi = event.get("gi")
    return not gis or gi is None or gi == ALL_INSTANCES or gi in gis


EVENT_WAIT = "nvmlEventSetWait"
"""An error line of this call: the sampler's event set failed (no events after it)."""


def _error_findings(rec: Recording) -> list[Finding]:
    """Findings for the NVML errors the sampler recorded.

    GPU_IS_LOST ends a GPU's samples; any other NVML error is a gap the sampler retried across (from
    the error to the GPU's next sample).
    """
    out = []
    for e in rec.errors:
        at = float(e["ts"]) - rec.started
        gpu = e.get("gpu")
        if e.get("call") == EVENT_WAIT:
            out.append(
                Finding(
                    "warning",
                    "events-unwatched",
                    f"NVML's event wait answered {e.get('name')} ({e.get('code')}) at "
                    f"+{clock_text(at)}: Xid and ECC events from +{clock_text(at)} on were not "
                    "watched (no Xid reported after that is no evidence of none; the kernel "
                    "log's NVRM lines have them).",
                    at,
                )
            )
            continue
        if e.get("code") == 15:
            out.append(
                Finding(
                    "warning",
                    "gpu-lost",
                    f"GPU {gpu}: NVML answered {e.get('name')} ({e.get('code')}) "
                    f"at +{clock_text(at)}: "
                    "the GPU stopped answering (fallen off the bus -- Xid 79 -- or a fatal or "
                    "GPU-unavailable error: the kernel log's Xid says which); no samples after "
                    "that. Drain this runner and reset the GPU.",
                    at,
                )
            )
            continue
        back = next((s.ts for s in rec.samples if s.index == gpu and s.ts > float(e["ts"])), None)
        gap = (
            f"no samples from +{clock_text(at)} to +{clock_text(back - rec.started)}; "
            "sampling resumed"
            if back is not None
            else f"no samples from +{clock_text(at)} on (the sampler kept asking), so the idle "
            "share and its cost are unknown"
            if e.get("gap")
            else "no samples from this GPU after that"
        )
        out.append(
            Finding(
                "warning",
                "nvml-failed",
                f"GPU {gpu}: NVML answered {e.get('name')} ({e.get('code')}) at +{clock_text(at)}; "
                f"{gap}.",
                at,
            )
        )
    return out


def xid_finding(code: int, gpu: object, at: float, recovery_action: object = None) -> Finding:
    """The finding for one Xid, with its documented action.

    An Xid with the catalogue's meaning and immediate action; a reset is asked only where the
    action's bucket takes the GPU out of service (13/31/43 do not), and a workflow bucket (74's
    NVLink registers, 154's recovery action) says what decides: for 154 the action the driver asked
    for (``recovery_action``, read with the event).
    """
    meaning = XID_MEANING.get(code)
    action = XID_ACTION.get(code)
    if meaning is None:
        what, then = "see NVIDIA's Xid catalogue", f": {_CATALOGUE['source']}"
    elif code in XID_RESET:
        what, then = meaning, f": catalogue action {action}; drain this runner"
    elif code in XID_NO_RESET:
        what, then = meaning, f": catalogue action {action}; the GPU needs no reset"
    else:
        guidance = BUCKET_GUIDANCE.get(str(action), "see the catalogue")
        if action == "XID_154":
            guidance += ": " + recovery_action_text(recovery_action)
        what, then = meaning, f": catalogue action {action}; {guidance}"
    return Finding(
        "warning", f"xid-{code}", f"GPU {gpu}: Xid {code} ({what}) at +{clock_text(at)}{then}.", at
    )


def _event_findings(rec: Recording) -> list[Finding]:
    out = []
    for e in rec.events:
        if not _ours(e, rec.gpus):
            continue
        at = float(e["ts"]) - rec.started
        kind = str(e.get("type"))
        if kind == "xid":
            out.append(
                xid_finding(int(e.get("data", 0)), e.get("gpu"), at, e.get("recovery_action"))
            )
            continue
        known = EVENT_ACTIONS.get(kind)
        text = f"{known['meaning']}; {known['action']}" if known else "an NVML event"
        if kind == "recovery-action":
            text += "; " + recovery_action_text(e.get("recovery_action"))
        out.append(
            Finding(
                known["level"] if known else "warning",
                kind,
                f"GPU {e.get('gpu')}: {kind} event ({text}) at +{clock_text(at)}.",
                at,
            )
        )
    return out


def _health_findings(h: dict[str, int | None], label: str) -> list[Finding]:
    """ECC errors and remapped rows that grew while the job ran."""
    out = []
    if h.get("ecc_uncorrected"):
        out.append(
            Finding(
                "warning",
                "ecc-uncorrected",
                f"{label}: {h['ecc_uncorrected']} uncorrected ECC error(s) during the job "
                "(volatile count): its results may be wrong; drain this runner and reset the GPU.",
            )
        )
    if h.get("ecc_corrected"):
        out.append(
            Finding(
                "notice",
                "ecc-corrected",
                f"{label}: {h['ecc_corrected']} corrected ECC error(s) during the job.",
            )
        )
    if h.get("rows_remapped") or h.get("remap_failure"):
        out.append(
            Finding(
                "warning",
                "rows-remapped",
                f"{label}: {h.get('rows_remapped') or 0} memory row(s) remapped during the job"
                + (
                    "; a remap is pending: reset the GPU when idle to activate it"
                    if h.get("remap_pending")
                    else ""
                )
                + (
                    "; row remapping FAILED: the GPU needs service"
                    if h.get("remap_failure")
                    else ""
                )
                + ".",
            )
        )
    return out


def _unwatched_note(report: Report) -> str:
    gap = unwatched(report.recording, report.end)
    if gap is None:
        return ""
    return (
        f"; +{clock_text(gap[0])} to +{clock_text(gap[1])} was not watched, so the idle share and "
        "idle cost are unknown (busy time counts only what was watched)"
    )


def _file_findings(report: Report) -> list[Finding]:
    """What the sample file says about itself: ended early, full, too large, torn."""
    rec = report.recording
    out: list[Finding] = []
    if rec.stop is None:
        last = (rec.sample_times[-1] - rec.started) if rec.sample_times else None
        out.append(
            Finding(
                "warning",
                "sampler-ended-early",
                "the sampler ended without its last line (killed, or the disk "
                f"filled); samples end at +{clock_text(last)}{_unwatched_note(report)}.",
                last,
            )
        )
    elif rec.stop.get("reason") == "size-limit":
        out.append(
            Finding(
                "warning",
                "sample-file-full",
                "the sample file reached its size limit; later samples were not recorded"
                f"{_unwatched_note(report)}.",
            )
        )
    if rec.truncated_at is not None:
        out.append(
            Finding(
                "warning",
                "sample-file-too-large",
                "the sample file is larger than the sampler ever writes: something "
                f"else wrote to it; only its first {rec.truncated_at} bytes were "
                "read.",
            )
        )
    if rec.bad_lines:
        out.append(
            Finding(
                "warning",
                "unreadable-lines",
                f"{rec.bad_lines} line(s) of the sample file were unreadable.",
            )
        )
    return out


def _gpu_findings(report: Report, limits: Limits) -> list[Finding]:
    """Each GPU's health counters and its memory and utilisation limits."""
    out: list[Finding] = []
    boards: set[int] = set()
    for g in report.gpus:
        label = f"GPU {g.gpu.index} ({g.gpu.name})"
        out.extend(_health_findings(g.health, label))
        if g.board_health is not None and g.gpu.index not in boards:
            # a MIG board's counters, once per board: the hardware the job ran on, any
            # tenant's errors (never charged to the slice as its own)
            boards.add(g.gpu.index)
            board = f"GPU {g.gpu.index}, board-wide (the whole MIG-enabled GPU, every slice)"
            out.extend(_health_findings(g.board_health, board))
        if limits.max_memory is not None and g.peak_memory > limits.max_memory:
            out.append(
                Finding(
                    "error",
                    "max-memory-exceeded",
                    f"{label} peaked at {g.peak_memory / MIB:.0f} MiB"
                    + (f" ({g.peak_process})" if g.peak_process else "")
                    + f", above max-memory ({limits.max_memory / MIB:.0f} MiB).",
                    g.peak_at_s,
                )
            )
        if limits.min_utilisation is not None and g.util_mean is None:
            out.append(
                Finding(
                    "error" if limits.unknown_fails else "warning",
                    "min-utilisation-unknown",
                    f"{label}: min-utilisation could not be evaluated: NVML reports no "
                    "utilisation for it ("
                    + (
                        "a MIG slice on a GPU without GPM counters, which are Hopper and newer"
                        if g.gpu.slot is not None
                        else "not supported"
                    )
                    + "); its busy time and idle share are unknown.",
                )
            )
        elif (
            limits.min_utilisation is not None
            and g.util_mean is not None
            and g.util_mean < limits.min_utilisation
        ):
            out.append(
                Finding(
                    "error",
                    "min-utilisation-unmet",
                    f"{label} averaged {g.util_mean:.1f} % utilisation, below min-utilisation "
                    f"({limits.min_utilisation:g} %).",
                )
            )
    return out


def _use_findings(report: Report, limits: Limits) -> list[Finding]:
    """``expect-gpu-use``: the job used a GPU, or why that is unknown."""
    out: list[Finding] = []
    if limits.expect_gpu_use and report.foreign_only:
        pids = sorted({p for g in report.gpus for p in g.foreign_processes})
        out.append(
            Finding(
                "error" if limits.unknown_fails else "warning",
                "gpu-use-unknown",
                "expect-gpu-use could not be evaluated: the only GPU processes (PIDs "
                + ", ".join(map(str, pids[:8]))
                + ") are outside this PID namespace (NVML lists host PIDs inside a container): "
                "they may be this job's or another container's.",
            )
        )
    elif limits.expect_gpu_use and report.use_unknown:
        unread = [g for g in report.gpus if g.processes_unknown_s > 0]
        out.append(
            Finding(
                "error" if limits.unknown_fails else "warning",
                "gpu-use-unknown",
                "expect-gpu-use could not be evaluated: no GPU was busy, and the GPU process "
                "list could not be read for "
                + ", ".join(
                    f"GPU {g.gpu.index} ({g.gpu.name}, {clock_text(g.processes_unknown_s)})"
                    for g in unread
                )
                + " (the driver refused it: NO_PERMISSION or NOT_SUPPORTED); a process may have "
                "held GPU memory between kernels.",
            )
        )
    elif limits.expect_gpu_use and not report.gpu_used:
        out.append(
            Finding(
                "error",
                "gpu-not-used",
                "expect-gpu-use: no process used a GPU and no GPU was busy while the monitor ran: "
                "the GPU tests ran on the CPU (a framework built without CUDA, or one that cannot "
                "see the device) or were skipped.",
            )
        )
    return out


def findings(report: Report, limits: Limits) -> list[Finding]:
    """Every finding of a report, errors first, then by time."""
    rec = report.recording
    out = _error_findings(rec) + _event_findings(rec) + _file_findings(report)
    out += _gpu_findings(report, limits) + _use_findings(report, limits)
    return sorted(out, key=lambda f: (f.level != "error", f.at_s is None, f.at_s or 0.0))
