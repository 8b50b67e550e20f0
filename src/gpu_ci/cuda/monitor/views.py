"""gpu-monitor's views of a report: Markdown, chart, JSON, CSV and outputs.

Pure rendering: every number comes from :mod:`gpu_ci.cuda.monitor.report`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from gpu_ci.charts import Series, downsample, xychart
from gpu_ci.cuda.monitor import right_size as rs
from gpu_ci.cuda.monitor.findings import clock_text
from gpu_ci.cuda.monitor.recording import ACTIVITY, MIB, GpuSample, Recording, printable
from gpu_ci.cuda.monitor.results import Cost, GpuUsage, PhaseUsage, Report
from gpu_ci.markdown import markdown_table

SCHEMA_VERSION = 2
MAX_FINDINGS_SHOWN = 50


# -- views ------------------------------------------------------------------------------


UNKNOWN = "unknown"
"""How the summary shows a counter the GPU does not support (never as 0)."""


def _pct(value: float | None) -> str:
    if value is None:
        return UNKNOWN
    return f"{value:.0f} %" if value >= 10 or value == 0 else f"{value:.1f} %"


def _wh(value: float | None) -> str:
    return UNKNOWN if value is None else f"{value:.2f} Wh"


def _busy(value: float | None) -> str:
    return UNKNOWN if value is None else clock_text(value)


def _energy_cell(g: GpuUsage) -> str:
    if g.gpu.slot is not None and g.energy_wh is None:
        return (
            "board-wide " + _wh(g.board_energy_wh) + " (whole GPU, not this slice's)"
            if g.board_energy_wh is not None
            else UNKNOWN
        )
    return _wh(g.energy_wh)


def _mib(value: int) -> str:
    return f"{value / MIB:,.0f} MiB"


def _usd(value: Decimal | None) -> str:
    return "-" if value is None else f"${value.quantize(Decimal('0.01'), ROUND_HALF_UP)}"


def _trim(value: Decimal) -> str:
    """Format a per-minute price as the table writes it.

    A per-minute price as written in the table (0.052, not 0.05 or 0.0520000).
    """
    text = f"{value.quantize(Decimal('0.0001'), ROUND_HALF_UP):f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    # a process name is chosen by the code the job ran: one line, then shown as text
    return markdown_table(headers, [[printable(str(c)) for c in row] for row in rows])


def charts(report: Report, max_points: int = 100, max_gpus: int = 8) -> list[str]:
    """One ``xychart-beta`` per GPU: utilisation % and memory used % of total over time."""
    rec = report.recording
    out = []
    for usage in report.gpus[:max_gpus]:
        gpu = usage.gpu
        # only readings there are: an unsupported one is no 0 on the line
        mine = [s for s in rec.samples if s.key == gpu.key and s.util is not None]
        if not mine:
            continue
        util = downsample([float(s.util or 0) for s in mine], max_points)
        mem = downsample(
            [
                round(100.0 * s.mem_used / gpu.memory_total, 1) if gpu.memory_total else 0.0
                for s in mine
            ],
            max_points,
        )
        n = len(util)
        times = [mine[(i * len(mine)) // n].ts - rec.started for i in range(n)]
        out.append(
            xychart(
                f"GPU {gpu.index} {gpu.name}: utilisation and memory used, % (line 1: util, "
                f"line 2: memory)",
                [clock_text(t) for t in times],
                [Series("utilisation %", tuple(util)), Series("memory %", tuple(mem))],
                y_title="%",
                y_range=(0, 100),
                x_title="time since start",
            )
        )
    return out


def _bytes(value: int | None) -> str:
    if value is None:
        return UNKNOWN
    for unit, size in (("GiB", 2**30), ("MiB", MIB), ("KiB", 1024)):
        if value >= size:
            return f"{value / size:,.1f} {unit}"
    return f"{value} B"


def _pair(a: int | None, b: int | None) -> str:
    return UNKNOWN if a is None and b is None else f"{_bytes(a)} / {_bytes(b)}"


def _health_cell(h: dict[str, int | None]) -> str:
    if h.get("ecc_uncorrected") is None and h.get("rows_remapped") is None:
        return UNKNOWN
    ecc = (
        UNKNOWN
        if h.get("ecc_uncorrected") is None
        else f"+{h.get('ecc_corrected') or 0} / +{h['ecc_uncorrected']}"
    )
    rows = UNKNOWN if h.get("rows_remapped") is None else f"+{h['rows_remapped']}"
    return f"ECC {ecc}, rows remapped {rows}" + (" (pending)" if h.get("remap_pending") else "")


SIGNALS_UNKNOWN = (
    "DCGM-level signals (GPM activity, PCIe and NVLink bytes, ECC and remapped rows): "
    "unknown, none is supported by these GPUs and driver (GPM needs Hopper or newer).\n"
)


def signals_table(report: Report) -> str:
    """DCGM-level signals per GPU: GPM activity (Hopper and newer), PCIe and NVLink bytes,
    ECC and remapped-row growth; a line saying they are unknown when no GPU had any."""
    rows = []
    for g in report.gpus:
        # a MIG slice has no counters of its own: the board's, marked board-wide
        io, health = (g.board_io, g.board_health) if g.board_io is not None else (g.io, g.health)
        health = health or {}
        if not (g.activity or any(v is not None for v in (*io.values(), *health.values()))):
            continue
        mark = "board-wide " if g.board_io is not None else ""
        rows.append(
            (
                f"{g.gpu.index} {g.gpu.name}",
                " / ".join(_pct(g.activity.get(k)) for k in ("sm", "tensor", "dram"))
                if g.activity
                else UNKNOWN + " (GPM: Hopper and newer)",
                mark + _pair(io.get("pcie_tx"), io.get("pcie_rx")),
                mark + _pair(io.get("nvlink_tx"), io.get("nvlink_rx")),
                mark + _health_cell(health),
            )
        )
    if not rows:
        return SIGNALS_UNKNOWN if report.gpus else ""
    return _table(
        [
            "GPU",
            "SM active / tensor / DRAM (GPM)",
            "PCIe tx / rx",
            "NVLink tx / rx",
            "ECC corrected / uncorrected, remapped rows (during the job)",
        ],
        rows,
    )


def _gpu_table(report: Report) -> str:
    """One row per GPU: busy time, utilisation, memory, energy, throttling."""
    return _table(
        [
            "GPU",
            "busy",
            "utilisation mean / p95 / max",
            "peak memory",
            "by",
            "energy",
            "throttled",
        ],
        [
            (
                f"{g.gpu.index} {g.gpu.name}",
                _busy(g.busy_s),
                (
                    f"{_pct(g.util_mean)} / {_pct(g.util_p95)} / {_pct(g.util_max)}"
                    if g.util_mean is not None
                    else UNKNOWN
                ),
                f"{_mib(g.peak_memory)} of {_mib(g.gpu.memory_total)}",
                g.peak_process or "-",
                _energy_cell(g),
                _busy(g.throttled_s)
                + (
                    " ("
                    + ", ".join(f"{k} {clock_text(v)}" for k, v in g.throttle_reasons.items())
                    + ")"
                    if g.throttle_reasons
                    else ""
                ),
            )
            for g in report.gpus
        ],
    )


def _cost_table(report: Report) -> str:
    """Paid and used GPU-minutes, the price and what the job cost."""
    c = report.cost
    idle = None if c.idle_fraction is None else 100 * c.idle_fraction
    price = (
        f"${_trim(c.usd_per_minute)}/min"
        + (" per GPU" if c.per_gpu else "")
        + f" ({c.price_source})"
        if c.usd_per_minute is not None
        else "unknown: set `price-per-hour` (an amount or a GitHub-hosted GPU SKU)"
    )
    return _table(
        [
            "paid minutes",
            "GPU-minutes paid",
            "GPU-minutes used",
            "idle",
            "price",
            "cost",
            "idle cost",
        ],
        [
            (
                f"{c.paid_minutes} ({clock_text(c.window_s)} from the {c.window_from} "
                "start, rounded up)",
                f"{c.gpu_minutes_paid:.0f}",
                UNKNOWN if c.gpu_minutes_used is None else f"{c.gpu_minutes_used:.2f}",
                _pct(idle),
                price,
                _usd(c.cost_usd),
                UNKNOWN
                if c.idle_fraction is None and c.cost_usd is not None
                else _usd(c.idle_cost_usd),
            )
        ],
    )


def _phase_table(report: Report) -> str:
    """One row per step (or the one start-to-report phase)."""
    what = "step (jobs API)" if report.phases_from == "steps" else "phase"
    return _table(
        [
            what,
            "start",
            "duration",
            "busy GPU time",
            "mean utilisation",
            "peak memory",
            "energy",
        ],
        [
            (
                p.name,
                ("-" if p.start_s < -0.5 else "+") + clock_text(abs(p.start_s)),
                clock_text(p.duration_s),
                _busy(p.busy_s),
                _pct(p.util_mean),
                _mib(p.peak_memory),
                _wh(p.energy_wh),
            )
            for p in report.phases
        ],
    )


def _findings_parts(report: Report) -> list[str]:
    """The findings table, cut at ``MAX_FINDINGS_SHOWN`` with a note of the rest."""
    parts: list[str] = []
    if report.findings:
        shown = report.findings[:MAX_FINDINGS_SHOWN]
        parts.append(
            _table(
                ["level", "code", "at", "finding"],
                [
                    (
                        f.level,
                        f.code,
                        f"+{clock_text(f.at_s)}" if f.at_s is not None else "-",
                        f.message,
                    )
                    for f in shown
                ],
            )
        )
        if len(report.findings) > len(shown):
            parts.append(
                f"… and {len(report.findings) - len(shown)} more findings (all of them "
                "are in the JSON report).\n"
            )
    return parts


def markdown(report: Report) -> str:
    """The job summary: headline, tables, right size, charts and findings."""
    c = report.cost
    n = len(report.gpus)
    used = UNKNOWN if c.gpu_minutes_used is None else f"{c.gpu_minutes_used:.1f}"
    idle = None if c.idle_fraction is None else 100 * c.idle_fraction
    head = (
        f"### gpu-monitor: {n} GPU(s), {used} of "
        f"{c.gpu_minutes_paid:.0f} paid GPU-minutes used ({_pct(idle)} "
        "idle"
        + (f", {_usd(c.idle_cost_usd)} idle cost" if c.idle_cost_usd is not None else "")
        + ")\n"
    )
    parts = [head, _gpu_table(report)]
    signals = signals_table(report)
    if signals:
        parts.append(signals)
    parts += [_cost_table(report), _phase_table(report)]
    if report.right_size is not None:
        parts.append(f"**Right size:** {printable(report.right_size.line())}.\n")
    parts.extend(charts(report))
    parts += _findings_parts(report)
    return "\n".join(parts)


def _money(v: Decimal | None) -> float | None:
    return None if v is None else float(v)


def _r(v: float | None, digits: int) -> float | None:
    return None if v is None else round(v, digits)


def _gpu_json(g: GpuUsage) -> dict[str, Any]:
    """One GPU's entry of the report file."""
    return {
        "index": g.gpu.index,
        "name": g.gpu.name,
        "uuid": g.gpu.uuid,
        "memory_total_bytes": g.gpu.memory_total,
        "samples": g.samples,
        "mig_slice": g.gpu.slot,
        "utilisation_source": (
            g.gpu.util_source if g.busy_s is not None or g.util_mean is not None else None
        ),
        "busy_s": _r(g.busy_s, 6),
        "utilisation": {"mean": _r(g.util_mean, 3), "p95": g.util_p95, "max": g.util_max},
        "memory_utilisation_mean": _r(g.mem_util_mean, 3),
        "peak_memory_bytes": g.peak_memory,
        "peak_process": g.peak_process,
        "peak_at_s": g.peak_at_s,
        "energy_wh": _r(g.energy_wh, 6),
        "board_energy_wh": _r(g.board_energy_wh, 6),
        "memory_reserved_bytes": g.memory_reserved,
        "power_max_w": g.power_max_w,
        "temperature_max_c": g.temp_max,
        "throttled_s": g.throttled_s,
        "throttle_reasons_s": g.throttle_reasons,
        "processes": [
            {"pid": p.pid, "name": p.name, "peak_memory_bytes": p.peak_memory} for p in g.processes
        ],
        "lost_at_s": g.lost_at_s,
        "activity": {k: _r(v, 3) for k, v in g.activity.items()},
        "io_bytes": dict(g.io),
        "health": dict(g.health),
        "board_io_bytes": None if g.board_io is None else dict(g.board_io),
        "board_health": None if g.board_health is None else dict(g.board_health),
        "foreign_pids": list(g.foreign_processes),
    }


