"""Infrastructure failure or test failure: one verdict per failed job, from what the API records.

A GPU job lost to the machine (a spot reclaim, a runner that went away, a GPU that fell off
the bus) is worth one re-run; a job whose tests failed is not, and re-running it spends GPU
budget on a known result. GitHub does not say which is which, so the verdict is built from
evidence the REST API records, each piece kept with the verdict:

* **the runner's own messages**, as annotations of the job's check run
  (``GET /repos/{o}/{r}/check-runs/{check_run_id}/annotations``): "The runner has received
  a shutdown signal. ..." (actions/runner#2427, #2040) and "The self-hosted runner: <name>
  lost communication with the server. ..." / "The hosted runner: <name> lost ..."
  (actions/runner#2624, #3539);
* **the pytest plugin's annotations** (``gpu_ci.pytest_plugin``, title ``gpu-ci pytest``):
  "<test>: out of memory (<reason>); still failing after N reruns" says the tests ran out of
  GPU memory, the job's own doing;
* **the job's steps**: a job that ended while a step was still ``in_progress`` (or queued),
  with no failed step: the server closed it because the runner stopped reporting; a
  ``failure`` step is the tests' (or the workflow's) own failure;
* **the runner gone**: the job failed with no runner recorded (``runner_name`` null) though
  it had started: supporting only;
* **gpu-monitor's report** (its artifact, read by the report's documented JSON fields, see
  ``actions/gpu-monitor/report.schema.json``: ``findings[].code`` and ``gpus[].lost_at_s``):
  ``gpu-lost`` / ``xid-79`` or a ``lost_at_s`` mean the GPU fell off the bus, which also
  explains a test step that then failed; ``sampler-ended-early`` (the sampler ended with the
  machine, or was killed) is supporting only.

* **a record kept outside the job** (:mod:`.machine`: the cloud's record of the machine,
  ARC's pod and node events, a hook running as another OS user): the only evidence the
  job's code cannot write.

Everything else above is **the job's own evidence**: on a self-hosted runner the job's code
runs as the runner's user, so it can print the runner's messages, stop the runner mid-step
or upload any report under gpu-monitor's name. It still decides (GPU runners do get lost),
but a verdict built on it alone allows one re-run per run at most, and its reason says where
its evidence came from; outside evidence ranks first and allows ``retry-infra-failures``.

Rules, stated once (:func:`classify`):

0. a GPU out-of-memory failure (the plugin's annotation) -> **test**, whatever else was
   recorded: an OOM is never infrastructure, and a re-run would spend GPU time on it again;
1. a GPU lost (monitor or outside record), or an outside record of the machine or runner
   lost -> **infrastructure**, even with a failed step (a CUDA call fails when its GPU
   leaves the bus, a test step fails when its machine is reclaimed);
2. else a failed step -> **test** (whatever else was recorded: never re-run a real failure);
3. else a runner message or an interrupted step -> **infrastructure**;
4. else a job ``cancelled`` -> **cancelled**: stopped with the others (a matrix's
   fail-fast, a concurrency group), neither cause nor test failure; it is re-run with them;
5. else -> **unknown**, which is *not* infrastructure (supporting evidence alone never is).

Everything here is pure: :mod:`gpu_ci.github.watchdog` fetches.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_ci.github.jobs import parse_time
from gpu_ci.github.monitor_artifact import report_versions
from gpu_ci.github.watchdog.machine import SOURCES, MachineRecord, records_for

INFRASTRUCTURE = "infrastructure"
TEST = "test"
UNKNOWN = "unknown"
NOT_FAILED = "not-failed"
CANCELLED = "cancelled"

#: Job conclusions a re-run of failed jobs re-runs (GitHub re-runs failed and cancelled jobs).
FAILED_CONCLUSIONS = ("failure", "cancelled", "timed_out")

#: The runner's message when its process is told to stop mid-job (a node drained or reclaimed).
SHUTDOWN = re.compile(r"The runner has received a shutdown signal")
#: The server's message when a runner stops reporting: "The self-hosted runner: <name> lost
#: communication with the server." (hosted runners: "The hosted runner: <name> lost ...").
LOST = re.compile(
    r"\bThe (?:self-hosted|hosted) runner\b[^\n]{0,300}?\blost communication with the server"
)
#: The pytest plugin's annotation of a test that failed with a GPU out-of-memory error
#: (gpu_ci.pytest_plugin.report.rerun_detail; a test that passed on its rerun says "passed").
#: Anchored at the message's end: a test id quoting the words earlier in a message (an OOM
#: that passed on its rerun, a leak) is not one.
OOM = re.compile(r"\bout of memory \([^\n]{0,300}\); still failing after \d+ reruns?\s*\Z")
OOM_TITLE = "gpu-ci pytest"
#: gpu-monitor's finding codes (src/gpu_ci/cuda/monitor/report.py, ``findings``), by meaning.
GPU_LOST_CODES = ("gpu-lost", "xid-79")
SAMPLER_ENDED = "sampler-ended-early"
#: Runner clock vs GitHub's job times: a report's window may stick out this much.
SLACK_S = 120.0

#: Evidence codes that decide "infrastructure" (rules 1 and 3), the one named first
#: first; the others only support.
STRONG = ("gpu-lost", "machine-lost", "runner-lost", "runner-shutdown", "step-interrupted")
#: Each deciding code in words, for the summary and the commit status.
WORDS = {
    "gpu-lost": "the GPU was lost during the job: it fell off the bus",
    "machine-lost": "the machine went away (reclaimed, stopped or evicted)",
    "runner-lost": "the runner lost communication with the server",
    "runner-shutdown": "the runner received a shutdown signal",
    "step-interrupted": "the runner stopped reporting mid-step",
}
#: Where a job's own evidence is read (the job's code can write each of them).
OWN_SOURCES = ("annotation", "steps", "job", "monitor-report")


@dataclass(frozen=True)
class Evidence:
    """One recorded fact behind a verdict."""

    code: str
    """gpu-oom, gpu-lost, runner-shutdown, runner-lost, step-interrupted, runner-gone,
    sampler-ended, failed-step."""
    source: str
    """Where it was read: ``annotation``, ``steps``, ``job`` or ``monitor-report`` (the
    job's own), or ``cloud``, ``arc``, ``hook`` (outside the job, :mod:`.machine`)."""
    detail: str

    @property
    def outside(self) -> bool:
        """Kept where the job's code cannot write it."""
        return self.source not in OWN_SOURCES

    def origin(self) -> str:
        """Where it came from, in words."""
        if self.outside:
            return f"from outside the job, {SOURCES.get(self.source, self.source)}"
        return "from the job itself, which its code could have written"


@dataclass(frozen=True)
class Verdict:
    """What one failed job's records say about why it failed."""

    job_id: int
    job: str
    kind: str
    """infrastructure, test, cancelled, unknown or not-failed."""
    evidence: tuple[Evidence, ...]
    reason: str
    outside: bool = False
    """The deciding evidence was kept outside the job (:attr:`Evidence.outside`)."""
    cause: str = ""
    """The deciding evidence's code, for an infrastructure verdict."""

    @property
    def infrastructure(self) -> bool:
        return self.kind == INFRASTRUCTURE

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "job": self.job,
            "kind": self.kind,
            "reason": self.reason,
            "outside": self.outside,
            "evidence": [
                {"code": e.code, "source": e.source, "outside": e.outside, "detail": e.detail}
                for e in self.evidence
            ],
        }


