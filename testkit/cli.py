"""Run the ``gpu-ci`` command in a subprocess, as a runner would.

The ``run_cli`` fixture of tests/conftest.py and the conda wing's ``setup`` fixture use it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit.act_runner import FAST_HTTP_ENV
from testkit.shared import ROOT


@dataclass
class CliResult:
    """What one run of the command left: exit status, streams, outputs and summary."""

    returncode: int
    stdout: str
    stderr: str
    outputs: dict[str, str]
    summary: str

    @property
    def errors(self) -> list[str]:
        return [line for line in self.stdout.splitlines() if line.startswith("::error")]


def parse_output_file(text: str) -> dict[str, str]:
    """Parse GitHub's file-command format (``name<<DELIM`` blocks and ``name=value``)."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            j = lines.index(delim, i + 1)
            out[name] = "\n".join(lines[i + 1 : j])
            i = j + 1
        elif "=" in line:
            name, value = line.split("=", 1)
            out[name] = value
            i += 1
        else:
            i += 1
    return out


def tree_digest(root: Path) -> str:
    """One hash of a tree's names and file contents."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode())
        if path.is_file() and not path.is_symlink():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def run_cli(
    workdir: Path,
    args: list[str],
    env: dict[str, str] | None = None,
    *,
    event: dict[str, Any] | None = None,
    event_name: str | None = None,
    timeout: float = 60,
) -> CliResult:
    """Run ``python -m gpu_ci ARGS`` with its file commands in ``workdir``.

    The caller's ``INPUT_``, ``GITHUB_`` and ``RUNNER_`` variables are dropped, so a test
    sees only what it sets."""
    output = workdir / "github_output"
    summary = workdir / "step_summary"
    output.write_text("")
    summary.write_text("")
    full_env = {
        k: v for k, v in os.environ.items() if not k.startswith(("INPUT_", "GITHUB_", "RUNNER_"))
    }
    full_env.update(
        {
            "GITHUB_OUTPUT": str(output),
            "GITHUB_STEP_SUMMARY": str(summary),
            "GITHUB_ACTIONS": "true",
            "PYTHONPATH": str(ROOT / "src"),
        }
    )
    full_env.update(FAST_HTTP_ENV)
    if event is not None:
        path = workdir / "event.json"
        path.write_text(json.dumps(event))
        full_env["GITHUB_EVENT_PATH"] = str(path)
    if event_name is not None:
        full_env["GITHUB_EVENT_NAME"] = event_name
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-m", "gpu_ci", *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return CliResult(
        proc.returncode,
        proc.stdout,
        proc.stderr,
        parse_output_file(output.read_text()),
        summary.read_text(),
    )
