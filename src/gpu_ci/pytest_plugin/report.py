"""The session's findings: one JSON record, merged across workers, and its views.

A record is plain JSON (it travels from xdist workers to the controller as
``workeroutput``): the GPUs, the memory held before the tests, notes, and one entry per
test. The views are one Markdown table for the job summary, workflow-command annotations
pointing at the tests, and the lines of the terminal summary.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from typing import Any

from gpu_ci.cuda import pytest_link

Record = dict[str, Any]
VERSION = 1
#: Rows of each finding in the job summary (GitHub refuses a step's summary past 1 MiB).
MAX_ROWS = 20
#: Annotations of each level: GitHub keeps 10 per level per step.
MAX_ANNOTATIONS = 10
#: The longest test id shown in the summary and annotations; the JSON keeps it whole.
MAX_ID = 300


def new_record() -> Record:
    return {
        "version": VERSION,
        "started": None,
        "finished": None,
        "gpus": [],
        "held_before": [],
        "notes": [],
        "workers": {},
        "tests": [],
    }


def merge(main: Record, parts: dict[str, Record]) -> Record:
    """``main`` (the controller's) with each worker's tests, devices and notes."""
    out = dict(main)
    out["tests"] = list(main["tests"])
    out["notes"] = list(main["notes"])
    out["workers"] = dict(main["workers"])
    for name in sorted(parts):
        part = parts[name]
        out["workers"].update(part["workers"])
        out["tests"].extend(part["tests"])
        out["notes"].extend(n for n in part["notes"] if n not in out["notes"])
    out["tests"].sort(key=lambda t: (t["start"], t["nodeid"]))
    return out


def write(record: Record, path: str) -> str | None:
    """Write ``record`` whole or not at all.

    None, or why it was not written.

    A reader never sees half a file, and a full disk leaves none behind: the report is
    not worth failing the tests for."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".pytest-gpu-", suffix=".tmp", dir=directory)
    except OSError as exc:
        return str(exc)
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o644)
            json.dump(record, f, separators=(",", ":"))
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return str(exc)
    return None


def leaks(record: Record, threshold_mib: float) -> list[Record]:
    """Tests that left at least ``threshold_mib`` behind, the largest first."""
    found = [
        t
        for t in record["tests"]
        if t["leftover_mib"] is not None
        and t["leftover_mib"] >= threshold_mib
        and not t["context_created"]
    ]
    return sorted(found, key=lambda t: -t["leftover_mib"])


def biggest(record: Record, top: int) -> list[Record]:
    """The ``top`` tests by their framework's peak (where one was known)."""
    known = [t for t in record["tests"] if t["peak_mib"] is not None]
    return sorted(known, key=lambda t: -t["peak_mib"])[:top]


def reruns(record: Record) -> list[Record]:
    """Tests that failed with an out-of-memory error, rerun or not."""
    return [t for t in record["tests"] if t["oom"]]


def _mib(value: float | None) -> str:
    return "?" if value is None else f"{value:,.0f}"


def _gpus(test: Record) -> str:
    return ",".join(str(g) for g in test["gpus"]) or "?"


def rerun_detail(test: Record) -> str:
    n = test["oom_reruns"]
    runs = f"{n} rerun" + ("s" if n != 1 else "")
    if test["outcome"] == "passed":
        return f"out of memory ({test['oom']}); passed after {runs}"
    return f"out of memory ({test['oom']}); still failing after {runs}"


def rows(record: Record, threshold_mib: float, top: int) -> list[tuple[str, ...]]:
    """The summary table's rows: reruns, leaks, biggest tests, memory held before."""
    out: list[tuple[str, ...]] = []
    for t in reruns(record):
        out.append(("out-of-memory", t["nodeid"], _gpus(t), "", rerun_detail(t)))
    for t in leaks(record, threshold_mib):
        out.append(
            ("leak", t["nodeid"], _gpus(t), f"+{_mib(t['leftover_mib'])}", "left after teardown")
        )
    for t in biggest(record, top):
        out.append(("biggest", t["nodeid"], _gpus(t), _mib(t["peak_mib"]), t["peak_source"]))
    for h in record["held_before"]:
        out.append(
            (
                "held before",
                f"pid {h['pid']} ({h['name']})",
                str(h["gpu"]),
                _mib(h["mib"]),
                f"{h['whose']} process, before the first test",
            )
        )
    return out


