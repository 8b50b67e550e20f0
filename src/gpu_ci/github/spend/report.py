"""The gpu-spend report as data: the ``spend.json`` document, the CSV rows, the ledger to keep.

Pure functions of what :mod:`gpu_ci.github.spend` collected (the month's GPU jobs, their
costs, the billing report, the idle shares of :mod:`gpu_ci.github.spend.idle`): the command writes
the files, the outputs and the Markdown summary from a :class:`Report`.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from gpu_ci.github.jobs import GpuMatcher
from gpu_ci.github.spend import budget
from gpu_ci.github.spend.idle import Idle, idle_breakdown, right_size_by
from gpu_ci.github.spend.kinds import every_job_priced
from gpu_ci.pricing import Price


@dataclass(frozen=True)
class IdleFound:
    """The idle shares read from gpu-monitor reports, and how they were found."""

    by_job: dict[int, Idle]
    """Job id -> its idle share."""
    doc: dict[str, Any]
    """The ``idle`` section of ``spend.json``."""


def idle_section(
    prefix: str,
    reports_read: int,
    matched: Mapping[int, Idle],
    costs: Sequence[budget.JobCost],
    api_calls: int,
    skipped: Sequence[str],
) -> dict[str, Any]:
    """The ``idle`` section of ``spend.json``."""
    return {
        "artifact_prefix": prefix,
        "reports_read": reports_read,
        "jobs_with_report": len(matched),
        "completed_jobs": sum(1 for c in costs if c.state == "completed"),
        "minutes": str(sum((i.minutes for i in matched.values()), Decimal(0))),
        "usd": str(sum((i.usd for i in matched.values()), Decimal(0))),
        "api_calls": api_calls,
        "skipped": list(skipped),
    }


@dataclass(frozen=True)
class Report:
    """One month's report: the numbers the outputs and the summary show, and ``doc``, the
    ``spend.json`` document."""

    doc: dict[str, Any]
    costs: list[budget.JobCost]
    total: budget.Spend
    unit: str
    """``usd`` or ``minutes``: the budget's unit, else USD when a price is known."""
    points: list[tuple[date, Decimal]]
    """Cumulative spend per day, up to today (or the month's end)."""
    left: Decimal | None
    breakdowns: dict[str, list[budget.Row]]
    idle: IdleFound | None


@dataclass(frozen=True)
class Scope:
    """What a spend report covers, and how it prices and judges it."""

    repo: str
    month: budget.Month
    now: datetime
    matcher: GpuMatcher
    workflows: Sequence[str]
    price: Price | None
    plan: budget.Budget | None


def build(
    scope: Scope,
    costs: Sequence[budget.JobCost],
    billed: budget.Spend | None,
    idle: IdleFound | None,
) -> Report:
    """The spend report of ``costs``.

    With the billing report's total and idle cost, when they were read."""
    repo, month, now, matcher = scope.repo, scope.month, scope.now, scope.matcher
    workflows, price, plan = scope.workflows, scope.price, scope.plan
    ordered = sorted(costs, key=lambda c: (c.day, c.run_id, c.job_id))
    tot = budget.total(ordered, "GPU jobs")
    priced = every_job_priced(matcher, price)
    unit = plan.unit if plan is not None else ("usd" if priced else "minutes")
    last_day = min(now.date(), month.last) if now.date() >= month.first else month.first
    points = budget.cumulative(ordered, month, last_day, unit)
    spent_value = tot.usd if unit == "usd" else Decimal(tot.minutes)
    left = plan.amount - spent_value if plan is not None else None
    breakdowns = {
        title: budget.breakdown(ordered, name)
        for title, name in budget.BREAKDOWNS.items()
        if matcher.kinds or title not in budget.KIND_BREAKDOWNS
    }
    doc: dict[str, Any] = {
        "repository": repo,
        "month": str(month),
        "generated": now.isoformat(),
        "gpu_jobs": matcher.describe(),
        "workflows": list(workflows) or ["(every workflow)"],
        "price": price.describe() if price else None,
        "kind_prices": {k.name: k.price.describe() if k.price else None for k in matcher.kinds},
        "minutes": tot.minutes,
        "usd": str(tot.usd) if priced else None,
        "reserved_minutes": tot.reserved_minutes,
        "budget": None
        if plan is None
        else {"amount": str(plan.amount), "unit": plan.unit, "left": str(left)},
        "billing": None if billed is None else {"minutes": billed.minutes, "usd": str(billed.usd)},
        "by": {
            title: [
                {"key": r.key, "minutes": r.minutes, "usd": str(r.usd), "jobs": r.jobs}
                for r in rows
            ]
            for title, rows in breakdowns.items()
        },
        "days": [{"day": d.isoformat(), "cumulative": str(v)} for d, v in points],
        "jobs": [c.to_json() for c in ordered],
    }
    if idle is not None:
        _add_idle(doc, ordered, idle)
    return Report(doc, ordered, tot, unit, points, left, breakdowns, idle)


