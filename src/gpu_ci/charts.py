"""Mermaid ``xychart-beta`` charts for job summaries (GitHub renders Mermaid in Markdown).

A malformed chart renders as nothing, so the text is built from plain data here, in one
place, and the tests parse what it emits with mermaid's own parser. Series are downsampled to
at most ``max_points`` (GitHub's renderer and readers both cope badly with thousands).
Shared by ``gpu-monitor`` (utilisation and memory over time) and the spend report (spend per
day against the budget), so it lives at the root and needs only the standard library.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

MAX_POINTS = 100


@dataclass(frozen=True)
class Series:
    name: str
    values: tuple[float, ...]
    kind: str = "line"
    """``line`` or ``bar``."""


def downsample(
    values: Sequence[float], max_points: int = MAX_POINTS, how: str = "max"
) -> list[float]:
    """At most ``max_points`` values: each bucket of consecutive samples becomes its maximum
    (``how="max"``: a short spike stays visible) or its mean (``how="mean"``)."""
    if max_points < 1:
        raise ValueError("max_points must be at least 1")
    n = len(values)
    if n <= max_points:
        return [float(v) for v in values]
    out: list[float] = []
    for i in range(max_points):
        lo, hi = (i * n) // max_points, ((i + 1) * n) // max_points
        bucket = values[lo:hi]
        out.append(float(max(bucket)) if how == "max" else float(sum(bucket) / len(bucket)))
    return out


_UNSAFE = re.compile(r'["\n\r\[\]]')


def _text(value: str) -> str:
    """A quoted Mermaid string: double quotes, brackets and line breaks cannot appear."""
    return '"' + _UNSAFE.sub(" ", value).strip() + '"'


def _number(value: float) -> str:
    if not math.isfinite(value):
        return "0"
    return f"{value:.6g}" if value != int(value) else str(int(value))


def xychart(
    title: str,
    x_labels: Sequence[str],
    series: Sequence[Series],
    *,
    y_title: str = "",
    y_range: tuple[float, float] | None = None,
    x_title: str = "",
) -> str:
    """A fenced ``mermaid`` block with one ``xychart-beta``. Every series must have one value
    per x label (downsample first)."""
    if not series or not x_labels:
        raise ValueError("a chart needs at least one series and one x label")
    for s in series:
        if len(s.values) != len(x_labels):
            raise ValueError(
                f"series {s.name!r} has {len(s.values)} values for {len(x_labels)} x labels"
            )
        if s.kind not in ("line", "bar"):
            raise ValueError(f"series kind {s.kind!r} is not line or bar")
    lines = ["```mermaid", "xychart-beta", f"    title {_text(title)}"]
    labels = ", ".join(_text(label) for label in x_labels)
    lines.append(f"    x-axis {_text(x_title) + ' ' if x_title else ''}[{labels}]")
    y = f"    y-axis {_text(y_title)}" if y_title else "    y-axis"
    if y_range is not None:
        y += f" {_number(y_range[0])} --> {_number(y_range[1])}"
    if y.strip() != "y-axis":
        lines.append(y)
    for s in series:
        lines.append(f"    {s.kind} [{', '.join(_number(v) for v in s.values)}]")
    lines.append("```")
    return "\n".join(lines) + "\n"
