"""``gpu-cloud-runner/stop``: end the job's VM and runner, found by tags, and report the cost.

The start job's outputs are no input here: a cancelled start has none. The VM is found by its
run's tags; when a registration of this job exists but no VM yet, a launch may still be in
flight, so the search is repeated for ``wait-seconds``. The spot interruption is read from the
cloud's own record of the VM (its state reason), never from the VM, where PR code ran.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

from gpu_ci.cloud import naming
from gpu_ci.cloud.aws import AwsProvider
from gpu_ci.cloud.cost import VmCost, vm_cost
from gpu_ci.cloud.provider import CloudError, Instance
from gpu_ci.commands.gpu_cloud_runner import TITLE, job_owner
from gpu_ci.errors import GpuCiError, UsageError
from gpu_ci.github.client import RestClient, call_api, connect
from gpu_ci.github.runners import registration as runners
from gpu_ci.inputs import Inputs
from gpu_ci.markdown import markdown_table
from gpu_ci.runtime import Runtime, write_report

POLL_SECONDS = 5.0


def _find(provider: AwsProvider, owner: naming.Owner, wait: float, pending: bool) -> list[Instance]:
    """The job's VMs. While none is found and a launch may be in flight, ask again."""
    end = time.monotonic() + (wait if pending else 0)
    while True:
        found = provider.find(owner.tags())
        if found or time.monotonic() >= end:
            return found
        time.sleep(min(POLL_SECONDS, max(0.0, end - time.monotonic())))


def _registrations(rest: RestClient, owner: naming.Owner) -> list[runners.Runner]:
    listed = call_api(
        "the repository's runners (the token needs Administration: read)",
        lambda: runners.list_runners(rest, owner.repository),
    )
    return [r for r in listed if owner.owns(naming.RunnerName.parse(r.name))]


def _unregister(rest: RestClient, owner: naming.Owner, found: list[runners.Runner]) -> list[str]:
    problems = []
    for runner in found:
        try:
            runners.delete_runner(rest, owner.repository, runner.id)
        except Exception as exc:  # the reaper deletes it later
            problems.append(f"runner {runner.id} ({runner.name}) was not deleted: {exc}")
    return problems


def report(owner: naming.Owner, costs: list[VmCost]) -> dict[str, object]:
    """The JSON gpu-spend reads: this job's VMs, their minutes and cost."""
    return {
        "kind": "gpu-cloud-runner",
        "repository": owner.repository,
        "run_id": owner.run_id,
        "run_attempt": owner.attempt,
        "job_key": owner.job_key,
        "vms": [c.to_json() for c in costs],
        "minutes": sum(c.minutes for c in costs),
        "cost_usd": str(sum((c.usd for c in costs), Decimal(0))),
    }


def _summary(costs: list[VmCost], problems: list[str]) -> str:
    rows = [
        (
            c.instance.instance_id,
            c.instance.instance_type,
            c.instance.market.value,
            c.instance.state_reason or c.instance.state,
            c.minutes,
            f"${c.usd}",
        )
        for c in costs
    ]
    text = "### gpu-cloud-runner/stop\n\n"
    if rows:
        text += markdown_table(("VM", "type", "market", "state", "minutes", "cost"), rows)
    else:
        text += "No VM of this job was found: nothing was launched, or it is gone.\n"
    return text + "".join(f"\n- {p}" for p in problems)


def run(inputs: Inputs, rt: Runtime) -> int:
    owner = job_owner(inputs, rt)
    wait = inputs["wait-seconds"].strip()
    if not wait.isdigit() or int(wait) > 900:
        raise UsageError(f"input 'wait-seconds' is {wait!r}: a whole number up to 900.")
    rest = connect(inputs["github-token"], rt.environ, rt.mask, needs="Administration: write")
    found = _registrations(rest, owner)
    try:
        provider = AwsProvider(inputs["region"].strip())
        vms = _find(provider, owner, float(wait), pending=bool(found))
        provider.terminate([v.instance_id for v in vms if v.live])
        vms = provider.find(owner.tags()) if vms else vms
    except CloudError as exc:
        raise GpuCiError(f"{exc} The reaper ends what this left.", title=TITLE) from None
    problems = _unregister(rest, owner, found)
    end = datetime.now(timezone.utc)
    costs = [vm_cost(v, end) for v in vms]
    doc = report(owner, costs)
    default = Path(rt.environ.get("RUNNER_TEMP") or os.getcwd()) / f"{TITLE}-{owner.job_key}.json"
    path = write_report(inputs["report-file"] or default, json.dumps(doc, indent=1) + "\n")
    interrupted = any(c.instance.spot_interrupted for c in costs)
    rt.set_output("instance-ids", json.dumps([c.instance.instance_id for c in costs]))
    rt.set_output("vm-minutes", doc["minutes"])
    rt.set_output("vm-cost", doc["cost_usd"])
    rt.set_output("spot-interrupted", "true" if interrupted else "false")
    rt.set_output("report-file", str(path))
    rt.summary(_summary(costs, problems))
    for problem in problems:
        rt.warning(problem, title=TITLE)
    if interrupted:
        rt.warning(
            "AWS reclaimed the spot VM (Server.SpotInstanceTermination): an "
            "infrastructure loss; a re-run starts on-demand.",
            title=TITLE,
        )
    return 0
