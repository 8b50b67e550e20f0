"""Red team (issue 44): the admission hook's token never reaches the job it admits.

The shipped ARC values give the runner container ``GPU_CI_ADMISSION_TOKEN`` from a Secret,
and outside ``kubernetes`` mode the job's steps run in that very container, as the same
user, inheriting the runner's environment ("any other environment variables that are set
in the working environment on the runner"). So every admitted job, an approved fork's code
included, reads the admin's long-lived token: it can drain its rate limit from anywhere
(every later hook call fails closed: no GPU job runs) and read what it may read (commit
statuses, pull requests with their diffs, Actions logs and artifacts) in every repository
the token covers, private ones of an organisation-wide scale set too. SECURITY-MODEL.md:
"never give secrets to GPU jobs of pull requests".
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