def _phase_json(p: PhaseUsage) -> dict[str, Any]:
    return {
        "name": p.name,
        "start_s": p.start_s,
        "duration_s": p.duration_s,
        "samples": p.samples,
        "busy_s": _r(p.busy_s, 6),
        "utilisation_mean": _r(p.util_mean, 3),
        "peak_memory_bytes": p.peak_memory,
        "energy_wh": _r(p.energy_wh, 6),
    }


def _cost_json(c: Cost) -> dict[str, Any]:
    return {
        "window_s": c.window_s,
        "window_from": c.window_from,
        "paid_minutes": c.paid_minutes,
        "gpu_minutes_paid": c.gpu_minutes_paid,
        "gpu_minutes_used": c.gpu_minutes_used,
        "idle_fraction": c.idle_fraction,
        "usd_per_minute": _money(c.usd_per_minute),
        "price_source": c.price_source,
        "price_per_gpu": c.per_gpu,
        "cost_usd": _money(c.cost_usd),
        "idle_cost_usd": _money(c.idle_cost_usd),
    }


def as_json(report: Report) -> dict[str, Any]:
    """The report file (schema: actions/gpu-monitor/report.schema.json)."""
    rec = report.recording
    return {
        "schema_version": SCHEMA_VERSION,
        "ok": report.ok,
        "started": rec.started,
        "ended": report.end,
        "interval_s": rec.interval,
        "samples": len(rec.sample_times),
        "gpu_used": report.gpu_used,
        "gpus": [_gpu_json(g) for g in report.gpus],
        "phases_from": report.phases_from,
        "phases": [_phase_json(p) for p in report.phases],
        "cost": _cost_json(report.cost),
        "findings": [
            {"level": f.level, "code": f.code, "message": f.message, "at_s": f.at_s}
            for f in report.findings
        ],
        "right_size": right_size_json(report.right_size),
    }


