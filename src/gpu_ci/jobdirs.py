"""One directory per job attempt under ``RUNNER_TEMP``, for a job's detached helpers.

They are gpu-monitor's sampler and gpu-lease's holder. A root module, so both wings use the
one rule."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def job_directory(runner_temp: str, environ: Mapping[str, str], name: str) -> Path:
    """``<RUNNER_TEMP>/<name>/<job key>``. The runner empties RUNNER_TEMP per job; the key
    keeps two jobs that share one apart (matrix legs share run id, attempt and job id, so the
    runner's name is part of it). Characters other than letters, digits and ``-_.`` become
    ``_``, so the key never leaves the directory."""
    parts = ("GITHUB_RUN_ID", "GITHUB_RUN_ATTEMPT", "GITHUB_JOB", "RUNNER_NAME")
    key = "-".join(environ.get(p, "") for p in parts if environ.get(p, "")) or "local"
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in key)
    return Path(runner_temp) / name / safe
