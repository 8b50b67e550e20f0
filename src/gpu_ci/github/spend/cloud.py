"""Cloud VM minutes for the spend report, from gpu-cloud-runner's JSON reports.

GitHub's job minutes never show a cloud VM's boot, its idle time nor a leak: the stop
job's report (kind ``gpu-cloud-runner``) and the reaper's (``gpu-cloud-runner-reap``)
do, uploaded as artifacts whose name starts with the prefix (``gpu-cloud-runner-``).

An artifact is the job's to write, so every report is checked before it counts:

- its JSON matches the schema below (RFC 8259, at most ``MAX_REPORT_BYTES``);
- a stop report comes from a run the spend report listed, of this repository itself
  (a fork's run has no cloud credentials, so its report can only be forged), and names
  that run and this repository;
- a reap report comes from a run of this repository on its default branch;
- a VM's minutes are at most the time from its run's creation to the artifact's upload,
  and its price at most :data:`MAX_USD_PER_HOUR`; its cost is computed here, never read.

A VM named by several reports counts once, with its largest minutes: minutes only grow,
so a second report can neither add a VM twice nor hide one. VM cost is information
beside the count of GPU jobs (whose minutes on the VM are already counted there), never
added to it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from gpu_ci.github.client import Rest
from gpu_ci.github.jobs import parse_time
from gpu_ci.github.monitor_artifact import read_json_artifact, schema_errors
from gpu_ci.github.spend import budget
from gpu_ci.github.spend.idle import Listed, download

STOP_KIND = "gpu-cloud-runner"
REAP_KIND = "gpu-cloud-runner-reap"
MAX_USD_PER_HOUR = Decimal(1000)
"""No cloud VM costs more an hour (the largest GPU VMs cost about a tenth of it)."""
FORK = "made by a fork's run (which has no cloud credentials): not counted"
SLACK_MINUTES = 2
"""Runner clocks vs GitHub's times: a VM's minutes may exceed the bound this much."""

_VM: dict[str, Any] = {
    "type": "object",
    "required": ["instance_id", "instance_type", "launched_at", "minutes", "usd_per_hour"],
    "properties": {
        "instance_id": {"type": "string"},
        "instance_type": {"type": "string"},
        "launched_at": {"type": "string"},
        "minutes": {"type": "integer", "minimum": 0},
        "usd_per_hour": {"type": ["string", "null"]},
    },
}
STOP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["kind", "repository", "run_id", "run_attempt", "job_key", "vms"],
    "properties": {
        "kind": {"const": STOP_KIND},
        "repository": {"type": "string"},
        "run_id": {"type": "integer", "minimum": 1},
        "run_attempt": {"type": "integer", "minimum": 1},
        "job_key": {"type": "string"},
        "vms": {"type": "array", "items": _VM},
    },
}
_LEAK: dict[str, Any] = {
    "type": "object",
    "required": [*_VM["required"], "run_id", "leaked_minutes"],
    "properties": {
        **_VM["properties"],
        "run_id": {"type": "string"},
        "leaked_minutes": {"type": "integer", "minimum": 0},
    },
}
REAP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["kind", "dry_run", "terminated"],
    "properties": {
        "kind": {"const": REAP_KIND},
        "dry_run": {"type": "boolean"},
        "terminated": {"type": "array", "items": _LEAK},
    },
}


@dataclass(frozen=True)
class Vm:
    """One VM as the reports tell it, bounded."""

    instance_id: str
    instance_type: str
    run_id: int
    minutes: int
    leaked_minutes: int
    usd_per_hour: Decimal | None

    def usd(self, minutes: int) -> Decimal:
        if self.usd_per_hour is None:
            return Decimal(0)
        return (self.usd_per_hour * minutes / 60).quantize(Decimal("0.0001"))


@dataclass
class CloudFound:
    """The VMs read, by instance id; a note per report not counted."""

    vms: dict[str, Vm] = field(default_factory=dict)
    reports: int = 0
    notes: list[str] = field(default_factory=list)

    def add(self, vm: Vm) -> None:
        old = self.vms.get(vm.instance_id)
        if old is None:
            self.vms[vm.instance_id] = vm
            return
        self.vms[vm.instance_id] = Vm(
            vm.instance_id,
            vm.instance_type or old.instance_type,
            old.run_id,
            max(old.minutes, vm.minutes),
            max(old.leaked_minutes, vm.leaked_minutes),
            old.usd_per_hour if old.usd_per_hour is not None else vm.usd_per_hour,
        )


def cloud_artifact(prefix: str) -> Callable[[Mapping[str, Any]], bool]:
    """Whether an artifact may hold a gpu-cloud-runner report (by its name)."""
    return lambda art: bool(prefix) and str(art.get("name") or "").startswith(prefix)


def _price(text: Any) -> Decimal | None | str:
    """A VM's price per hour; None when unknown; else why refused."""
    if text is None:
        return None
    try:
        value = Decimal(str(text))
    except InvalidOperation:
        return f"usd_per_hour {str(text)[:20]!r} is not a number"
    if not value.is_finite() or not 0 <= value <= MAX_USD_PER_HOUR:
        return f"usd_per_hour {str(text)[:20]!r} is not from 0 to {MAX_USD_PER_HOUR}"
    return value


