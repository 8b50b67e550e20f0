"""Jobs as GitHub's REST API lists them: their times, the clock, and what a GPU job is.

One ``parse_time`` for every timestamp of an API answer, one clock for every decision and
report (``GPU_CI_NOW`` reproduces one as of a past moment), and the rules that say which
jobs are GPU jobs, side by side, so that gate, budget, spend, status and watchdog read
them from one place.

Which jobs are GPU jobs: every action names the same jobs, the ones that run on your GPU
runners, through the input that fits what it looks at:

* :class:`GpuMatcher` (``gpu-runs-on`` of gpu-gate's budget and gpu-spend): the job's
  ``labels`` include *all* of the GPU ``runs-on`` labels, or it ran in the GPU runner group;
  the same value the gate's ``runs-on`` output gives the GPU job, so the budget counts
  exactly the jobs the gate sends there.
* :func:`has_gpu_label` (``gpu-labels`` of gpu-watchdog): the job asks for *any* of the GPU
  labels; a queued job has no runner group yet, and a GPU label alone (``gpu``) is what no
  CPU runner carries.
* :func:`named_gpu_jobs` (``gpu-jobs`` of gpu-status): the job's name (``tests``, or a
  matrix job ``tests (3.12)``): the status speaks for named jobs of one workflow run, whose
  labels a fork's workflow file could change.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from gpu_ci.errors import UsageError
from gpu_ci.pricing import DearestPrice, Price

#: Job statuses of a job that no runner has taken yet.
QUEUED = ("queued", "waiting", "pending", "requested")

#: Of those, the ones that wait for a runner: ``waiting`` waits for an environment's
#: reviewers and ``pending`` for its concurrency group, which no runner would end.
NO_RUNNER_YET = ("queued", "requested")


def parse_time(value: object) -> datetime | None:
    """A GitHub time as an aware UTC datetime, or None.

    An ISO 8601 time (``2026-11-02T10:00:00Z``, or with an offset such as ``+02:00``) as
    an aware UTC datetime; ``None`` for no time (``null``, empty) or one that is not ISO 8601.
    A time without a zone is read as UTC, as GitHub's times are."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if text[-1:] in ("Z", "z"):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.astimezone(timezone.utc)


def now(environ: Mapping[str, str]) -> datetime:
    """The time a decision or report is made: now (UTC), or ``GPU_CI_NOW`` (ISO 8601) to
    reproduce a decision or a report as of a past moment."""
    raw = environ.get("GPU_CI_NOW", "").strip()
    if not raw:
        return datetime.now(timezone.utc)
    parsed = parse_time(raw)
    if parsed is None:
        raise UsageError(
            f"GPU_CI_NOW={raw!r} is not an ISO 8601 time such as 2026-11-30T12:00:00Z."
        )
    return parsed


def queue_seconds(job: Mapping[str, Any], at: datetime) -> float | None:
    """How long a job waited for a runner: created → started, or → ``at`` while queued."""
    created = parse_time(job.get("created_at"))
    if created is None:
        return None
    if job.get("status") in QUEUED:
        return max(0.0, (at - created).total_seconds())
    started = parse_time(job.get("started_at"))
    if (
        started is None
        or job.get("runner_name") is None
        and job.get("conclusion") in ("cancelled", "skipped")
    ):
        return None  # never picked up: no queue time to report
    return max(0.0, (started - created).total_seconds())


# -- which jobs are GPU jobs ------------------------------------------------------------------


#: The labels GitHub gives every self-hosted runner (its kind, OS and architecture): a job
#: may leave them out of ``runs-on`` and still land on a runner that has them.
GENERIC_LABELS = frozenset({"self-hosted", "linux", "windows", "macos", "x64", "arm", "arm64"})
#: The runner group of GitHub-hosted runners, as a job names it (case-folded).
HOSTED_GROUP = "github actions"


