"""``gpu-cloud-runner/reap``: terminate leaked VMs and delete ghost runners, in two passes.

Pass 1 asks only the cloud: live VMs of this repository past their ``expires-at``. Pass 2
reconciles with GitHub both ways: VMs whose run has completed (or moved to a later attempt)
are terminated; offline ``gpu-ci-`` registrations older than the grace period with no live
VM are deleted. Only what carries our tag or name prefix is ever looked at.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from gpu_ci.cloud import naming, reap
from gpu_ci.cloud.aws import AwsProvider
from gpu_ci.cloud.cost import vm_cost
from gpu_ci.cloud.provider import MANAGED, CloudError, Instance
from gpu_ci.errors import GpuCiError, UsageError
from gpu_ci.github import jobs
from gpu_ci.github.client import ApiError, RestClient, call_api, connect
from gpu_ci.github.runners import registration as runners
from gpu_ci.inputs import Inputs
from gpu_ci.markdown import markdown_table
from gpu_ci.runtime import Runtime, repository, write_report

TITLE = "gpu-cloud-runner/reap"
#: A start's launch walk (at most 600 s) and its other calls end within this.
MIN_GRACE_MINUTES = 15


def _run_state(rest: RestClient, repo: str, run_id: str) -> reap.RunState:
    try:
        run: dict[str, Any] = rest.get(f"/repos/{repo}/actions/runs/{run_id}")
    except ApiError as exc:
        if exc.status == 404:
            return reap.RunState(found=False)
        raise
    ended = naming.parse_time(str(run.get("updated_at") or ""))
    started = naming.parse_time(str(run.get("run_started_at") or ""))
    done = run.get("status") == "completed"
    return reap.RunState(True, ended if done else None, int(run.get("run_attempt") or 1), started)


def _orphans(rest: RestClient, repo: str, vms: list[Instance], now: datetime) -> list[reap.Leak]:
    leaks, states = [], {}
    for vm in vms:
        run_id = naming.tag(vm.tags, naming.RUN_ID)
        if run_id not in states:
            states[run_id] = call_api(
                f"workflow run {run_id}", functools.partial(_run_state, rest, repo, run_id)
            )
        if leak := reap.orphaned(vm, states[run_id], now):
            leaks.append(leak)
    return leaks


def _ghosts(
    rest: RestClient, repo: str, live: list[Instance], now: datetime, grace: timedelta
) -> list[tuple[runners.Runner, str]]:
    ids = {naming.tag(v.tags, naming.RUNNER_ID) for v in live}
    listed = call_api(
        "the repository's runners (the token needs Administration: read)",
        lambda: runners.list_runners(rest, repo),
    )
    found = []
    for r in listed:
        why = reap.stale_registration(r.name, r.status, r.busy, r.id, ids, now, grace)
        if why:
            found.append((r, why))
    return found


def _summary(leaks: list[reap.Leak], ghosts: list[tuple[runners.Runner, str]], dry: bool) -> str:
    verb = "would terminate" if dry else "terminated"
    rows = [
        (lk.instance.instance_id, lk.instance.instance_type, lk.why, lk.minutes, f"${lk.usd:.2f}")
        for lk in leaks
    ]
    text = f"### {TITLE}{' (dry run)' if dry else ''}\n\n"
    text += f"VMs {verb}: {len(leaks)}\n\n"
    if rows:
        text += markdown_table(("VM", "type", "why", "leaked minutes", "leaked cost"), rows)
    text += f"\nRunner registrations {'to delete' if dry else 'deleted'}: {len(ghosts)}\n\n"
    if ghosts:
        text += markdown_table(("runner", "name", "why"), [(r.id, r.name, w) for r, w in ghosts])
    return text


def _grace(inputs: Inputs) -> timedelta:
    text = inputs["grace-minutes"].strip()
    if not text.isdigit() or int(text) < MIN_GRACE_MINUTES:
        raise UsageError(
            f"input 'grace-minutes' is {text!r}: a whole number, at least {MIN_GRACE_MINUTES} "
            "(a start may take that long between registering and launching)."
        )
    return timedelta(minutes=int(text))


def sweep(
    provider: AwsProvider, rest: RestClient, repo: str, now: datetime, grace: timedelta
) -> tuple[list[reap.Leak], list[tuple[runners.Runner, str]]]:
    """Both passes' findings; nothing is changed here."""
    live = [v for v in provider.find({MANAGED: "true", naming.REPOSITORY: repo}) if v.live]
    expired = [lk for v in live if (lk := reap.expired(v, now))]
    first = {lk.instance.instance_id for lk in expired}
    leaks = expired + _orphans(rest, repo, [v for v in live if v.instance_id not in first], now)
    gone = {lk.instance.instance_id for lk in leaks}
    return leaks, _ghosts(rest, repo, [v for v in live if v.instance_id not in gone], now, grace)


def _report(leaks: list[reap.Leak], ghosts: list[tuple[runners.Runner, str]], dry: bool) -> str:
    doc = {
        "kind": "gpu-cloud-runner-reap",
        "dry_run": dry,
        "terminated": [
            {
                **vm_cost(lk.instance, lk.now).to_json(),
                "run_id": naming.tag(lk.instance.tags, naming.RUN_ID),
                "why": lk.why,
                "leaked_minutes": lk.minutes,
                "leaked_cost_usd": f"{lk.usd:.4f}",
            }
            for lk in leaks
        ],
        "deleted": [{"runner_id": r.id, "name": r.name, "why": why} for r, why in ghosts],
    }
    return json.dumps(doc, indent=1) + "\n"


def run(inputs: Inputs, rt: Runtime) -> int:
    repo, grace = repository("", rt.environ, input_name=None), _grace(inputs)
    dry = inputs.boolean("dry-run")
    rest = connect(inputs["github-token"], rt.environ, rt.mask, needs="Administration: write")
    try:
        provider = AwsProvider(inputs["region"].strip())
        leaks, ghosts = sweep(provider, rest, repo, jobs.now(rt.environ), grace)
        if not dry:
            provider.terminate([lk.instance.instance_id for lk in leaks])
    except CloudError as exc:
        raise GpuCiError(str(exc), title=TITLE) from None
    if not dry:
        for runner, _why in ghosts:
            delete = functools.partial(runners.delete_runner, rest, repo, runner.id)
            call_api(f"runner {runner.id}", delete)
    rt.set_output("terminated", json.dumps([lk.instance.instance_id for lk in leaks]))
    rt.set_output("deleted", json.dumps([r.id for r, _ in ghosts]))
    rt.set_output("leaked-minutes", sum(lk.minutes for lk in leaks))
    rt.set_output("leaked-cost", f"{sum((lk.usd for lk in leaks), Decimal(0)):.2f}")
    rt.summary(_summary(leaks, ghosts, dry))
    if inputs["report-file"]:
        write_report(inputs["report-file"], _report(leaks, ghosts, dry))
    return 0
