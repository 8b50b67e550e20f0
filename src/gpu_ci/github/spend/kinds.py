"""The budget's GPU jobs: ``gpu-runs-on`` and each runner kind at its price.

gpu-gate, gpu-spend and gpu-watchdog build their matcher here, so a job is priced by the
kind whose labels or group it ran on, the same way in the gate's verdict, the monthly
report and a re-run's reservation.
"""

from __future__ import annotations

from datetime import date

from gpu_ci.errors import UsageError
from gpu_ci.github.jobs import GpuMatcher, PricedKind
from gpu_ci.github.kinds import RunnerKind, parse_kinds, runs_on_json
from gpu_ci.github.spend.budget import parse_gpu_price
from gpu_ci.pricing import Price, PriceTable


def priced_matcher(
    gpu_runs_on: str, kinds: tuple[RunnerKind, ...], table: PriceTable, today: date
) -> GpuMatcher:
    """The GPU jobs of ``gpu-runs-on`` and of each kind, at its price.

    A kind without a price is priced by ``gpu-price`` (a budget in money needs one)."""
    text = gpu_runs_on.strip()
    base = GpuMatcher.from_runs_on(runs_on_json("gpu-runs-on", text)) if text else GpuMatcher()
    priced = []
    for kind in kinds:
        price = None
        if kind.price:
            try:
                price = parse_gpu_price(kind.price, table, today)
            except UsageError as exc:
                raise UsageError(
                    f"input 'gpu-runner-kinds', kind {kind.name!r}: "
                    + exc.message.removeprefix("input 'gpu-price': ")
                ) from None
        matcher = (
            GpuMatcher.from_runs_on(kind.runs_on)
            if kind.runs_on
            else GpuMatcher(label_prefix=kind.label_prefix)
        )
        priced.append(PricedKind(kind.name, matcher, price))
    return GpuMatcher(base.labels, base.group, tuple(priced))


def matcher_from_inputs(
    gpu_runs_on: str, runner_kinds: str, table: PriceTable, today: date, action: str
) -> GpuMatcher:
    """``gpu-runs-on`` and ``gpu-runner-kinds`` as an action's inputs give them.

    At least one is needed: the budget counts the jobs that ran on your GPU runners."""
    kinds = parse_kinds(runner_kinds)
    if not gpu_runs_on.strip() and not kinds:
        raise UsageError(
            f"{action} needs 'gpu-runs-on' or 'gpu-runner-kinds': the budget counts the jobs "
            "that ran on your GPU runners, so name their labels or group (as gpu-gate's)."
        )
    return priced_matcher(gpu_runs_on, kinds, table, today)


def default_price(gpu_price: str, gpu_runs_on: str, kinds: tuple[RunnerKind, ...]) -> str:
    """``gpu-price``, or a kind's price when only priced kinds exist.

    That price then prices no job (each kind has its own); it only satisfies the rule that a
    budget in money needs a price."""
    if gpu_price.strip() or gpu_runs_on.strip():
        return gpu_price
    return kinds[0].price if kinds and all(k.price for k in kinds) else ""


def every_job_priced(matcher: GpuMatcher, price: Price | None) -> bool:
    """Whether each GPU job has a price: ``gpu-price``, or every kind's own with no runs-on."""
    if price is not None:
        return True
    own = bool(matcher.labels or matcher.group)
    return bool(matcher.kinds) and not own and all(k.price for k in matcher.kinds)
