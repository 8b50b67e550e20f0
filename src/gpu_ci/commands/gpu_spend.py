"""``gpu-ci gpu-spend``: the month's GPU minutes and cost, who and what spent them, against
the budget; JSON/CSV for dashboards and the ledger that keeps ``gpu-gate``'s budget check to
a few API calls. The counting is :mod:`gpu_ci.github.spend` / :mod:`gpu_ci.github.spend.budget`,
the report's documents :mod:`gpu_ci.github.spend.report`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from gpu_ci.charts import Series, downsample, xychart
from gpu_ci.errors import GpuCiError, UsageError
from gpu_ci.github import jobs, spend
from gpu_ci.github.client import Rest, connect, describe_api_failure
from gpu_ci.github.event import load_event
from gpu_ci.github.spend import budget, cloud, idle
from gpu_ci.github.spend import kinds as spend_kinds
from gpu_ci.github.spend import ledger as spend_ledger
from gpu_ci.github.spend import report as sr
from gpu_ci.inputs import Inputs
from gpu_ci.pricing import Price, PriceTable, load_table
from gpu_ci.runtime import Runtime, escape, markdown_table, repository, write_report


def _money(value: Decimal) -> str:
    return f"${value:.2f}"


def chart(
    points: list[tuple[date, Decimal]], budget_line: Decimal | None, unit: str, month: str
) -> str:
    """Cumulative spend per day (line) against the budget (a flat line)."""
    labels = [str(d.day) for d, _ in points]
    values = tuple(downsample([float(v) for _, v in points], len(points)))
    series = [Series("spend", values)]
    top = max(values) if values else 0.0
    if budget_line is not None:
        series.append(Series("budget", tuple(float(budget_line) for _ in points)))
        top = max(top, float(budget_line))
    y = "USD" if unit == "usd" else "GPU minutes"
    return xychart(
        f"Cumulative GPU spend, {month}",
        labels,
        series,
        y_title=y,
        y_range=(0, top * 1.1 if top > 0 else 1),
        x_title="day (UTC)",
    )


def _max_reports(text: str, name: str = "max-monitor-reports") -> int:
    value = (text or "").strip()
    if not value.isdigit():
        what = "gpu-monitor" if name == "max-monitor-reports" else "gpu-cloud-runner"
        raise UsageError(
            f"input '{name}' is {text!r}: write a whole number (0 reads no {what} report)."
        )
    return int(value)


@dataclass(frozen=True)
class _Plan:
    """The validated inputs: what to count, how to price it, where to write."""

    now: datetime
    table: PriceTable
    month: budget.Month
    plan: budget.Budget | None
    price: Price | None
    reserve: int
    matcher: jobs.GpuMatcher
    repo: str
    prefix: str
    max_reports: int
    out_dir: Path
    infra_files: tuple[str, ...] = ()
    """gpu-watchdog's infra-files: minutes lost to infrastructure, by pool."""
    cloud_prefix: str = ""
    max_cloud: int = 0

    @property
    def priced(self) -> bool:
        """Whether every GPU job has a price: gpu-price, or each runner kind's own."""
        return spend_kinds.every_job_priced(self.matcher, self.price)


def _plan(inputs: Inputs, rt: Runtime) -> _Plan:
    """Every input checked before any API call (a bad one: exit 2)."""
    now, table = jobs.now(rt.environ), load_table()
    month = budget.Month.parse(inputs["month"]) if inputs["month"] else budget.Month.of(now.date())
    plan = budget.parse_budget(inputs["monthly-budget"]) if inputs["monthly-budget"] else None
    price = (
        budget.parse_gpu_price(inputs["gpu-price"], table, now.date())
        if inputs["gpu-price"]
        else None
    )
    reserve = budget.parse_reserve(inputs["reserve-minutes"])
    matcher = spend_kinds.matcher_from_inputs(
        inputs["gpu-runs-on"], inputs["gpu-runner-kinds"], table, now.date(), "gpu-spend"
    )
    if plan is not None and not spend_kinds.every_job_priced(matcher, price):
        budget.require_price(plan, price)
    repo = repository(inputs["repository"], rt.environ)
    prefix = inputs["monitor-artifacts"].strip()
    max_reports = _max_reports(inputs["max-monitor-reports"]) if prefix else 0
    if inputs.items("gpu-workflows"):
        rt.warning(budget.EVERY_WORKFLOW, title="gpu-spend")
    cloud_prefix = inputs["cloud-artifacts"].strip()
    max_cloud = (
        _max_reports(inputs["max-cloud-reports"], "max-cloud-reports") if cloud_prefix else 0
    )
    return _Plan(
        now,
        table,
        month,
        plan,
        price,
        reserve,
        matcher,
        repo,
        prefix,
        max_reports,
        Path(inputs["output-dir"] or "gpu-spend"),
        tuple(inputs.items("infra-files")),
        cloud_prefix,
        max_cloud,
    )