def failed(job: Mapping[str, Any]) -> bool:
    return job.get("status") == "completed" and job.get("conclusion") in FAILED_CONCLUSIONS


def annotation_evidence(annotations: Sequence[Mapping[str, Any]]) -> list[Evidence]:
    """The runner's and the pytest plugin's messages among a check run's annotations.

    ``check-annotation``: ``message`` and ``title`` may be null."""
    out: list[Evidence] = []
    for note in annotations:
        text = str(note.get("message") or "")
        if str(note.get("title") or OOM_TITLE) == OOM_TITLE and OOM.search(text):
            out.append(Evidence("gpu-oom", "annotation", text[:200]))
        elif SHUTDOWN.search(text):
            out.append(Evidence("runner-shutdown", "annotation", text[:200]))
        elif LOST.search(text):
            out.append(Evidence("runner-lost", "annotation", text[:200]))
    return out


def step_evidence(job: Mapping[str, Any]) -> list[Evidence]:
    """Failed steps, and steps left running or queued when the job ended."""
    out: list[Evidence] = []
    for step in job.get("steps") or []:
        name = f"step {step.get('number')} '{step.get('name')}'"
        if step.get("conclusion") == "failure":
            out.append(Evidence("failed-step", "steps", f"{name} failed"))
        elif step.get("status") in ("in_progress", "queued", "pending"):
            out.append(
                Evidence(
                    "step-interrupted",
                    "steps",
                    f"{name} was still {step.get('status')} when the job ended",
                )
            )
    if failed(job) and not job.get("runner_name") and job.get("steps"):
        out.append(Evidence("runner-gone", "job", "the job records no runner"))
    return out