@dataclass(frozen=True)
class GpuMatcher:
    """``gpu-runs-on``: a job is a GPU job when its ``labels`` include all of ``labels`` (a
    ``runs-on`` label list), or when it ran in the runner group ``group``.

    ``kinds`` (``gpu-runner-kinds``) adds named runners, each with its own price."""

    labels: frozenset[str] = frozenset()
    group: str = ""
    kinds: tuple[PricedKind, ...] = ()
    label_prefix: str = ""
    """A job asking for any label with this prefix (gpu-cloud-runner's one-VM labels)."""

    @classmethod
    def from_runs_on(cls, runs_on_json: str) -> GpuMatcher:
        """From the gate's compact ``gpu-runs-on`` JSON: a label, a list, or
        ``{"group": ..., "labels": ...}``."""
        value = json.loads(runs_on_json)
        if isinstance(value, str):
            return cls(frozenset({value.lower()}))
        if isinstance(value, list):
            return cls(frozenset(str(v).lower() for v in value))
        labels = value.get("labels") or []
        if isinstance(labels, str):
            labels = [labels]
        return cls(frozenset(str(v).lower() for v in labels), str(value.get("group") or ""))

    def _own(self, job: Mapping[str, Any]) -> bool:
        if self.group and str(job.get("runner_group_name") or "").lower() == self.group.lower():
            return True
        labels = {str(x).lower() for x in job.get("labels") or []}
        prefix = self.label_prefix.lower()
        if prefix and any(label.startswith(prefix) for label in labels):
            return True
        # A job need not name the labels every self-hosted runner has: ``runs-on: gpu``
        # lands on the ``[self-hosted, gpu]`` runner too, so the distinctive ones decide.
        distinctive = self.labels - GENERIC_LABELS
        return bool(self.labels) and (
            self.labels <= labels or (bool(distinctive) and distinctive <= labels)
        )

    def _exact(self, job: Mapping[str, Any]) -> bool:
        return self._own(job) or any(k.matcher._exact(job) for k in self.kinds)

    def _may_run_on(self, job: Mapping[str, Any]) -> bool:
        """Whether a GPU runner may have taken ``job`` though it named none.

        A job that asks only for labels a GPU runner has (``runs-on: self-hosted``) may land
        on it; so may one that asks for a runner group alone, when no group of ours tells
        the groups apart. Counting such a job may count a CPU job: the safe error."""
        matchers = (self, *(k.matcher for k in self.kinds))
        ours = frozenset().union(*(m.labels for m in matchers))
        if not ours and not any(m.group for m in matchers):
            return False  # a label prefix alone: gpu-cloud-runner's VMs run nothing else
        asked = {str(x).lower() for x in job.get("labels") or []}
        if asked:
            return asked <= ours | GENERIC_LABELS
        # a group alone: any self-hosted group may hold runners a matcher knows by labels only
        ran_in = str(job.get("runner_group_name") or "").lower()
        return ran_in not in ("", HOSTED_GROUP) and any(m.labels and not m.group for m in matchers)

    def matches(self, job: Mapping[str, Any]) -> bool:
        return self._exact(job) or self._may_run_on(job)

    def kind_of(self, job: Mapping[str, Any]) -> PricedKind | None:
        """The most specific kind whose runners ``job`` asked for, or None."""
        exact = [k for k in self.kinds if k.matcher._exact(job)]
        return max(exact, key=lambda k: len(k.matcher.labels), default=None)

    def price_for(self, job: Mapping[str, Any], default: Price | None) -> Price | None:
        """The price of the runner ``job`` ran on, as its labels tell.

        Kinds may share labels (``gpu`` on the T4 and on the H100 boxes): a job is priced
        as the dearest kind whose runners could take it. A job that only may have run on a
        GPU runner is priced as the dearest of ``default`` and every kind."""
        candidates = [k.price or default for k in self.kinds if _could_take(k.matcher, job)]
        if (self.labels or self.group) and _could_take(self, job):
            candidates.append(default)  # gpu-runs-on's runners could take it too
        if not candidates and self.kinds and self._may_run_on(job):
            candidates = [default, *(k.price for k in self.kinds)]
        elif not candidates:
            return default
        prices = tuple({p: None for p in candidates if p is not None})
        return DearestPrice(of=prices) if len(prices) > 1 else (prices[0] if prices else None)

    def describe(self) -> str:
        parts = []
        if self.labels:
            parts.append("labels " + ", ".join(sorted(self.labels)))
        if self.group:
            parts.append(f"runner group {self.group}")
        if self.label_prefix:
            parts.append(f"labels starting {self.label_prefix}")
        for kind in self.kinds:
            price = f" at {kind.price.describe()}" if kind.price else ""
            parts.append(f"kind {kind.name} ({kind.matcher.describe()}{price})")
        return " or ".join(parts)


def _could_take(kind: GpuMatcher, job: Mapping[str, Any]) -> bool:
    """Whether a runner of ``kind`` (or of ``gpu-runs-on``) could have taken ``job``.

    It could when the job asked for it, or for no label that its runners lack; a group-only
    kind only by its group. Each kind's labels are taken as all its runners carry."""
    if kind._own(job):
        return True
    asked = {str(x).lower() for x in job.get("labels") or []}
    return bool(kind.labels and asked) and asked <= kind.labels | GENERIC_LABELS


@dataclass(frozen=True)
class PricedKind:
    """A ``gpu-runner-kinds`` entry as the budget counts it."""

    name: str
    matcher: GpuMatcher
    price: Price | None


def has_gpu_label(job: Mapping[str, Any], labels: frozenset[str]) -> bool:
    """``gpu-labels``: the job asks for any of ``labels`` (case-folded)."""
    return any(str(label).casefold() in labels for label in job.get("labels") or [])


def named_gpu_jobs(
    jobs: Sequence[Mapping[str, Any]], names: Sequence[str]
) -> list[Mapping[str, Any]]:
    """``gpu-jobs``: jobs named like one of ``names``; ``tests`` also matches matrix jobs
    ``tests (3.12)``.

    Segment by segment: a reusable workflow's jobs are ``<caller job> / <its job>``, so
    ``gpu / Test on GPU`` matches ``gpu (pool-a) / Test on GPU`` and nothing else of the
    call, and ``gpu`` matches none of them: matching the call's every job would take in its
    results job, which passes when the gate refused."""
    wanted = [n.casefold().split(" / ") for n in names]
    out = []
    for job in jobs:
        parts = str(job.get("name") or "").casefold().split(" / ")
        if any(
            len(parts) == len(w) and all(p == n or p.startswith(n + " (") for p, n in zip(parts, w))
            for w in wanted
        ):
            out.append(job)
    return out
