"""The launch walk: market x type x zone, one request each, first success wins.

Capacity errors move on to the next candidate; quota errors are recorded as quota and move
on too (spot and on-demand quotas differ); throttling waits and asks the same candidate
again with the same idempotency token, so a request the cloud did act on is not doubled; a
configuration error stops the walk at once, since every later candidate shares it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from gpu_ci.cloud.provider import (
    Candidate,
    Failure,
    Instance,
    LaunchFailure,
    LaunchSpec,
    Market,
    Provider,
)

MARKETS = ("spot-then-on-demand", "spot", "on-demand")


def markets_for(choice: str, run_attempt: int) -> tuple[Market, ...]:
    """The markets to walk, in order: a re-run (attempt 2 or later) of
    ``spot-then-on-demand`` goes straight to on-demand, so a spot loss is not repeated."""
    if choice == "spot":
        return (Market.SPOT,)
    if choice == "on-demand" or run_attempt > 1:
        return (Market.ON_DEMAND,)
    return (Market.SPOT, Market.ON_DEMAND)


def candidates(
    markets: Sequence[Market], prices: Mapping[str, Decimal], zones: Mapping[str, str]
) -> list[Candidate]:
    """Every market, then every type, then every subnet (zone). Types keep the user's
    order (``prices``' keys)."""
    return [
        Candidate(market, instance_type, subnet, zone, price)
        for market in markets
        for instance_type, price in prices.items()
        for subnet, zone in zones.items()
    ]


@dataclass(frozen=True)
class Attempt:
    """One candidate tried: ``launched`` or a :class:`Failure`'s value, with the cloud's code."""

    candidate: Candidate
    outcome: str
    code: str = ""
    message: str = ""
    tries: int = 1

    def to_json(self) -> dict[str, object]:
        return {
            "market": self.candidate.market.value,
            "instance_type": self.candidate.instance_type,
            "zone": self.candidate.zone,
            "subnet": self.candidate.subnet,
            "outcome": self.outcome,
            "code": self.code,
            "tries": self.tries,
        }


@dataclass(frozen=True)
class Backoff:
    """How throttling is waited out: ``retries`` more tries, waits doubling from ``first``."""

    retries: int = 4
    first: float = 1.0
    longest: float = 20.0

    def wait(self, n: int) -> float:
        return float(min(self.longest, self.first * 2 ** (n - 1)))


@dataclass(frozen=True)
class Walk:
    instance: Instance | None
    attempts: tuple[Attempt, ...]
    error: str = ""
    """Why nothing launched (empty when ``instance`` is set)."""


def _try(
    provider: Provider,
    spec: LaunchSpec,
    candidate: Candidate,
    token: str,
    backoff: Backoff,
    sleep: Callable[[float], None],
) -> tuple[Instance | LaunchFailure, int]:
    tries = 0
    while True:
        tries += 1
        result = provider.launch(spec, candidate, token)
        throttled = isinstance(result, LaunchFailure) and result.kind is Failure.THROTTLED
        if not throttled or tries > backoff.retries:
            return result, tries
        sleep(backoff.wait(tries))


def walk(
    provider: Provider,
    spec: LaunchSpec,
    plan: Sequence[Candidate],
    backoff: Backoff = Backoff(),
    sleep: Callable[[float], None] = time.sleep,
    deadline: float | None = None,
) -> Walk:
    """Launch the first candidate the cloud has room for. No new candidate is tried past
    ``deadline`` (``time.monotonic()``)."""
    attempts: list[Attempt] = []
    for index, candidate in enumerate(plan):
        if deadline is not None and time.monotonic() > deadline and attempts:
            return Walk(None, tuple(attempts), _late(attempts, len(plan)))
        token = f"{index}-{spec.client_token}"[:64]  # EC2's limit cuts the tail, not the index
        result, tries = _try(provider, spec, candidate, token, backoff, sleep)
        if isinstance(result, Instance):
            attempts.append(Attempt(candidate, "launched", tries=tries))
            return Walk(result, tuple(attempts))
        attempts.append(Attempt(candidate, result.kind.value, result.code, result.message, tries))
        if result.kind is Failure.CONFIGURATION:
            return Walk(None, tuple(attempts), _configuration(candidate, result))
        if result.kind is Failure.THROTTLED:
            return Walk(None, tuple(attempts), _throttled(result, tries))
    return Walk(None, tuple(attempts), _exhausted(attempts))


def _late(attempts: Sequence[Attempt], planned: int) -> str:
    return (
        f"launch-timeout passed after {len(attempts)} of {planned} candidates: nothing was "
        "launched. " + _exhausted(attempts)
    )


def _configuration(candidate: Candidate, failure: LaunchFailure) -> str:
    return (
        f"the cloud refused the launch request itself ({failure.code}: {failure.message}) "
        f"for {candidate.instance_type} in {candidate.zone}; every other candidate shares "
        "it, so none was tried. Check the image, subnets, security group and the role's "
        "permissions."
    )


def _throttled(failure: LaunchFailure, tries: int) -> str:
    return (
        f"the cloud kept throttling the launch ({failure.code}) through {tries} tries: "
        "nothing was launched. Too many launches at once in this account; try again later."
    )


def _exhausted(attempts: Sequence[Attempt]) -> str:
    quota = [a for a in attempts if a.outcome == Failure.QUOTA.value]
    capacity = [a for a in attempts if a.outcome == Failure.CAPACITY.value]
    parts = []
    if capacity:
        parts.append(f"{len(capacity)} had no capacity")
    if quota:
        codes = sorted({a.code for a in quota})
        markets = sorted({a.candidate.market.value for a in quota})
        parts.append(
            f"{len(quota)} hit the account's quota ({', '.join(codes)}; "
            f"{' and '.join(markets)}): ask AWS for a larger G/P instance vCPU quota"
        )
    return (
        f"no candidate launched: of {len(attempts)} (market x type x zone), "
        + "; ".join(parts)
        + ". Add instance types or subnets in other zones, or try again later."
    )
