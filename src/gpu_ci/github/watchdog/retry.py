"""gpu-watchdog's retry: re-run once a run whose GPU job was lost to infrastructure.

A failed run of the retry window has its failed jobs classified (:mod:`.infra`: steps,
annotations, gpu-monitor's report). A run lost to infrastructure is re-run once its head
still holds its approval (:func:`gpu_ci.github.approval.watchdog_hold`) and the budget
allows the reservation; its new attempt gets a "retried" status that gpu-status accepts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import date, timedelta
from decimal import Decimal
from functools import partial
from typing import Any
from urllib.parse import quote

from gpu_ci.github.approval import Source, retried_text, watchdog_hold
from gpu_ci.github.client import Rest
from gpu_ci.github.commit_status import Status, clip
from gpu_ci.github.event import PR_EVENTS, TRUSTED_EVENTS
from gpu_ci.github.jobs import (
    has_gpu_label,
)
from gpu_ci.github.monitor_artifact import MAX_REPORT_BYTES, read_monitor_report
from gpu_ci.github.spend import budget, month
from gpu_ci.github.watchdog import infra
from gpu_ci.github.watchdog.calls import FAILED, Caller, describe, listed_runs, run_jobs
from gpu_ci.github.watchdog.result import (
    BudgetExhausted,
    InfraRecord,
    RetryBudget,
    RetryRecord,
    Sweep,
)


def retry_sweep(rest: Rest, call: Caller, result: Sweep, sources: Sequence[str]) -> None:
    """Failed runs created within retry-window-hours: classify their failed jobs, re-run the
    runs lost to infrastructure (see :func:`_retry_run`)."""
    since = result.now - timedelta(hours=result.config.retry_window_hours)
    created = quote(">=" + since.strftime("%Y-%m-%dT%H:%M:%SZ"), safe="")
    runs: dict[int, Mapping[str, Any]] = {}
    for source in sources:
        for run in listed_runs(rest, call, result, source, "failure", created):
            if run.get("status") == "completed":
                runs.setdefault(int(run["id"]), run)
    for _run_id, run in sorted(runs.items()):
        _retry_run(rest, call, result, run)


def _retry_run(rest: Rest, call: Caller, result: Sweep, run: Mapping[str, Any]) -> None:
    config = result.config
    run_id, attempt = int(run["id"]), int(run.get("run_attempt") or 1)
    jobs = run_jobs(rest, call, result, run_id, f"listing the jobs of failed run {run_id}")
    if jobs is None:
        return
    failed = [j for j in jobs if infra.failed(j)]
    gpu_ids = {
        int(j["id"]) for j in failed if has_gpu_label(j, config.labels) or cloud_runner_job(j)
    }
    if not gpu_ids:
        return  # no GPU job failed: not the watchdog's business
    verdicts = tuple(_verdicts(rest, call, result, run, failed, gpu_ids))
    decision = infra.retry_decision(run, verdicts, gpu_ids, config.max_retries)
    code, reason = decision.code, decision.reason
    every = any(cloud_runner_job(j) for j in failed if int(j["id"]) in gpu_ids)
    if decision.retry:
        queued = queued_again(jobs, config.labels, every)
        code, reason = _may_retry(rest, call, result, run, queued) or (code, reason)
    link = _attempt_link(run, attempt)
    record = RetryRecord(
        run_id,
        attempt,
        str(run.get("head_sha") or ""),
        str(run.get("path") or ""),
        "not-retried",
        code,
        reason,
        (link,),
        verdicts,
    )
    if code == "retry":
        record = _rerun(rest, call, result, run, record, every=every)
    result.retries.append(record)
    by_id = {int(j["id"]): j for j in failed}
    for verdict in verdicts:
        if verdict.infrastructure and verdict.job_id in gpu_ids:
            result.infra.append(
                _infra_record(run, by_id[verdict.job_id], verdict, record.action == "retried")
            )


def _attempt_link(run: Mapping[str, Any], attempt: int) -> str:
    url = str(run.get("html_url") or "").rstrip("/")
    return f"{url}/attempts/{attempt}" if url else ""


def _infra_record(
    run: Mapping[str, Any], job: Mapping[str, Any], verdict: infra.Verdict, retried: bool
) -> InfraRecord:
    return InfraRecord(
        int(run["id"]),
        int(job.get("run_attempt") or run.get("run_attempt") or 1),
        verdict.job_id,
        verdict.job,
        infra.pool_of(job),
        tuple(str(x) for x in job.get("labels") or []),
        str(job.get("runner_name") or ""),
        str(job.get("started_at") or ""),
        round(infra.minutes_of(job), 2),
        tuple(e.code for e in verdict.evidence),
        retried,
    )


def _verdicts(
    rest: Rest,
    call: Caller,
    result: Sweep,
    run: Mapping[str, Any],
    failed: Sequence[Mapping[str, Any]],
    gpu_ids: set[int],
) -> list[infra.Verdict]:
    """One verdict per failed job.

    Steps and the machine records kept outside the job first (free), the check run's
    annotations only when no step failed (a failed step is a test failure whatever they
    say), gpu-monitor's report only for a GPU job whose verdict it could change."""
    evidence: dict[int, list[infra.Evidence]] = {}
    for job in failed:
        found = infra.step_evidence(job) + infra.machine_evidence(result.config.machines, job)
        if not any(e.code == "failed-step" for e in found):
            found += _annotations(rest, call, result, job)
        evidence[int(job["id"])] = found
    wanting = [
        j
        for j in failed
        if int(j["id"]) in gpu_ids and infra.needs_report(j, evidence[int(j["id"])])
    ]
    if wanting and result.config.monitor_prefix:
        for job_id, found in _reports(rest, call, result, run, wanting).items():
            evidence[job_id] += found
    return [infra.classify(j, evidence[int(j["id"])]) for j in failed]


