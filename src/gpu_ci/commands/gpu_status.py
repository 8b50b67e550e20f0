"""``gpu-ci gpu-status``: post the GPU CI commit status for this event (privileged, inert).

Runs in the ``pull_request_target`` workflow (labeled: no API call besides the POST; opened,
reopened, synchronize: the head's statuses first, a final result stays; closed: ends the
pull request's approval of its head) and in a
``workflow_run`` workflow (requested: the commit's statuses; completed: also the run's jobs),
and in the comment workflow's status job (``issue_comment``, after the gate: the POST only)
and result job (after the GPU job: the commit's statuses, then the POST).
It never checks out or runs code of the pull request. With ``comment: true`` it also keeps
the pull request's one explaining comment (:mod:`gpu_ci.github.status.pr_comment`) in step
with the head's state, and collapses or deletes it on ``closed`` if asked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from gpu_ci.errors import GpuCiError, UsageError
from gpu_ci.github import approval, jobs, watchdog
from gpu_ci.github import status as statuses
from gpu_ci.github.client import RestClient, call_api, connect
from gpu_ci.github.event import EventContext, load_event
from gpu_ci.github.status import pr_comment
from gpu_ci.inputs import Inputs
from gpu_ci.runtime import Runtime, markdown_table, write_report


@dataclass
class _Result:
    """What one event led to: the decision, the client that read for it (None: no call yet)
    and the longest GPU queue time of a completed run ('' when not known)."""

    outcome: statuses.Outcome
    rest: RestClient | None
    queued: str = ""
    listed: list[Any] = field(default_factory=list)
    """The commit's statuses as read before posting (newest first; empty when not read)."""


def _connect(inputs: Inputs, rt: Runtime, needs: str = "statuses: write") -> RestClient:
    return connect(inputs["github-token"], rt.environ, rt.mask, needs=needs)


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
    reads = action in (*statuses.NEW_HEAD, "closed") or (
        action == "labeled" and _gate_run(inputs) is False
    )
    if reads and len(head) == 40:
        rest = _connect(inputs, rt)
        listed = _listed(rest, ctx.repository, head)
    server = rt.environ.get("GITHUB_SERVER_URL", "").rstrip("/") or "https://github.com"
    outcome = statuses.for_pull_event(
        config,
        action,
        ctx.payload,
        statuses.GateOutputs(_gate_run(inputs), inputs["gate-reason"], inputs["labeled-by"]),
        server,
        ctx.repository,
        listed,
    )
    if outcome.status and rest is None:
        rest = _connect(inputs, rt)
    return _Result(outcome, rest, listed=listed)


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
    rerun = None
    if outcome.rerun_of is not None:
        rerun = _rerun_facts(rest, repo, *outcome.rerun_of)
        outcome = statuses.for_workflow_run(
            config, action, wf_run, run_jobs, listed, repo, now, statuses.Asked(rerun=rerun)
        )
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
            statuses.Asked(siblings.get("workflow_runs") or [], rerun),
        )
    if run_jobs is None:
        return _Result(outcome, rest, listed=listed)
    gpu = jobs.named_gpu_jobs(run_jobs, config.gpu_jobs)
    waits = [w for w in (jobs.queue_seconds(j, now) for j in gpu) if w is not None]
    if inputs["report-file"]:
        doc = watchdog.queue_times(repo, wf_run, gpu, now)
        write_report(inputs["report-file"], json.dumps(doc, indent=2) + "\n")
    return _Result(outcome, rest, f"{max(waits):.0f}" if waits else "", listed)


