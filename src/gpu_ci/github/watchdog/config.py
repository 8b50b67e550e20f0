"""gpu-watchdog's inputs, checked, and the schedule they imply."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from gpu_ci.errors import UsageError
from gpu_ci.github.commit_status import DEFAULT_CREATORS, validate_context
from gpu_ci.github.watchdog.machine import MachineRecord


@dataclass(frozen=True)
class WatchdogConfig:
    workflows: tuple[str, ...]
    """Workflow file names (``cuda-ci.yml``) or ids; empty: every workflow of the repository."""
    labels: frozenset[str]
    """GPU runner labels, case-folded: a job with any of them is a GPU job."""
    max_queue_minutes: float
    cancel: bool
    context: str
    """Commit status context to set on cancelled runs; empty: none."""
    max_calls: int
    rate_reserve: int
    max_retries: int = 0
    """``retry-infra-failures``: re-runs of a run's failed jobs lost to infrastructure (0: off,
    and no failed run is examined)."""
    force_cancel_minutes: float | None = None
    """``force-cancel-minutes``: a run still not cancelled this long past max-queue-minutes is
    force-cancelled; None: never."""
    retry_window_hours: float = 24.0
    monitor_prefix: str = "gpu-monitor-"
    """Name prefix of gpu-monitor's report artifacts (empty: none read)."""
    creators: tuple[str, ...] = DEFAULT_CREATORS
    """``trusted-creators``: whose approvals in ``context`` a re-run's head check believes
    (gpu-status's own writer; with an App token, its bot)."""
    machines: tuple[MachineRecord, ...] = ()
    """``machine-records``: records of the runners' machines kept outside the jobs."""


@dataclass(frozen=True)
class WatchdogInputs:
    """gpu-watchdog's inputs as written, one field per input of the action."""

    workflows: Sequence[str]
    labels: Sequence[str]
    max_queue_minutes: str
    cancel: bool
    context: str
    max_calls: str
    rate_reserve: str
    retry_infra_failures: str = "0"
    force_cancel_minutes: str = ""
    retry_window_hours: str = "24"
    monitor_prefix: str = "gpu-monitor-"
    creators: Sequence[str] = ()


def make_config(given: WatchdogInputs) -> WatchdogConfig:
    """The checked config.

    A bad input is a :class:`UsageError` that says what to write."""
    limit = _queue_limit(given.max_queue_minutes)
    if not given.labels:
        raise UsageError(
            "input 'gpu-labels' is empty: name the GPU runner labels (e.g. 'gpu'); "
            "jobs with any of them are watched."
        )
    numbers = {}
    for name, raw, least in (
        ("max-calls", given.max_calls, 4),
        ("rate-reserve", given.rate_reserve, 0),
    ):
        if not raw.strip().isdigit() or int(raw) < least:
            raise UsageError(
                f"input '{name}' must be a whole number of at least {least}; got {raw!r}."
            )
        numbers[name] = int(raw)
    for flow in given.workflows:
        if "/" in flow or not re.fullmatch(r"[A-Za-z0-9._-]+", flow):
            raise UsageError(
                f"input 'workflows': {flow!r} is not a workflow file name (e.g. "
                "'cuda-ci.yml', without .github/workflows/) nor an id."
            )
    force = given.force_cancel_minutes
    return WatchdogConfig(
        tuple(given.workflows),
        frozenset(label.casefold() for label in given.labels),
        limit,
        given.cancel,
        validate_context(given.context) if given.context else "",
        numbers["max-calls"],
        numbers["rate-reserve"],
        _whole(given.retry_infra_failures, "retry-infra-failures", 0, 10),
        _minutes(force, "force-cancel-minutes", 35 * 24 * 60, "minutes") if force else None,
        _minutes(given.retry_window_hours, "retry-window-hours", RETRY_WINDOW_MAX_HOURS, "hours"),
        given.monitor_prefix.strip(),
        tuple(given.creators) or DEFAULT_CREATORS,
    )


def _queue_limit(raw: str) -> float:
    """``max-queue-minutes``: a number of minutes above 0."""
    try:
        limit = float(raw)
    except ValueError:
        raise UsageError(
            f"input 'max-queue-minutes' must be a number of minutes; got {raw!r}."
        ) from None
    if not limit > 0:
        raise UsageError(f"input 'max-queue-minutes' must be above 0; got {raw!r}.")
    return limit


def _whole(raw: str, name: str, least: int, most: int) -> int:
    if not raw.strip().isdigit() or not least <= int(raw) <= most:
        raise UsageError(
            f"input '{name}' must be a whole number from {least} to {most}; got {raw!r}."
        )
    return int(raw)


#: GitHub re-runs a workflow run only within 30 days of its creation: an older failed run
#: cannot be retried, so a longer window only costs listing calls.
RETRY_WINDOW_MAX_HOURS = 30 * 24


def _minutes(raw: str, name: str, most: float, unit: str) -> float:
    """A number input of minutes or hours, checked.

    A finite number above 0 and at most ``most`` (workflow runs last at most 35 days;
    ``inf`` or ``1e8`` would overflow the date arithmetic into an internal error)."""
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= most:  # also false for nan and inf
        raise UsageError(
            f"input '{name}' must be a number of {unit} above 0 and at most {most:g}; got {raw!r}."
        )
    return value


def _field_values(text: str, low: int, high: int) -> list[int] | None:
    """The values of one cron field, or None.

    Values of one cron field (``*``, ``*/n``, ``a-b``, ``a-b/n``, lists); None if unknown."""
    values: set[int] = set()
    for part in text.split(","):
        match = re.fullmatch(r"(\*|\d+(?:-\d+)?)(?:/(\d+))?", part.strip())
        if not match:
            return None
        span, step = match.group(1), int(match.group(2) or 1)
        if span == "*":
            start, stop = low, high
        elif "-" in span:
            start, stop = (int(x) for x in span.split("-"))
        else:
            start = stop = int(span)
            if match.group(2):
                stop = high
        if step < 1 or start < low or stop > high or start > stop:
            return None
        values.update(range(start, stop + 1, step))
    return sorted(values)


def cron_interval_minutes(cron: str) -> int | None:
    """The longest gap between two firings of a cron schedule, in minutes.

    Looks at the minute and hour fields (GitHub's schedules are UTC, five fields); a schedule
    restricted by day, month or weekday gives None (its gap is days, say so elsewhere).
    """
    fields = cron.split()
    if len(fields) != 5 or any(f != "*" for f in fields[2:]):
        return None
    mins = _field_values(fields[0], 0, 59)
    hours = _field_values(fields[1], 0, 23)
    if not mins or not hours:
        return None
    times = [h * 60 + m for h in hours for m in mins]
    gaps = [b - a for a, b in zip(times, times[1:])] + [times[0] + 24 * 60 - times[-1]]
    return max(gaps)


def schedule_warning(max_queue_minutes: float, interval: int | None) -> str:
    if interval is None or max_queue_minutes >= interval:
        return ""
    return (
        f"max-queue-minutes ({max_queue_minutes:g}) is below the schedule's interval "
        f"({interval} min): a job is cancelled only at the next sweep, so it can wait up "
        f"to {max_queue_minutes + interval:g} minutes. Run the watchdog more often or "
        "raise max-queue-minutes to the interval."
    )
