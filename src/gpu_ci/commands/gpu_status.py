"""``gpu-ci gpu-status``: post the GPU CI commit status for this event (privileged, inert).

Runs in the ``pull_request_target`` workflow (labeled: no API call besides the POST; opened,
reopened, synchronize: the head's statuses first, a final result stays) and in a
``workflow_run`` workflow (requested: the commit's statuses; completed: also the run's jobs).
It never checks out or runs code of the pull request.
"""

from __future__ import annotations

import json
from urllib.parse import quote

from gpu_ci.errors import GpuCiError, UsageError
from gpu_ci.github import statuses
from gpu_ci.github.client import call_api
from gpu_ci.github.event import load_event
from gpu_ci.inputs import Inputs
from gpu_ci.runtime import Runtime, markdown_table


def _rest(inputs: Inputs, rt: Runtime):
    from gpu_ci.github.client import connect

    return connect(inputs["github-token"], rt.environ, rt.mask, needs="statuses: write")



def _gate_run(inputs: Inputs) -> bool | None:
    if not inputs["gate-run"].strip():
        return None
    return inputs.boolean("gate-run")


def _write_report(path: str, repository: str, run: dict, gpu_jobs: list, now) -> None:
    from gpu_ci.github.watchdog import SCHEMA, record_of

    records = [record_of(run, job, now) for job in gpu_jobs]
    waits = [r.queued_seconds for r in records if r.queued_seconds is not None]
    doc = {"schema": SCHEMA, "source": "gpu-status", "repository": repository,
           "generated_at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
           "max_queued_seconds": max(waits) if waits else None, "complete": True,
           "jobs": [dict(r.__dict__, labels=list(r.labels)) for r in records], "errors": []}
    try:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(doc, handle, indent=2)
            handle.write("\n")
    except OSError as exc:
        raise GpuCiError(f"cannot write report-file {path}: {exc.strerror}.") from None


def run(inputs: Inputs, rt: Runtime) -> int:
    config = statuses.make_config(inputs["context"], inputs["label"], inputs["min-permission"],
                                  inputs.items("gpu-jobs"), inputs["workflow"])
    gate_run = _gate_run(inputs)
    ctx = load_event(rt.environ)
    server = rt.environ.get("GITHUB_SERVER_URL", "").rstrip("/") or "https://github.com"
    action = str(ctx.payload.get("action") or "")
    calls_note = ""
    queued = ""
    if ctx.name in statuses.PR_EVENTS:
        rest = None
        listed: list = []
        head = str(((ctx.payload.get("pull_request") or {}).get("head") or {}).get("sha") or "")
        # a final result, an approval of another pull request or one in flight stays
        if (action in statuses.NEW_HEAD or action == "labeled" and gate_run is False) \
                and len(head) == 40:
            rest = client = _rest(inputs, rt)
            listed = call_api(f"the statuses of {head[:12]}", lambda: client.get_pages(
                f"/repos/{ctx.repository}/commits/{quote(head, safe='')}/statuses", limit=100))
        outcome = statuses.for_pull_event(config, action, ctx.payload, gate_run,
                                          inputs["gate-reason"], inputs["labeled-by"],
                                          server, ctx.repository, listed)
        if outcome.status and rest is None:
            rest = _rest(inputs, rt)
    elif ctx.name == "workflow_run":
        wf_run = ctx.payload.get("workflow_run")
        if not isinstance(wf_run, dict) or len(str(wf_run.get("head_sha") or "")) != 40:
            raise GpuCiError("the workflow_run event has no workflow_run.head_sha.",
                             title="malformed event")
        rest = _rest(inputs, rt)
        sha = str(wf_run["head_sha"])
        listed = call_api(f"the statuses of {sha[:12]}", lambda: rest.get_pages(
            f"/repos/{ctx.repository}/commits/{sha}/statuses", limit=100))
        jobs = None
        if action == "completed":
            attempt = int(wf_run.get("run_attempt") or 1)
            jobs = call_api(f"the jobs of run {wf_run.get('id')}", lambda: rest.get(
                f"/repos/{ctx.repository}/actions/runs/{int(wf_run['id'])}/attempts/"
                f"{attempt}/jobs?per_page=100")).get("jobs") or []
        from gpu_ci.github.watchdog import utcnow

        now = utcnow()
        outcome = statuses.for_workflow_run(config, action, wf_run, jobs, listed,
                                            ctx.repository, now)
        if outcome.need_siblings:
            siblings = call_api(f"the runs for {sha[:12]}", lambda: rest.get(
                f"/repos/{ctx.repository}/actions/runs?head_sha={sha}&per_page=100"))
            outcome = statuses.for_workflow_run(
                config, action, wf_run, jobs, listed, ctx.repository, now,
                siblings=siblings.get("workflow_runs") or [])
        if jobs is not None:
            gpu = statuses.gpu_jobs_of(jobs, config.gpu_jobs)
            waits = [w for w in (statuses.queue_seconds(j, now) for j in gpu) if w is not None]
            queued = f"{max(waits):.0f}" if waits else ""
            if inputs["report-file"]:
                _write_report(inputs["report-file"], ctx.repository, wf_run, list(gpu), now)
    else:
        raise UsageError(
            f"gpu-status handles pull_request_target (or pull_request) and workflow_run "
            f"events; this is '{ctx.name}'. See actions/gpu-status/README.md for the "
            "three-workflow setup.")
    status = outcome.status
    if status is not None and rest is not None:
        body = status.body(config.context)
        post_to = f"/repos/{ctx.repository}/statuses/{quote(status.sha, safe='')}"
        try:
            call_api(f"setting the '{config.context}' status of {status.sha[:12]}",
                  lambda: rest.post(post_to, body))
        except GpuCiError as exc:
            if ctx.name == "pull_request" and "HTTP 403" in exc.message:
                raise GpuCiError(exc.message + " A pull_request run from a fork always has a "
                                 "read-only token: post statuses from pull_request_target and "
                                 "workflow_run (examples/cuda-ci-remove-label.yml, "
                                 "examples/cuda-ci-status.yml).", title=exc.title) from None
            raise
        if ctx.name == "workflow_run" and status.state == "pending":
            # requested and completed of one run may be handled at once: read again, and
            # put the run's own result back on top if it landed below our "in progress"
            again = call_api(f"the statuses of {status.sha[:12]}", lambda: rest.get_pages(
                f"/repos/{ctx.repository}/commits/{quote(sha, safe='')}/statuses", limit=100))
            fixed = statuses.settle(config, ctx.payload["workflow_run"], again)
            if fixed is not None:
                restore = fixed.body(config.context)
                call_api(f"restoring the '{config.context}' result of {fixed.sha[:12]}",
                         lambda: rest.post(post_to, restore))
                status = fixed
        calls_note = f" ({rest.calls} API calls)"
        rt.info(f"gpu-status: {config.context} = {status.state}: {status.description}"
                f"{calls_note}")
    else:
        rt.info(f"gpu-status: no status posted: {outcome.note}")
    rt.set_output("state", status.state if status else "")
    rt.set_output("description", status.description if status else outcome.note)
    rt.set_output("sha", status.sha if status else "")
    rt.set_output("queued-seconds", queued)
    rows = [("event", f"{ctx.name}.{action}"), ("context", config.context),
            ("commit", status.sha if status else ""),
            ("state", status.state if status else "(not posted)"),
            ("description", status.description if status else outcome.note),
            ("link", status.target_url if status else ""), ("why", outcome.note)]
    if queued:
        rows.append(("GPU queue time", f"{queued} s"))
    rt.summary("### gpu-status\n\n" + markdown_table(["", ""], rows))
    return 0