def _annotations(
    rest: Rest, call: Caller, result: Sweep, job: Mapping[str, Any]
) -> list[infra.Evidence]:
    check_run = str(job.get("check_run_url") or "").rstrip("/").rsplit("/", 1)[-1]
    if not check_run.isdigit():
        return []
    path = f"/repos/{result.repository}/check-runs/{check_run}/annotations"
    try:
        notes = call(partial(rest.get_pages, path, limit=100))
    except BudgetExhausted:
        raise
    except FAILED as exc:
        result.notes.append(describe(exc, f"reading the annotations of job {job.get('id')}"))
        return []
    return infra.annotation_evidence([n for n in notes if isinstance(n, Mapping)])


def _reports(
    rest: Rest,
    call: Caller,
    result: Sweep,
    run: Mapping[str, Any],
    wanting: Sequence[Mapping[str, Any]],
) -> dict[int, list[infra.Evidence]]:
    """gpu-monitor's reports of the run: one artifact listing, then at most one download per
    job that wants one (newest artifacts first), each matched to a job by its time window."""
    repository, prefix = result.repository, result.config.monitor_prefix
    url = f"/repos/{repository}/actions/runs/{int(run['id'])}/artifacts?per_page=100"
    try:
        listed = call(partial(rest.get, url)).get("artifacts") or []
    except BudgetExhausted:
        raise
    except FAILED as exc:
        result.notes.append(describe(exc, f"listing the artifacts of run {run.get('id')}"))
        return {}
    arts = [
        a
        for a in listed
        if str(a.get("name") or "").startswith(prefix)
        and not a.get("expired")
        and int(a.get("size_in_bytes") or 0) <= MAX_REPORT_BYTES
    ]
    arts.sort(key=lambda a: (str(a.get("created_at") or ""), int(a["id"])), reverse=True)
    out: dict[int, list[infra.Evidence]] = {}
    for art in arts[: len(wanting)]:
        path = f"/repos/{repository}/actions/artifacts/{int(art['id'])}/zip"
        try:
            blob = call(partial(rest.download, path, MAX_REPORT_BYTES))
        except BudgetExhausted:
            raise
        except FAILED as exc:
            result.notes.append(describe(exc, f"downloading artifact {art.get('name')}"))
            continue
        report, why = read_monitor_report(blob)
        if report is None:
            result.notes.append(f"artifact '{art.get('name')}': {why}")
            continue
        try:  # the artifact is PR code's to write: whatever it holds, a note, never a crash
            found = [
                (int(job["id"]), infra.monitor_evidence(report, str(art.get("name"))))
                for job in wanting
                if infra.report_is_for(report, job)
            ]
        except Exception as exc:  # noqa: BLE001 - one unreadable artifact must not end the sweep
            result.notes.append(f"artifact '{art.get('name')}': unreadable report ({exc!r})")
            continue
        for job_id, evidence in found:
            out.setdefault(job_id, []).extend(evidence)
    return out


