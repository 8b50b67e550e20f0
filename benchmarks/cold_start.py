"""Cold start of each action: from a fresh machine state to the action's outputs.

For each action and installer (pip; uv when available), measured side by side, medians of
--runs interleaved runs:

* cold: empty tool cache, empty pip/uv cache, no venv: ``bootstrap.sh <action>`` + the
  command, until it exits with its outputs written;
* warm: the venv exists (a later job on a persistent runner): same two steps;
* boot: the warm bootstrap step alone (``bootstrap.sh``: verifying the venv against its
  manifest before reusing it), the part of "warm" that the action adds before its command;
* bytes a cold install downloads (the wheels of the action's group locks) and the
  distributions installed.

Ratios are to ``python3 -c pass``. Goals (issue: cold start): verify-cuda-env cold <= 3 s,
gpu-gate cold <= 4 s, warm <= 0.5 s for every action, with the package index reachable.

    python benchmarks/cold_start.py [--runs 5] [--actions gpu-gate,verify-cuda-env]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from gpu_ci.specs import groups_for  # noqa: E402
from tests.events import workflow_dispatch  # noqa: E402
from tests.github_server import FakeGitHub, PullRequest  # noqa: E402

LOCK = ROOT / "tests" / "fixtures" / "self-test.linux-64.lock"
"""The project's own explicit lock (six packages): a dry run plans it, downloads nothing."""


def wheel_bytes(action: str) -> int:
    """What a cold install downloads: the wheels of the action's group locks."""
    dest = Path(tempfile.mkdtemp(prefix="wheels-"))
    for group in groups_for(action):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary",
                ":all:",
                "--require-hashes",
                "-d",
                str(dest),
                "-r",
                str(ROOT / "requirements" / f"{group}.txt"),
            ],
            check=True,
            capture_output=True,
        )
    total = sum(p.stat().st_size for p in dest.iterdir())
    shutil.rmtree(dest)
    return total


def command(action: str, work: Path, github: FakeGitHub) -> tuple[list[str], dict[str, str]]:
    if action == "gpu-gate":
        event = work / "workflow_dispatch.json"
        event.write_text(json.dumps(workflow_dispatch(repository="octo-org/octo-repo")))
        return [], {
            "GITHUB_EVENT_NAME": "workflow_dispatch",
            "GITHUB_EVENT_PATH": str(event),
            "GITHUB_REPOSITORY": "octo-org/octo-repo",
            "GITHUB_SHA": "a" * 40,
        }
    if action == "remove-label":
        return ["--number", "2", "--repository", "octo/repo"], {
            "GITHUB_API_URL": github.url,
            "GITHUB_TOKEN": "t",
        }
    if action == "verify-cuda-env":
        return ["--require-gpu", "false"], {}
    return ["--lock-file", str(LOCK), "--dry-run", "true"], {}


def one_run(action: str, installer: str, state: Path, github: FakeGitHub) -> tuple[float, float]:
    work = Path(tempfile.mkdtemp(prefix="cold-"))
    env_file = work / "github_env"
    out_file = work / "github_output"
    env_file.touch()
    out_file.touch()
    path = os.environ["PATH"]
    uv_dir = str(ROOT / ".venv" / "bin")
    if installer == "uv":
        path = f"{uv_dir}:{path}"
    else:
        path = ":".join(p for p in path.split(":") if p != uv_dir)
    base = {
        **os.environ,
        "PATH": path,
        "GPU_CI_CACHE_DIR": str(state / "toolcache"),
        "PIP_CACHE_DIR": str(state / "pip-cache"),
        "UV_CACHE_DIR": str(state / "uv-cache"),
        "GPU_CI_BOOTSTRAP_PYTHON": sys.executable,
        "GITHUB_ENV": str(env_file),
        "GITHUB_OUTPUT": str(out_file),
    }
    for key in ("GPU_CI_PYTHON", "GPU_CI_ROOT", "VIRTUAL_ENV", "PYTHONPATH"):
        base.pop(key, None)
    args, extra = command(action, work, github)
    start = time.perf_counter()
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "bootstrap.sh"), action],
        env=base,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"bootstrap failed: {proc.stdout}{proc.stderr}")
    booted = time.perf_counter() - start
    exported = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    proc = subprocess.run(
        [exported["GPU_CI_PYTHON"], str(ROOT / "scripts" / "run.py"), action, *args],
        env={**base, **extra},
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    if proc.returncode != 0 or not out_file.read_text():
        raise SystemExit(f"{action} failed: {proc.stdout}{proc.stderr}")
    shutil.rmtree(work)
    return elapsed, booted


def distributions(state: Path) -> int:
    pythons = list((state / "toolcache").glob("gpu-ci-actions/*/*/bin/python"))
    pythons = [p for p in pythons if ".tmp-" not in str(p) and ".trash-" not in str(p)]
    listing = "import importlib.metadata as m; print(len(list(m.distributions())))"
    out = subprocess.run([str(pythons[0]), "-c", listing], capture_output=True, text=True)
    return int(out.stdout.strip())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--actions", default="gpu-gate,remove-label,verify-cuda-env,setup-conda-from-lock"
    )
    args = parser.parse_args()
    actions = args.actions.split(",")
    installers = ["pip"] + (["uv"] if (ROOT / ".venv" / "bin" / "uv").exists() else [])
    baseline = []
    results: dict[tuple[str, str], dict[str, list[float]]] = {}
    sizes: dict[tuple[str, str], tuple[int, int]] = {}
    with FakeGitHub() as github:
        github.add_repo("octo/repo")
        for _ in range(args.runs):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            baseline.append(time.perf_counter() - start)
            for action in actions:
                for installer in installers:
                    github.add_pull("octo/repo", PullRequest(2, "a" * 40, labels=["CUDA CI"]))
                    state = Path(tempfile.mkdtemp(prefix="state-"))
                    cold, _ = one_run(action, installer, state, github)
                    warm, boot = one_run(action, installer, state, github)
                    entry = results.setdefault(
                        (action, installer), {"cold": [], "warm": [], "boot": []}
                    )
                    entry["cold"].append(cold)
                    entry["warm"].append(warm)
                    entry["boot"].append(boot)
                    sizes[(action, installer)] = (0, distributions(state))
                    shutil.rmtree(state)
    downloads = {action: wheel_bytes(action) for action in actions}
    base = statistics.median(baseline)
    print(
        f"medians of {args.runs} runs; python3 -c pass = {base * 1000:.0f} ms; "
        f"{os.cpu_count()} cores"
    )
    print(
        f"{'action':24} {'installer':9} {'cold s':>7} {'x pass':>7} {'warm s':>7} "
        f"{'x pass':>7} {'boot s':>7} {'MB wheels':>9} {'dists':>5}"
    )
    report = {}
    for (action, installer), entry in results.items():
        cold, warm = statistics.median(entry["cold"]), statistics.median(entry["warm"])
        boot = statistics.median(entry["boot"])
        _, dists = sizes[(action, installer)]
        mb = downloads[action]
        print(
            f"{action:24} {installer:9} {cold:7.2f} {cold / base:7.0f} {warm:7.2f} "
            f"{warm / base:7.0f} {boot:7.2f} {mb / 1e6:9.1f} {dists:5d}"
        )
        report[f"{action}/{installer}"] = {
            "cold_s": cold,
            "warm_s": warm,
            "boot_s": boot,
            "bytes": mb,
            "distributions": dists,
        }
    out = ROOT / "benchmarks" / ".cache" / "cold_start.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"python_pass_s": base, "results": report}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