def _comment_event(
    inputs: Inputs, rt: Runtime, config: statuses.StatusConfig, ctx: EventContext
) -> _Result:
    """The comment workflow's own run (rule 8 of :mod:`gpu_ci.github.status`): the gate's
    outputs name the commit; this run, from the runner's environment, names the record."""
    sha = inputs["sha"].strip()
    server = rt.environ.get("GITHUB_SERVER_URL", "").rstrip("/") or "https://github.com"
    link = statuses.comment_run_link(
        server,
        ctx.repository,
        rt.environ.get("GITHUB_RUN_ID", ""),
        rt.environ.get("GITHUB_RUN_ATTEMPT", ""),
    )
    result = inputs["gpu-result"].strip()
    if not result:
        number = inputs["pr-number"].strip()
        outcome = statuses.comment_approved(
            config,
            sha,
            int(number) if number.isdigit() else 0,
            bool(_gate_run(inputs)),
            inputs["labeled-by"].strip(),
            link,
        )
        return _Result(outcome, _connect(inputs, rt) if outcome.status else None)
    if result not in statuses.JOB_RESULTS:
        raise UsageError(
            f"input 'gpu-result' is '{result}': pass the GPU job's needs.<job>.result "
            f"({', '.join(statuses.JOB_RESULTS)})."
        )
    if len(sha) != 40:
        raise UsageError("input 'sha' is not a full commit SHA: pass the gate's sha output.")
    rest = _connect(inputs, rt)
    listed = _listed(rest, ctx.repository, sha)
    return _Result(statuses.comment_result(config, sha, result, link, listed), rest, listed=listed)