def markdown(record: Record, threshold_mib: float, top: int) -> str:
    """The job summary's section: one table, then the notes.

    Each finding's first ``MAX_ROWS`` rows; the cells are text, never markup."""
    body = rows(record, threshold_mib, top)
    tests = len({t["nodeid"] for t in record["tests"]})
    lines = [f"### gpu-ci pytest: GPU memory ({tests} tests)", ""]
    if body:
        lines += ["| finding | test / process | GPU | MiB | detail |", "|---|---|---|---|---|"]
    shown: dict[str, int] = {}
    for row in body:
        shown[row[0]] = shown.get(row[0], 0) + 1
        if shown[row[0]] <= MAX_ROWS:
            lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    if not body:
        lines.append("No out-of-memory failure, leak or memory held before the tests.")
    for kind, count in shown.items():
        if count > MAX_ROWS:
            lines.append(f"\n{count - MAX_ROWS} more {kind} findings in the terminal summary.")
    lines += [f"\n- {_cell(n)}" for n in record["notes"]]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return pytest_link.cell(text, MAX_ID)


def short(text: str) -> str:
    """``text`` cut at ``MAX_ID`` characters (a test id can be any length)."""
    return text if len(text) <= MAX_ID else text[: MAX_ID - 1] + "\u2026"


def _escape(text: str, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def annotation(
    message: str, path: str | None = None, line: int | None = None, level: str = "warning"
) -> str:
    """A ``::warning`` or ``::error`` workflow command.

    It points at a file and line where they are known."""
    props = [f"title={_escape('gpu-ci pytest', True)}"]
    if path:
        props.insert(0, f"file={_escape(path, True)}")
        if line is not None:
            props.insert(1, f"line={line}")
    return f"::{level} {','.join(props)}::{_escape(message)}"


def held_over(record: Record, warn_mib: float) -> list[Record]:
    """Memory held before the tests, on GPUs above the warning.

    GPUs where other processes held ``warn_mib`` or more in all."""
    per_gpu: dict[int, float] = {}
    for h in record["held_before"]:
        per_gpu[h["gpu"]] = per_gpu.get(h["gpu"], 0.0) + (h["mib"] or 0.0)
    return [h for h in record["held_before"] if per_gpu[h["gpu"]] >= warn_mib]


def workflow_warnings(record: Record, threshold_mib: float, warn_mib: float) -> list[str]:
    """The annotations, most telling first: GitHub keeps 10 of each level per step.

    An OOM that stayed is an error (gpu-watchdog reads it: never infrastructure); reruns
    that passed, leaks and memory held before are warnings. ``MAX_ANNOTATIONS`` of each."""
    errors, warnings = [], []
    stayed = [t for t in reruns(record) if t["outcome"] != "passed"]
    for t in stayed:
        msg = f"{short(t['nodeid'])}: {rerun_detail(t)}"
        errors.append(annotation(msg, t["path"], t["line"], level="error"))
    for t in reruns(record):
        if t not in stayed:
            msg = f"{short(t['nodeid'])}: {rerun_detail(t)}"
            warnings.append(annotation(msg, t["path"], t["line"]))
    for t in leaks(record, threshold_mib):
        msg = (
            f"{short(t['nodeid'])} left {_mib(t['leftover_mib'])} MiB of GPU memory after teardown"
        )
        warnings.append(annotation(msg, t["path"], t["line"]))
    for h in held_over(record, warn_mib):
        warnings.append(
            annotation(
                f"GPU {h['gpu']}: pid {h['pid']} ({h['name']}, {h['whose']}) held "
                f"{_mib(h['mib'])} MiB before the first test"
            )
        )
    return errors[:MAX_ANNOTATIONS] + warnings[:MAX_ANNOTATIONS]