def right_size_json(a: rs.Advice | None) -> dict[str, Any] | None:
    """The report's ``right_size`` object (None: no table was given)."""
    if a is None:
        return None
    pick = a.suggestion
    return {
        "peak_memory_bytes": a.peak_memory,
        "needed_bytes": a.needed,
        "current": a.current,
        "current_memory_bytes": a.current_memory,
        "activity": None if a.activity is None else round(a.activity, 3),
        "suggestion": None if pick is None else pick.name,
        "suggestion_kind": None if pick is None else pick.kind,
        "suggestion_memory_bytes": None if pick is None else pick.capacity,
        "suggestion_source": None if pick is None else pick.source,
        "usd_per_minute": None if a.usd_per_minute is None else float(a.usd_per_minute),
        "cost_usd": None if a.cost_usd is None else float(a.cost_usd),
        "line": a.line(),
    }


CSV_COLUMNS = (
    "ts",
    "elapsed_s",
    "gpu",
    "uuid",
    "utilisation",
    "memory_utilisation",
    "memory_used_mib",
    "power_w",
    "temperature_c",
    "sm_clock_mhz",
    "throttle_reasons",
    "processes",
    "mig_slice",
    "busy_s",
    "energy_counter_mj",
    "memory_reserved_mib",
    "board_power_w",
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "dram_active",
    "pcie_tx_bytes",
    "pcie_rx_bytes",
    "nvlink_tx_kib",
    "nvlink_rx_kib",
    "ecc_corrected",
    "ecc_uncorrected",
    "remapped_rows",
    "foreign_pids",
    "board_pcie_tx_bytes",
    "board_pcie_rx_bytes",
    "board_nvlink_tx_kib",
    "board_nvlink_rx_kib",
    "board_ecc_corrected",
    "board_ecc_uncorrected",
)


