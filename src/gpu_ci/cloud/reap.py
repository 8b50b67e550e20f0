"""What the reaper calls a leak: a VM past its expiry or its run, a runner with no VM.

Pure decisions over what the cloud and GitHub listed; the reap command makes the calls.
Leaked minutes are those past the moment the VM should have ended (its expiry, or the end of
its run), priced at the VM's own price tag.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from gpu_ci.cloud import naming
from gpu_ci.cloud.provider import Instance


@dataclass(frozen=True)
class Leak:
    instance: Instance
    why: str
    since: datetime
    """When the VM should have ended."""
    now: datetime

    @property
    def minutes(self) -> int:
        return max(0, math.ceil((self.now - self.since).total_seconds() / 60))

    @property
    def usd(self) -> Decimal:
        price = _price(self.instance)
        return price * self.minutes / 60 if price is not None else Decimal(0)


def _price(instance: Instance) -> Decimal | None:
    try:
        return Decimal(naming.tag(instance.tags, naming.PRICE))
    except ArithmeticError:
        return None


def expired(instance: Instance, now: datetime) -> Leak | None:
    """Pass 1: a live VM past its ``expires-at`` tag (or with an unreadable one)."""
    if not instance.live:
        return None
    expires = naming.parse_time(naming.tag(instance.tags, naming.EXPIRES_AT))
    if expires is None:
        return Leak(
            instance, "its expires-at tag is missing or unreadable", instance.launched_at, now
        )
    if expires <= now:
        since = max(expires, instance.launched_at)
        return Leak(instance, f"expired at {naming.iso(expires)}", since, now)
    return None


@dataclass(frozen=True)
class RunState:
    """What GitHub says of a VM's workflow run."""

    found: bool
    completed_at: datetime | None = None
    """When the run completed; None while it runs."""
    attempt: int = 1
    attempt_started: datetime | None = None


def orphaned(instance: Instance, run: RunState, now: datetime) -> Leak | None:
    """Pass 2: a live VM whose run has completed, is gone, or has moved on to a later
    attempt (a re-run starts its own VM)."""
    if not instance.live:
        return None
    if not run.found:
        return Leak(instance, "its workflow run no longer exists", now, now)
    if run.completed_at is not None:
        since = max(run.completed_at, instance.launched_at)
        return Leak(instance, "its workflow run has completed", since, now)
    attempt = naming.tag(instance.tags, naming.RUN_ATTEMPT)
    if attempt.isdigit() and int(attempt) < run.attempt:
        since = max(run.attempt_started or now, instance.launched_at)
        return Leak(instance, f"its run is at attempt {run.attempt} now", since, now)
    return None


def stale_registration(
    name: str,
    status: str,
    busy: bool,
    runner_id: int,
    live_runner_ids: Collection[str],
    now: datetime,
    grace: timedelta,
) -> str:
    """Why a runner registration is to be deleted; empty to keep it. Only our
    names, offline and idle, older than ``grace`` (a start may be between registering and
    launching), with no live VM of ours carrying its id."""
    parsed = naming.RunnerName.parse(name)
    if parsed is None or status != "offline" or busy:
        return ""
    if str(runner_id) in live_runner_ids:
        return ""
    age = now - parsed.created
    if age < grace:
        return ""
    return f"offline, {int(age.total_seconds() // 60)} min old, and no VM of ours carries its id"