def report_window(report: Mapping[str, Any]) -> tuple[float, float] | None:
    """A report's window, in seconds since the epoch.

    (started, ended) of a gpu-monitor report, seconds since the epoch; None if absent."""
    start, end = report.get("started"), report.get("ended")
    if not isinstance(start, (int, float)) or not isinstance(end, (int, float)):
        return None
    return float(start), float(end)


def report_is_for(report: Mapping[str, Any], job: Mapping[str, Any]) -> bool:
    """The report's window lies within the job's start..end (give or take ``SLACK_S``)."""
    window = report_window(report)
    start = parse_time(job.get("started_at"))
    end = parse_time(job.get("completed_at"))
    if window is None or start is None or end is None:
        return False
    return start.timestamp() - SLACK_S <= window[0] and window[1] <= end.timestamp() + SLACK_S


def _entries(report: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    """The mappings of a report's list field.

    The mappings of a report's list field; anything else (a number, a string, a list of
    numbers: PR code can upload any artifact under the monitor's name) counts as absent."""
    value = report.get(key)
    return [e for e in value if isinstance(e, Mapping)] if isinstance(value, list) else []


def monitor_evidence(report: Mapping[str, Any], artifact: str) -> list[Evidence]:
    """The evidence a gpu-monitor report gives.

    GPU lost / Xid 79 / sampler ended, from a report's documented fields
    (``findings[].code``, ``gpus[].lost_at_s``, the same in every version
    ``idle.report_versions()`` names); a report of another schema gives nothing."""
    if report.get("schema_version") not in report_versions():
        return []
    out: list[Evidence] = []
    codes = [str(f.get("code")) for f in _entries(report, "findings")]
    lost = [c for c in codes if c in GPU_LOST_CODES]
    lost_gpus = [
        g.get("index")
        for g in _entries(report, "gpus")
        if isinstance(g.get("lost_at_s"), (int, float))
    ]
    if lost or lost_gpus:
        what = ", ".join(lost) or "lost_at_s"
        gpus = f" (GPU {', '.join(str(i) for i in lost_gpus)})" if lost_gpus else ""
        out.append(Evidence("gpu-lost", "monitor-report", f"{artifact}: {what}{gpus}"))
    if SAMPLER_ENDED in codes:
        out.append(Evidence("sampler-ended", "monitor-report", f"{artifact}: {SAMPLER_ENDED}"))
    return out


def machine_evidence(records: Sequence[MachineRecord], job: Mapping[str, Any]) -> list[Evidence]:
    """The outside records of the job's machine (:func:`.machine.records_for`), as evidence."""
    return [Evidence(r.code, r.source, r.detail or r.code) for r in records_for(records, job)]


def classify(job: Mapping[str, Any], evidence: Sequence[Evidence]) -> Verdict:
    """The verdict for one job, from all its evidence.

    The module's rules decide."""
    name, job_id = str(job.get("name") or ""), int(job.get("id") or 0)
    gathered = tuple(evidence)
    if not failed(job):
        return Verdict(job_id, name, NOT_FAILED, gathered, f"conclusion {job.get('conclusion')}")
    if any(e.code == "gpu-oom" for e in gathered):
        oom = next(e.detail for e in gathered if e.code == "gpu-oom")
        return Verdict(job_id, name, TEST, gathered, f"GPU out of memory: {oom}")
    strong = sorted(
        (e for e in gathered if e.code in STRONG),
        key=lambda e: (not e.outside, STRONG.index(e.code)),
    )
    if strong and (strong[0].outside or strong[0].code == "gpu-lost"):
        return _lost(job_id, name, gathered, strong[0])
    if any(e.code == "failed-step" for e in gathered):
        step = next(e.detail for e in gathered if e.code == "failed-step")
        return Verdict(job_id, name, TEST, gathered, f"{step}: a test (or workflow) failure")
    if strong:
        return _lost(job_id, name, gathered, strong[0])
    if job.get("conclusion") == "cancelled":
        return Verdict(
            job_id, name, CANCELLED, gathered, "cancelled with the others (fail-fast, concurrency)"
        )
    return Verdict(
        job_id,
        name,
        UNKNOWN,
        gathered,
        "no failed step and no record of the runner or GPU going away: not retried",
    )


def _lost(job_id: int, name: str, gathered: tuple[Evidence, ...], first: Evidence) -> Verdict:
    """An infrastructure verdict naming its evidence and where it came from."""
    reason = f"{first.code}: {WORDS[first.code]} ({first.origin()}: {first.detail})"
    return Verdict(job_id, name, INFRASTRUCTURE, gathered, reason, first.outside, first.code)


def needs_report(job: Mapping[str, Any], evidence: Sequence[Evidence]) -> bool:
    """Whether a gpu-monitor report could change the verdict: only a GPU lost overrides a
    failed step or turns an unknown into infrastructure, so a job already called
    infrastructure needs no download."""
    return classify(job, evidence).kind in (TEST, UNKNOWN)


def minutes_of(job: Mapping[str, Any]) -> float:
    """Minutes the job held its runner (started..completed); 0 when either is missing."""
    start, end = parse_time(job.get("started_at")), parse_time(job.get("completed_at"))
    if start is None or end is None or end < start:
        return 0.0
    return (end - start).total_seconds() / 60


def pool_of(job: Mapping[str, Any]) -> str:
    """The runner pool a job asked for: its runner group, else its labels (as gpu-spend's
    ``runner`` column names it)."""
    labels = sorted(str(x) for x in job.get("labels") or [])
    return str(job.get("runner_group_name") or "") or ",".join(labels)


# -- whether a run may be re-run --------------------------------------------------------------


@dataclass(frozen=True)
class RetryDecision:
    """Whether to re-run a run's failed jobs, and why (or why not)."""

    retry: bool
    reason: str
    code: str
    """retry, not-infrastructure, retries-spent, no-gpu-job."""


#: Re-runs a run gets at most when a failed job's verdict rests on its own evidence.
OWN_EVIDENCE_RETRIES = 1


def retry_decision(
    run: Mapping[str, Any], verdicts: Sequence[Verdict], gpu_job_ids: set[int], max_retries: int
) -> RetryDecision:
    """The run-level rule for a re-run of a run's failed jobs.

    Every failed job infrastructure (``rerun-failed-jobs`` re-runs them all, so one test
    failure among them refuses it; jobs cancelled with them neither count nor refuse), at
    least one a GPU job, and the run's attempt still within ``max_retries`` re-runs, or
    within :data:`OWN_EVIDENCE_RETRIES` when a verdict rests on the job's own evidence (the
    job's code could have written it, so it buys no more). Budget and head are the
    caller's checks."""
    attempt = int(run.get("run_attempt") or 1)
    failed_ones = [v for v in verdicts if v.kind not in (NOT_FAILED, CANCELLED)]
    if not any(v.job_id in gpu_job_ids for v in failed_ones):
        return RetryDecision(False, "no failed GPU job", "no-gpu-job")
    others = [v for v in failed_ones if not v.infrastructure]
    if others:
        first = others[0]
        return RetryDecision(
            False, f"job '{first.job}' is a {first.kind} failure: {first.reason}", first.kind
        )
    own = not all(v.outside for v in failed_ones)
    allowed = min(max_retries, OWN_EVIDENCE_RETRIES) if own else max_retries
    if attempt > allowed:
        what = "a second loss on the retry" if attempt > 1 else "retries are off"
        bound = (
            f"; the evidence came from the job itself, so {OWN_EVIDENCE_RETRIES} re-run at most"
            if own and allowed < max_retries
            else ""
        )
        return RetryDecision(
            False,
            f"{what}: attempt {attempt}, retry-infra-failures is {max_retries}{bound}",
            "retries-spent",
        )
    return RetryDecision(True, failed_ones[0].reason, "retry")
