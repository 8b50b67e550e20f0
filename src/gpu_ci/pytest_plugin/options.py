"""The plugin's command-line options, read once into frozen settings."""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from gpu_ci.cuda.pytest_link import REPORT_DIR_VARIABLE
from gpu_ci.cuda.sizes import BYTE_UNITS

_UNITS = {"": 2**20, **BYTE_UNITS}  # a bare number is MiB
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


@dataclass(frozen=True)
class Settings:
    """What the options ask for, validated."""

    reruns: int
    leak_mib: float
    held_warn_mib: float
    require_free: tuple[str, float] | None  # ("share", 0.9) or ("mib", 10240.0)
    report: str | None
    top: int


def add(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpu-ci", "GPU memory (gpu-ci-actions)")
    group.addoption(
        "--gpu-oom-reruns",
        type=int,
        default=1,
        metavar="N",
        help="rerun a test that failed with a GPU out-of-memory error up to N times "
        "(default 1; 0: never); no other failure is rerun",
    )
    group.addoption(
        "--gpu-leak-threshold",
        default="64MiB",
        metavar="SIZE",
        help="list a test as leaking when it leaves this much GPU memory after its "
        "teardown (default 64MiB)",
    )
    group.addoption(
        "--gpu-held-warning",
        default="1GiB",
        metavar="SIZE",
        help="warn when other processes hold this much on a job GPU before the first test "
        "(default 1GiB)",
    )
    group.addoption(
        "--gpu-require-free",
        default="",
        metavar="PERCENT|SIZE",
        help="fail before the first test unless each job GPU has this much free "
        "(90%% of its memory, or a size such as 20GiB)",
    )
    group.addoption(
        "--gpu-report",
        default="",
        metavar="PATH",
        help=f"write the session's JSON report here (default: a file in ${REPORT_DIR_VARIABLE}"
        " when set, else none)",
    )
    group.addoption(
        "--gpu-top",
        type=int,
        default=5,
        metavar="N",
        help="how many of the biggest tests (by peak memory) to list (default 5)",
    )


def size_mib(text: str, option: str) -> float:
    """A size as MiB: ``64MiB``, ``1.5GiB``, ``500MB`` or a bare number of MiB."""
    m = _SIZE.match(text)
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise pytest.UsageError(
            f"{option}={text!r} is not a size: give a number with B, KiB, MiB, GiB, TiB "
            "(or KB, MB, GB, TB), e.g. 64MiB; a bare number is MiB"
        )
    return float(m.group(1)) * _UNITS[unit] / 2**20


def _require_free(text: str) -> tuple[str, float] | None:
    text = text.strip()
    if not text:
        return None
    if text.endswith("%"):
        try:
            share = float(text[:-1]) / 100
        except ValueError:
            share = -1.0
        if not 0 < share <= 1:
            raise pytest.UsageError(
                f"--gpu-require-free={text!r}: a percentage is between 0 and 100, e.g. 90%"
            )
        return ("share", share)
    return ("mib", size_mib(text, "--gpu-require-free"))


def read(config: Any, environ: Mapping[str, str]) -> Settings:
    """The validated settings.

    A bad value is a usage error that names the option."""
    opt = config.getoption
    reruns = opt("gpu_oom_reruns")
    top = opt("gpu_top")
    if reruns < 0 or top < 0:
        raise pytest.UsageError("--gpu-oom-reruns and --gpu-top take 0 or more")
    report = opt("gpu_report").strip() or None
    directory = environ.get(REPORT_DIR_VARIABLE, "").strip()
    if report is None and directory:
        # by time, then unique: containers of one job reuse small PIDs
        name = f"pytest-gpu-{int(time.time())}-{os.getpid()}-{secrets.token_hex(4)}.json"
        report = os.path.join(directory, name)
    return Settings(
        reruns=reruns,
        leak_mib=size_mib(opt("gpu_leak_threshold"), "--gpu-leak-threshold"),
        held_warn_mib=size_mib(opt("gpu_held_warning"), "--gpu-held-warning"),
        require_free=_require_free(opt("gpu_require_free")),
        report=report,
        top=top,
    )
