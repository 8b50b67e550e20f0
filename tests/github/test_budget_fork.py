"""Budget a fork cannot move (issue 25 item 3): a queued GPU job reserves budget only when its
run's workflow is this repository's own; runner groups reserve for queued jobs too; fork
pull requests are attributed by their head repository and branch, one row each."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

from gpu_ci.github.jobs import GpuMatcher
from gpu_ci.github.spend import budget
from gpu_ci.pricing import Price, load_table

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)
NOV = budget.Month(2026, 11)
GPU = GpuMatcher(frozenset({"self-hosted", "gpu"}))
PRICE = Price(sku="linux_4_core_gpu")
BASE = {"id": 1296269, "full_name": "octocat/Hello-World"}
FORK = {"id": 4242, "full_name": "mallory/Hello-World"}


def _run(head=BASE, *, event="pull_request", prs=(), branch="feature", run_id=1):
    run = {
        "id": run_id,
        "run_attempt": 1,
        "event": event,
        "status": "queued",
        "path": ".github/workflows/cuda-ci.yml",
        "head_branch": branch,
        "pull_requests": [{"number": n} for n in prs],
        "triggering_actor": {"login": "mallory"},
        "repository": BASE,
        "head_repository": head,
    }
    if head is ...:
        del run["head_repository"]
    return run


def _queued(job_id, labels=("self-hosted", "gpu", "no-such-runner")):
    return {
        "id": job_id,
        "name": f"flood {job_id}",
        "labels": list(labels),
        "status": "queued",
        "conclusion": None,
        "created_at": "2026-11-20T11:59:00Z",
        "started_at": "2026-11-20T11:59:00Z",
        "completed_at": None,
        "runner_name": None,
        "runner_group_name": None,
        "run_attempt": 1,
    }


def _done(job_id, minutes=12):
    return {
        **_queued(job_id, ("self-hosted", "gpu")),
        "status": "completed",
        "conclusion": "success",
        "started_at": "2026-11-20T10:00:00Z",
        "completed_at": f"2026-11-20T10:{minutes:02d}:00Z",
        "runner_name": "gpu-1",
    }


def costs(run, jobs, matcher=GPU, reserve=60):
    costing = budget.Costing(matcher, PRICE, load_table(), reserve, NOV, NOW)
    return budget.job_costs(run, jobs, costing)


def test_a_forks_twenty_queued_jobs_cannot_change_a_decision():
    """The issue's attack: $6.24 spent, a fork's modified workflow queues 20 jobs on a label
    no runner has; each used to reserve 60 min ($68.64 "spent" of $50)."""
    spent = [c for n in range(10) for c in costs(_run(run_id=100 + n), [_done(n)])]
    flood = costs(_run(FORK, branch="main"), [_queued(1000 + n) for n in range(20)])
    assert flood == []
    verdict = budget.check(
        budget.parse_budget("$50"),
        budget.total(spent + flood, "x"),
        60,
        Decimal("0.052"),
    )
    assert verdict.ok and verdict.spent == Decimal("6.240")


def test_a_queued_job_of_this_repositorys_run_reserves():
    for event in ("push", "schedule", "pull_request_target", "pull_request"):
        got = costs(_run(event=event), [_queued(1, ("self-hosted", "gpu"))])
        assert [(c.minutes, c.state) for c in got] == [(60, "reserved")], event


def test_a_run_without_repository_ids_is_not_trusted():
    for run in (_run(None), _run(...), {**_run(), "repository": {"full_name": "x/y"}}):
        assert not budget.run_reserves(run)
        assert costs(run, [_queued(1, ("self-hosted", "gpu"))]) == []


def test_a_forks_job_a_runner_picked_up_is_spend():
    running = {**_queued(1, ("self-hosted", "gpu")), "status": "in_progress"}
    running["runner_name"] = "gpu-1"
    got = costs(_run(FORK), [running, _done(2)])
    assert [(c.job_id, c.state) for c in got] == [(1, "reserved"), (2, "completed")]


def test_a_group_only_gpu_runs_on_reserves_for_queued_jobs():
    group = GpuMatcher.from_runs_on('{"group": "gpu-pool"}')
    waiting = _queued(1, ())
    cpu = _queued(2, ("ubuntu-latest",))
    got = costs(_run(), [waiting, cpu], matcher=group)
    assert [(c.job_id, c.minutes, c.state) for c in got] == [(1, 60, "reserved")]
    assert costs(_run(FORK), [waiting], matcher=group) == []  # not from a fork
    # once a runner of another group picks it up, it is not a GPU job
    other = {**waiting, "status": "in_progress", "runner_name": "r", "runner_group_name": "cpu"}
    assert costs(_run(), [other], matcher=group) == []


def test_fork_pull_requests_are_one_row_each():
    a = costs(_run(FORK, branch="fix-a", run_id=1), [_done(1)])
    b = costs(_run(FORK, branch="fix-b", run_id=2), [_done(2)])
    gone = costs(_run(None, branch="fix-c", run_id=3), [_done(3)])
    ours = costs(_run(prs=(7,), run_id=4), [_done(4)])
    push = costs(_run(event="push", branch="main", run_id=5), [_done(5)])
    assert [c.pull_request for c in a + b + gone + ours + push] == [
        "mallory/Hello-World:fix-a",
        "mallory/Hello-World:fix-b",
        "(deleted fork):fix-c",
        "#7",
        "",
    ]
    rows = budget.breakdown(a + b + gone + ours + push, "pull_request")
    assert len(rows) == 5


def test_the_gate_refuses_nothing_for_a_forks_flood(run_cli, server):
    """Through the CLI and the test server: 10 runs ($6.24) and a fork's run of its own
    workflow with 20 GPU jobs queued on a label no runner has; a $50 budget still runs."""
    from testkit.github.runs import REPO, gate, gpu_run
    from testkit.github_server import Job, WorkflowRun

    for n in range(10):
        gpu_run(server, datetime(2026, 11, 2 + n, 10, tzinfo=timezone.utc), 11.5)
    server.add_repo("mallory/Hello-World")
    flood = WorkflowRun(
        server.next_id(),
        "CUDA CI",
        ".github/workflows/cuda-ci.yml",
        "f" * 40,
        status="queued",
        created_at="2026-11-30T13:00:00Z",
        head_repo="mallory/Hello-World",
        head_branch="main",
    )
    for n in range(20):
        flood.jobs.append(
            Job(
                server.next_id(),
                f"flood {n}",
                ["self-hosted", "gpu", "no-such-runner"],
                created_at="2026-11-30T13:00:00Z",
            )
        )
    server.add_run(REPO, flood)
    args = ["--monthly-budget", "$50", "--gpu-price", "linux_4_core_gpu"]
    args += ["--reserve-minutes", "60", "--gpu-workflows", "cuda-ci.yml"]
    result = gate(run_cli, server, args)
    assert result.outputs["budget-spent"] == "6.24", result.stdout
    assert result.outputs["run"] == "true"
