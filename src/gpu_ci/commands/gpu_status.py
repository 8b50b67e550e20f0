"""``gpu-ci gpu-status``: post the GPU CI commit status for this event (privileged, inert).

Runs in the ``pull_request_target`` workflow (labeled: no API call besides the POST; opened,
reopened, synchronize: the head's statuses first, a final result stays) and in a
``workflow_run`` workflow (requested: the commit's statuses; completed: also the run's jobs).
It never checks out or runs code of the pull request.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from gpu_ci.errors import GpuCiError, UsageError
from gpu_ci.github import jobs, statuses, watchdog
from gpu_ci.github.client import RestClient, call_api, connect
from gpu_ci.github.event import EventContext, load_event
from gpu_ci.inputs import Inputs
from gpu_ci.runtime import Runtime, markdown_table, write_report


@dataclass
class _Result:
    """What one event led to: the decision, the client that read for it (None: no call yet)
    and the longest GPU queue time of a completed run ('' when not known)."""

    outcome: statuses.Outcome
    rest: RestClient | None
    queued: str = ""


def _connect(inputs: Inputs, rt: Runtime) -> RestClient:
    return connect(inputs["github-token"], rt.environ, rt.mask, needs="statuses: write")


def _gate_run(inputs: Inputs) -> bool | None:
    if not inputs["gate-run"].strip():
        return None
    return inputs.boolean("gate-run")


def _listed(rest: RestClient, repository: str, sha: str) -> list[Any]:
    """The commit's statuses, newest first (one page of 100)."""
    return list(
        call_api(
            f"the statuses of {sha[:12]}",
            lambda: rest.get_pages(
                f"/repos/{repository}/commits/{quote(sha, safe='')}/statuses", limit=100
            ),
        )
    )


def _pull_event(
    inputs: Inputs, rt: Runtime, config: statuses.StatusConfig, ctx: EventContext, action: str
) -> _Result:
    rest = None
    listed: list[Any] = []
    head = str(((ctx.payload.get("pull_request") or {}).get("head") or {}).get("sha") or "")
    # a final result, an approval of another pull request or one in flight stays
    if (action in statuses.NEW_HEAD or action == "labeled" and _gate_run(inputs) is False) and len(
        head
    ) == 40:
        rest = _connect(inputs, rt)
        listed = _listed(rest, ctx.repository, head)
    server = rt.environ.get("GITHUB_SERVER_URL", "").rstrip("/") or "https://github.com"
    outcome = statuses.for_pull_event(
        config,
        action,
        ctx.payload,
        _gate_run(inputs),
        inputs["gate-reason"],
        inputs["labeled-by"],
        server,
        ctx.repository,
        listed,
    )
    if outcome.status and rest is None:
        rest = _connect(inputs, rt)
    return _Result(outcome, rest)


def _workflow_run_event(
    inputs: Inputs, rt: Runtime, config: statuses.StatusConfig, ctx: EventContext, action: str
) -> _Result:
    wf_run = ctx.payload.get("workflow_run")
    if not isinstance(wf_run, dict) or len(str(wf_run.get("head_sha") or "")) != 40:
        raise GpuCiError(
            "the workflow_run event has no workflow_run.head_sha.", title="malformed event"
        )
    rest = _connect(inputs, rt)
    sha, repo = str(wf_run["head_sha"]), ctx.repository
    listed = _listed(rest, repo, sha)
    run_jobs = _run_jobs(rest, repo, wf_run) if action == "completed" else None
    now = jobs.now(rt.environ).replace(microsecond=0)
    outcome = statuses.for_workflow_run(config, action, wf_run, run_jobs, listed, repo, now)
    if outcome.need_siblings:
        siblings = call_api(
            f"the runs for {sha[:12]}",
            lambda: rest.get(f"/repos/{repo}/actions/runs?head_sha={sha}&per_page=100"),
        )
        outcome = statuses.for_workflow_run(
            config,
            action,
            wf_run,
            run_jobs,
            listed,
            repo,
            now,
            siblings=siblings.get("workflow_runs") or [],
        )
    if run_jobs is None:
        return _Result(outcome, rest)
    gpu = jobs.named_gpu_jobs(run_jobs, config.gpu_jobs)
    waits = [w for w in (jobs.queue_seconds(j, now) for j in gpu) if w is not None]
    if inputs["report-file"]:
        doc = watchdog.queue_times(repo, wf_run, gpu, now)
        write_report(inputs["report-file"], json.dumps(doc, indent=2) + "\n")
    return _Result(outcome, rest, f"{max(waits):.0f}" if waits else "")