def _billed(inputs: Inputs, rt: Runtime, p: _Plan) -> budget.Spend | None:
    """The billing usage report's GPU spend, when a billing-token is given."""
    if not inputs["billing-token"]:
        return None
    billing = connect(inputs["billing-token"], rt.environ, rt.mask)
    skus = [p.price.sku] if p.price is not None and p.price.sku else list(p.table.skus)
    try:
        return spend.billing_spend(billing, p.repo, p.month, skus, True)
    except GpuCiError:
        raise
    except Exception as exc:  # ApiError, or an answer that is not what was asked
        raise describe_api_failure(exc, "the billing usage report") from None


def run(inputs: Inputs, rt: Runtime) -> int:
    p = _plan(inputs, rt)
    try:
        p.out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GpuCiError(f"output-dir {p.out_dir} cannot be created ({exc.strerror}).") from None
    rest = connect(inputs["github-token"], rt.environ, rt.mask, needs="actions: read")
    got, ledger_note = _collect(inputs, rt, p, rest)
    billed = _billed(inputs, rt, p)
    listed = _listing(rest, p, got, rt)
    found = _idle(rest, p, got, rt, listed)
    report = _report(p, got, billed, found)
    vm_cost = _cloud(rest, p, got, rt, listed, report)
    paths = _write_files(p, got, report)
    tot, left = report.total, report.left
    rt.set_output("minutes", str(tot.minutes))
    rt.set_output("cost", f"{tot.usd:.2f}" if p.priced else "")
    rt.set_output(
        "budget-left",
        "" if left is None else (f"{left:.2f}" if report.unit == "usd" else str(int(left))),
    )
    rt.set_output("json", paths[0])
    rt.set_output("csv", paths[1])
    rt.set_output("ledger", paths[2])
    rt.set_output("vm-cost", vm_cost)
    rt.info(
        f"gpu-spend: {p.repo} {p.month}: {tot.minutes} GPU minutes"
        f"{', ' + _money(tot.usd) if p.priced else ''} in {len(report.costs)} GPU jobs "
        f"({rest.calls} API calls)"
    )
    rt.summary(
        summary(report, p.plan, billed, p.priced)
        + _counted_from(ledger_note, got.notes, rest.calls)
    )
    for note in got.notes:
        rt.warning(note, title="gpu-spend listing")
    return 0


