"""Idle cost for the spend report, from gpu-monitor's reports.

Idle cost for the spend report, from the JSON reports ``gpu-monitor`` leaves as artifacts.

How they are found: one listing of the repository's artifacts per page (newest first, at
most ``MAX_LISTING_PAGES`` pages, stopping at the first artifact made before the month);
an artifact counts when its name starts with the prefix (``gpu-monitor-`` by default, as in
``examples/cuda-ci.yml``) and its ``workflow_run.id`` is a run the report counted. Each such
artifact is downloaded once (at most ``max_reports``, the newest first), its report checked
against ``report.schema.json`` and matched to the GPU job of that run whose start..end holds
the monitor's window (the run's jobs come from the jobs API, not from the artifact).

A report's ``right_size`` object (gpu-monitor's advice: the smallest GPU or MIG profile
that would have held the job) is carried with the job's idle share; :func:`right_size_by`
aggregates it per workflow. Like idle cost it is information: the cost at the suggested
size is the report's per-minute price of that size times the minutes the spend report
counted, never anything the report claims to have cost.

Idle cost is information, never a discount: it is the report's ``idle_fraction`` (0..1 by the
schema) times what the spend report itself counted for that job, so a report a pull request
forged can neither lower nor exceed the job's counted spend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from gpu_ci.errors import GpuCiError
from gpu_ci.github.client import ApiError, Rest
from gpu_ci.github.monitor_artifact import MAX_REPORT_BYTES, read_monitor_report
from gpu_ci.github.spend import budget

MAX_LISTING_PAGES = 10
"""Artifact listing pages of 100 read at most (1,000 artifacts)."""
SLACK_S = 120.0
"""Runner clock vs GitHub's job times: the monitor's window may stick out this much."""


# -- finding and reading the artifacts -------------------------------------------------------


@dataclass(frozen=True)
class RightSize:
    """A report's right-size advice (its ``right_size`` object)."""

    peak_memory: int | None
    needed: int | None
    current: str
    activity: float | None
    suggestion: str | None
    usd_per_minute: Decimal | None

    @classmethod
    def of(cls, data: Mapping[str, Any] | None) -> RightSize | None:
        if not data:
            return None
        price = data.get("usd_per_minute")
        return cls(
            data["peak_memory_bytes"],
            data["needed_bytes"],
            str(data["current"]),
            data["activity"],
            data["suggestion"],
            None if price is None else Decimal(str(price)),
        )


@dataclass(frozen=True)
class MonitorReport:
    artifact_id: int
    artifact: str
    run_id: int
    started: float
    ended: float
    idle_fraction: Decimal
    right_size: RightSize | None = None


@dataclass(frozen=True)
class Found:
    reports: tuple[MonitorReport, ...]
    notes: tuple[str, ...]
    listing_calls: int
    downloads: int


def read_report(blob: bytes, art: Mapping[str, Any]) -> tuple[MonitorReport | None, str]:
    """The report in one artifact's zip, or None and why."""
    label = f"artifact '{art.get('name')}' #{art.get('id')}"
    data, why = read_monitor_report(blob)
    if data is None:
        return None, f"{label}: {why}"
    if data["cost"]["idle_fraction"] is None:  # a GPU without a utilisation counter
        return (
            None,
            f"{label}: its idle fraction is unknown (no utilisation counter, or the sampler died)",
        )
    return MonitorReport(
        int(art["id"]),
        str(art.get("name")),
        int((art.get("workflow_run") or {})["id"]),
        float(data["started"]),
        float(data["ended"]),
        Decimal(str(data["cost"]["idle_fraction"])),
        RightSize.of(data.get("right_size")),
    ), ""


@dataclass(frozen=True)
class Listed:
    """The month's artifacts one listing kept, and what it cost."""

    artifacts: tuple[Mapping[str, Any], ...]
    notes: tuple[str, ...]
    calls: int


def list_artifacts(
    rest: Rest, repo: str, month: budget.Month, keep: Callable[[Mapping[str, Any]], bool]
) -> Listed:
    """The unexpired artifacts ``keep`` accepts, newest first: one listing of the
    repository's artifacts (at most :data:`MAX_LISTING_PAGES` pages, stopping at the first
    artifact made before the month), shared by every report gpu-spend reads."""
    oldest = (month.first - timedelta(days=1)).isoformat()
    matched: list[Mapping[str, Any]] = []
    notes: list[str] = []
    calls = 0
    for page in range(1, MAX_LISTING_PAGES + 1):
        got = rest.get(f"/repos/{repo}/actions/artifacts?per_page=100&page={page}")
        calls += 1
        arts = got.get("artifacts") or []
        matched += [a for a in arts if not a.get("expired") and keep(a)]
        total = got.get("total_count")
        done = (
            len(arts) < 100
            or (isinstance(total, int) and page * 100 >= total)
            or any(str(a.get("created_at") or "") < oldest for a in arts)
        )
        if done:
            break
    else:
        notes.append(
            f"artifact listing stopped after {MAX_LISTING_PAGES} pages "
            f"({MAX_LISTING_PAGES * 100} artifacts): older reports not read"
        )
    matched.sort(key=lambda a: (str(a.get("created_at") or ""), int(a["id"])), reverse=True)
    return Listed(tuple(matched), tuple(notes), calls)


