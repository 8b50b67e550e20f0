"""Real-shaped failed GPU jobs for the infrastructure-failure tests.

The runner's messages are quoted as GitHub shows them in a job's annotations (actions/runner
#2427: "The runner has received a shutdown signal. ..."; #2624, #3539: "The self-hosted
runner: <name> lost communication with the server. ..."). gpu-monitor's reports are made by
gpu-monitor's own report code from a sample file (``gpu_ci.cuda.monitor.report``), so the
github wing's reading of the report's documented fields is checked against the real writer.
"""

from __future__ import annotations

import io
import json
import zipfile
from datetime import datetime, timedelta, timezone
from typing import Any

from gpu_ci.cuda.monitor import recording, views
from gpu_ci.cuda.monitor import report as mr
from testkit.github.runs import gate_job
from testkit.github_server import Job, Step, WorkflowRun

SHUTDOWN = (
    "The runner has received a shutdown signal. This can happen when the runner service is "
    "stopped, or a manually started runner is canceled."
)
LOST = (
    "The self-hosted runner: gpu-spot-7 lost communication with the server. Verify the "
    "machine is running and has a healthy network connection. Anything in your workflow "
    "that terminates the runner process, starves it for CPU/Memory, or blocks its network "
    "access can cause this error."
)
EXIT_1 = "Process completed with exit code 1."
REPO = "octo-org/octo-repo"
GIB = 2**30


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def steps(start: datetime, how: str) -> list[Step]:
    """The GPU job's steps: ``lost`` (the test step still running when the job ended),
    ``failed`` (the test step failed) or ``passed``."""
    t = [iso(start + timedelta(minutes=m)) for m in (0, 1, 2, 30)]
    setup = Step("Set up job", 1, "completed", "success", t[0], t[1])
    checkout = Step("Run actions/checkout@v4", 2, "completed", "success", t[1], t[2])
    if how == "lost":
        test = Step("Run GPU tests", 3, "in_progress", None, t[2], None)
    elif how == "failed":
        test = Step("Run GPU tests", 3, "completed", "failure", t[2], t[3])
    else:
        test = Step("Run GPU tests", 3, "completed", "success", t[2], t[3])
    return [setup, checkout, test]


def failed_run(
    gh,
    start: datetime,
    how: str = "lost",
    *,
    annotations: tuple[tuple[str, str], ...] = (("failure", LOST),),
    head_sha: str = "a" * 40,
    attempt: int = 1,
    pr: int | None = 2,
    minutes: float = 30,
    labels: tuple[str, ...] = ("self-hosted", "gpu", "spot"),
    group: tuple[int, str] | None = None,
    event: str = "pull_request",
) -> WorkflowRun:
    """A completed, failed CUDA CI run: a gate job that passed, a GPU job that failed ``how``
    after ``minutes`` (its runner recorded unless it was lost), the given annotations."""
    end = start + timedelta(minutes=minutes)
    run = WorkflowRun(
        gh.next_id(),
        "CUDA CI",
        ".github/workflows/cuda-ci.yml",
        head_sha,
        event=event,
        status="completed",
        conclusion="failure",
        created_at=iso(start),
        run_attempt=attempt,
        actor="maintainer",  # the approver's run: attempt 1's actor is its triggering actor
        triggering_actor="maintainer",
        pull_requests=[pr] if pr else [],
    )
    done = iso(start + timedelta(minutes=1))
    run.jobs.append(gate_job(gh, iso(start), done, "GitHub Actions 2", attempt))
    run.jobs.append(
        Job(
            gh.next_id(),
            "gpu-tests",
            list(labels),
            status="completed",
            conclusion="failure",
            created_at=iso(start),
            started_at=iso(start),
            completed_at=iso(end),
            runner_name="gpu-spot-7",
            runner_group_id=group[0] if group else None,
            runner_group_name=group[1] if group else None,
            steps=steps(start, how),
            run_attempt=attempt,
            annotations=list(annotations),
        )
    )
    return gh.add_run(REPO, run)


def monitor_report(
    start: datetime, seconds: int, *, lost_at: int | None = None, killed: bool = False
) -> dict:
    """gpu-monitor's report.json for a sampler that ran ``seconds`` from ``start``.

    With ``lost_at``, NVML answered GPU_IS_LOST then and the kernel logged Xid 79 just before;
    ``killed``: the sampler never wrote its last line."""
    t0 = start.timestamp() + 180
    lines = [
        {
            "kind": "start",
            "version": 1,
            "ts": t0,
            "interval": 1.0,
            "pid": 1,
            "gpus": [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-1", "memory_total": GIB}],
        }
    ]
    last = seconds if lost_at is None else lost_at
    lines += [
        {
            "kind": "sample",
            "ts": t0 + i,
            "gpus": [{"index": 0, "util": 90, "mem_util": 10, "mem_used": GIB // 2}],
        }
        for i in range(last)
    ]
    if lost_at is not None:
        lines.append({"kind": "event", "ts": t0 + lost_at - 1, "gpu": 0, "type": "xid", "data": 79})
        lines.append(
            {
                "kind": "error",
                "ts": t0 + lost_at,
                "gpu": 0,
                "call": "nvmlDeviceGetUtilizationRates",
                "code": 15,
                "name": "GPU_IS_LOST",
            }
        )
    if not killed:
        lines.append({"kind": "stop", "ts": t0 + seconds, "reason": "done"})
    rec = recording.parse_recording("\n".join(json.dumps(x) for x in lines))
    return views.as_json(mr.compute(rec, end=t0 + seconds))


def zipped(report: dict[str, Any]) -> dict[str, bytes]:
    return {"report.json": json.dumps(report).encode()}


def zip_bytes(report: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("report.json", json.dumps(report))
    return buf.getvalue()


NOW = datetime(2026, 11, 2, 12, 0, tzinfo=timezone.utc)