def queued_again(
    jobs: Sequence[Mapping[str, Any]], labels: frozenset[str], every: bool
) -> list[Mapping[str, Any]]:
    """The GPU jobs the re-run queues again: what the budget reserves for.

    A whole-run re-run (``every``: a cloud runner's job needs its start job again) runs every
    GPU job of the run, the passed ones too, each on a VM of its own. "Re-run failed jobs"
    runs the failed jobs and the jobs that depend on them; the API names no dependency, so
    every GPU job that did not succeed counts (a dependent of a failed job was skipped)."""
    return [
        j
        for j in jobs
        if (has_gpu_label(j, labels) or cloud_runner_job(j))
        and (every or j.get("conclusion") != "success")
    ]


def _may_retry(
    rest: Rest,
    call: Caller,
    result: Sweep,
    run: Mapping[str, Any],
    queued: Sequence[Mapping[str, Any]],
) -> tuple[str, str] | None:
    """Why the head or budget refuses re-running the ``queued`` GPU jobs, or None."""
    try:
        stale = _stale_head(rest, call, result, run)
    except BudgetExhausted:
        raise
    except FAILED as exc:
        detail = describe(exc, f"checking the head of run {run.get('id')}")
        result.errors.append(detail)
        return "error", detail
    if stale:
        return "stale-head", stale
    return _over_budget(rest, result, queued)


def _stale_head(rest: Rest, call: Caller, result: Sweep, run: Mapping[str, Any]) -> str:
    """Why the run's head is no longer approved, or "".

    Why the run's head is no longer the approved one, or "" when it still is.

    A pull request's head must hold a current approval and still be the pull request's
    head. A trusted event's commit is in the repository already: nothing to check. Any
    other event (a comment approval's ``issue_comment`` run) runs from the default branch:
    its ``head_sha`` is that branch's commit, not the approved one, so it is never re-run."""
    event = str(run.get("event") or "")
    if event not in PR_EVENTS and event not in TRUSTED_EVENTS:
        return (
            f"a '{event}' run runs from the default branch (its head_sha is not the approved "
            "commit): the watchdog cannot tell that its approval is current, approve again"
        )
    if event not in PR_EVENTS:
        return ""
    repository, context = result.repository, result.config.context
    sha = str(run.get("head_sha") or "")
    listed = [p.get("number") for p in run.get("pull_requests") or [] if isinstance(p, dict)]
    number = listed[0] if listed else None
    if not context:
        return (
            "no context: approvals cannot be read, so a pull request's run is never re-run "
            "(set context to gpu-status's)"
        )
    statuses = call(
        partial(rest.get_pages, f"/repos/{repository}/commits/{sha}/statuses", limit=100)
    )
    approval, why = watchdog_hold(Source(context, tuple(result.config.creators)), run, statuses)
    if approval is None:
        return why
    number = approval.number or number
    if number is None:
        return "the run names no pull request: cannot tell whether its head is still approved"
    pull = call(partial(rest.get, f"/repos/{repository}/pulls/{int(number)}"))
    head = str((pull.get("head") or {}).get("sha") or "")
    if pull.get("state") != "open" or head != sha:
        return (
            f"the pull request #{number} is {pull.get('state')} at {head[:12]}, not at the "
            f"approved head {sha[:12]}"
        )
    return ""