def monitor_artifact(prefix: str, run_ids: Iterable[int]) -> Callable[[Mapping[str, Any]], bool]:
    """Whether an artifact is a counted run's gpu-monitor report."""
    wanted = {int(r) for r in run_ids}

    def keep(art: Mapping[str, Any]) -> bool:
        wr = art.get("workflow_run") or {}
        return (
            bool(prefix)
            and str(art.get("name") or "").startswith(prefix)
            and isinstance(wr.get("id"), int)
            and wr["id"] in wanted
        )

    return keep


def download(
    rest: Rest, repo: str, art: Mapping[str, Any], notes: list[str], what: str
) -> bytes | None:
    """An artifact's zip, or None with a note saying why."""
    if int(art.get("size_in_bytes") or 0) > MAX_REPORT_BYTES:
        notes.append(
            f"artifact '{art.get('name')}' #{art['id']}: over "
            f"{MAX_REPORT_BYTES} bytes, skipped (upload the {what} alone)"
        )
        return None
    try:
        return rest.download(
            f"/repos/{repo}/actions/artifacts/{int(art['id'])}/zip", MAX_REPORT_BYTES
        )
    except (ApiError, GpuCiError) as exc:  # expired since listed, too large: skip it
        notes.append(
            f"artifact '{art.get('name')}' #{art['id']}: not downloaded ({str(exc)[:120]})"
        )
        return None


def find_reports(
    rest: Rest,
    repo: str,
    prefix: str,
    run_ids: Iterable[int],
    month: budget.Month,
    max_reports: int,
    listed: Listed | None = None,
) -> Found:
    """The gpu-monitor reports of the counted runs (see the module's docstring).

    ``listed``: a listing already made (:func:`list_artifacts`), of which only the monitor's
    artifacts are read; without it, one is made here."""
    keep = monitor_artifact(prefix, run_ids)
    if listed is None:
        listed = list_artifacts(rest, repo, month, keep)
    matched = [a for a in listed.artifacts if keep(a)]
    notes = list(listed.notes)
    if len(matched) > max_reports:
        notes.append(
            f"{len(matched) - max_reports} older gpu-monitor reports not read "
            f"(max-monitor-reports is {max_reports})"
        )
        matched = matched[:max_reports]
    reports: list[MonitorReport] = []
    downloads = 0
    for art in matched:
        if int(art.get("size_in_bytes") or 0) <= MAX_REPORT_BYTES:
            downloads += 1
        blob = download(rest, repo, art, notes, "report")
        if blob is None:
            continue
        report, why = read_report(blob, art)
        if report is None:
            notes.append(why)
        else:
            reports.append(report)
    return Found(tuple(reports), tuple(notes), listed.calls, downloads)


# -- matching a report to a counted GPU job (pure) --------------------------------------------


@dataclass(frozen=True)
class Idle:
    """A job's idle share, as the spend report shows it."""

    fraction: Decimal
    minutes: Decimal
    usd: Decimal
    artifact_id: int
    right_size: RightSize | None = None


def match(
    reports: Sequence[MonitorReport],
    costs: Sequence[budget.JobCost],
    windows: Mapping[int, tuple[float, float]],
) -> tuple[dict[int, Idle], list[str]]:
    """Job id -> its idle share. A report goes to the completed GPU job of its run whose
    start..end (``windows``, epoch seconds from the jobs API) overlaps the monitor's window
    most, allowing ``SLACK_S`` of clock skew; each job takes one report (the newest)."""
    by_run: dict[int, list[budget.JobCost]] = {}
    for c in costs:
        if c.state == "completed" and c.job_id in windows:
            by_run.setdefault(c.run_id, []).append(c)
    out: dict[int, Idle] = {}
    notes: list[str] = []
    for rep in sorted(reports, key=lambda r: -r.artifact_id):
        best, best_overlap = None, 0.0
        for c in by_run.get(rep.run_id, []):
            if c.job_id in out:
                continue
            start, end = windows[c.job_id]
            overlap = min(end + SLACK_S, rep.ended) - max(start - SLACK_S, rep.started)
            if overlap > best_overlap:
                best, best_overlap = c, overlap
        if best is None:
            notes.append(
                f"artifact '{rep.artifact}' #{rep.artifact_id}: no counted GPU job "
                f"of run {rep.run_id} ran when it was recorded"
            )
            continue
        fraction = min(max(rep.idle_fraction, Decimal(0)), Decimal(1))
        out[best.job_id] = Idle(
            fraction,
            (fraction * best.minutes).quantize(Decimal("0.01")),
            (fraction * best.cost).quantize(Decimal("0.0001")),
            rep.artifact_id,
            rep.right_size,
        )
    return out, notes