def _bound(run: Mapping[str, Any] | None, art: Mapping[str, Any]) -> int | None:
    """The most minutes a VM of ``run`` lived before ``art``'s upload."""
    created = parse_time((run or {}).get("created_at"))
    uploaded = parse_time(art.get("created_at"))
    if created is None or uploaded is None:
        return None
    return max(0, math.ceil((uploaded - created).total_seconds() / 60)) + SLACK_MINUTES


def _vm(
    row: Mapping[str, Any], run_id: int, run: Mapping[str, Any] | None, art: Mapping[str, Any]
) -> Vm | str:
    """One report row as a :class:`Vm`, or why it does not count."""
    label = f"VM {str(row['instance_id'])[:32]}"
    if run is None:
        return f"{label}: run {run_id} is not among the runs this report listed"
    price = _price(row.get("usd_per_hour"))
    if isinstance(price, str):
        return f"{label}: {price}"
    bound = _bound(run, art)
    minutes, leaked = int(row["minutes"]), int(row.get("leaked_minutes") or 0)
    if bound is None or minutes > bound or leaked > minutes:
        return (
            f"{label}: {minutes} min is more than run {run_id} can have had "
            f"(from its creation to the upload: {bound} min)"
        )
    return Vm(str(row["instance_id"]), str(row["instance_type"]), run_id, minutes, leaked, price)


@dataclass(frozen=True)
class Source:
    """What the checks compare a report with: the repository, its runs, its default branch."""

    repo: str
    runs: Mapping[int, Mapping[str, Any]]
    default_branch: Callable[[], str]


def _stop_rows(doc: Mapping[str, Any], art: Mapping[str, Any], src: Source) -> list[Any] | str:
    wr = art.get("workflow_run") or {}
    if doc["run_id"] != wr.get("id") or str(doc["repository"]).lower() != src.repo.lower():
        return f"names run {doc['run_id']} of {str(doc['repository'])[:100]}, not its own run"
    return [dict(vm, run_id=doc["run_id"]) for vm in doc["vms"]]


def _reap_rows(art: Mapping[str, Any], doc: Mapping[str, Any], src: Source) -> list[Any] | str:
    if (art.get("workflow_run") or {}).get("head_branch") != src.default_branch():
        return "a reap report not made on this repository's default branch: not counted"
    rows = []
    for row in doc["terminated"]:
        if not str(row["run_id"]).isdigit():
            return f"run id {str(row['run_id'])[:20]!r} is not a number"
        rows.append(dict(row, run_id=int(row["run_id"])))
    return rows


