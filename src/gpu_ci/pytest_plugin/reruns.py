"""Reruns of tests that failed with a GPU out-of-memory error, only those.

A rerun shows as pytest-rerunfailures' do (``rerun``, ``R``), and in JUnit XML as the
testcase's properties. Where pytest-rerunfailures reruns a test itself (``--reruns``, the
``flaky`` mark), it decides alone: no test is rerun twice over.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Generator
from typing import Any

import pytest

# the runner's one call that runs setup, call and teardown without logging them
from _pytest.runner import runtestprotocol

from gpu_ci.pytest_plugin import oom


class OomReruns:
    """Tells out-of-memory failures apart and reruns them."""

    def __init__(self, reruns: int, who_holds: Callable[[], str]) -> None:
        self.reruns = reruns
        self.who_holds = who_holds
        self.reasons: dict[str, str] = {}
        #: tests whose attempt failed otherwise too (an assertion beside a teardown's OOM)
        self.not_oom: set[str] = set()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> bool | None:
        """Run the test, and again after an out-of-memory failure.

        Up to ``--gpu-oom-reruns`` times.

        Where pytest-rerunfailures reruns this test (``--reruns``, ``flaky``), it decides
        alone: no test is rerun twice over."""
        if self.reruns <= 0 or _rerunfailures_owns(item):
            return None
        hook = item.ihook
        hook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        attempt = 0
        while True:
            reports = runtestprotocol(item, nextitem=nextitem, log=False)
            why = self.reasons.pop(item.nodeid, None)
            if item.nodeid in self.not_oom:
                self.not_oom.discard(item.nodeid)
                why = None
            failed = [r for r in reports if r.failed]
            if why and failed and attempt < self.reruns:
                attempt += 1
                failed[0].outcome = "rerun"  # type: ignore[assignment]
                hook.pytest_runtest_logreport(report=failed[0])
                _forget_failed_state(item)
                freed = oom.release_caches()
                item.user_properties.append(
                    (
                        f"gpu_oom_rerun_{attempt}",
                        why + (f"; released {', '.join(freed)}" if freed else ""),
                    )
                )
                continue
            item._gpu_ci_oom_reruns = attempt  # type: ignore[attr-defined]
            if attempt:  # JUnit XML: the testcase's properties (the rerun reasons are there)
                reports[-1].user_properties.append(("gpu_oom_reruns", str(attempt)))
            for r in reports:
                hook.pytest_runtest_logreport(report=r)
            break
        hook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Any, None]:
        outcome = yield
        rep = outcome.get_result()
        # the last attempt's outcome: its setup's, then its call's, or a failed teardown
        if call.when == "setup" or (call.when == "call" and rep.outcome != "passed"):
            item._gpu_ci_outcome = rep.outcome  # type: ignore[attr-defined]
        elif rep.failed:
            item._gpu_ci_outcome = "failed"  # type: ignore[attr-defined]
        if call.excinfo is None or not rep.failed:
            return
        why = oom.reason(call.excinfo.value)
        if why is None:
            if self.reruns > 0:  # a real failure in this attempt: no rerun hides it
                self.not_oom.add(item.nodeid)
            return
        if self.reruns > 0:  # the protocol pops it
            self.reasons[item.nodeid] = why
        item._gpu_ci_oom = why  # type: ignore[attr-defined]
        rep.sections.append(("GPU memory at the out-of-memory failure", self.who_holds()))
        if _rerunfailures_owns(item):  # its rerun then starts with the caches released
            oom.release_caches()

    def pytest_report_teststatus(self, report: pytest.TestReport) -> Any:
        if str(report.outcome) == "rerun":  # as pytest-rerunfailures spells it
            return "rerun", "R", ("RERUN", {"yellow": True})
        return None


def _rerunfailures_owns(item: pytest.Item) -> bool:
    """Whether pytest-rerunfailures will rerun this test's failures (its own count)."""
    if not item.config.pluginmanager.hasplugin("rerunfailures"):
        return False
    count = getattr(sys.modules.get("pytest_rerunfailures"), "get_reruns_count", None)
    try:
        return bool(count(item)) if count is not None else False
    except Exception:  # another version's internals: ours rerun
        return False


def _forget_failed_state(item: pytest.Item) -> None:
    """Drop what a failed attempt left on the item.

    Fixtures cached with their error, the item's setup state, its class instance: the
    next attempt starts clean."""
    info = getattr(item, "_fixtureinfo", None)
    for defs in getattr(info, "name2fixturedefs", {}).values():
        for fixturedef in defs:
            cached = getattr(fixturedef, "cached_result", None)
            if cached is not None and len(cached) > 2 and cached[2] is not None:
                fixturedef.cached_result = None
                finalizers = getattr(fixturedef, "_finalizers", None)
                if isinstance(finalizers, list):
                    finalizers.clear()
    stack = getattr(getattr(item.session, "_setupstate", None), "stack", None)
    if isinstance(stack, dict) and item in stack:
        del stack[item]
    if getattr(item, "_instance", None) is not None:
        del item._instance  # type: ignore[attr-defined]
        item._obj = None  # type: ignore[attr-defined]
