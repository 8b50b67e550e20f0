"""The pytest plugin's findings beside gpu-monitor's samples, by time.

gpu-monitor's start names a directory for the plugin's JSON reports
(``GPU_CI_PYTEST_REPORT_DIR``); its report reads them back and lists each out-of-memory
failure and leak at its time in the job, with the memory the sampler saw on that GPU while
the test ran. Standard library only: the plugin imports the variable's name from here.
The files are the job's (pull-request code can write anything there): each is read within
a size, and what is not the plugin's shape is skipped.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: Where the plugin writes its session reports when set (gpu-monitor's start sets it).
REPORT_DIR_VARIABLE = "GPU_CI_PYTEST_REPORT_DIR"
MAX_FILES = 64
MAX_BYTES = 32 * 2**20  # about 100,000 tests
MAX_TOTAL_BYTES = 64 * 2**20  # what the report step reads in all
MAX_ROWS = 30
MIB = 2**20


@dataclass(frozen=True)
class Link:
    """One finding of the plugin, placed in the job's time."""

    start: float
    end: float
    nodeid: str
    finding: str
    gpus: tuple[int, ...]


def read_reports(directory: str) -> list[dict[str, Any]]:
    """The plugin's session reports in ``directory`` (regular files, within the size).

    Links are not followed, the directory's nor its files' (a planted one could name any
    file of the host), and the files' bytes in all stay within ``MAX_TOTAL_BYTES``."""
    out: list[dict[str, Any]] = []
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    try:
        dir_fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | nofollow)
    except OSError:
        return out
    try:
        names = sorted(n for n in os.listdir(dir_fd) if n.endswith(".json"))[:MAX_FILES]
        budget = MAX_TOTAL_BYTES
        for name in names:
            raw = _read_regular(name, dir_fd, min(MAX_BYTES, budget))
            if raw is None:
                continue
            budget -= len(raw)
            try:
                record = json.loads(raw)
            except (ValueError, RecursionError):  # RecursionError: nested past the parser
                continue
            if isinstance(record, dict) and isinstance(record.get("tests"), list):
                out.append(record)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
    return out


def _read_regular(name: str, dir_fd: int, limit: int) -> bytes | None:
    """A regular file's bytes, not through a link.

    None when over ``limit`` or unreadable."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        raw = f.read(limit + 1)
    return raw if len(raw) <= limit else None


def _number(value: object) -> float | None:
    """A finite number, or None (Python's json reads ``Infinity`` and ``NaN``)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok and math.isfinite(value) else None  # type: ignore[arg-type]


def links(records: Sequence[dict[str, Any]]) -> list[Link]:
    """Each out-of-memory failure and leak of the reports, in time order."""
    out = []
    for record in records:
        settings = record.get("settings")
        given = settings.get("leak_threshold_mib") if isinstance(settings, dict) else None
        leak = _number(given) or 64.0
        for t in record["tests"]:
            if not isinstance(t, dict):
                continue
            start, end = _number(t.get("start")), _number(t.get("end"))
            if start is None or end is None:
                continue
            listed = t.get("gpus")
            gpus = (
                tuple(g for g in listed if isinstance(g, int)) if isinstance(listed, list) else ()
            )
            leftover = _number(t.get("leftover_mib"))
            finding = ""
            if t.get("oom"):
                runs = _number(t.get("oom_reruns")) or 0
                state = "passed" if t.get("outcome") == "passed" else "still failing"
                finding = f"out of memory, {state} after {runs:.0f} rerun(s)"
            elif leftover is not None and leftover >= leak and not t.get("context_created"):
                finding = f"left {leftover:,.0f} MiB after teardown"
            if finding:
                out.append(Link(start, end, str(t.get("nodeid"))[:300], finding, gpus))
    return sorted(out, key=lambda x: x.start)


def seen(samples: Sequence[Any], link: Link) -> int | None:
    """The most memory sampled on the test's GPUs while it ran (bytes)."""
    during = [
        s.mem_used
        for s in samples
        if link.start - 1 <= s.ts <= link.end + 1 and (not link.gpus or s.index in link.gpus)
    ]
    return max(during) if during else None


_MARKUP = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "\\|", "\r": " ", "\n": " "}
_MARKUP.update({c: "\\" + c for c in "\\`*[]!~"})


def cell(text: str, limit: int = 300) -> str:
    """``text`` as it reads, in one Markdown table cell: no HTML, link, code span or emphasis.

    Test ids are the job's; cut at ``limit`` characters."""
    if len(text) > limit:
        text = text[: limit - 1] + "\u2026"
    return "".join(_MARKUP.get(c, c) for c in text)


def _clock(seconds: float) -> str:
    sign = "-" if seconds < 0 else "+"
    whole = int(abs(seconds))
    return f"{sign}{whole // 60}:{whole % 60:02d}"


def markdown(found: Sequence[Link], started: float, samples: Sequence[Any]) -> str:
    """The report's section: one row per finding, at its time since the monitor started."""
    if not found:
        return ""
    rows = [
        "#### pytest (gpu-ci plugin), by time",
        "",
        "| at | test | finding | GPU | memory used then (sampled) |",
        "|---|---|---|---|---|",
    ]
    for link in found[:MAX_ROWS]:
        used = seen(samples, link)
        then = "?" if used is None else f"{used / MIB:,.0f} MiB"
        test = cell(link.nodeid)
        gpus = ",".join(str(g) for g in link.gpus) or "?"
        rows.append(
            f"| {_clock(link.start - started)} | {test} | {link.finding} | {gpus} | {then} |"
        )
    if len(found) > MAX_ROWS:
        rows.append(f"\n{len(found) - MAX_ROWS} more in the plugin's JSON report.")
    return "\n".join(rows) + "\n"