def read(
    rest: Rest, src: Source, listed: Listed, keep: Callable[..., bool], cap: int
) -> CloudFound:
    """The VMs of the trusted reports among ``listed`` (at most ``cap`` downloads)."""
    found = CloudFound()
    arts = [a for a in listed.artifacts if keep(a)]
    if len(arts) > cap:
        found.notes.append(
            f"{len(arts) - cap} older gpu-cloud-runner reports not read "
            f"(max-cloud-reports is {cap})"
        )
        arts = arts[:cap]
    for art in arts:
        label = f"artifact '{str(art.get('name'))[:100]}' #{art.get('id')}"
        wr = art.get("workflow_run") or {}
        if not budget.same_repository(wr.get("repository_id"), wr.get("head_repository_id")):
            found.notes.append(f"{label}: {FORK}")
            continue  # not even downloaded: a fork can upload any number
        blob = download(rest, src.repo, art, found.notes, "report")
        if blob is None:
            continue
        doc, why = read_json_artifact(blob)
        kind = doc.get("kind") if isinstance(doc, dict) else None
        schema = {STOP_KIND: STOP_SCHEMA, REAP_KIND: REAP_SCHEMA}.get(str(kind))
        errors = [why] if why else ["no gpu-cloud-runner kind"] if schema is None else []
        errors = errors or schema_errors(doc, schema or {})
        if errors:
            found.notes.append(f"{label}: not a gpu-cloud-runner report: " + "; ".join(errors[:3]))
            continue
        rows = _stop_rows(doc, art, src) if kind == STOP_KIND else _reap_rows(art, doc, src)
        if isinstance(rows, str):
            found.notes.append(f"{label}: {rows}")
            continue
        found.reports += 1
        for row in rows:
            got = _vm(row, row["run_id"], src.runs.get(row["run_id"]), art)
            if isinstance(got, str):
                found.notes.append(f"{label}: {got}")
            else:
                found.add(got)
    return found


@dataclass(frozen=True)
class CloudRow:
    key: str
    vms: int
    minutes: int
    usd: Decimal
    leaked_minutes: int
    leaked_usd: Decimal

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "vms": self.vms,
            "minutes": self.minutes,
            "usd": str(self.usd),
            "leaked_minutes": self.leaked_minutes,
            "leaked_usd": str(self.leaked_usd),
        }


def rows_by(vms: Sequence[Vm], key: Callable[[Vm], str], title: str = "") -> list[CloudRow]:
    """VMs, minutes and cost per ``key``, dearest first."""
    acc: dict[str, list[Vm]] = {}
    for vm in vms:
        acc.setdefault(key(vm), []).append(vm)
    rows = [
        CloudRow(
            k or title,
            len(group),
            sum(v.minutes for v in group),
            sum((v.usd(v.minutes) for v in group), Decimal(0)),
            sum(v.leaked_minutes for v in group),
            sum((v.usd(v.leaked_minutes) for v in group), Decimal(0)),
        )
        for k, group in acc.items()
    ]
    return sorted(rows, key=lambda r: (-r.usd, -r.minutes, r.key))


def section(
    prefix: str, found: CloudFound, runs: Mapping[int, Mapping[str, Any]], calls: int
) -> dict[str, Any]:
    """The ``cloud`` section of ``spend.json``."""
    vms = sorted(found.vms.values(), key=lambda v: (v.run_id, v.instance_id))
    (total,) = rows_by(vms, lambda v: "all") or [CloudRow("all", 0, 0, Decimal(0), 0, Decimal(0))]
    return {
        "artifact_prefix": prefix,
        "reports_read": found.reports,
        "vms": total.vms,
        "minutes": total.minutes,
        "usd": str(total.usd),
        "leaked_minutes": total.leaked_minutes,
        "leaked_usd": str(total.leaked_usd),
        "by_workflow": [
            r.to_json() for r in rows_by(vms, lambda v: budget.workflow_name(runs[v.run_id]))
        ],
        "by_run": [r.to_json() for r in rows_by(vms, lambda v: str(v.run_id))],
        "api_calls": calls,
        "skipped": list(found.notes),
    }


def run_index(runs: Sequence[Mapping[str, Any]]) -> dict[int, Mapping[str, Any]]:
    return {int(r["id"]): r for r in runs if isinstance(r.get("id"), int)}