def _rerun_facts(
    rest: RestClient, repository: str, by: str, number: int
) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """A re-run by hand: GitHub's records of the approved pull request and of ``by``'s role."""
    pull = call_api(
        f"pull request #{number}", lambda: rest.get(f"/repos/{repository}/pulls/{number}")
    )
    login = quote(by, safe="")
    permission = call_api(
        f"the permission of @{by} (a re-run by hand needs the role)",
        lambda: rest.get(f"/repos/{repository}/collaborators/{login}/permission"),
    )
    return pull, permission


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
        inputs.items("relay-bot"),
    )
    _gate_run(inputs)  # a bad gate-run is a usage error before the event is read
    commenting = _comment_config(inputs, config)  # so are the comment's inputs
    ctx = load_event(rt.environ)
    action = str(ctx.payload.get("action") or "")
    if ctx.name in statuses.PR_EVENTS:
        result = _pull_event(inputs, rt, config, ctx, action)
    elif ctx.name == "workflow_run":
        result = _workflow_run_event(inputs, rt, config, ctx, action)
    elif ctx.name == "issue_comment":
        result = _comment_event(inputs, rt, config, ctx)
    else:
        raise UsageError(
            f"gpu-status handles pull_request_target (or pull_request), workflow_run and "
            f"issue_comment events; this is '{ctx.name}'. See actions/gpu-status/README.md "
            "for the three-workflow setup."
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
    done = _comment(inputs, rt, ctx, action, (config, commenting), result, status)
    rt.set_output("comment", done.action if done else "")
    rt.summary(_summary(ctx, action, config, result, done))
    return 0


# -- the pull request's comment (comment: true) -----------------------------------------------


def _comment_config(
    inputs: Inputs, config: statuses.StatusConfig
) -> pr_comment.CommentConfig | None:
    if not inputs.boolean("comment"):
        return None
    return pr_comment.make_config(
        config.context,
        config.label,
        config.min_permission,
        inputs["comment-command"],
        inputs["comment-help"],
        inputs["comment-on-close"],
        config.creators,
    )


@dataclass(frozen=True)
class _Write:
    """The comment to write: on pull request ``number``, ``body`` (None: delete it)."""

    number: int
    body: str | None
    create: bool = True


def _comment(
    inputs: Inputs,
    rt: Runtime,
    ctx: EventContext,
    action: str,
    configs: tuple[statuses.StatusConfig, pr_comment.CommentConfig | None],
    result: _Result,
    status: statuses.Status | None,
) -> pr_comment.Result | None:
    """Update the pull request's comment.

    Bring the pull request's comment in step with the state just posted (or kept)."""
    config, commenting = configs
    if commenting is None:
        return None
    rest = result.rest
    pull_event = ctx.name in statuses.PR_EVENTS
    if rest is None and pull_event and action in (*statuses.NEW_HEAD, "labeled", "closed"):
        rest = _connect(inputs, rt, "pull-requests: write")
    if rest is None or ctx.name == "issue_comment":
        write: _Write | str = f"'{ctx.name}.{action}' does not change the comment."
    elif pull_event:
        write = _for_pull(rest, ctx, action, (config, commenting), status, result.listed)
    else:
        write = _for_run(rest, ctx, config, commenting, result, status)
    if isinstance(write, str) or rest is None:
        rt.info(f"gpu-status: the comment stays: {write}")
        return pr_comment.Result("none", None, str(write))
    client = rest
    done: pr_comment.Result = call_api(
        f"the GPU CI comment of pull request #{write.number} (the job needs "
        "'pull-requests: write')",
        lambda: pr_comment.sync(
            client, commenting, ctx.repository, write.number, write.body, create=write.create
        ),
    )
    rt.info(f"gpu-status: comment on #{write.number}: {done.note}")
    return done


def _for_pull(
    rest: RestClient,
    ctx: EventContext,
    action: str,
    configs: tuple[statuses.StatusConfig, pr_comment.CommentConfig],
    status: statuses.Status | None,
    listed: list[Any],
) -> _Write | str:
    """A pull_request_target event: the head's state (``listed``: its statuses if already
    read), or the close rule."""
    config, commenting = configs
    pr = ctx.payload.get("pull_request") or {}
    number, head = pr.get("number"), str((pr.get("head") or {}).get("sha") or "")
    if not isinstance(number, int) or len(head) != 40:
        return "the event lacks pull_request.number or pull_request.head.sha."
    if action == "closed":
        if commenting.on_close == "keep":
            return "the pull request is closed; comment-on-close is keep."
        merged = bool(pr.get("merged"))
        body = pr_comment.render_closed(commenting, number, merged)
        return _Write(number, None if commenting.on_close == "delete" else body, create=False)
    if pr.get("state") == "closed":
        return f"pull request #{number} is closed."
    if status is None or status.sha != head:
        listed = listed or _listed(rest, ctx.repository, head)
        latest = statuses.latest_of(statuses.trusted_statuses(config, listed), config.context)
        status = None if latest is None else _as_status(head, latest)
    return _Write(number, pr_comment.render(commenting, _shown(number, head, status)))


def _for_run(
    rest: RestClient,
    ctx: EventContext,
    config: statuses.StatusConfig,
    commenting: pr_comment.CommentConfig,
    result: _Result,
    status: statuses.Status | None,
) -> _Write | str:
    """A workflow_run event: the approval names the pull request; its head must be the run's."""
    if status is None:
        return "no status was posted."
    run_pulls = ctx.payload["workflow_run"].get("pull_requests") or []
    number = approval.approved_pull(config, result.listed)
    if number is None and run_pulls and isinstance(run_pulls[0], dict):
        number = run_pulls[0].get("number")
    if not isinstance(number, int):
        return "the run is for no pull request."
    pull = call_api(
        f"pull request #{number}", lambda: rest.get(f"/repos/{ctx.repository}/pulls/{number}")
    )
    head = str((pull.get("head") or {}).get("sha") or "")
    if pull.get("state") != "open" or head != status.sha:
        return f"pull request #{number} is closed or its head moved on from {status.sha[:12]}."
    return _Write(number, pr_comment.render(commenting, _shown(number, head, status)))


def _as_status(sha: str, listed: Mapping[str, Any]) -> statuses.Status:
    return statuses.Status(
        sha,
        str(listed.get("state") or ""),
        str(listed.get("description") or ""),
        str(listed.get("target_url") or ""),
    )


def _shown(number: int, head: str, status: statuses.Status | None) -> pr_comment.Shown:
    if status is None:
        return pr_comment.Shown(number, head)
    return pr_comment.Shown(number, head, status.state, status.description, status.target_url)


def _summary(
    ctx: EventContext,
    action: str,
    config: statuses.StatusConfig,
    result: _Result,
    comment: pr_comment.Result | None,
) -> str:
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
    if comment is not None:
        rows.append(("comment", f"{comment.action}: {comment.note}"))
    return "### gpu-status\n\n" + markdown_table(["", ""], rows)
