"""gpu-spend's cloud VM section: gpu-cloud-runner's stop and reap reports (written by the
actions' own code) uploaded as artifacts, found in the one artifact listing of the loopback
server, checked like gpu-monitor's reports; forged, foreign or inflated ones never count."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal

from gpu_ci.cloud import naming
from gpu_ci.cloud.cost import vm_cost
from gpu_ci.cloud.provider import Instance, Market
from gpu_ci.cloud.reap import Leak
from gpu_ci.commands.gpu_cloud_runner_reap import _report as reap_report
from gpu_ci.commands.gpu_cloud_runner_stop import report as stop_report
from testkit.github.runs import REPO, api_calls, gpu_run, iso, spend
from testkit.github_server import WorkflowRun

T0 = datetime(2026, 11, 10, 9, 0, tzinfo=timezone.utc)
NO_LEDGER = ["--reuse-ledger", "none", "--monitor-artifacts", "none"]


def _vm(run_id: int, launched: datetime, price: str = "1.006") -> Instance:
    tags = {**naming.Owner(REPO, run_id, 1, "gpu").tags(), naming.PRICE: price}
    return Instance(
        f"i-{run_id:017x}", "g5.xlarge", "us-east-1a", "terminated", launched, tags, Market.SPOT
    )


def _stop_doc(run_id: int, launched: datetime, minutes: int, **over: object) -> dict:
    owner = naming.Owner(REPO, run_id, 1, "gpu")
    doc = stop_report(
        owner, [vm_cost(_vm(run_id, launched), launched + timedelta(minutes=minutes))]
    )
    doc.update(over)
    return doc


def _put(server, run_id, doc, at, name="gpu-cloud-runner-gpu", **kw):
    return server.add_artifact(
        REPO,
        f"{name}-{run_id}",
        {"gpu-cloud-runner-gpu.json": json.dumps(doc).encode()},
        run_id=run_id,
        created_at=iso(at),
        **kw,
    )


def _reaper_run(server, at: datetime, branch: str = "main") -> WorkflowRun:
    run = WorkflowRun(
        server.next_id(),
        "GPU cloud reaper",
        ".github/workflows/gpu-cloud-reaper.yml",
        "c" * 40,
        event="schedule",
        status="completed",
        conclusion="success",
        head_branch=branch,
        created_at=iso(at),
    )
    return server.add_run(REPO, run)


def test_vm_minutes_and_cost_come_from_trusted_reports_only(run_cli, server, tmp_path):
    ok = gpu_run(server, T0, 30)
    _put(server, ok.id, _stop_doc(ok.id, T0 + timedelta(minutes=1), 40), T0 + timedelta(minutes=42))
    # the same run's second report (a re-upload, or a forger's 0 minutes): the VM counts once
    again = _stop_doc(ok.id, T0 + timedelta(minutes=1), 0)
    _put(server, ok.id, again, T0 + timedelta(minutes=43), name="gpu-cloud-runner-again")
    fork = gpu_run(server, T0 + timedelta(days=1), 5)
    _put(server, fork.id, _stop_doc(fork.id, T0, 500), T0 + timedelta(days=1), fork=True)
    inflated = gpu_run(server, T0 + timedelta(days=2), 5)
    at = T0 + timedelta(days=2)
    _put(server, inflated.id, _stop_doc(inflated.id, at, 10_000), at + timedelta(minutes=9))
    dear = _stop_doc(inflated.id, at, 5)
    dear["vms"][0]["usd_per_hour"] = "1e9"
    _put(server, inflated.id, dear, at + timedelta(minutes=9), name="gpu-cloud-runner-dear")
    other = _stop_doc(ok.id, T0, 30)  # names another run than its own
    _put(server, inflated.id, other, at + timedelta(minutes=9), name="gpu-cloud-runner-other")
    # a leak the stop never reported: the reaper's report, made on the default branch
    leaked_run = gpu_run(server, T0 + timedelta(days=3), 5)
    launched, now = T0 + timedelta(days=3, minutes=1), T0 + timedelta(days=3, minutes=201)
    vm = _vm(leaked_run.id, launched, price="1.2")
    reap = json.loads(
        reap_report([Leak(vm, "expired", launched + timedelta(minutes=50), now)], [], False)
    )
    reaper = _reaper_run(server, now)
    _put(server, reaper.id, reap, now, name="gpu-cloud-runner-reap", head_branch="main")
    branch = _reaper_run(server, now, branch="feature")
    _put(server, branch.id, reap, now, name="gpu-cloud-runner-reap-pr", head_branch="feature")
    before = len(server.log)
    result = spend(run_cli, server, tmp_path, NO_LEDGER)
    assert result.returncode == 0, result.stdout
    calls = [r.path for r in api_calls(server, before)]
    assert len([p for p in calls if p.endswith("/zip")]) == 7
    assert len([p for p in calls if p.endswith("/actions/artifacts")]) == 1  # one listing
    doc = json.loads((tmp_path / "out" / "spend.json").read_text())
    section = doc["cloud"]
    assert (section["vms"], section["minutes"]) == (2, 240)
    # 40 min at $1.006/h + 200 min at $1.20/h; 150 of those leaked
    assert Decimal(section["usd"]) == Decimal("0.6707") + Decimal("4.0000")
    assert (section["leaked_minutes"], section["leaked_usd"]) == (150, "3.0000")
    assert [r["key"] for r in section["by_workflow"]] == ["cuda-ci.yml"]
    assert {r["key"]: r["minutes"] for r in section["by_run"]} == {
        str(ok.id): 40,
        str(leaked_run.id): 200,
    }
    skipped = " ".join(section["skipped"])
    assert "fork's run" in skipped and "10000 min is more than" in skipped
    assert "'1e9' is not from 0 to 1000" in skipped and "not its own run" in skipped
    assert "default branch" in skipped
    assert section["reports_read"] == 5  # ok, again, inflated, dear (their VMs refused), reap
    assert doc["minutes"] == 45  # the GPU jobs' count is unchanged: VM cost is beside it
    assert result.outputs["vm-cost"] == "4.67"
    assert "Cloud GPU VMs" in result.summary and "| cuda-ci.yml | 2 | 240 |" in result.summary


def test_no_cloud_report_is_one_listing_and_none_turns_it_off(run_cli, server, tmp_path):
    gpu_run(server, T0, 3)
    before = len(server.log)
    result = spend(run_cli, server, tmp_path, ["--reuse-ledger", "none"])
    assert result.returncode == 0, result.stdout
    calls = [r.path for r in api_calls(server, before)]
    assert len([p for p in calls if "/artifacts" in p]) == 1  # shared with gpu-monitor's
    assert result.outputs["vm-cost"] == ""
    off = spend(run_cli, server, tmp_path / "off", [*NO_LEDGER, "--cloud-artifacts", "none"])
    assert "cloud" not in json.loads((tmp_path / "off" / "out" / "spend.json").read_text())
    assert not [r for r in api_calls(server, before + len(calls)) if "/artifacts" in r.path]
    assert off.returncode == 0


def test_a_broken_report_is_a_note_not_a_failure(run_cli, server, tmp_path):
    run = gpu_run(server, T0, 3)
    server.add_artifact(REPO, "gpu-cloud-runner-x", {"a.json": b"{"}, run_id=run.id)
    wrong = _stop_doc(run.id, T0, 3, kind="gpu-monitor")
    _put(server, run.id, wrong, T0 + timedelta(minutes=5))
    result = spend(run_cli, server, tmp_path, NO_LEDGER)
    assert result.returncode == 0, result.stdout
    section = json.loads((tmp_path / "out" / "spend.json").read_text())["cloud"]
    assert section["reports_read"] == 0 and len(section["skipped"]) == 2
    assert result.outputs["vm-cost"] == ""
