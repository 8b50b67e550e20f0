"""The spend ledger: the runs already counted, and where a trusted one is found.

``gpu-spend`` writes the ledger on a trusted event (schedule or push on the default
branch) and uploads it; the gate reads it, checking where it came from. A ledger a pull
request could write would let it claim a lower spend.
"""

from __future__ import annotations

import io
import math
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote

from gpu_ci.github.client import ApiError, Rest
from gpu_ci.github.jobs import GpuMatcher, parse_time
from gpu_ci.github.monitor_artifact import load_json
from gpu_ci.github.spend import budget
from gpu_ci.github.spend.budget import JobCost, Month

LEDGER_VERSION = 1


def _finite(value: Any) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{value!r} is not a finite number")
    return number


@dataclass(frozen=True)
class Ledger:
    """The runs already counted, and their GPU jobs' costs.

    Completed runs already counted (``run id -> attempt``) and their GPU jobs' costs.

    Written by ``gpu-spend`` on a trusted event (schedule or push on the default branch) and
    read by the gate, which checks where it came from (see ``spend.trusted_artifact``): a
    ledger a pull request could write would let it claim a lower spend.
    """

    repository: str
    month: str
    matcher: str
    """``ledger_key()`` when written: which GPU jobs of which workflows; a ledger of other
    jobs or workflows is not reused (it would miss or add runs)."""
    through: str
    """ISO time: every run created before this time's day (UTC) is complete and counted
    here; runs created on that day or later are listed again."""
    runs: dict[str, int] = field(default_factory=dict)
    jobs: tuple[JobCost, ...] = ()
    windows: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Job id -> (started, completed) epoch seconds of the jobs counted: what gpu-spend
    matches gpu-monitor reports to when it reuses the ledger (absent in older ledgers)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "version": LEDGER_VERSION,
            "repository": self.repository,
            "month": self.month,
            "matcher": self.matcher,
            "through": self.through,
            "runs": self.runs,
            "jobs": [j.to_json() for j in self.jobs],
            "windows": {k: list(v) for k, v in self.windows.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Ledger | None:
        """``None`` for anything that is not a ledger of this version (then: count afresh)."""
        try:
            if data.get("version") != LEDGER_VERSION:
                return None
            return cls(
                str(data["repository"]),
                str(data["month"]),
                str(data["matcher"]),
                str(data["through"]),
                {str(k): int(v) for k, v in dict(data["runs"]).items()},
                tuple(JobCost.from_json(j) for j in data["jobs"]),
                {
                    str(k): (_finite(v[0]), _finite(v[1]))
                    for k, v in dict(data.get("windows") or {}).items()
                },
            )
        except (KeyError, TypeError, ValueError, AttributeError, ArithmeticError):
            return None

    def usable(
        self, repository: str, month: Month, matcher: GpuMatcher, workflows: Sequence[str]
    ) -> bool:
        return (
            self.repository.lower() == repository.lower()
            and self.month == str(month)
            and self.matcher == ledger_key(matcher, workflows)
        )

    def counted(self, run: Mapping[str, Any]) -> bool:
        """Whether the ledger counted this run as it is now.

        Same attempt, completed then and now."""
        return run.get("status") == "completed" and self.runs.get(str(run.get("id"))) == int(
            run.get("run_attempt") or 1
        )


def ledger_key(matcher: GpuMatcher, workflows: Sequence[str]) -> str:
    return f"{matcher.describe()} in {', '.join(sorted(workflows)) or 'every workflow'}"


def build_ledger(
    repository: str,
    month: Month,
    key: str,
    now: datetime,
    runs: Sequence[Mapping[str, Any]],
    costs: Sequence[JobCost],
    reused: Mapping[str, int] | None = None,
    windows: Mapping[int, tuple[float, float]] | None = None,
) -> Ledger:
    """The ledger of the runs counted now.

    A ledger of the completed runs among ``runs`` (the runs listed) and of ``reused``
    (run id -> attempt: the runs an earlier ledger counted, whose costs are among ``costs``).
    ``key`` says what was counted (:func:`ledger_key`).

    ``through`` is ``now``, or the creation time of the oldest run not yet complete, so
    that the gate, which lists the runs created since that day, still sees that run."""
    done = dict(reused or {})
    done.update(
        (str(r["id"]), int(r.get("run_attempt") or 1))
        for r in runs
        if r.get("status") == "completed"
    )
    through = now
    for r in runs:
        created = parse_time(r.get("created_at"))
        if r.get("status") != "completed" and created is not None:
            through = min(through, created)
    kept = tuple(c for c in costs if str(c.run_id) in done and c.state == "completed")
    spans = windows or {}
    return Ledger(
        repository,
        str(month),
        key,
        through.replace(microsecond=0).isoformat().replace("+00:00", "Z"),
        done,
        kept,
        {str(c.job_id): spans[c.job_id] for c in kept if c.job_id in spans},
    )


# -- the trusted ledger artifact --------------------------------------------------------

LEDGER_FILE = "gpu-spend-ledger.json"
MAX_LEDGER_BYTES = 32 * 1024 * 1024

#: The events whose runs may write the ledger: a pull request's run is none of them.
LEDGER_EVENTS = ("schedule", "push", "workflow_dispatch")
#: Newest same-name artifacts whose run is read to check its event, at most.
LEDGER_RUN_CHECKS = 3
#: Newest successful default-branch runs per event whose artifacts are looked through when
#: pull requests' uploads push the trusted ledger off the first listing page.
LEDGER_FALLBACK_RUNS = 10
#: The most REST calls finding the ledger may take: 1 listing, LEDGER_RUN_CHECKS runs read,
#: one run listing per event, LEDGER_FALLBACK_RUNS runs' artifacts, 1 download.
LEDGER_MAX_CALLS = 1 + LEDGER_RUN_CHECKS + len(LEDGER_EVENTS) + LEDGER_FALLBACK_RUNS + 1


def _trusted_run(run: Mapping[str, Any], default_branch: str) -> bool:
    return (
        run.get("event") in LEDGER_EVENTS
        and run.get("head_branch") == default_branch
        and budget.run_reserves(run)
    )


def trusted_ledger(
    rest: Rest, repo: str, name: str, default_branch: str
) -> tuple[Ledger | None, str]:
    """The trusted ledger artifact and its ledger, if one is found.

    The newest unexpired artifact ``name`` made by a run of this repository itself, on its
    default branch, of a trusted event (:data:`LEDGER_EVENTS`), and its ledger; at most
    :data:`LEDGER_MAX_CALLS` REST calls however many same-name artifacts pull requests
    upload (a ledger a pull request wrote could claim a lower spend).

    First the newest 100 artifacts of that name: those whose ``workflow_run`` is on the
    default branch with equal repository ids, newest first, up to :data:`LEDGER_RUN_CHECKS`
    of them, have their run read for its event. When none passes and the listing holds more
    than one page (pull requests' uploads may hide the trusted one), the newest successful
    default-branch runs of each trusted event are listed instead and their own artifacts of
    that name looked through, newest run first."""
    listing = rest.get(f"/repos/{repo}/actions/artifacts?name={quote(name, safe='')}&per_page=100")
    arts = [
        a
        for a in listing.get("artifacts") or []
        if a.get("name") == name
        and not a.get("expired")
        and (a.get("workflow_run") or {}).get("head_branch") == default_branch
        and isinstance((a.get("workflow_run") or {}).get("id"), int)
        and budget.same_repository(
            (a.get("workflow_run") or {}).get("repository_id"),
            (a.get("workflow_run") or {}).get("head_repository_id"),
        )
    ]
    arts.sort(key=lambda a: (str(a.get("created_at") or ""), int(a["id"])), reverse=True)
    for art in arts[:LEDGER_RUN_CHECKS]:
        run_id = int(art["workflow_run"]["id"])
        try:
            run = rest.get(f"/repos/{repo}/actions/runs/{run_id}")
        except ApiError as exc:
            if exc.status != 404:
                raise
            continue  # the run is gone: its artifact cannot be shown to be trusted
        if _trusted_run(run, default_branch):
            return _read_ledger(rest, repo, name, art)
    if int(listing.get("total_count") or 0) <= 100 and not arts[LEDGER_RUN_CHECKS:]:
        return None, (
            f"no artifact '{name}' from a {'/'.join(LEDGER_EVENTS)} run of the default "
            f"branch ({default_branch})"
        )
    art = _ledger_of_trusted_runs(rest, repo, name, default_branch)
    if art is None:
        return None, (
            f"no artifact '{name}' among the newest {LEDGER_FALLBACK_RUNS} successful "
            f"{'/'.join(LEDGER_EVENTS)} runs of the default branch ({default_branch})"
        )
    return _read_ledger(rest, repo, name, art)


def _ledger_of_trusted_runs(
    rest: Rest, repo: str, name: str, default_branch: str
) -> dict[str, Any] | None:
    runs: list[dict[str, Any]] = []
    for event in LEDGER_EVENTS:
        answer = rest.get(
            f"/repos/{repo}/actions/runs?branch={quote(default_branch, safe='')}"
            f"&event={event}&status=success&per_page={LEDGER_FALLBACK_RUNS}"
        )
        runs += [r for r in answer.get("workflow_runs") or [] if _trusted_run(r, default_branch)]
    runs.sort(key=lambda r: (str(r.get("created_at") or ""), int(r["id"])), reverse=True)
    for run in runs[:LEDGER_FALLBACK_RUNS]:
        answer = rest.get(
            f"/repos/{repo}/actions/runs/{int(run['id'])}/artifacts"
            f"?name={quote(name, safe='')}&per_page=10"
        )
        for art in answer.get("artifacts") or []:
            if art.get("name") == name and not art.get("expired"):
                return dict(art)
    return None


def _read_ledger(
    rest: Rest, repo: str, name: str, art: Mapping[str, Any]
) -> tuple[Ledger | None, str]:
    blob = rest.download(f"/repos/{repo}/actions/artifacts/{art['id']}/zip", MAX_LEDGER_BYTES)
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as archive:
            info = archive.getinfo(LEDGER_FILE)
            if info.file_size > MAX_LEDGER_BYTES:
                return None, f"artifact '{name}' holds an oversized ledger"
            data = load_json(archive.read(info))
    except (zipfile.BadZipFile, KeyError, ValueError) as exc:
        return None, f"artifact '{name}' #{art['id']} holds no readable {LEDGER_FILE} ({exc})"
    ledger = Ledger.from_json(data) if isinstance(data, dict) else None
    if ledger is None:
        return None, f"artifact '{name}' #{art['id']} is not a ledger of this version"
    return ledger, f"ledger artifact #{art['id']} written {ledger.through}"
