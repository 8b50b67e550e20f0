"""`make demo`: the example workflows under act against a local GitHub API server.

Nothing leaves this machine: the GitHub REST API is the test suite's loopback server,
act runs the jobs in host mode (no Docker), and our actions are mapped from this working
tree. Each scenario prints the action's decision and its job summary.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testkit.act_runner import run_act  # noqa: E402
from testkit.events import HEAD, REPO  # noqa: E402
from testkit.events import pull_request_labeled as labeled_event  # noqa: E402
from testkit.github_server import FakeGitHub, PullRequest  # noqa: E402


def show(title: str, result, keys: list[str]) -> bool:
    print(f"\n=== {title}")
    for line in result.log.splitlines():
        text = line.split("|", 1)[-1].strip() if "|" in line[:40] else ""
        if text.strip("| ") and text.startswith(
            (
                "gpu-gate:",
                "remove-label:",
                "verify-cuda-env:",
                "setup-conda-from-lock:",
                "gpu-status:",
                "gpu-watchdog:",
                "gpu-spend:",
                "gpu-monitor:",
                "gpu-lease:",
                "| ",
                "### ",
            )
        ):
            print("   ", text)
    for key in keys:
        print(f"    output {key} = {result.outputs.get(key, '(unset)')}")
    status = "ok" if result.returncode == 0 else f"FAILED (act exit {result.returncode})"
    print(f"    -> {status}")
    if result.returncode:
        print(result.log[-4000:])
    return result.returncode == 0


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="gpu-ci-demo-"))
    cache = work / "toolcache"
    cache.mkdir()
    env_base = {"GPU_CI_PRINT_SUMMARY": "1"}
    ok = True
    with FakeGitHub() as github:
        github.add_repo(REPO, roles={"Codertocat": "maintain", "drive-by": "read"})
        github.add_pull(REPO, PullRequest(2, HEAD, labels=["CUDA CI"]))
        env = {**env_base, "GITHUB_API_URL": github.url}
        print(f"local GitHub API at {github.url}; working in {work}")

        scenarios = [
            (
                "a maintainer applies 'CUDA CI' -> the gate runs the GPU job at the labelled SHA",
                "cuda-ci.yml",
                "pull_request",
                labeled_event("CUDA CI", "Codertocat"),
                "gate",
                ["run", "sha", "runs-on", "reason"],
            ),
            (
                "a read-only user applies 'CUDA CI' -> the gate refuses",
                "cuda-ci.yml",
                "pull_request",
                labeled_event("CUDA CI", "drive-by"),
                "gate",
                ["run", "runs-on", "reason"],
            ),
            (
                "the privileged remover takes the label off again",
                "cuda-ci-remove-label.yml",
                "pull_request_target",
                labeled_event("CUDA CI", "Codertocat"),
                None,
                ["removed", "absent"],
            ),
        ]
        for i, (title, workflow, event_name, event, job, keys) in enumerate(scenarios):
            result = run_act(
                work / f"s{i}",
                ROOT / "examples" / workflow,
                event_name,
                event,
                tool_cache=cache,
                env=env,
                repository=REPO,
                job=job,
            )
            ok &= show(title, result, keys)
        # The GPU job on this machine (no GPU): a locked environment from a local channel,
        # then the driver check, which reports that no driver is visible.
        from testkit.conda_channel import ChannelServer, build_channel

        channel = build_channel(work / "channel")
        channel.server = ChannelServer(work / "channel").start()
        lock = work / "conda-linux-64.lock"
        lock.write_text(channel.explicit_lock(["libhello", "hello", "python"]))
        try:
            result = run_act(
                work / "gpu-job",
                ROOT / "tests" / "e2e" / "workflows" / "gpu-job.yml",
                "workflow_dispatch",
                {"inputs": {}},
                tool_cache=cache,
                env={**env_base, "E2E_LOCK": str(lock)},
            )
        finally:
            channel.server.stop()
        ok &= show(
            "the GPU job: setup-conda-from-lock, then verify-cuda-env (no GPU here)",
            result,
            ["prefix", "packages", "reused", "ok"],
        )
        for finding in result.outputs.get("findings") or []:
            print(f"    finding {finding['level']}: [{finding['code']}] {finding['message']}")
        # The budget: a month of GPU runs ($12.48 of a $15 budget), a gate that refuses the
        # next one (its 60-minute reservation would pass the budget), and the spend report.
        from testkit.github.runs import month_of_runs

        month_of_runs(github, per_day=2, days=10)
        budget_env = {**env, "GPU_CI_NOW": "2026-11-30T14:00:00Z"}
        budget_wf = ROOT / "tests" / "e2e" / "workflows" / "budget.yml"
        result = run_act(
            work / "budget-gate",
            budget_wf,
            "pull_request",
            labeled_event("CUDA CI", "Codertocat"),
            tool_cache=cache,
            env=budget_env,
            repository=REPO,
            job="gate",
        )
        ok &= show(
            "the month's GPU spend is $12.48 of $15 -> the gate refuses a 60-minute run",
            result,
            ["run", "spent", "left", "reason"],
        )
        result = run_act(
            work / "budget-spend",
            budget_wf,
            "workflow_dispatch",
            {"inputs": {}},
            tool_cache=cache,
            env=budget_env,
            repository=REPO,
            job="spend",
        )
        ok &= show(
            "gpu-spend: the month by workflow, pull request, approver and runner",
            result,
            ["minutes", "cost", "ledger"],
        )
        # gpu-monitor on a fake H200: the tests' fake libnvidia-ml plays a scripted series.
        from testkit.gpu_monitor_env import E2E_SCRIPT, fake_gpu_env

        (work / "monitor").mkdir()
        gpu_env = fake_gpu_env(work / "monitor", E2E_SCRIPT, samples=45)
        gpu_env.pop("RUNNER_TEMP")
        gpu_env.pop("INPUT_INTERVAL")
        result = run_act(
            work / "monitor-job",
            ROOT / "tests" / "e2e" / "workflows" / "monitor.yml",
            "workflow_dispatch",
            {"inputs": {}},
            tool_cache=cache,
            env={**env_base, **gpu_env},
        )
        ok &= show(
            "gpu-monitor: start, a step on the (fake) GPU, report with if: always()",
            result,
            ["busy-seconds", "paid-minutes", "idle-fraction", "idle-cost-usd"],
        )
        # gpu-lease on a fake 8-GPU host shared by several runners; GPU 0 runs a foreign
        # process (a zombie of an earlier job), so the lease takes GPUs 1 and 2.
        from testkit.gpu_lease_env import fake_host_env

        (work / "lease").mkdir()
        result = run_act(
            work / "lease-job",
            ROOT / "tests" / "e2e" / "workflows" / "lease.yml",
            "workflow_dispatch",
            {"inputs": {}},
            tool_cache=cache,
            env={**env_base, **fake_host_env(work / "lease", busy={0: 1})},
        )
        ok &= show(
            "gpu-lease: 2 of a shared 8-GPU host (GPU 0 busy), verify-cuda-env sees "
            "those 2, release",
            result,
            ["cuda-visible-devices", "xdist-workers", "verify-gpu-count"],
        )
        print(f"\nlabels on {REPO}#2 now: {github.repos[REPO].pulls[2].labels}")
        # The watchdog: a GPU job queued for 95 minutes, no runner took it.
        from datetime import datetime, timedelta, timezone

        from testkit.github_server import Job, WorkflowRun

        then = (datetime.now(timezone.utc) - timedelta(minutes=95)).strftime("%Y-%m-%dT%H:%M:%SZ")
        stuck = WorkflowRun(
            github.next_id(),
            "CUDA CI",
            ".github/workflows/cuda-ci.yml",
            "d" * 40,
            status="in_progress",
            created_at=then,
        )
        stuck.jobs = [Job(github.next_id(), "tests", ["self-hosted", "gpu"], created_at=then)]
        github.add_run(REPO, stuck)
        result = run_act(
            work / "watchdog",
            ROOT / "examples" / "cuda-ci-watchdog.yml",
            "schedule",
            {"schedule": "*/15 * * * *"},
            tool_cache=cache,
            env=env,
            repository=REPO,
        )
        ok &= show("gpu-watchdog: a GPU job no runner took for 95 minutes", result, [])
        for sha, listed in github.repos[REPO].statuses.items():
            for status in reversed(listed):
                print(
                    f"    status {status['context']} on {sha[:12]}: {status['state']}: "
                    f"{status['description']}"
                )
    print("\ndemo", "succeeded" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