def _add_idle(doc: dict[str, Any], costs: Sequence[budget.JobCost], idle: IdleFound) -> None:
    doc["idle"] = idle.doc
    for title, name in budget.BREAKDOWNS.items():
        if title not in doc["by"]:
            continue
        extra = idle_breakdown(costs, idle.by_job, name)
        for row in doc["by"][title]:
            got_idle = extra[row["key"]]
            row.update(
                idle_minutes=str(got_idle.minutes),
                idle_usd=str(got_idle.usd),
                idle_reports=got_idle.reports,
            )
    for job in doc["jobs"]:
        job.update(idle_columns(idle.by_job.get(job["job_id"])))
    doc["right_size"] = [w.to_json() for w in right_size_by(costs, idle.by_job)]


def idle_columns(got: Idle | None) -> dict[str, Any]:
    """A job's four idle columns (empty for a job without a report)."""
    if got is None:
        return {"idle_fraction": "", "idle_minutes": "", "idle_usd": "", "monitor_artifact": ""}
    return {
        "idle_fraction": str(got.fraction),
        "idle_minutes": str(got.minutes),
        "idle_usd": str(got.usd),
        "monitor_artifact": got.artifact_id,
    }


def csv_text(jobs: Sequence[budget.JobCost], idle: Mapping[int, Idle] | None = None) -> str:
    """The spend report's CSV, one row per GPU job.

    One row per GPU job; with gpu-monitor reports read (``idle``), four idle columns at
    the end, empty for a job without a report."""
    out = io.StringIO()
    fields = [
        "day",
        "workflow",
        "run_id",
        "attempt",
        "job_id",
        "job",
        "event",
        "pull_request",
        "approver",
        "runner",
        "minutes",
        "usd",
        "state",
    ]
    if idle is not None:
        fields += ["idle_fraction", "idle_minutes", "idle_usd", "monitor_artifact"]
    writer = csv.DictWriter(out, fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for job in jobs:
        row = job.to_json()
        if idle is not None:
            row.update(idle_columns(idle.get(job.job_id)))
        for key in ("job", "approver", "runner", "workflow"):  # no formulas in spreadsheets
            if str(row[key])[:1] in ("=", "+", "-", "@"):
                row[key] = "'" + str(row[key])
        writer.writerow(row)
    return out.getvalue()


# -- minutes lost to infrastructure (gpu-watchdog's infra-file) ---------------------------------

INFRA_SCHEMA = "gpu-ci/infra-failures/v1"


def read_infra(texts: Mapping[str, str]) -> tuple[dict[int, str], list[str]]:
    """gpu-watchdog's evidence per job, from its infra-files.

    Job id -> the watchdog's evidence (its codes, comma-separated), from gpu-watchdog's
    ``infra-file`` documents (path -> text); and a note per file or row not understood.
    Sweeps repeat, so a job listed by several files counts once."""
    lost: dict[int, str] = {}
    notes: list[str] = []
    for path, text in texts.items():
        for row in _infra_failures(path, text, notes):
            job_id = row.get("job_id") if isinstance(row, dict) else None
            if not isinstance(job_id, int) or isinstance(job_id, bool):
                notes.append(f"{path}: a failure without a job_id, skipped")
                continue
            evidence = row.get("evidence") or []
            if not isinstance(evidence, list):
                notes.append(f"{path}: job {job_id}'s evidence is not a list, skipped")
                continue
            lost.setdefault(job_id, ",".join(str(c) for c in evidence))
    return lost, notes


def _infra_failures(path: str, text: str, notes: list[str]) -> list[Any]:
    """The failure rows of one infra-file.

    None, and a note, when the text is not one."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        notes.append(f"{path}: not JSON ({exc})")
        return []
    if not isinstance(doc, dict) or doc.get("schema") != INFRA_SCHEMA:
        notes.append(f"{path}: not a gpu-watchdog infra-file (schema {INFRA_SCHEMA})")
        return []
    failures = doc.get("failures") or []
    if isinstance(failures, list):
        return failures
    notes.append(f"{path}: 'failures' is not a list, skipped")
    return []


def infra_section(
    lost: Mapping[int, str], costs: Sequence[budget.JobCost], files: int, notes: Sequence[str]
) -> dict[str, Any]:
    """The ``infra`` section of ``spend.json``: the minutes (and cost) this report itself
    counted for the jobs gpu-watchdog found lost to infrastructure, by pool (the ``runner``
    column: the runner group, else the labels). A job the report does not count (another
    month, not a GPU job here) adds nothing: the watchdog's own minutes are never used."""
    hit = [c for c in costs if c.job_id in lost and c.state == "completed"]
    rows = budget.breakdown(hit, "runner")
    return {
        "files": files,
        "jobs": len(hit),
        "listed": len(lost),
        "minutes": sum(c.minutes for c in hit),
        "usd": str(sum((c.cost for c in hit), Decimal(0))),
        "by_pool": [
            {"pool": r.key, "minutes": r.minutes, "usd": str(r.usd), "jobs": r.jobs} for r in rows
        ],
        "notes": list(notes),
    }