def _report(
    p: _Plan, got: spend.Collected, billed: budget.Spend | None, found: sr.IdleFound | None
) -> sr.Report:
    scope = sr.Scope(p.repo, p.month, p.now, p.matcher, (), p.price, p.plan)
    report = sr.build(scope, got.costs, billed, found)
    if p.infra_files:
        texts = {}
        for name in p.infra_files:
            try:
                texts[name] = Path(name).read_text("utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise UsageError(f"input 'infra-files': {name} cannot be read ({exc}).") from None
        lost, notes = sr.read_infra(texts)
        report.doc["infra"] = sr.infra_section(lost, report.costs, len(texts), notes)
    return report


def _collect(inputs: Inputs, rt: Runtime, p: _Plan, rest: Rest) -> tuple[spend.Collected, str]:
    """The month's GPU jobs.

    The month's GPU jobs, reusing this workflow's own ledger (``reuse-ledger``) for the
    current month: the runs it counted are not fetched again."""
    ledger, note = _own_ledger(inputs, rt, p, rest)
    try:
        counting = spend.Counting(
            p.repo, (), p.matcher, p.price, p.table, p.reserve, p.month, p.now
        )
        got = spend.collect(rest, counting, ledger, progress=rt.info)
    except GpuCiError:
        raise
    except Exception as exc:  # ApiError, or an answer that is not what was asked
        raise describe_api_failure(
            exc, f"the GPU jobs of {p.repo} in {p.month} (the job needs permissions: actions: read)"
        ) from None
    return got, f"{note}; {got.ledger_used}" if ledger is not None else note


def _own_ledger(
    inputs: Inputs, rt: Runtime, p: _Plan, rest: Rest
) -> tuple[spend_ledger.Ledger | None, str]:
    """This workflow's last ledger, or None.

    This workflow's last ledger, for the current month; one that cannot be read is a
    warning (every run is then counted), not a failed report."""
    name = inputs["reuse-ledger"].strip()
    if not name:
        return None, "not reused (reuse-ledger: none)"
    if p.month != budget.Month.of(p.now.date()):
        return None, f"not reused: a ledger is of the current month, not {p.month}"
    try:
        return spend.trusted_ledger(rest, p.repo, name, _default_branch(rt, p, rest))
    except Exception as exc:  # refused, failed after retries, or not understood
        rt.warning(
            f"the ledger artifact '{name}' could not be read ({str(exc)[:200]}): every run "
            "of the month is counted.",
            title="gpu-spend ledger",
        )
        return None, "not read: every run counted"


def _default_branch(rt: Runtime, p: _Plan, rest: Rest) -> str:
    """Where a trusted ledger comes from.

    Where a trusted ledger comes from, without a call when the run says: a ``schedule``
    run is on the default branch ("Scheduled workflows run on the latest commit on the
    default branch"), and most events' payloads name it; else one call for the repository."""
    env = rt.environ
    if (
        env.get("GITHUB_EVENT_NAME") == "schedule"
        and env.get("GITHUB_REF_NAME")
        and env.get("GITHUB_REPOSITORY", "").lower() == p.repo.lower()
    ):
        return env["GITHUB_REF_NAME"]
    try:
        payload = load_event(rt.environ, need_repository=False).payload
    except GpuCiError:
        payload = {}
    repo = payload.get("repository") or {}
    if str(repo.get("full_name") or "").lower() == p.repo.lower() and repo.get("default_branch"):
        return str(repo["default_branch"])
    return str(rest.get(f"/repos/{p.repo}").get("default_branch") or "")


def _counted_from(ledger_note: str, notes: list[str], calls: int) -> str:
    """How the month was counted: the ledger reused or not, listings cut short, REST calls."""
    rows = [("ledger", ledger_note), ("REST calls", str(calls))]
    rows += [("listing", note) for note in notes]
    return "\n#### Counted from\n\n" + markdown_table(["", ""], rows)


def _write_files(p: _Plan, got: spend.Collected, report: sr.Report) -> tuple[str, str, str]:
    """Write the report's files and return their paths.

    spend.json, spend.csv and (for the current month) the ledger; their paths ('' for a
    ledger not written this time and not there from before)."""
    json_path, csv_path = p.out_dir / "spend.json", p.out_dir / "spend.csv"
    write_report(json_path, json.dumps(report.doc, indent=2) + "\n", what="output-dir")
    write_report(
        csv_path,
        sr.csv_text(report.costs, report.idle.by_job if report.idle else None),
        what="output-dir",
    )
    ledger_path = p.out_dir / spend.LEDGER_FILE
    if p.month == budget.Month.of(p.now.date()):  # the gate reads this month's ledger only
        ledger = spend_ledger.build_ledger(
            p.repo,
            p.month,
            spend_ledger.ledger_key(p.matcher, ()),
            p.now,
            got.runs,
            report.costs,
            got.reused,
            got.windows,
        )
        write_report(ledger_path, json.dumps(ledger.to_json()) + "\n", what="output-dir")
    return str(json_path), str(csv_path), str(ledger_path) if ledger_path.exists() else ""


def _listing(rest: Rest, p: _Plan, got: spend.Collected, rt: Runtime) -> idle.Listed | None:
    """One listing of the month's artifacts for every report read (None: none is read, or
    the listing failed: the report goes on without them, and a warning says so)."""
    keeps = []
    if p.prefix and p.max_reports:
        runs = {c.run_id for c in got.costs if c.state == "completed"}
        keeps.append(idle.monitor_artifact(p.prefix, runs))
    if p.cloud_prefix and p.max_cloud:
        keeps.append(cloud.cloud_artifact(p.cloud_prefix))
    if not keeps:
        return None
    try:
        return idle.list_artifacts(rest, p.repo, p.month, lambda a: any(k(a) for k in keeps))
    except Exception as exc:  # listing refused, failed after retries, or not understood
        rt.warning(
            f"report artifacts could not be listed ({str(exc)[:200]}): the report has no "
            "idle column and no cloud VM cost.",
            title="gpu-spend artifacts",
        )
        return None


def _idle(
    rest: Rest, p: _Plan, got: spend.Collected, rt: Runtime, listed: idle.Listed | None
) -> sr.IdleFound | None:
    """Idle share per job id from gpu-monitor report artifacts (``None``: not looked for, or
    the artifacts could not be listed: the spend report goes on without the idle column).
    Every report skipped is a notice that says why."""
    if not p.prefix or p.max_reports == 0 or listed is None:
        return None
    costs = sorted(got.costs, key=lambda c: (c.day, c.run_id, c.job_id))
    runs = {c.run_id for c in costs if c.state == "completed"}
    before = rest.calls - listed.calls
    found = idle.find_reports(rest, p.repo, p.prefix, runs, p.month, p.max_reports, listed)
    matched, notes = idle.match(found.reports, costs, got.windows)
    for note in (*found.notes, *notes):
        rt.notice(note, title="gpu-spend idle cost")
    return sr.IdleFound(
        matched,
        sr.idle_section(
            p.prefix,
            len(found.reports),
            matched,
            costs,
            rest.calls - before,
            [*found.notes, *notes],
        ),
    )


def _cloud(
    rest: Rest,
    p: _Plan,
    got: spend.Collected,
    rt: Runtime,
    listed: idle.Listed | None,
    report: sr.Report,
) -> str:
    """Adds the cloud VMs' minutes and cost to ``report``.

    Its ``cloud`` section, which the summary shows; returns their cost in USD, or '' when
    no report was read."""
    if not p.cloud_prefix or p.max_cloud == 0 or listed is None:
        return ""
    before = rest.calls
    runs = cloud.run_index(got.runs)
    branch: list[str] = []

    def default_branch() -> str:
        if not branch:
            branch.append(_default_branch(rt, p, rest))
        return branch[0]

    source = cloud.Source(p.repo, runs, default_branch)
    keep = cloud.cloud_artifact(p.cloud_prefix)
    found = cloud.read(rest, source, listed, keep, p.max_cloud)
    for note in found.notes:
        rt.notice(note, title="gpu-spend cloud VMs")
    doc = cloud.section(p.cloud_prefix, found, runs, rest.calls - before)
    report.doc["cloud"] = doc
    return str(Decimal(doc["usd"]).quantize(Decimal("0.01"))) if found.reports else ""


def summary(
    report: sr.Report, plan: budget.Budget | None, billed: budget.Spend | None, priced: bool
) -> str:
    doc = report.doc
    parts = [f"### gpu-spend: {doc['repository']}, {doc['month']}\n"]
    parts.append(markdown_table(["", ""], _overview(report, plan, billed, priced)))
    if report.points:
        parts.append(
            chart(
                report.points, plan.amount if plan is not None else None, report.unit, doc["month"]
            )
        )
    parts += _breakdown_tables(report, bool(doc.get("idle")), priced)
    if doc.get("infra") is not None:
        parts += _infra_table(doc["infra"], priced)
    if doc.get("cloud") is not None:
        parts += _cloud_table(doc["cloud"])
    if doc.get("right_size"):
        parts.append("#### Right size\n")
        parts.append(
            markdown_table(
                ["per workflow (gpu-monitor reports; information)"],
                [(w["line"],) for w in doc["right_size"][:20]],
            )
        )
    return "\n".join(parts)


def _overview(
    report: sr.Report, plan: budget.Budget | None, billed: budget.Spend | None, priced: bool
) -> list[tuple[str, object]]:
    """The month's totals: jobs, minutes, cost, budget and what is left, idle, GitHub's bill."""
    doc, tot = report.doc, report.total
    rows: list[tuple[str, object]] = [
        ("GPU jobs", doc["gpu_jobs"]),
        ("workflows", ", ".join(doc["workflows"])),
        (
            "GPU minutes",
            f"{tot.minutes} (of which reserved for running jobs: {tot.reserved_minutes})",
        ),
        ("cost", _money(tot.usd) + f" at {_prices(doc)}" if priced else "(no gpu-price)"),
    ]
    if plan is not None:
        spent = tot.usd if report.unit == "usd" else Decimal(tot.minutes)
        rows.append(("budget", plan.describe()))
        rows.append(("left", plan.describe(plan.amount - spent)))
    idle_doc = doc.get("idle")
    if idle_doc:
        rows.append(
            (
                "idle (gpu-monitor reports; information, not subtracted)",
                f"{idle_doc['minutes']} min"
                + (f", {_money(Decimal(idle_doc['usd']))}" if priced else "")
                + f" in {idle_doc['jobs_with_report']} of {idle_doc['completed_jobs']} "
                f"completed GPU jobs with a report",
            )
        )
    if billed is not None:
        rows.append(
            ("GitHub billed (billing usage API)", f"{billed.minutes} min, {_money(billed.usd)}")
        )
    return rows


def _prices(doc: dict[str, Any]) -> str:
    """The prices the cost was counted at: gpu-price and each runner kind's own."""
    kinds = [f"{k} {v}" for k, v in (doc.get("kind_prices") or {}).items() if v]
    default = [str(doc["price"])] if doc.get("price") else []
    return ", ".join(default + [f"kind {k}" for k in kinds])


def _breakdown_tables(report: sr.Report, with_idle: bool, priced: bool) -> list[str]:
    parts = []
    for title, table_rows in report.breakdowns.items():
        parts.append(f"#### By {title}\n")
        if with_idle:
            extra = {r["key"]: r for r in report.doc["by"][title]}
            parts.append(
                markdown_table(
                    [title, "GPU minutes", "cost", "jobs", "idle (jobs with a report)"],
                    [
                        (
                            r.key,
                            r.minutes,
                            _money(r.usd) if priced else "",
                            r.jobs,
                            _idle_cell(extra[r.key], priced),
                        )
                        for r in table_rows[:20]
                    ]
                    or [("(no GPU jobs)", 0, "", 0, "")],
                )
            )
            continue
        parts.append(
            markdown_table(
                [title, "GPU minutes", "cost", "jobs"],
                [
                    (r.key, r.minutes, _money(r.usd) if priced else "", r.jobs)
                    for r in table_rows[:20]
                ]
                or [("(no GPU jobs)", 0, "", 0)],
            )
        )
    return parts


def _infra_table(infra: dict[str, Any], priced: bool) -> list[str]:
    """Minutes lost to infrastructure by pool (gpu-watchdog's infra-files)."""
    rows = [
        (r["pool"], r["minutes"], _money(Decimal(r["usd"])) if priced else "", r["jobs"])
        for r in infra["by_pool"][:20]
    ]
    total = f"{infra['minutes']} GPU minutes in {infra['jobs']} jobs"
    notes = "".join(f"- {escape(n)}\n" for n in infra["notes"][:10])
    return [
        f"#### Lost to infrastructure (gpu-watchdog): {total}\n",
        markdown_table(["pool", "GPU minutes lost", "cost", "jobs"], rows or [("(none)", 0, "", 0)])
        + notes,
    ]


def _cloud_table(section: dict[str, Any]) -> list[str]:
    """Cloud VMs' minutes and cost by workflow (gpu-cloud-runner's reports)."""
    rows = [
        (
            r["key"],
            r["vms"],
            r["minutes"],
            _money(Decimal(r["usd"])),
            r["leaked_minutes"],
            _money(Decimal(r["leaked_usd"])),
        )
        for r in section["by_workflow"][:20]
    ]
    total = (
        f"{section['minutes']} VM minutes, {_money(Decimal(section['usd']))} in "
        f"{section['vms']} VMs ({section['reports_read']} reports)"
    )
    return [
        f"#### Cloud GPU VMs (gpu-cloud-runner; information, not in the cost above): {total}\n",
        markdown_table(
            ["workflow", "VMs", "VM minutes", "cost", "leaked minutes", "leaked cost"],
            rows or [("(no report)", 0, 0, "", 0, "")],
        ),
    ]


def _idle_cell(row: dict[str, Any], priced: bool) -> str:
    if not row["idle_reports"]:
        return "(no report)"
    money = f", {_money(Decimal(row['idle_usd']))}" if priced else ""
    return f"{row['idle_minutes']} min{money} ({row['idle_reports']})"
