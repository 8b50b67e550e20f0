"""GPU runs on the loopback GitHub server, and actions run against them.

A month of runs, gpu-gate's and gpu-spend's runs through the CLI, and builders of runs,
jobs and webhooks: what the budget, spend, status and watchdog tests (and the act tests, and
`make demo`) share. The ``server`` fixture is in tests/github/conftest.py."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

from testkit.github_server import Job, WorkflowRun
from testkit.shared import webhook

REPO = "Codertocat/Hello-World"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
WF = ".github/workflows/cuda-ci.yml"
NOW = "2026-11-30T14:00:00Z"
GATE_CALLS = 2  # the labeller's role and the pull request


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def gate_job(gh, created: str, completed: str | None, runner: str, attempt: int = 1):
    """The gate job of a CUDA CI run: it took a CPU ``runner`` at ``created`` and passed."""
    return Job(
        gh.next_id(),
        "gate",
        ["ubuntu-latest"],
        status="completed",
        conclusion="success",
        created_at=created,
        started_at=created,
        completed_at=completed,
        runner_name=runner,
        run_attempt=attempt,
    )


def usage_item(
    repo: str,
    quantity: int,
    amount: float,
    *,
    sku: str,
    date: str = "2026-11-03T00:00:00Z",
    unit: str = "Minutes",
) -> dict[str, Any]:
    """One row of an organization's billing usage report, at $0.052 a minute.

    ``repo`` is ``org/name``; ``amount`` is the gross and net amount in USD."""
    org, name = repo.split("/")
    return {
        "date": date,
        "product": "actions",
        "sku": sku,
        "quantity": quantity,
        "unitType": unit,
        "pricePerUnit": 0.052,
        "grossAmount": amount,
        "discountAmount": 0,
        "netAmount": amount,
        "organizationName": org,
        "repositoryName": name,
    }


def gpu_job(
    gh,
    started: str,
    completed: str | None = None,
    *,
    conclusion: str = "success",
    runner: str = "gpu-1",
    attempt: int = 1,
    labels=("self-hosted", "gpu"),
    name: str = "tests",
    created: str | None = None,
):
    """A GPU job: it took ``runner`` at ``started``; ``completed`` when it ended.

    Without ``completed`` it is still in progress; ``created`` defaults to ``started``."""
    done = completed is not None
    return Job(
        gh.next_id(),
        name,
        list(labels),
        status="completed" if done else "in_progress",
        conclusion=conclusion if done else None,
        created_at=created or started,
        started_at=started,
        completed_at=completed,
        runner_name=runner,
        run_attempt=attempt,
    )


def gpu_run(
    gh,
    start: datetime,
    minutes: float,
    *,
    pr=2,
    who="Codertocat",
    attempt=1,
    status="completed",
    labels=("self-hosted", "gpu"),
    event="pull_request",
    path=WF,
):
    """A run of the CUDA CI workflow: a gate job on a CPU runner, a GPU job of ``minutes``."""
    run = WorkflowRun(
        gh.next_id(),
        "CUDA CI",
        path,
        HEAD,
        event=event,
        status=status,
        conclusion="success" if status == "completed" else None,
        created_at=iso(start),
        run_attempt=attempt,
        triggering_actor=who,
        pull_requests=[pr] if pr else [],
    )
    end = start + timedelta(minutes=minutes)
    run.jobs.append(gate_job(gh, iso(start), iso(start + timedelta(seconds=20)), "cpu"))
    gpu = Job(
        gh.next_id(),
        "tests",
        list(labels),
        status=status,
        created_at=iso(start),
        started_at=iso(start),
        runner_name="gpu-1",
        run_attempt=attempt,
    )
    if status == "completed":
        gpu.conclusion, gpu.completed_at = "success", iso(end)
    run.jobs.append(gpu)
    return gh.add_run(REPO, run)


#: When a job was created, started and completed (GitHub's timestamps).
Times = tuple[str, str, str]


def played_run(gh, gate: Times, gpu: Times, *, repo=REPO, sha=HEAD, path=WF, **fields):
    """A CUDA CI run: its gate and GPU jobs ran at these times."""
    run = WorkflowRun(gh.next_id(), "CUDA CI", path, sha, **fields)
    run.jobs = [
        Job(gh.next_id(), "gate", ["ubuntu-latest"], created_at=gate[0]),
        Job(gh.next_id(), "tests", ["self-hosted", "gpu"], created_at=gpu[0]),
    ]
    gh.add_run(repo, run)
    for job, (_, started, completed) in zip(run.jobs, (gate, gpu)):
        gh.start_job(job.id, started)
        gh.complete_job(job.id, completed)
    return run


def stuck_run(
    gh,
    created: str,
    queued_since: str,
    *,
    sha: str | None = HEAD,
    runner: str = "GitHub Actions 2",
    labels=("self-hosted", "gpu"),
    status: str = "queued",
    path: str = WF,
    extra_jobs=(),
    repo: str = REPO,
):
    """A CUDA CI run in progress: its gate job took a CPU ``runner`` at ``created``, its GPU
    job ``tests`` has waited since ``queued_since``. ``sha=None``: a fresh head."""
    run_id = gh.next_id()
    run = WorkflowRun(
        run_id,
        "CUDA CI",
        path,
        sha or f"{gh.next_id():040d}",
        status="in_progress",
        created_at=created,
    )
    run.jobs.append(gate_job(gh, created, None, runner))
    run.jobs.append(
        Job(gh.next_id(), "tests", list(labels), status=status, created_at=queued_since)
    )
    run.jobs.extend(extra_jobs)
    return gh.add_run(repo, run)


def forged_review_run(gh, at: Times, *, repo=REPO):
    """A fork's workflow named ``CUDA CI`` on pull_request_review: its job ``tests`` ran
    on ubuntu-latest at ``at`` (the forged-success attack on gpu-status)."""
    run = WorkflowRun(
        gh.next_id(),
        "CUDA CI",
        ".github/workflows/fake.yml",
        HEAD,
        event="pull_request_review",
        actor="contributor",
    )
    run.jobs = [Job(gh.next_id(), "tests", ["ubuntu-latest"], created_at=at[0])]
    gh.add_run(repo, run)
    gh.start_job(run.jobs[0].id, at[1])
    gh.complete_job(run.jobs[0].id, at[2])
    return run


def finished_jobs(gh, count: int, at: Times, *, runner: str, name="lint ({n})", labels=None):
    """``count`` successful jobs (``name`` formatted with ``n``), all run at ``at``."""
    return [
        Job(
            gh.next_id(),
            name.format(n=n),
            list(labels or ["ubuntu-latest"]),
            status="completed",
            conclusion="success",
            created_at=at[0],
            started_at=at[1],
            completed_at=at[2],
            runner_name=runner,
        )
        for n in range(count)
    ]


def run_event(run, action: str = "completed", **fields):
    """The ``workflow_run`` webhook of ``run`` (GitHub's example, with the run's fields)."""
    event = webhook("workflow_run.completed.with-pull-requests")
    event["action"] = action
    event["workflow_run"].update(id=run.id, head_sha=run.head_sha, path=run.path, **fields)
    return event


FORK = "contributor/Hello-World"


def approved_run_event(action: str, created_at: str, **fields):
    """The ``workflow_run`` webhook of run 5: attempt 1 of the GPU workflow on a fork's
    pull request at ``HEAD``, triggered by @maintainer (the approved run)."""
    event = webhook("workflow_run.completed.with-pull-requests")
    event["action"] = action
    event["workflow_run"].update(
        id=5,
        head_sha=HEAD,
        event="pull_request",
        run_attempt=1,
        pull_requests=[],
        path=WF,
        html_url=f"https://github.com/{REPO}/actions/runs/5",
        created_at=created_at,
        triggering_actor={"login": "maintainer"},
        head_repository={"full_name": FORK},
    )
    event["workflow_run"].update(fields)
    return event


def watchdog_env(github, repo: str = REPO, token: str = "watchdog-token", **inputs: str):
    """gpu-watchdog's environment on ``repo`` for cuda-ci.yml, with these ``INPUT_*``."""
    return {
        "GITHUB_API_URL": github.url,
        "GITHUB_REPOSITORY": repo,
        "GITHUB_TOKEN": token,
        "INPUT_WORKFLOWS": "cuda-ci.yml",
        **inputs,
    }


