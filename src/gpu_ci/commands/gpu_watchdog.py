"""``gpu-ci gpu-watchdog``: one sweep over queued GPU jobs; always a summary, then the exit code.

API errors while listing or cancelling are collected, never raised half-way: the summary
and the JSON report say what was done and what failed, and the step fails (exit 1) after.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from gpu_ci.errors import UsageError
from gpu_ci.github import jobs, watchdog
from gpu_ci.github import status as statuses
from gpu_ci.github.client import connect
from gpu_ci.github.event import load_event
from gpu_ci.github.kinds import parse_kinds
from gpu_ci.github.spend import budget
from gpu_ci.github.spend import kinds as spend_kinds
from gpu_ci.github.watchdog import machine
from gpu_ci.github.watchdog.result import RetryBudget
from gpu_ci.inputs import Inputs
from gpu_ci.pricing import load_table
from gpu_ci.runtime import Markdown, Runtime, escape, markdown_table, write_report
from gpu_ci.runtime import repository as repository_of


def _interval(inputs: Inputs, rt: Runtime) -> tuple[int | None, str]:
    """The watchdog's own interval: the input, else the schedule event's cron."""
    raw = inputs["schedule-minutes"].strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise UsageError(
                f"input 'schedule-minutes' must be a whole number of minutes; got {raw!r}."
            )
        return int(raw), "schedule-minutes"
    if rt.environ.get("GITHUB_EVENT_NAME") == "schedule" and rt.environ.get("GITHUB_EVENT_PATH"):
        cron = str(load_event(rt.environ).payload.get("schedule") or "")
        return watchdog.cron_interval_minutes(cron), f"the schedule '{cron}'"
    return None, ""


def summarize(result: watchdog.Sweep, warning: str) -> str:
    config = result.config
    head = (
        f"### gpu-watchdog\n\nGPU labels {', '.join(sorted(config.labels))}; limit "
        f"{config.max_queue_minutes:g} min in the queue; {result.calls} REST calls "
        f"(budget {config.max_calls}).\n\n"
    )
    # a job name comes from the workflow file (a fork's, for its pull requests): escaped,
    # so that it cannot end the link text and plant a link of its own
    rows = [
        (
            Markdown(f"[{escape(j.name)}]({j.html_url})") if j.html_url else j.name,
            j.run_id,
            j.status,
            "" if j.queued_seconds is None else watchdog_minutes(j.queued_seconds),
            j.action,
            j.detail,
        )
        for j in result.jobs
    ]
    body = (
        markdown_table(["GPU job", "run", "status", "queued", "action", "detail"], rows)
        if rows
        else "No GPU jobs in queued or in-progress runs old enough to check.\n"
    )
    body += _retries(result)
    tail = []
    if warning:
        tail.append(f"> [!WARNING]\n> {escape(warning)}")
    if result.stopped:
        tail.append(
            f"> [!WARNING]\n> Stopped early: {result.stopped}; the next sweep "
            "continues. This sweep is incomplete."
        )
    if result.incomplete:
        tail.append(
            "> [!WARNING]\n> This sweep is incomplete: "
            + escape("; ".join(result.incomplete))
            + "."
        )
    tail += [f"- {escape(note)}" for note in result.notes]
    tail += [f"- error: {escape(error)}" for error in result.errors]
    return head + body + ("\n" + "\n".join(tail) + "\n" if tail else "")


def _retries(result: watchdog.Sweep) -> str:
    """Failed runs with a failed GPU job: re-run or not, why, and the attempts' links."""
    if not result.retries:
        return ""
    rows = [
        (
            r.run_id,
            r.attempt,
            r.action,
            r.code,
            r.reason,
            Markdown(
                " ".join(f"[attempt {link.rsplit('/', 1)[-1]}]({link})" for link in r.links if link)
            ),
        )
        for r in result.retries
    ]
    lost = sum(i.minutes for i in result.infra)
    return (
        f"\n#### Failed GPU runs (retry-infra-failures: {result.config.max_retries})\n\n"
        + markdown_table(["run", "attempt", "action", "verdict", "reason", "attempts"], rows)
        + f"\n{len(result.infra)} GPU jobs lost to infrastructure, {lost:.1f} min.\n"
    )


def watchdog_minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def _config(inputs: Inputs) -> watchdog.WatchdogConfig:
    return watchdog.make_config(
        watchdog.WatchdogInputs(
            inputs.items("workflows"),
            inputs.items("gpu-labels"),
            inputs["max-queue-minutes"],
            inputs.boolean("cancel"),
            inputs["context"],
            inputs["max-calls"],
            inputs["rate-reserve"],
            inputs["retry-infra-failures"],
            inputs["force-cancel-minutes"],
            inputs["retry-window-hours"],
            inputs["monitor-artifacts"],
            inputs.items("trusted-creators"),
        )
    )