def _cells(values: tuple[int, ...] | None, n: int) -> list[str]:
    return [""] * n if values is None else [str(v) for v in values]


def _activity_cells(s: GpuSample) -> list[str]:
    got = dict(s.activity)
    return ["" if got.get(k) is None else f"{got[k]:g}" for k in ACTIVITY]


def samples_csv(rec: Recording) -> str:
    """The samples as CSV, one row per GPU per sample.

    One row per GPU (or MIG slice) per sample; processes as ``name:pid:MiB`` joined by spaces; an
    unsupported reading is an empty cell. ``busy_s`` is the time with a kernel running that the
    sample stands for (the driver's buffer, else utilisation × Δt).
    """
    uuids = {g.key: g.uuid for g in rec.gpus}
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for s in rec.samples:
        writer.writerow(
            [
                f"{s.ts:.3f}",
                f"{s.ts - rec.started:.3f}",
                s.index,
                uuids.get(s.key, ""),
                "" if s.util is None else s.util,
                "" if s.mem_util is None else s.mem_util,
                f"{s.mem_used / MIB:.1f}",
                "" if s.power_mw is None else f"{s.power_mw / 1000:.3f}",
                "" if s.temp is None else s.temp,
                "" if s.sm_mhz is None else s.sm_mhz,
                "" if s.throttle is None else f"0x{s.throttle:x}",
                " ".join(f"{name}:{pid}:{used / MIB:.0f}" for pid, used, name in s.procs),
                "" if s.slot is None else s.slot,
                "" if s.util_busy_s is None and s.util is None else f"{s.busy_s:.3f}",
                "" if s.energy_mj is None else s.energy_mj,
                "" if s.mem_reserved is None else f"{s.mem_reserved / MIB:.1f}",
                "" if s.board_power_mw is None else f"{s.board_power_mw / 1000:.3f}",
                *_activity_cells(s),
                *_cells(s.pcie_bytes, 2),
                *_cells(s.nvlink_kib, 2),
                *_cells(s.ecc, 2),
                "" if s.remap is None else s.remap[0] + s.remap[1],
                " ".join(map(str, s.foreign)),
                *_cells(s.board_pcie_bytes, 2),  # a MIG slice: its whole board's counters
                *_cells(s.board_nvlink_kib, 2),
                *_cells(s.board_ecc, 2),
            ]
        )
    return buf.getvalue()