def _run_jobs(rest: RestClient, repository: str, wf_run: Mapping[str, Any]) -> list[Any]:
    attempt = int(wf_run.get("run_attempt") or 1)
    return list(
        call_api(
            f"the jobs of run {wf_run.get('id')}",
            lambda: rest.get_pages(
                f"/repos/{repository}/actions/runs/{int(wf_run['id'])}/attempts/{attempt}/jobs",
                key="jobs",
            ),
        )
    )


def _settle(
    rest: RestClient, ctx: EventContext, config: statuses.StatusConfig, status: statuses.Status
) -> statuses.Status:
    """``requested`` and ``completed`` of one run may be handled at once: read again, and put
    the run's own result back on top if it landed below our "in progress"."""
    again = _listed(rest, ctx.repository, status.sha)
    fixed = statuses.settle(config, ctx.payload["workflow_run"], again)
    if fixed is None:
        return status
    _post(rest, ctx, config, fixed)
    return fixed


def _post(
    rest: RestClient, ctx: EventContext, config: statuses.StatusConfig, status: statuses.Status
) -> None:
    body = status.body(config.context)
    try:
        call_api(
            f"setting the '{config.context}' status of {status.sha[:12]}",
            lambda: rest.post(
                f"/repos/{ctx.repository}/statuses/{quote(status.sha, safe='')}", body
            ),
        )
    except GpuCiError as exc:
        if ctx.name == "pull_request" and "HTTP 403" in exc.message:
            raise GpuCiError(
                exc.message + " A pull_request run from a fork always has a "
                "read-only token: post statuses from pull_request_target and "
                "workflow_run (examples/cuda-ci-remove-label.yml, "
                "examples/cuda-ci-status.yml).",
                title=exc.title,
            ) from None
        raise


def run(inputs: Inputs, rt: Runtime) -> int:
    config = statuses.make_config(
        inputs["context"],
        inputs["label"],
        inputs["min-permission"],
        inputs.items("gpu-jobs"),
        inputs["workflow"],
        inputs.items("trusted-creators"),
    )
    _gate_run(inputs)  # a bad gate-run is a usage error before the event is read
    ctx = load_event(rt.environ)
    action = str(ctx.payload.get("action") or "")
    if ctx.name in statuses.PR_EVENTS:
        result = _pull_event(inputs, rt, config, ctx, action)
    elif ctx.name == "workflow_run":
        result = _workflow_run_event(inputs, rt, config, ctx, action)
    else:
        raise UsageError(
            f"gpu-status handles pull_request_target (or pull_request) and workflow_run "
            f"events; this is '{ctx.name}'. See actions/gpu-status/README.md for the "
            "three-workflow setup."
        )
    status, note = result.outcome.status, result.outcome.note
    if status is not None and result.rest is not None:
        _post(result.rest, ctx, config, status)
        if ctx.name == "workflow_run" and status.state == "pending":
            status = _settle(result.rest, ctx, config, status)
        rt.info(
            f"gpu-status: {config.context} = {status.state}: {status.description}"
            f" ({result.rest.calls} API calls)"
        )
    else:
        rt.info(f"gpu-status: no status posted: {note}")
    rt.set_output("state", status.state if status else "")
    rt.set_output("description", status.description if status else note)
    rt.set_output("sha", status.sha if status else "")
    rt.set_output("queued-seconds", result.queued)
    rt.summary(_summary(ctx, action, config, result))
    return 0


def _summary(ctx: EventContext, action: str, config: statuses.StatusConfig, result: _Result) -> str:
    status, note = result.outcome.status, result.outcome.note
    rows = [
        ("event", f"{ctx.name}.{action}"),
        ("context", config.context),
        ("commit", status.sha if status else ""),
        ("state", status.state if status else "(not posted)"),
        ("description", status.description if status else note),
        ("link", status.target_url if status else ""),
        ("why", note),
    ]
    if result.queued:
        rows.append(("GPU queue time", f"{result.queued} s"))
    return "### gpu-status\n\n" + markdown_table(["", ""], rows)
