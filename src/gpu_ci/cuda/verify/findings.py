"""A finding: one root cause, its level, a stable code, and the fix.

Also the rules about the target interpreter itself (is there one, did the probe run, are the
frameworks the ``frameworks`` input names installed), which need no driver reading.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

LEVELS = ("info", "warning", "error")


@dataclass(frozen=True)
class Finding:
    level: str
    code: str
    message: str
    fix: str = ""

    def as_json(self) -> dict[str, str]:
        return asdict(self)


def failing(findings: Sequence[Finding], fail_on: str) -> list[Finding]:
    threshold = LEVELS.index(fail_on)
    return [f for f in findings if LEVELS.index(f.level) >= threshold]


def python_findings(python_input: str, python: str | None, probe_error: str) -> list[Finding]:
    """Findings about the ``python`` input.

    An explicit ``python`` that does not exist is an error; no python at all is only noted (a
    CPU-less image may have none); a probe that failed is an error.
    """
    if python_input and python is None:
        return [
            Finding(
                "error",
                "python-not-found",
                f"input 'python' is {python_input!r}, which is not an executable on PATH.",
                "point it at the environment's interpreter, e.g. the "
                "'python' output of setup-conda-from-lock.",
            )
        ]
    if python is None:
        return [
            Finding(
                "info",
                "python-not-found",
                "no python on PATH: installed frameworks were not checked.",
                "set the 'python' input.",
            )
        ]
    if probe_error:
        return [
            Finding("error", "python-probe-failed", probe_error, "check that the interpreter runs.")
        ]
    return []


def selection_findings(
    chosen: Sequence[str] | None, families_found: Sequence[str], python: str
) -> list[Finding]:
    """Each family the ``frameworks`` input names must be installed."""
    return [
        Finding(
            "error",
            "framework-not-found",
            f"frameworks names {family}, but it is not installed for "
            f"{python or 'the target interpreter'}.",
            "install it, or drop it from 'frameworks'.",
        )
        for family in chosen or ()
        if family not in families_found
    ]
