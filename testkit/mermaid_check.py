"""Check Mermaid diagrams with mermaid's own parser (npm ``mermaid`` under node, headless).

A malformed chart renders as nothing on GitHub, silently; so every chart a summary emits is
parsed by the parser GitHub's renderer runs. ``tests/mermaid/`` is a small node project
(``package.json`` + ``package-lock.json``; ``.ci/run`` installs it with ``npm ci``). Tests
call :func:`require_mermaid` first, which skips with the reason when node or the packages
are missing, so a developer without node still runs the rest of the suite.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent / "tests" / "mermaid"
SCRIPT = PROJECT / "parse.mjs"

_FENCE = re.compile(r"^```mermaid[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Parsed:
    ok: bool
    type: str | None
    error: str | None


def unavailable() -> str | None:
    """Why mermaid cannot run here, or None when it can."""
    if shutil.which("node") is None:
        return "node is not installed (needed to run mermaid's parser; .ci/run installs it)"
    if not (PROJECT / "node_modules" / "mermaid").is_dir():
        return (
            "npm packages of tests/mermaid are not installed: run "
            "`npm ci --prefix tests/mermaid` (.ci/run does)"
        )
    return None


def require_mermaid() -> None:
    import pytest

    reason = unavailable()
    if reason:
        pytest.skip(reason)


def blocks(markdown: str) -> list[str]:
    """The bodies of the fenced ```mermaid blocks in a Markdown text."""
    return [m.group(1) for m in _FENCE.finditer(markdown)]


def parse(diagrams: list[str], timeout: float = 120) -> list[Parsed]:
    """Parse each diagram text; one node process for all of them."""
    node = shutil.which("node")
    if node is None:
        raise RuntimeError(unavailable() or "node is missing")
    proc = subprocess.run(
        [node, str(SCRIPT)],
        input=json.dumps(diagrams),
        text=True,
        capture_output=True,
        cwd=PROJECT,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"mermaid parser failed to run: {proc.stderr[-2000:]}")
    return [Parsed(bool(r["ok"]), r["type"], r["error"]) for r in json.loads(proc.stdout)]


def assert_charts_parse(
    markdown: str, *, expect: int | None = None, diagram_type: str = "xychart"
) -> list[str]:
    """Every ```mermaid block in ``markdown`` parses as ``diagram_type``; returns the bodies."""
    found = blocks(markdown)
    if expect is not None:
        assert len(found) == expect, f"expected {expect} mermaid block(s), found {len(found)}"
    assert found, "no ```mermaid block in the text"
    for body, result in zip(found, parse(found)):
        assert result.ok, f"mermaid rejected the chart: {result.error}\n{body}"
        assert result.type == diagram_type, f"parsed as {result.type}, not {diagram_type}"
    return found