def gate_env(server, repo: str = REPO) -> dict[str, str]:
    """gpu-gate's environment on ``repo``: the API, a token, the merge commit."""
    return {
        "GITHUB_API_URL": server.url,
        "GITHUB_REPOSITORY": repo,
        "INPUT_GITHUB_TOKEN": "ghs_secret",
        "GITHUB_SHA": "d" * 40,
    }


def month_of_runs(gh, per_day=10, days=30, minutes=11.5):
    """``per_day × days`` GPU runs in November 2026.

    Each is billed 12 minutes ($0.624)."""
    for day in range(1, days + 1):
        for hour in range(per_day):
            gpu_run(
                gh,
                datetime(2026, 11, day, hour, 5, tzinfo=timezone.utc),
                minutes,
                pr=100 + hour % 3,
                who=("alice", "bob")[hour % 2],
            )


BUDGET = [
    "--monthly-budget",
    "$500",
    "--gpu-price",
    "linux_4_core_gpu",
    "--reserve-minutes",
    "60",
    "--gpu-workflows",
    "cuda-ci.yml",
]

#: gpu-runs-on has no default: the GPU runners these runs use.
GPU_RUNS_ON = {"INPUT_GPU_RUNS_ON": '["self-hosted", "gpu"]'}


def labeled(name: str = "CUDA CI"):
    """GitHub's example ``pull_request`` labeled webhook, for the label ``name``."""
    event = webhook("pull_request.labeled")
    event["label"]["name"] = name
    return event


