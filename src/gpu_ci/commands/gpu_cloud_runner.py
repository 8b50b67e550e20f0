"""``gpu-cloud-runner``: a just-in-time runner for one job, on a cloud GPU VM launched for it.

Order matters for leaks and money: inputs and the budget are checked before any call; the
runner is registered before the launch (its id and JIT configuration go into the VM's tags
and user data); when nothing launches, or anything fails after registering, the
registration is deleted before the job fails. A start killed after the launch leaves a VM
that carries its run's tags, which the stop job and the reaper find.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal

from gpu_ci.cloud import budget, launch, naming, userdata
from gpu_ci.cloud.aws import AwsProvider
from gpu_ci.cloud.provider import CloudError, Instance, LaunchSpec, Market
from gpu_ci.errors import GpuCiError, UsageError
from gpu_ci.github.client import RestClient, call_api, connect
from gpu_ci.github.runners import registration as runners
from gpu_ci.inputs import Inputs
from gpu_ci.markdown import markdown_table
from gpu_ci.pricing import instance_price, load_instance_prices
from gpu_ci.runtime import Runtime, repository

TITLE = "gpu-cloud-runner"
#: The longest launch walk: within the reaper's shortest grace (15 min), calls included.
MAX_LAUNCH_SECONDS = 600
ONLINE_POLL_SECONDS = 5.0


@dataclass(frozen=True)
class Plan:
    """Everything the launch needs, checked before any call."""

    owner: naming.Owner
    region: str
    prices: dict[str, Decimal]
    subnets: list[str]
    security_group: str
    image: str
    markets: tuple[Market, ...]
    boot: userdata.Boot
    launch_timeout: int
    online_timeout: int = 0
    """Seconds to wait for the runner to come online; 0: only check it still exists."""


def _number(inputs: Inputs, name: str, low: int, high: int) -> int:
    text = inputs[name].strip()
    if not text.isdigit() or not low <= int(text) <= high:
        raise UsageError(f"input '{name}' is {text!r}: write a whole number from {low} to {high}.")
    return int(text)


def job_owner(inputs: Inputs, rt: Runtime) -> naming.Owner:
    key = inputs["job-key"].strip()
    if not naming.JOB_KEY_PATTERN.fullmatch(key):
        raise UsageError(f"input 'job-key' is {key!r}: lower case letters, digits and -, 1-16.")
    run_id, attempt = rt.environ.get("GITHUB_RUN_ID", ""), rt.environ.get("GITHUB_RUN_ATTEMPT", "1")
    if not run_id.isdigit() or not attempt.isdigit():
        raise UsageError("GITHUB_RUN_ID and GITHUB_RUN_ATTEMPT must be set (the runner sets them).")
    return naming.Owner(repository("", rt.environ, input_name=None), int(run_id), int(attempt), key)


def _prices(inputs: Inputs, region: str, now: datetime) -> dict[str, Decimal]:
    types = inputs.items("instance-types")
    given = budget.parse_instance_prices(inputs["instance-prices"])
    if isinstance(given, str):
        raise UsageError(given)
    rows = load_instance_prices()
    found = budget.candidate_prices(
        types, given, lambda t: instance_price(rows, "aws", region, t, now.date()), region
    )
    if isinstance(found, str):
        raise UsageError(found)
    return found


def plan(inputs: Inputs, rt: Runtime, now: datetime) -> Plan:
    """The inputs as a plan. The budget refusal comes before any call."""
    region = inputs["region"].strip()
    prices = _prices(inputs, region, now)
    max_minutes = _number(inputs, "max-minutes", 5, 24 * 60)
    left = budget.parse_budget_left(inputs["budget-left"]) if inputs["budget-left"] else None
    if isinstance(left, str):
        raise UsageError(left)
    held = budget.reserve(left, max_minutes, prices)
    if held.refusal:
        raise GpuCiError(held.refusal, title=f"{TITLE}: over budget")
    owner = job_owner(inputs, rt)
    boot = userdata.Boot(
        max_minutes,
        _number(inputs, "idle-minutes", 1, max_minutes),
        inputs["runner-version"].strip(),
        inputs["runner-sha256"].strip().lower(),
        "placeholder",
    )
    if problem := userdata.check(boot):
        raise UsageError(problem)
    subnets, group = inputs.items("subnets"), inputs["security-group"].strip()
    if not subnets or not group:
        raise UsageError("inputs 'subnets' and 'security-group' are required.")
    markets = launch.markets_for(inputs.choice("market", launch.MARKETS), owner.attempt)
    timeout = _number(inputs, "launch-timeout", 10, MAX_LAUNCH_SECONDS)
    online = _number(inputs, "online-timeout", 0, 1800)
    return Plan(
        owner, region, prices, subnets, group, inputs["image"], markets, boot, timeout, online
    )


def _spec(plan: Plan, name: naming.RunnerName, reg: runners.Registration, image: str) -> LaunchSpec:
    expires = name.created + timedelta(minutes=plan.boot.max_minutes)
    boot = replace(plan.boot, jit_config=reg.jit_config)
    tags = {
        **plan.owner.tags(),
        "Name": str(name),
        naming.RUNNER_ID: str(reg.runner.id),
        naming.EXPIRES_AT: naming.iso(expires),
    }
    return LaunchSpec(image, plan.security_group, userdata.render(boot), tags, str(name))


@dataclass(frozen=True)
class Started:
    instance: Instance
    walk: launch.Walk
    spec: LaunchSpec


def start(plan: Plan, rest: RestClient, rt: Runtime, now: datetime) -> Started:
    """Register, launch; on any failure after registering, the registration is deleted."""
    name = naming.RunnerName.new(plan.owner.run_id, plan.owner.attempt, plan.owner.job_key, now)
    repo = plan.owner.repository
    reg = call_api(
        "the runner registration (generate-jitconfig; the token needs Administration: write)",
        lambda: runners.register_jit(rest, repo, str(name), [str(name)]),
    )
    rt.mask(reg.jit_config)
    try:
        _alone(rest, plan.owner, reg.runner.id)
        provider = AwsProvider(plan.region)
        spec = _spec(plan, name, reg, provider.resolve_image(plan.image.strip()))
        zones = provider.zones(plan.subnets)
        if missing := [s for s in plan.subnets if s not in zones]:
            raise CloudError(f"subnets {', '.join(missing)} do not exist in {plan.region}.")
        deadline = time.monotonic() + plan.launch_timeout
        candidates = launch.candidates(plan.markets, plan.prices, zones)
        walk = launch.walk(provider, spec, candidates, deadline=deadline)
        if walk.instance is None:
            raise CloudError(walk.error, walk)
        _online(provider, rest, repo, reg, walk.instance, plan.online_timeout)
        return Started(walk.instance, walk, spec)
    except BaseException as exc:
        gone = _unregister(rest, repo, reg.runner.id)
        if isinstance(exc, CloudError):
            tried = exc.args[1] if len(exc.args) > 1 else None
            if isinstance(tried, launch.Walk):
                rt.summary(attempts_table(tried))
            raise GpuCiError(f"{exc.args[0]} {gone}", title=TITLE) from None
        raise


def _alone(rest: RestClient, owner: naming.Owner, runner_id: int) -> None:
    """Fails when another start of this run attempt has this job key.

    Their VMs would carry the same tags, and either stop would end both."""
    listed = call_api(
        "the repository's runners (the token needs Administration: read)",
        lambda: runners.list_runners(rest, owner.repository),
    )
    twins = [r for r in listed if r.id != runner_id and owner.owns(naming.RunnerName.parse(r.name))]
    if twins:
        raise CloudError(
            f"another start of this run attempt uses job-key {owner.job_key!r} (runner "
            f"{twins[0].id}, {twins[0].name}): nothing was launched. Give each start, each "
            "matrix leg, its own job-key (e.g. gpu-${{ strategy.job-index }})."
        )


def _online(
    provider: AwsProvider,
    rest: RestClient,
    repo: str,
    reg: runners.Registration,
    vm: Instance,
    timeout: int,
) -> None:
    """Waits for the runner to come online, else ends the VM.

    A registration the reaper took while launching, or a VM that never boots (so no timer
    of its user data runs), would leave the GPU job queued for a runner that cannot come."""
    end = time.monotonic() + timeout
    while True:
        found = call_api(
            f"runner {reg.runner.id}", lambda: runners.get_runner(rest, repo, reg.runner.id)
        )
        if found is None:
            provider.terminate([vm.instance_id])
            raise CloudError(
                f"the runner registration {reg.runner.id} was deleted while the VM launched "
                "(by gpu-cloud-runner/reap, whose grace-minutes must be longer than a start): "
                f"the VM {vm.instance_id} was terminated and nothing queues for it."
            )
        if timeout == 0 or found.status == "online" or found.busy:
            return
        if time.monotonic() >= end:
            provider.terminate([vm.instance_id])
            raise CloudError(
                f"the VM {vm.instance_id} launched but its runner did not come online within "
                f"online-timeout ({timeout} s): it never booted, or the runner could not start "
                "(image, network, runner download). The VM was terminated; nothing queues."
            )
        time.sleep(ONLINE_POLL_SECONDS)


def _unregister(rest: RestClient, repository: str, runner_id: int) -> str:
    try:
        runners.delete_runner(rest, repository, runner_id)
    except Exception as exc:  # the reaper deletes it later: say so, keep the first error
        return f"The runner registration {runner_id} could not be deleted ({exc}); the reaper will."
    return f"The runner registration {runner_id} was deleted."


def attempts_table(walk: launch.Walk) -> str:
    rows = [
        (
            a.candidate.market.value,
            a.candidate.instance_type,
            a.candidate.zone,
            a.outcome,
            a.code,
            a.tries,
        )
        for a in walk.attempts
    ]
    table = markdown_table(("market", "type", "zone", "outcome", "code", "tries"), rows)
    return "### gpu-cloud-runner: launch attempts\n\n" + table


def run(inputs: Inputs, rt: Runtime) -> int:
    now = datetime.now(timezone.utc)
    the_plan = plan(inputs, rt, now)
    rest = connect(inputs["github-token"], rt.environ, rt.mask, needs="Administration: write")
    done = start(the_plan, rest, rt, now)
    chosen, instance, tags = done.walk.attempts[-1].candidate, done.instance, done.spec.tags
    outputs = {
        "label": tags["Name"],
        "runner-id": tags[naming.RUNNER_ID],
        "instance-id": instance.instance_id,
        "instance-type": chosen.instance_type,
        "availability-zone": chosen.zone,
        "market": chosen.market.value,
        "hourly-price": str(chosen.usd_per_hour),
        "expires-at": tags[naming.EXPIRES_AT],
        "attempts": json.dumps([a.to_json() for a in done.walk.attempts]),
    }
    for key, value in outputs.items():
        rt.set_output(key, value)
    rt.summary(attempts_table(done.walk))
    rt.info(
        f"gpu-cloud-runner: {instance.instance_id} ({chosen.instance_type}, "
        f"{chosen.market.value}, {chosen.zone}) for runner {outputs['runner-id']}; it ends "
        f"by {outputs['expires-at']} at the latest."
    )
    return 0
