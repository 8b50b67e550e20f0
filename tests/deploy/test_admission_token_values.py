"""The admission hook's token never reaches the job it admits.

Outside ``kubernetes`` mode the job's steps run in the runner container, as its user,
inheriting the runner's environment ("any other environment variables that are set in the
working environment on the runner"). A token there is every admitted job's, an approved
fork's code included: it could drain the token's rate limit (every later hook call fails
closed: no GPU job runs) and read what the token may read in every repository it covers.
So the shipped values give the runner container no Secret in its environment: the token is
a file the hook removes (tests/github/test_admission_token_file.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
VALUES = sorted((ROOT / "deploy" / "arc").glob("values-*.yaml"))


def _load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _runner(values: dict[str, Any]) -> dict[str, Any]:
    containers = values["template"]["spec"]["containers"]
    return next(c for c in containers if c.get("name") == "runner")


def _steps_run_in_the_runner_container(values: dict[str, Any]) -> bool:
    """Whether the job's steps run in the runner's own container."""
    return (values.get("containerMode") or {}).get("type") != "kubernetes"


SAME_CONTAINER = [p for p in VALUES if _steps_run_in_the_runner_container(_load(p))]


def test_the_shipped_values_run_jobs_in_the_runner_container():
    assert [p.name for p in SAME_CONTAINER] == [
        "values-mig.yaml",
        "values-time-sliced.yaml",
        "values-whole-gpu.yaml",
    ]


@pytest.mark.parametrize("path", SAME_CONTAINER, ids=lambda p: p.name)
def test_no_secret_is_in_the_environment_of_the_container_that_runs_the_job(path):
    """An approved fork's test prints ``$GPU_CI_ADMISSION_TOKEN`` from the job's environment."""
    values = _load(path)
    runner = _runner(values)
    secret = [
        e["name"] for e in runner.get("env") or [] if "secretKeyRef" in (e.get("valueFrom") or {})
    ]
    assert secret == [], f"{path.name}: {secret} reach every job's steps"
    assert not runner.get("envFrom"), f"{path.name}: envFrom reaches every job's steps"
