"""Records of a GPU machine kept outside the job: evidence its code cannot write.

A job's own evidence (its check run's annotations, its steps, its gpu-monitor report) is
written by the job or by the runner it can stop: on a self-hosted runner the job's code
runs as the runner's OS user, so it can print "The runner has received a shutdown signal",
hang a step until the timeout, or upload a report that says ``gpu-lost``. A record kept
by something the job cannot reach carries more weight:

* ``cloud``: the cloud's record of the instance (EC2's ``StateReason`` such as
  ``Server.SpotInstanceTermination``, a spot interruption notice), as gpu-cloud-runner's
  controller keeps it;
* ``arc``: Actions Runner Controller's pod and node events (``Evicted``, ``NodeNotReady``);
* ``hook``: a runner hook that runs as another OS user than the job (a job-completed hook
  that reads ``nvidia-smi`` or the kernel log).

Whoever keeps them hands them over as one JSON document (:data:`SCHEMA`)::

    {"schema": "gpu-ci/machine-records/v1",
     "records": [{"source": "cloud", "runner_name": "gpu-spot-7",
                  "at": "2026-11-30T13:20:00Z", "code": "machine-lost",
                  "detail": "Server.SpotInstanceTermination: Spot instance termination"}]}

``code`` is ``machine-lost`` (the instance or pod went away: reclaimed, stopped,
evicted), ``runner-lost`` (the runner process died while the machine stayed) or
``gpu-lost`` (the GPU fell off the bus: Xid 79, the device gone from the PCI bus). A record
speaks for the job that ran on ``runner_name`` when ``at`` falls within the job's start and
end (give or take :data:`SLACK_S`). The file must come from where the job cannot write:
the watchdog's own runner, the controller's store, never a job's artifact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_ci.github.jobs import parse_time

SCHEMA = "gpu-ci/machine-records/v1"
#: Who may keep a record, and how the summary names them.
SOURCES = {
    "cloud": "the cloud's record of the machine",
    "arc": "ARC's pod and node events",
    "hook": "a hook running as another OS user than the job",
}
CODES = ("machine-lost", "runner-lost", "gpu-lost")
#: A record's time against GitHub's job times: the machine may go a little after the job.
SLACK_S = 300.0


@dataclass(frozen=True)
class MachineRecord:
    """One fact about a runner's machine, kept outside the job."""

    source: str
    """``cloud``, ``arc`` or ``hook`` (:data:`SOURCES`)."""
    runner_name: str
    at: float
    """When it happened, seconds since the epoch."""
    code: str
    """``machine-lost``, ``runner-lost`` or ``gpu-lost`` (:data:`CODES`)."""
    detail: str


class RecordError(ValueError):
    """A machine-records document that cannot be read, with where and why."""


def parse_records(doc: object) -> tuple[MachineRecord, ...]:
    """The records of a :data:`SCHEMA` document; :class:`RecordError` names the first fault."""
    if not isinstance(doc, Mapping) or doc.get("schema") != SCHEMA:
        raise RecordError(f"not a {SCHEMA} document (its 'schema' must be {SCHEMA!r})")
    items = doc.get("records")
    if not isinstance(items, list):
        raise RecordError("'records' must be a list")
    return tuple(_record(i, item) for i, item in enumerate(items))


def _record(index: int, item: Any) -> MachineRecord:
    where = f"records[{index}]"
    if not isinstance(item, Mapping):
        raise RecordError(f"{where} is not an object")
    source, code = item.get("source"), item.get("code")
    if source not in SOURCES:
        raise RecordError(f"{where}.source is {source!r}: write one of {', '.join(SOURCES)}")
    if code not in CODES:
        raise RecordError(f"{where}.code is {code!r}: write one of {', '.join(CODES)}")
    at = parse_time(item.get("at"))
    if at is None:
        raise RecordError(f"{where}.at is {item.get('at')!r}: write an ISO 8601 time")
    runner = item.get("runner_name")
    if not isinstance(runner, str) or not runner:
        raise RecordError(f"{where}.runner_name must name the runner")
    return MachineRecord(
        str(source), runner, at.timestamp(), str(code), str(item.get("detail") or "")[:200]
    )


def records_for(records: Sequence[MachineRecord], job: Mapping[str, Any]) -> list[MachineRecord]:
    """The records that speak for ``job``: its runner, within its start and end."""
    runner = job.get("runner_name")
    start = parse_time(job.get("started_at"))
    end = parse_time(job.get("completed_at"))
    if not runner or start is None or end is None:
        return []
    lo, hi = start.timestamp() - SLACK_S, end.timestamp() + SLACK_S
    return [r for r in records if r.runner_name == runner and lo <= r.at <= hi]