def _guard(inputs: Inputs, rt: Runtime, config: watchdog.WatchdogConfig) -> RetryBudget | None:
    """gpu-gate's budget inputs, for re-runs (None: no monthly-budget, or retries off)."""
    if not inputs["monthly-budget"].strip() or config.max_retries == 0:
        return None
    table, today = load_table(), jobs.now(rt.environ).date()
    # the guard counts every workflow's GPU jobs, each kind at its price, as gpu-gate's budget
    matcher = spend_kinds.matcher_from_inputs(
        inputs["gpu-runs-on"], inputs["gpu-runner-kinds"], table, today, "input 'monthly-budget'"
    )
    kinds = parse_kinds(inputs["gpu-runner-kinds"])
    written = budget.BudgetInputs(
        inputs["monthly-budget"],
        spend_kinds.default_price(inputs["gpu-price"], inputs["gpu-runs-on"], kinds),
        inputs["reserve-minutes"],
        inputs["budget-on-unknown"],
        "repository",
        ledger_artifact=inputs["budget-ledger"],
    )
    cfg = budget.make_budget_config(written, table, today)
    if cfg is None:
        return None
    # whose approvals let a fork run's waiting job reserve: the watchdog's own context and
    # trusted-creators, as its head check reads them
    approvals = statuses.approval_config(
        config.context or statuses.DEFAULT_CONTEXT, config.creators, inputs.items("relay-bot")
    )
    cfg = dataclasses.replace(cfg, approvals=approvals)
    scheduled = rt.environ.get("GITHUB_EVENT_NAME") == "schedule"
    branch = rt.environ.get("GITHUB_REF_NAME", "") if scheduled else ""
    return RetryBudget(cfg, matcher, table, branch)


def _machines(path: str) -> tuple[machine.MachineRecord, ...]:
    """``machine-records``: the records file, read and checked (a fault: exit 2)."""
    if not path.strip():
        return ()
    try:
        return machine.parse_records(json.loads(Path(path).read_text("utf-8")))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(
            f"input 'machine-records': {path} cannot be read as {machine.SCHEMA} ({exc}); "
            "hand over the file gpu-cloud-runner, ARC's event export or the runner hook writes."
        ) from None


def run(inputs: Inputs, rt: Runtime) -> int:
    config = dataclasses.replace(_config(inputs), machines=_machines(inputs["machine-records"]))
    guard = _guard(inputs, rt, config)
    interval, source = _interval(inputs, rt)
    warning = watchdog.schedule_warning(config.max_queue_minutes, interval)
    if warning:
        rt.warning(f"{warning} (interval from {source})", title="gpu-watchdog")
    repository = repository_of("", rt.environ, input_name=None)
    rest = connect(inputs["github-token"], rt.environ, rt.mask, needs="actions: write")
    server = rt.environ.get("GITHUB_SERVER_URL", "").rstrip("/") or "https://github.com"
    now = jobs.now(rt.environ).replace(microsecond=0)
    result = watchdog.sweep(rest, repository, config, now, server, guard)

    doc = result.as_json()
    rt.set_output("stale", str(len(result.stale)))
    rt.set_output("cancelled", json.dumps(result.cancelled))
    rt.set_output("retried", json.dumps(result.retried))
    top = doc["max_queued_seconds"]
    rt.set_output("max-queued-seconds", "" if top is None else f"{top:.0f}")
    rt.set_output("rest-calls", str(result.calls))
    rt.set_output("complete", "true" if result.complete else "false")
    rt.summary(summarize(result, warning))
    _log(result, rt)
    if inputs["report-file"]:
        write_report(inputs["report-file"], json.dumps(doc, indent=2) + "\n")
    if inputs["infra-file"]:
        text = json.dumps(watchdog.infra_json(result), indent=2) + "\n"
        write_report(inputs["infra-file"], text, what="infra-file")
    for error in result.errors:
        rt.error(error, title="gpu-watchdog")
    return 1 if result.errors else 0


def _log(result: watchdog.Sweep, rt: Runtime) -> None:
    """The sweep's summary lines.

    A line (or a warning, for what needs a look) per stale job, then the totals."""
    stale = result.stale
    for record in stale:
        message = (
            f"{record.name} (run {record.run_id}) queued "
            f"{watchdog_minutes(record.queued_seconds or 0)}: {record.action}"
            f"{' — ' + record.detail if record.detail else ''}"
        )
        if record.action in (
            "cancelled",
            "cancel-unconfirmed",
            "reported",
            "left-running-siblings",
        ):
            rt.warning(message, title="gpu-watchdog")
        else:
            rt.info(f"gpu-watchdog: {message}")
    for retry in result.retries:
        line = f"run {retry.run_id} attempt {retry.attempt}: {retry.action} — {retry.reason}"
        if retry.action == "retried":
            rt.warning(line, title="gpu-watchdog")
        else:
            rt.info(f"gpu-watchdog: {line}")
    if result.stopped:
        rt.warning(f"stopped early: {result.stopped}.", title="gpu-watchdog")
    rt.info(
        f"gpu-watchdog: {len(result.jobs)} GPU jobs seen, {len(stale)} stale, "
        f"{len(result.cancelled)} runs cancelled, {len(result.retried)} re-run, "
        f"{result.calls} REST calls."
    )