def _over_budget(
    rest: Rest, result: Sweep, gpu_jobs: Sequence[Mapping[str, Any]]
) -> tuple[str, str] | None:
    """The budget's refusal of the re-run's reservation, or None.

    gpu-gate's budget rule for the re-run's reservation (``reserve-minutes`` per GPU job
    it re-runs, each at its runner kind's price, plus what this sweep's earlier re-runs
    reserve)."""
    guard = result.guard
    if guard is None:
        return None
    cfg = guard.config
    reserve = cfg.reserve_minutes * len(gpu_jobs)
    spent = result.month_spent
    if spent is None:
        before = getattr(rest, "calls", None)
        try:
            spent, _note = month.month_spend(
                rest,
                result.repository,
                cfg,
                guard.matcher,
                guard.table,
                result.now,
                default_branch=guard.default_branch,
                skip=None,
            )
        except Exception as exc:  # ApiError, or an answer that is not what was asked
            if cfg.on_unknown == "run":
                result.notes.append(f"budget not checked (budget-on-unknown: run): {exc}")
                return None
            return "budget-unknown", f"the month's GPU spend could not be read: {exc}"
        finally:
            after = getattr(rest, "calls", None)
            if isinstance(before, int) and isinstance(after, int):
                result.calls += after - before
        result.month_spent = spent
    cost = _reserved_cost(guard, gpu_jobs, result.now.date())
    minutes = result.reserved_minutes + reserve
    usd = None if cost is None or result.reserved_usd is None else result.reserved_usd + cost
    # the mean price of what is reserved, so that minutes x price is each job at its own
    price = None if usd is None or not minutes else usd / minutes
    verdict = budget.check(cfg.budget, spent, minutes, price)
    if not verdict.ok:
        earlier = result.reserved_minutes
        what = f"with this sweep's earlier re-runs ({earlier} min): " if earlier else ""
        return "over-budget", what + verdict.reason
    result.reserved_minutes, result.reserved_usd = minutes, usd
    return None


def _reserved_cost(
    guard: RetryBudget, gpu_jobs: Sequence[Mapping[str, Any]], day: date
) -> Decimal | None:
    """What re-running ``gpu_jobs`` reserves in USD, each at its kind's price (None: unknown)."""
    total = Decimal(0)
    for job in gpu_jobs:
        price = guard.matcher.price_for(job, guard.config.price)
        rate = price.on(day, guard.table) if price is not None else None
        if rate is None:
            return None
        total += rate * guard.config.reserve_minutes
    return total


#: The label prefix of gpu-cloud-runner's just-in-time runners (one label per VM).
CLOUD_RUNNER_PREFIX = "gpu-ci-"


def cloud_runner_job(job: Mapping[str, Any]) -> bool:
    """Whether the job asked for a gpu-cloud-runner VM (its label carries our prefix)."""
    return any(str(label).startswith(CLOUD_RUNNER_PREFIX) for label in job.get("labels") or [])


def _rerun(
    rest: Rest,
    call: Caller,
    result: Sweep,
    run: Mapping[str, Any],
    record: RetryRecord,
    *,
    every: bool = False,
) -> RetryRecord:
    """POST rerun-failed-jobs (``every``: rerun), read the new attempt back, say so.

    A GPU job on a cloud runner needs its start job again, which succeeded and so is no
    failed job: then the whole run is re-run, and the new attempt starts its own VM."""
    repository, run_id = result.repository, record.run_id
    base = f"/repos/{repository}/actions/runs/{run_id}"
    try:
        call(partial(rest.post, f"{base}/{'rerun' if every else 'rerun-failed-jobs'}"))
    except BudgetExhausted:
        raise
    except FAILED as exc:
        detail = describe(exc, f"re-running the failed jobs of run {run_id}")
        result.errors.append(detail)
        return replace(record, action="retry-failed", code="error", reason=detail)
    new = record.attempt + 1
    try:
        again = call(partial(rest.get, f"{base}/attempts/{new}"))
    except BudgetExhausted:
        raise
    except FAILED as exc:
        return replace(
            record,
            action="retry-unconfirmed",
            reason=describe(exc, f"reading attempt {new} of run {run_id}"),
        )
    links = (*record.links, _attempt_link(run, new))
    done = replace(record, action="retried", links=links, reason=f"{record.reason}: re-run")
    verdict = next(v for v in record.verdicts if v.infrastructure)
    what = "GPU" if verdict.cause == "gpu-lost" else "runner"
    if result.config.context:
        status = Status(
            record.head_sha,
            "pending",
            clip(retried_text(what, record.attempt, verdict.reason)),
            str(again.get("html_url") or "").rstrip("/") + f"/attempts/{new}",
        )
        try:
            call(
                partial(
                    rest.post,
                    f"/repos/{repository}/statuses/{status.sha}",
                    status.body(result.config.context),
                )
            )
            result.statuses.append(status)
        except BudgetExhausted:
            raise
        except FAILED as exc:
            result.errors.append(describe(exc, f"setting the status of {status.sha[:12]}"))
    return done
