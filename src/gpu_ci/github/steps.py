"""The current job's steps, with their timestamps, from the jobs API.

``GET /repos/{owner}/{repo}/actions/runs/{run_id}/attempts/{attempt}/jobs`` lists the jobs of
one attempt with ``steps[].started_at/completed_at``. A job does not know its own id
(``GITHUB_JOB`` is the workflow's key, not the display name the API shows, which matrix
values extend), so the running job is the one in progress on this runner (``RUNNER_NAME``),
as runners name themselves uniquely. gpu-monitor uses the steps to say which step used how
much GPU; it needs ``actions: read``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpu_ci.github.client import Rest
from gpu_ci.github.jobs import parse_time


@dataclass(frozen=True)
class StepTimes:
    name: str
    number: int
    started: float | None
    completed: float | None
    """Epoch seconds; ``None`` for a step that has not started (or finished) yet."""


@dataclass(frozen=True)
class JobTimes:
    job_id: int
    name: str
    started: float | None
    steps: tuple[StepTimes, ...]


def _epoch(value: object) -> float | None:
    """A timestamp of the answer as epoch seconds (``None``: no time, or not one)."""
    parsed = parse_time(value)
    return None if parsed is None else parsed.timestamp()


def find_current_job(jobs: list[dict[str, Any]], runner_name: str) -> dict[str, Any] | None:
    """The job in progress on ``runner_name``.

    A runner holds only one."""
    mine = [
        j for j in jobs if j.get("runner_name") == runner_name and j.get("status") == "in_progress"
    ]
    return mine[0] if len(mine) == 1 else None


def job_times(job: dict[str, Any]) -> JobTimes:
    steps = tuple(
        StepTimes(
            str(s.get("name", "")),
            int(s.get("number", 0)),
            _epoch(s.get("started_at")),
            _epoch(s.get("completed_at")),
        )
        for s in job.get("steps") or []
    )
    return JobTimes(int(job["id"]), str(job.get("name", "")), _epoch(job.get("started_at")), steps)


def current_job_times(
    client: Rest, repository: str, run_id: str, attempt: str, runner_name: str
) -> JobTimes | None:
    """The running job's steps, or None.

    None when this runner's job is not listed, or not once."""
    path = f"/repos/{repository}/actions/runs/{run_id}"
    path += f"/attempts/{attempt}/jobs" if attempt else "/jobs"
    jobs = client.get_pages(path, key="jobs", limit=1000)
    job = find_current_job([j for j in jobs if isinstance(j, dict)], runner_name)
    return job_times(job) if job else None
