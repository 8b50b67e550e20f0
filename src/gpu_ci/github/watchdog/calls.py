"""The watchdog's REST calls, each counted against ``max-calls`` and the rate limit."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from gpu_ci.errors import GpuCiError
from gpu_ci.github.client import ApiError, Rest, unanswered
from gpu_ci.github.watchdog.result import BudgetExhausted, Sweep


class Caller:
    """Each REST call, counted against the budget and the reserve.

    Counts calls against the budget and the rate-limit reserve before making each one."""

    def __init__(self, rest: Rest, sweep: Sweep) -> None:
        self.rest, self.sweep = rest, sweep

    def __call__(self, fn: Callable[[], Any]) -> Any:
        sweep, config = self.sweep, self.sweep.config
        if sweep.calls >= config.max_calls:
            raise BudgetExhausted(f"the budget of {config.max_calls} REST calls is spent")
        remaining = getattr(self.rest, "rate_remaining", None)
        if remaining is not None and remaining < config.rate_reserve:
            raise BudgetExhausted(
                f"X-RateLimit-Remaining is {remaining}, below rate-reserve {config.rate_reserve}"
            )
        sweep.calls += 1
        return fn()


#: What a failed call can raise: the client's :class:`ApiError`, or its own
#: :class:`GpuCiError` for an answer that is not the JSON asked for.
FAILED = (ApiError, GpuCiError)


def http_status(exc: Exception) -> int | None:
    return exc.status if isinstance(exc, ApiError) else None


def describe(exc: Exception, what: str) -> str:
    if not isinstance(exc, ApiError):
        return f"{what}: {exc}"
    if exc.status is None:
        return unanswered(what, exc.kind, exc.reason)
    hint = ""
    if exc.status in (401, 403):
        hint = (
            " — the job needs 'permissions: actions: write' to cancel (actions: read to "
            "list) and 'statuses: write' for the status"
        )
    return f"{what}: HTTP {exc.status}{': ' + exc.message if exc.message else ''}{hint}"


def listed_runs(
    rest: Rest, call: Caller, result: Sweep, source: str, state: str, created: str
) -> list[Any]:
    """Every run of ``source`` in ``state``, created as ``created`` says.

    A listing that fails is an error and an incomplete sweep; one cut short at GitHub's
    cap of a filtered listing is an incomplete sweep (never silently fewer runs)."""
    url = f"{source}?status={state}&created={created}"
    got = _listing(rest, call, result, url, "workflow_runs", f"listing {state} runs ({source})")
    if got is None:
        result.incomplete.append(f"{state} runs of {source} not listed")
        return []
    listed, total = got
    if total > len(listed):
        result.incomplete.append(
            f"{source} has {total} {state} runs; GitHub lists at most {len(listed)} of one "
            "filtered listing (the newest): older ones were not examined"
        )
    return listed


def run_jobs(rest: Rest, call: Caller, result: Sweep, run_id: int, what: str) -> list[Any] | None:
    """Every job of the run's latest attempt, or None.

    None (and an error in the sweep) when the listing fails."""
    url = f"/repos/{result.repository}/actions/runs/{run_id}/jobs?filter=latest"
    got = _listing(rest, call, result, url, "jobs", what)
    return None if got is None else got[0]


def _listing(
    rest: Rest, call: Caller, result: Sweep, url: str, key: str, what: str
) -> tuple[list[Any], int] | None:
    """:func:`pages`, or None when the listing fails.

    The failure is then an error in the sweep."""
    try:
        return pages(rest, call, url, key)
    except BudgetExhausted:
        raise
    except FAILED as exc:
        result.errors.append(describe(exc, what))
        return None


def pages(rest: Rest, call: Caller, url: str, key: str) -> tuple[list[Any], int]:
    """Every page of a listing, and its ``total_count``.

    Every page of a listing (100 a page, by number), each page one call of the budget;
    and the listing's ``total_count`` (above the items when GitHub stops short of it, as a
    filtered run listing does at 1,000)."""
    items: list[Any] = []
    page = 1
    while True:
        answer = call(partial(rest.get, f"{url}&per_page=100&page={page}"))
        chunk = answer.get(key)
        if not isinstance(chunk, list):
            raise GpuCiError(f"GitHub API answered GET {url} with unexpected JSON.")
        items.extend(chunk)
        total = int(answer.get("total_count") or 0)
        if len(chunk) < 100 or len(items) >= total:
            return items, max(total, len(items))
        page += 1