def outputs(report: Report) -> dict[str, str]:
    """The step's outputs; an unknown figure is empty.

    The step's figures as outputs; an unknown figure is an empty string, never 0.
    """
    c = report.cost
    gpus = report.gpus
    busy = [g.busy_s for g in gpus]
    utils = [g.util_mean for g in gpus]
    energy = [g.energy_wh for g in gpus]
    return {
        "ok": "true" if report.ok else "false",
        "gpu-count": str(len(gpus)),
        "gpu-used": "true" if report.gpu_used else "false",
        "busy-seconds": "" if None in busy else f"{sum(b or 0.0 for b in busy):.6g}",
        "utilisation-mean": (
            "" if None in utils or not utils else f"{sum(u or 0.0 for u in utils) / len(utils):.1f}"
        ),
        "peak-memory-mib": str(max((g.peak_memory for g in gpus), default=0) // MIB),
        "energy-wh": "" if None in energy else f"{sum(e or 0.0 for e in energy):.3f}",
        "paid-minutes": str(c.paid_minutes),
        "gpu-minutes-used": "" if c.gpu_minutes_used is None else f"{c.gpu_minutes_used:.2f}",
        "idle-fraction": "" if c.idle_fraction is None else f"{c.idle_fraction:.4f}",
        "idle-cost-usd": "" if c.idle_cost_usd is None else str(c.idle_cost_usd),
    }