def gate(run_cli, server, args=(), env=None):
    event = labeled()
    full_env = {**gate_env(server), "GPU_CI_NOW": NOW, **GPU_RUNS_ON}
    full_env.update(env or {})
    return run_cli(["gpu-gate", *args], full_env, event=event, event_name="pull_request")


def spend(run_cli, server, tmp_path, args=(), env=None):
    full_env = {
        "GITHUB_API_URL": server.url,
        "GITHUB_REPOSITORY": REPO,
        "INPUT_GITHUB_TOKEN": "ghs_secret",
        "GPU_CI_NOW": "2026-11-30T12:00:00Z",
        **GPU_RUNS_ON,
    }
    full_env.update(env or {})
    return run_cli(
        [
            "gpu-spend",
            "--output-dir",
            str(tmp_path / "out"),
            "--gpu-price",
            "linux_4_core_gpu",
            "--gpu-workflows",
            "cuda-ci.yml",
            *args,
        ],
        full_env,
    )


def upload_ledger(gh, ledger: bytes, *, created_at="2026-11-30T12:01:00Z", event="schedule"):
    """gpu-spend's ledger artifact as its hourly run leaves it: uploaded by a ``schedule``
    run of gpu-spend.yml on the default branch (``master``) of this repository."""
    run = gh.add_run(
        REPO,
        WorkflowRun(
            gh.next_id(),
            "GPU spend",
            ".github/workflows/gpu-spend.yml",
            HEAD,
            event=event,
            status="completed",
            conclusion="success",
            head_branch="master",
            created_at=created_at,
            actor="github-actions[bot]",
        ),
    )
    return gh.add_artifact(
        REPO,
        "gpu-spend-ledger",
        {"gpu-spend-ledger.json": ledger},
        head_branch="master",
        run_id=run.id,
        created_at=created_at,
    )


def api_calls(server, after=0):
    """REST calls (the artifact's storage download is not the API)."""
    return [r for r in server.log[after:] if not r.path.startswith("/_blobs/")]


def monitor_report(monkeypatch, job_start: datetime) -> dict:
    """A real gpu-monitor JSON report (``gpu_ci.cuda.monitor.views.as_json`` of the README's
    example recording: a 175 s job, sampler from +25 s, 55 s busy), recorded by a job that
    started at ``job_start``."""
    import testkit.gpu_monitor_env as env
    from gpu_ci.cuda.monitor import views as mr

    monkeypatch.setattr(env, "EPOCH", job_start.timestamp() + 25)
    return mr.as_json(env.example_report())


def upload(gh, run, report, name="gpu-monitor-tests", **kw):
    return gh.add_artifact(
        REPO,
        name,
        {"report.json": json.dumps(report).encode()},
        run_id=run.id,
        created_at=run.created_at,
        **kw,
    )


def watchdog_config(**kw):
    """gpu-watchdog's configuration for the tests: GPU jobs labelled ``gpu``, cancelled after
    60 minutes queued; ``kw`` overrides any field of ``watchdog.WatchdogInputs``."""
    from gpu_ci.github import watchdog

    args = dict(
        workflows=[],
        labels=["gpu"],
        max_queue_minutes="60",
        cancel=True,
        context="GPU CI",
        max_calls="200",
        rate_reserve="0",
    )
    args.update(kw)
    return watchdog.make_config(watchdog.WatchdogInputs(**args))


def retry_config(**kw):
    """:func:`watchdog_config` for the retry tests: cuda-ci.yml's GPU jobs, one retry of an
    infrastructure failure."""
    return watchdog_config(**{"workflows": ["cuda-ci.yml"], "retry_infra_failures": "1", **kw})


#: A fork's own workflow file: what it runs on a GPU runner, no approval asked.
MINER = ".github/workflows/miner.yml"


def hostile_gpu_hours(
    server: Any,
    asked: tuple[str, ...],
    runner_labels: tuple[str, ...],
    group: str | None = None,
    event: str = "pull_request",
) -> WorkflowRun:
    """A fork's ``miner.yml`` job asking for ``asked`` that ran 200 h on the one runner.

    The runner ``gpu-1`` carries ``runner_labels`` (and sits in ``group``), so GitHub gives
    it the job whatever kind the job's labels look like."""
    from testkit.github_server import add_runner

    add_runner(server, REPO, "gpu-1", labels=list(runner_labels), status="online")
    start = datetime(2026, 11, 20, 1, tzinfo=timezone.utc)
    run = gpu_run(server, start, 200 * 60, path=MINER, labels=asked, event=event)
    if group is not None:
        next(j for j in run.jobs if j.runner_name == "gpu-1").runner_group_name = group
    return run


def assert_refused_at(result: Any, spent: str) -> None:
    """The gate ran, counted ``spent`` this month, and refused: over the budget."""
    assert result.returncode == 0, result.stdout
    assert result.outputs["budget-spent"] == spent, result.stdout
    assert result.outputs["run"] == "false", result.stdout
