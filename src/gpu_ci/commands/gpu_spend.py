"""``gpu-ci gpu-spend``: the month's GPU minutes and cost, who and what spent them, against
the budget; JSON/CSV for dashboards and the ledger that keeps ``gpu-gate``'s budget check to
a few API calls. The counting is :mod:`gpu_ci.github.spend` / :mod:`gpu_ci.github.budget`."""

from __future__ import annotations

import csv
import io
import json
import os
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

from gpu_ci.charts import Series, xychart
from gpu_ci.errors import GpuCiError, UsageError
from gpu_ci.inputs import Inputs
from gpu_ci.runtime import Runtime, markdown_table


def _money(value: Decimal) -> str:
    return f"${value:.2f}"


def chart(points: list[tuple[date, Decimal]], budget_line: Decimal | None, unit: str,
          month: str) -> str:
    """Cumulative spend per day (line) against the budget (a flat line)."""
    from gpu_ci.charts import downsample

    labels = [str(d.day) for d, _ in points]
    values = tuple(downsample([float(v) for _, v in points], len(points)))
    series = [Series("spend", values)]
    top = max(values) if values else 0.0
    if budget_line is not None:
        series.append(Series("budget", tuple(float(budget_line) for _ in points)))
        top = max(top, float(budget_line))
    y = "USD" if unit == "usd" else "GPU minutes"
    return xychart(f"Cumulative GPU spend, {month}", labels, series, y_title=y,
                   y_range=(0, top * 1.1 if top > 0 else 1), x_title="day (UTC)")


