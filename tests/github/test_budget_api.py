"""gpu-gate's budget check and gpu-spend through the CLI, PyGithub and the loopback server:
a month of GPU runs, the ledger artifact and what may not write it, the billing report, faults
and the number of REST calls a decision costs."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from testkit.github.runs import (
    BUDGET,
    GATE_CALLS,
    REPO,
    api_calls,
    gate,
    gpu_job,
    gpu_run,
    month_of_runs,
    spend,
    upload_ledger,
    usage_item,
)


def test_over_budget_refuses_with_reason_outputs_and_summary(run_cli, server):
    month_of_runs(server, per_day=2, days=10)  # 20 runs × $0.624 = $12.48
    result = gate(
        run_cli,
        server,
        [
            "--monthly-budget",
            "$15",
            "--gpu-price",
            "linux_4_core_gpu",
            "--reserve-minutes",
            "60",
            "--gpu-workflows",
            "cuda-ci.yml",
        ],
    )
    assert result.returncode == 0, result.stdout
    out = result.outputs
    assert out["run"] == "false" and out["runs-on"] == '"ubuntu-latest"'
    assert out["budget-spent"] == "12.48" and out["budget-left"] == "2.52"
    assert "$12.48 of $15.00" in out["reason"] and "reserves $3.12" in out["reason"]
    assert "| budget verdict | **over: refused** |" in result.summary
    assert "| decision | skip |" in result.summary


def test_within_budget_runs_and_says_how_much_is_left(run_cli, server):
    month_of_runs(server, per_day=2, days=10)
    result = gate(
        run_cli,
        server,
        [
            "--monthly-budget",
            "$20",
            "--gpu-price",
            "0.052",
            "--reserve-minutes",
            "60",
            "--gpu-workflows",
            "cuda-ci.yml",
        ],
    )
    assert result.outputs["run"] == "true", result.stdout
    assert result.outputs["budget-left"] == "7.52"
    assert "| budget verdict | within |" in result.summary


def test_minutes_budget_counts_running_jobs_reservation_and_skips_own_run(run_cli, server):
    gpu_run(
        server, datetime(2026, 11, 30, 13, 50, tzinfo=timezone.utc), 0, status="in_progress"
    )  # 10 min so far: reserve 60
    done = gpu_run(server, datetime(2026, 11, 3, 10, tzinfo=timezone.utc), 100)  # 100 min
    own = gpu_run(
        server, datetime(2026, 11, 30, 13, 59, tzinfo=timezone.utc), 0, status="queued"
    )  # this run: not counted
    result = gate(
        run_cli,
        server,
        [
            "--monthly-budget",
            "220 minutes",
            "--reserve-minutes",
            "60",
            "--gpu-workflows",
            "cuda-ci.yml",
        ],
        env={"GITHUB_RUN_ID": str(own.id), "GITHUB_RUN_ATTEMPT": "1"},
    )
    assert result.outputs["budget-spent"] == "160", result.stdout
    assert result.outputs["run"] == "true"  # 160 + 60 = 220: within
    assert done.id
    result = gate(
        run_cli,
        server,
        [
            "--monthly-budget",
            "219 minutes",
            "--reserve-minutes",
            "60",
            "--gpu-workflows",
            "cuda-ci.yml",
        ],
        env={"GITHUB_RUN_ID": str(own.id), "GITHUB_RUN_ATTEMPT": "1"},
    )
    assert result.outputs["run"] == "false"


def test_reruns_cancelled_and_other_workflows(run_cli, server):
    run = gpu_run(server, datetime(2026, 11, 3, 10, tzinfo=timezone.utc), 10, attempt=1)
    rerun = gpu_job(
        server,
        "2026-11-03T11:00:00Z",
        "2026-11-03T11:03:10Z",
        conclusion="cancelled",
        runner="gpu-2",
        attempt=2,
    )
    run.jobs.append(rerun)
    run.run_attempt = 2
    gpu_run(
        server,
        datetime(2026, 11, 3, 10, tzinfo=timezone.utc),
        500,
        path=".github/workflows/nightly.yml",
    )  # another workflow's GPU job: counted too, gpu-workflows narrows nothing
    gpu_run(server, datetime(2026, 10, 31, 23, 0, tzinfo=timezone.utc), 500)  # October
    result = gate(
        run_cli, server, ["--monthly-budget", "1000 minutes", "--gpu-workflows", "cuda-ci.yml"]
    )
    assert result.outputs["budget-spent"] == "514", result.stdout  # 10 + 4 + 500
    assert "'gpu-workflows' is deprecated" in result.stdout


@pytest.mark.slow
def test_a_month_of_300_runs_costs_nine_calls_with_the_ledger(run_cli, server, tmp_path):
    month_of_runs(server)  # 300 GPU runs, $187.20
    report = spend(run_cli, server, tmp_path)
    assert report.returncode == 0, report.stdout
    assert report.outputs["minutes"] == "3600" and report.outputs["cost"] == "187.20"
    full_scan = len(api_calls(server))
    # the repository's default branch and the ledger's listing (none yet), 3 pages of runs,
    # the jobs of each, the gpu-monitor artifacts
    assert full_scan == 2 + 303 + 1
    ledger = (tmp_path / "out" / "gpu-spend-ledger.json").read_bytes()
    upload_ledger(server, ledger, created_at="2026-11-30T12:01:00Z")
    # what a pull request could upload under the same name: claims nothing was spent
    empty = json.loads(ledger)
    empty["jobs"] = []
    for poison in ({"head_branch": "feature"}, {"head_branch": "master", "fork": True}):
        server.add_artifact(
            REPO,
            "gpu-spend-ledger",
            {"gpu-spend-ledger.json": json.dumps(empty).encode()},
            created_at="2026-11-30T13:00:00Z",
            **poison,
        )
    gpu_run(server, datetime(2026, 11, 30, 13, 0, tzinfo=timezone.utc), 11.5)  # since then
    before = len(server.log)
    result = gate(run_cli, server, BUDGET)
    assert result.outputs["run"] == "true", result.stdout
    assert result.outputs["budget-spent"] == "187.82"  # 301 × $0.624: the poison is ignored
    calls = api_calls(server, before)
    budget_calls = [r.path for r in calls[GATE_CALLS:]]
    # the ledger's listing, its run, its download, 4 pages of runs (30 days before the
    # ledger: re-runs), the jobs of the one new run and of the run that wrote the ledger (a
    # run of another workflow: every workflow's GPU jobs count)
    assert len(budget_calls) <= 9, budget_calls
    assert budget_calls[0].endswith("/actions/artifacts")
    assert budget_calls[1].endswith(f"/actions/runs/{server_ledger_run(server)}")  # its event
    assert budget_calls[2].endswith("/zip") and budget_calls[-1].endswith("/jobs")
    assert "ledger artifact #" in result.summary
    # without a ledger the same decision reads the whole month again
    before = len(server.log)
    result = gate(run_cli, server, [*BUDGET, "--budget-ledger", ""])
    assert result.outputs["budget-spent"] == "187.82"
    # 4 pages of runs + the jobs of the 301 GPU runs and of the ledger's run
    assert len(api_calls(server, before)) - GATE_CALLS == 4 + 302


def server_ledger_run(server) -> int:
    """The run that uploaded the trusted ledger (the one of gpu-spend.yml)."""
    return next(r.id for r in server.repos[REPO].runs if r.path.endswith("gpu-spend.yml"))


def test_a_rerun_after_the_ledger_is_fetched_again(run_cli, server, tmp_path):
    run = gpu_run(server, datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc), 10)
    spend(run_cli, server, tmp_path)
    upload_ledger(server, (tmp_path / "out" / "gpu-spend-ledger.json").read_bytes())
    run.run_attempt, run.status = 2, "in_progress"
    run.jobs.append(gpu_job(server, "2026-11-30T13:55:00Z", attempt=2))
    result = gate(
        run_cli,
        server,
        [*BUDGET[:-2], "--gpu-workflows", "cuda-ci.yml", "--monthly-budget", "1000 minutes"],
    )
    assert result.outputs["budget-spent"] == "70", result.stdout  # 10 + reserved 60


def test_a_run_still_going_when_the_ledger_was_written_is_counted(run_cli, server, tmp_path):
    long = gpu_run(
        server, datetime(2026, 11, 29, 23, 0, tzinfo=timezone.utc), 0, status="in_progress"
    )  # yesterday, still running
    gpu_run(server, datetime(2026, 11, 29, 9, 0, tzinfo=timezone.utc), 10)
    spend(run_cli, server, tmp_path)
    upload_ledger(server, (tmp_path / "out" / "gpu-spend-ledger.json").read_bytes())
    server.complete_job(long.jobs[1].id, "2026-11-30T13:00:00Z")  # 14 hours on the GPU
    result = gate(
        run_cli,
        server,
        [*BUDGET[:-2], "--gpu-workflows", "cuda-ci.yml", "--monthly-budget", "10000 minutes"],
    )
    assert result.outputs["budget-spent"] == str(10 + 14 * 60), result.stdout
    runs_query = [r.query["created"] for r in server.log if r.path.endswith("/runs")]
    assert runs_query[-1] == ["2026-10-30..2026-11-30"]  # re-runs: 30 days before the ledger


def test_billing_token_reads_the_usage_report(run_cli, server):
    server.add_org(
        "Codertocat",
        billing_tokens={"billing-secret"},
        usage_items=[
            usage_item("Codertocat/Hello-World", 250, 13.0, sku="Actions Linux 4-core GPU"),
            usage_item("Codertocat/other", 1000, 52.0, sku="Actions Linux 4-core GPU"),
        ],
    )
    gpu_run(server, datetime(2026, 11, 3, 10, tzinfo=timezone.utc), 250)  # in the report
    result = gate(
        run_cli, server, [*BUDGET, "--monthly-budget", "$15", "--billing-token", "billing-secret"]
    )
    assert result.outputs["budget-spent"] == "13.00", result.stdout
    assert result.outputs["run"] == "false"  # 13 + 3.12 > 15
    gpu_run(
        server, datetime(2026, 11, 30, 13, 30, tzinfo=timezone.utc), 0, status="in_progress"
    )  # not in the report yet: reserves 60 min
    result = gate(
        run_cli, server, [*BUDGET, "--monthly-budget", "$20", "--billing-token", "billing-secret"]
    )
    assert result.outputs["budget-spent"] == "16.12", result.stdout  # 13 + 3.12
    assert "1 GPU jobs running now" in result.summary
    assert "::add-mask::billing-secret" in result.stdout
    billing = [r for r in server.log if "billing" in r.path]
    assert billing[0].query == {"year": ["2026"], "month": ["11"]}
    assert billing[0].headers["Authorization"] == "token billing-secret"
    org = gate(
        run_cli,
        server,
        [
            *BUDGET,
            "--monthly-budget",
            "$100",
            "--billing-token",
            "billing-secret",
            "--budget-scope",
            "organization",
        ],
    )
    assert org.outputs["budget-spent"] == "68.12"  # 13 + 52 + 3.12 running


@pytest.mark.parametrize(
    ("org", "words"), [(True, "Administration: read"), (False, "organizations only")]
)
def test_billing_403_and_404_name_the_fix(run_cli, server, org, words):
    if org:
        server.add_org("Codertocat", billing_tokens={"other"})
    result = gate(run_cli, server, [*BUDGET, "--billing-token", "weak"])
    assert result.returncode == 1
    assert result.outputs["run"] == "false"
    assert words in result.outputs["reason"] and words in "".join(result.errors)


def test_api_failure_follows_budget_on_unknown(run_cli, server):
    server.inject("GET", r"/actions/runs$", 502, times=50)
    refused = gate(run_cli, server, BUDGET)
    assert refused.returncode == 0 and refused.outputs["run"] == "false"
    assert "could not be read" in refused.outputs["reason"]
    assert "GPU jobs of every workflow" in refused.outputs["reason"]
    assert "502" in refused.outputs["reason"]
    allowed = gate(run_cli, server, [*BUDGET, "--budget-on-unknown", "run"])
    assert allowed.outputs["run"] == "true"
    assert any(line.startswith("::warning") for line in allowed.stdout.splitlines())


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--monthly-budget", "50"], "no unit"),
        (["--monthly-budget", "-5 USD"], "negative"),
        (["--gpu-price", "linux_8_core_gpu"], "known GitHub-hosted GPU SKU"),
        (["--budget-on-unknown", "maybe"], "refuse or run"),
    ],
)
def test_bad_budget_inputs_are_usage_errors_before_any_call(run_cli, server, args, words):
    result = gate(run_cli, server, [*BUDGET, *args])
    assert result.returncode == 2, result.stdout
    assert words in "".join(result.errors)
    assert server.log == []


def test_no_budget_no_extra_call(run_cli, server):
    month_of_runs(server, per_day=1, days=2)
    result = gate(run_cli, server)
    assert result.outputs["run"] == "true" and "budget-spent" not in result.outputs
    assert len(server.log) == GATE_CALLS


def test_a_budget_without_gpu_runs_on_is_a_usage_error_before_any_call(run_cli, server, tmp_path):
    # gpu-runs-on has no default (no self-hosted runner is assumed): the budget needs it.
    before = len(server.log)
    result = gate(run_cli, server, BUDGET, env={"INPUT_GPU_RUNS_ON": ""})
    assert result.returncode == 2 and "needs 'gpu-runs-on'" in result.stdout
    assert len(server.log) == before
    out = spend(run_cli, server, tmp_path, env={"INPUT_GPU_RUNS_ON": ""})
    assert out.returncode == 2 and "needs 'gpu-runs-on' or 'gpu-runner-kinds'" in out.stdout