@dataclass(frozen=True)
class IdleRow:
    minutes: Decimal
    usd: Decimal
    reports: int


def idle_breakdown(
    costs: Iterable[budget.JobCost], idle: Mapping[int, Idle], field_name: str
) -> dict[str, IdleRow]:
    """Idle minutes, cost and report count per key of :func:`budget.breakdown`."""
    acc: dict[str, list[Any]] = {}
    for c in costs:
        key = str(getattr(c, field_name)) or "(none)"
        if field_name == "pull_request" and not c.pull_request:
            key = f"({c.event or 'no pull request'})"
        row = acc.setdefault(key, [Decimal(0), Decimal(0), 0])
        got = idle.get(c.job_id)
        if got is not None:
            row[0] += got.minutes
            row[1] += got.usd
            row[2] += 1
    return {k: IdleRow(v[0], v[1], v[2]) for k, v in acc.items()}


GIB = 2**30


@dataclass(frozen=True)
class WorkflowSize:
    """A workflow's right-size advice for the month, from its jobs' gpu-monitor reports."""

    workflow: str
    reports: int
    peak_memory: int | None
    """The largest peak memory of its reports (None: none known)."""
    activity: float | None
    """Mean of the reports' activity (%) that are known; None: none known."""
    suggestion: str | None
    """The advice of the report with the largest need: it holds every smaller peak too;
    None when that report has none (already the smallest that fits) or no peak is known."""
    current: str
    minutes: int
    """GPU minutes the spend report counted for the jobs with a report."""
    usd: Decimal
    """What those jobs cost as counted (0 without a price)."""
    usd_at_suggestion: Decimal | None
    """Those minutes at the suggested size's price (None: no price known for it)."""

    def line(self) -> str:
        peak = (
            "peak unknown"
            if self.peak_memory is None
            else (f"peak {self.peak_memory / GIB:.1f} GiB")
        )
        act = "activity unknown" if self.activity is None else f"{self.activity:.0f} % busy"
        head = f"{self.workflow}: {peak} on {self.current}, {act} ({self.reports} report(s))"
        if self.suggestion is None:
            why = (
                "no advice (peak memory unknown)"
                if self.peak_memory is None
                else "already the smallest size that fits"
            )
            return f"{head}: {why}"
        cost = (
            f"${self.usd_at_suggestion:.2f} of ${self.usd:.2f}"
            if self.usd_at_suggestion is not None
            else f"cost at that size unknown (no price), ${self.usd:.2f} as run"
        )
        return f"{head}: {self.suggestion} would do; {cost}"

    def to_json(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "reports": self.reports,
            "peak_memory_bytes": self.peak_memory,
            "activity": None if self.activity is None else round(self.activity, 3),
            "current": self.current,
            "suggestion": self.suggestion,
            "minutes": self.minutes,
            "usd": str(self.usd),
            "usd_at_suggestion": (
                None if self.usd_at_suggestion is None else str(self.usd_at_suggestion)
            ),
            "line": self.line(),
        }


def right_size_by(costs: Iterable[budget.JobCost], idle: Mapping[int, Idle]) -> list[WorkflowSize]:
    """Per workflow (see :class:`WorkflowSize`): only jobs whose report has advice count."""
    acc: dict[str, list[tuple[budget.JobCost, RightSize]]] = {}
    for c in costs:
        got = idle.get(c.job_id)
        if got is not None and got.right_size is not None:
            acc.setdefault(c.workflow or "(none)", []).append((c, got.right_size))
    out = []
    for workflow, rows in sorted(acc.items()):
        sizes = [r for _, r in rows]
        known = [r for r in sizes if r.peak_memory is not None]
        top = max(known, key=lambda r: (r.needed or 0, r.peak_memory or 0), default=None)
        acts = [float(r.activity) for r in sizes if r.activity is not None]
        minutes = sum(c.minutes for c, _ in rows)
        usd = sum((c.cost for c, _ in rows), Decimal(0))
        price = top.usd_per_minute if top is not None and top.suggestion else None
        out.append(
            WorkflowSize(
                workflow,
                len(rows),
                top.peak_memory if top else None,
                sum(acts) / len(acts) if acts else None,
                top.suggestion if top else None,
                top.current if top else sizes[0].current,
                minutes,
                usd,
                None
                if price is None
                else (max(price, Decimal(0)) * minutes).quantize(Decimal("0.0001")),
            )
        )
    return out