def csv_text(jobs: list[Any], idle: dict[int, Any] | None = None) -> str:
    """One row per GPU job; with gpu-monitor reports read (``idle``), four idle columns at
    the end, empty for a job without a report."""
    out = io.StringIO()
    fields = ["day", "workflow", "run_id", "attempt", "job_id", "job", "event", "pull_request",
              "approver", "runner", "minutes", "usd", "state"]
    if idle is not None:
        fields += ["idle_fraction", "idle_minutes", "idle_usd", "monitor_artifact"]
    writer = csv.DictWriter(out, fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for job in jobs:
        row = job.to_json()
        if idle is not None:
            row.update(_idle_json(idle.get(job.job_id)))
        for key in ("job", "approver", "runner", "workflow"):  # no formulas in spreadsheets
            if str(row[key])[:1] in ("=", "+", "-", "@"):
                row[key] = "'" + str(row[key])
        writer.writerow(row)
    return out.getvalue()


def _idle_json(got: Any) -> dict[str, Any]:
    if got is None:
        return {"idle_fraction": "", "idle_minutes": "", "idle_usd": "",
                "monitor_artifact": ""}
    return {"idle_fraction": str(got.fraction), "idle_minutes": str(got.minutes),
            "idle_usd": str(got.usd), "monitor_artifact": got.artifact_id}


def _max_reports(text: str) -> int:
    value = (text or "").strip()
    if not value.isdigit():
        raise UsageError(f"input 'max-monitor-reports' is {text!r}: write a whole number "
                         "(0 reads no gpu-monitor report).")
    return int(value)


def _write(path: Path, text: str) -> None:
    """Atomic: a reader (the upload step) never sees half a file; a full or read-only disk
    leaves no temporary file behind and says which file it could not write."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise GpuCiError(f"cannot write {path} ({exc.strerror}): choose a writable "
                         "output-dir, e.g. ${{ runner.temp }}/gpu-spend.") from None


def run(inputs: Inputs, rt: Runtime) -> int:
    from gpu_ci.github import budget, spend
    from gpu_ci.github.client import ClientSettings, RestClient, connect
    from gpu_ci.github.gate import runs_on_json
    from gpu_ci.pricing import load_table

    now = budget.now_utc(rt.environ)
    table = load_table()
    month = budget.Month.parse(inputs["month"]) if inputs["month"] else budget.Month.of(
        now.date())
    plan = budget.parse_budget(inputs["monthly-budget"]) if inputs["monthly-budget"] else None
    price = (budget.parse_gpu_price(inputs["gpu-price"], table, now.date())
             if inputs["gpu-price"] else None)
    if plan is not None and plan.unit == "usd" and price is None:
        raise UsageError("input 'monthly-budget' is money, so 'gpu-price' is needed (an "
                         "amount such as 0.052, or a SKU such as linux_4_core_gpu).")
    reserve = budget.parse_reserve(inputs["reserve-minutes"])
    if not inputs["gpu-runs-on"].strip():
        raise UsageError("input 'gpu-runs-on' is empty: name your GPU runners' labels (a label "
                         "or a JSON list) or group ({\"group\": \"gpu-pool\"}), as gpu-gate's "
                         "gpu-runs-on does.")
    matcher = budget.GpuMatcher.from_runs_on(runs_on_json("gpu-runs-on", inputs["gpu-runs-on"]))
    workflows = inputs.items("gpu-workflows")
    repo = inputs["repository"] or rt.environ.get("GITHUB_REPOSITORY", "")
    if repo.count("/") != 1:
        raise UsageError("no repository: pass 'repository' (owner/name) or set "
                         "GITHUB_REPOSITORY.")
    prefix = inputs["monitor-artifacts"].strip()
    max_reports = _max_reports(inputs["max-monitor-reports"]) if prefix else 0
    out_dir = Path(inputs["output-dir"] or "gpu-spend")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GpuCiError(f"output-dir {out_dir} cannot be created ({exc.strerror}).") from None
    rest = connect(inputs["github-token"], rt.environ, rt.mask, needs="actions: read")
    from gpu_ci.github.client import describe_api_failure

    try:
        got = spend.collect(rest, repo, workflows, matcher, price, table, reserve, month, now,
                            progress=rt.info)
    except GpuCiError:
        raise
    except Exception as exc:
        raise describe_api_failure(exc, f"the GPU jobs of {repo} in {month} (the job needs "
                                   "permissions: actions: read)") from None
    billed = None
    if inputs["billing-token"]:
        rt.mask(inputs["billing-token"])
        billing = RestClient(inputs["billing-token"], ClientSettings.from_environ(rt.environ))
        skus = [price.sku] if price is not None and price.sku else list(table.skus)
        try:
            billed = spend.billing_spend(billing, repo, month, skus, True)
        except GpuCiError:
            raise
        except Exception as exc:
            raise describe_api_failure(exc, "the billing usage report") from None

    costs = sorted(got.costs, key=lambda c: (c.day, c.run_id, c.job_id))
    idle_of, idle_doc = _idle(rest, repo, prefix, max_reports, month, costs, got.windows, rt)
    tot = budget.total(costs, "GPU jobs")
    unit = plan.unit if plan is not None else ("usd" if price is not None else "minutes")
    last_day = min(now.date(), month.last) if now.date() >= month.first else month.first
    points = budget.cumulative(costs, month, last_day, unit)
    spent_value = tot.usd if unit == "usd" else Decimal(tot.minutes)
    left = plan.amount - spent_value if plan is not None else None
    breakdowns = {title: budget.breakdown(costs, name)
                  for title, name in budget.BREAKDOWNS.items()}

    doc: dict[str, Any] = {
        "repository": repo, "month": str(month), "generated": now.isoformat(),
        "gpu_jobs": matcher.describe(), "workflows": workflows or ["(every workflow)"],
        "price": price.describe() if price else None,
        "minutes": tot.minutes, "usd": str(tot.usd) if price else None,
        "reserved_minutes": tot.reserved_minutes,
        "budget": None if plan is None else {"amount": str(plan.amount), "unit": plan.unit,
                                             "left": str(left)},
        "billing": None if billed is None else {"minutes": billed.minutes,
                                                "usd": str(billed.usd)},
        "by": {title: [{"key": r.key, "minutes": r.minutes, "usd": str(r.usd), "jobs": r.jobs}
                       for r in rows] for title, rows in breakdowns.items()},
        "days": [{"day": d.isoformat(), "cumulative": str(v)} for d, v in points],
        "jobs": [c.to_json() for c in costs],
    }
    if idle_of is not None:
        from gpu_ci.github.idle import idle_breakdown

        doc["idle"] = idle_doc
        for title, name in budget.BREAKDOWNS.items():
            extra = idle_breakdown(costs, idle_of, name)
            for row in doc["by"][title]:
                got_idle = extra[row["key"]]
                row.update(idle_minutes=str(got_idle.minutes), idle_usd=str(got_idle.usd),
                           idle_reports=got_idle.reports)
        for job in doc["jobs"]:
            job.update(_idle_json(idle_of.get(job["job_id"])))
    json_path, csv_path = out_dir / "spend.json", out_dir / "spend.csv"
    _write(json_path, json.dumps(doc, indent=2) + "\n")
    _write(csv_path, csv_text(costs, idle_of))
    ledger_path = out_dir / spend.LEDGER_FILE
    if month == budget.Month.of(now.date()):  # the gate reads this month's ledger only
        ledger = budget.build_ledger(repo, month, matcher, workflows, now, got.runs, costs)
        _write(ledger_path, json.dumps(ledger.to_json()) + "\n")

    rt.set_output("minutes", str(tot.minutes))
    rt.set_output("cost", f"{tot.usd:.2f}" if price else "")
    rt.set_output("budget-left", "" if left is None else (
        f"{left:.2f}" if unit == "usd" else str(int(left))))
    rt.set_output("json", str(json_path))
    rt.set_output("csv", str(csv_path))
    rt.set_output("ledger", str(ledger_path) if ledger_path.exists() else "")
    rt.info(f"gpu-spend: {repo} {month}: {tot.minutes} GPU minutes"
            f"{', ' + _money(tot.usd) if price else ''} in {len(costs)} GPU jobs "
            f"({rest.calls} API calls)")
    rt.summary(summary(doc, breakdowns, points, plan, unit, tot, billed, price is not None))
    return 0


def _idle(rest: Any, repo: str, prefix: str, max_reports: int, month: Any, costs: list[Any],
          windows: dict[int, tuple[float, float]],
          rt: Runtime) -> tuple[dict[int, Any] | None, dict[str, Any]]:
    """Idle share per job id from gpu-monitor report artifacts (``None``: not looked for, or
    the artifacts could not be listed: the spend report goes on without the idle column).
    Every report skipped is a notice that says why."""
    from gpu_ci.github import idle

    if not prefix or max_reports == 0:
        return None, {}
    runs = {c.run_id for c in costs if c.state == "completed"}
    before = rest.calls
    try:
        found = idle.find_reports(rest, repo, prefix, runs, month, max_reports)
    except Exception as exc:  # listing refused or failed after retries: no idle column
        rt.warning(f"gpu-monitor report artifacts could not be listed ({str(exc)[:200]}): "
                   "the report has no idle column.", title="gpu-spend idle cost")
        return None, {}
    matched, notes = idle.match(found.reports, costs, windows)
    for note in (*found.notes, *notes):
        rt.notice(note, title="gpu-spend idle cost")
    completed = sum(1 for c in costs if c.state == "completed")
    return matched, {
        "artifact_prefix": prefix, "reports_read": len(found.reports),
        "jobs_with_report": len(matched), "completed_jobs": completed,
        "minutes": str(sum((i.minutes for i in matched.values()), Decimal(0))),
        "usd": str(sum((i.usd for i in matched.values()), Decimal(0))),
        "api_calls": rest.calls - before, "skipped": list(found.notes) + notes}


def summary(doc: dict[str, Any], breakdowns: dict[str, list[Any]],
            points: list[tuple[date, Decimal]], plan: Any, unit: str, tot: Any, billed: Any,
            priced: bool) -> str:
    parts = [f"### gpu-spend: {doc['repository']}, {doc['month']}\n"]
    rows = [("GPU jobs", doc["gpu_jobs"]), ("workflows", ", ".join(doc["workflows"])),
            ("GPU minutes", f"{tot.minutes} (of which reserved for running jobs: "
                            f"{tot.reserved_minutes})"),
            ("cost", _money(tot.usd) + f" at {doc['price']}" if priced else "(no gpu-price)")]
    if plan is not None:
        rows.append(("budget", plan.describe()))
        rows.append(("left", plan.describe(plan.amount - (tot.usd if unit == "usd"
                                                           else Decimal(tot.minutes)))))
    idle_doc = doc.get("idle")
    if idle_doc:
        rows.append(("idle (gpu-monitor reports; information, not subtracted)",
                     f"{idle_doc['minutes']} min"
                     + (f", {_money(Decimal(idle_doc['usd']))}" if priced else "")
                     + f" in {idle_doc['jobs_with_report']} of {idle_doc['completed_jobs']} "
                       f"completed GPU jobs with a report"))
    if billed is not None:
        rows.append(("GitHub billed (billing usage API)",
                     f"{billed.minutes} min, {_money(billed.usd)}"))
    parts.append(markdown_table(["", ""], rows))
    if points:
        parts.append(chart(points, plan.amount if plan is not None else None, unit,
                           doc["month"]))
    for title, table_rows in breakdowns.items():
        parts.append(f"#### By {title}\n")
        if idle_doc:
            extra = {r["key"]: r for r in doc["by"][title]}
            parts.append(markdown_table(
                [title, "GPU minutes", "cost", "jobs", "idle (jobs with a report)"],
                [(r.key, r.minutes, _money(r.usd) if priced else "", r.jobs,
                  _idle_cell(extra[r.key], priced)) for r in table_rows[:20]]
                or [("(no GPU jobs)", 0, "", 0, "")]))
            continue
        parts.append(markdown_table(
            [title, "GPU minutes", "cost", "jobs"],
            [(r.key, r.minutes, _money(r.usd) if priced else "", r.jobs)
             for r in table_rows[:20]] or [("(no GPU jobs)", 0, "", 0)]))
    return "\n".join(parts)


def _idle_cell(row: dict[str, Any], priced: bool) -> str:
    if not row["idle_reports"]:
        return "(no report)"
    money = f", {_money(Decimal(row['idle_usd']))}" if priced else ""
    return f"{row['idle_minutes']} min{money} ({row['idle_reports']})"
