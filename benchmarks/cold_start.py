"""Cold start of each action: from a fresh machine state to the action's outputs.

For each action and installer (pip; uv when available), measured side by side, medians of
--runs interleaved runs:

* cold: empty tool cache, empty pip/uv cache, no venv: ``bootstrap.sh <action>`` + the
  command, until it exits with its outputs written;
* warm: the venv exists (a later job on a persistent runner): same two steps;
* boot: the warm bootstrap step alone (``bootstrap.sh``: verifying the venv against its
  manifest before reusing it), the part of "warm" that the action adds before its command;
* bytes a cold install downloads (the wheels of the action's group locks) and the
  distributions installed;
* cpu: user + system seconds of every process of the run (``RUSAGE_CHILDREN``), printed
  beside the wall seconds with the load average before and after: the machine may be
  shared, and CPU seconds move far less with its load than wall seconds do;
* a container job without Python (issue 30), verify-cuda-env in a fresh overlay of the
  Debian root that ``testkit/debian_root.py`` builds and caches: cold (a Python
  installed, then the venv) and warm (a later action of the job), for each way of getting
  a Python: the package manager (root, apt-get), a uv in the image, a uv-managed Python
  (the pinned uv fetched). The two uv ones install python-build-standalone from GitHub
  (``UV_PYTHON_INSTALL_MIRROR`` when set), else this host's own Python packed in that
  layout and served on 127.0.0.1 (:func:`standalone_archive`: no transfer time); and
  an image like RAPIDS' ci-conda, whose only Python is conda's (that same Python unpacked
  as a read-only conda prefix): no Python installed, conda's creates the venv. The table
  says why a path did not run.

Ratios are to ``python3 -c pass``. Goals (issue 30 item 5, on 2 cores): gpu-gate cold
<= 4 s with pip and <= 2 s with uv, verify-cuda-env cold <= 3 s, warm <= 0.5 s for every
action, with the package index reachable. Not met: remove-label warm, 0.62-0.75 s (2026-12-01,
before and after that day's changes alike), of which ``import github`` is ~0.29 s; the gate
here decides without the API (workflow_dispatch), so a pull request's gate, which calls it,
costs about as much warm.

* the time to create a file where the caches live (``--dir``, default the temporary
  directory): a cold start creates ~1000 files, so a slow file system shows here.

    python benchmarks/cold_start.py [--runs 5] [--actions gpu-gate,verify-cuda-env]
        [--container-runs 1] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
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
from testkit.events import workflow_dispatch  # noqa: E402
from testkit.github_server import FakeGitHub, PullRequest  # noqa: E402
from testkit.standalone_python import (  # noqa: E402
    CONDA_PREFIX_SETUP,
    StandalonePython,
    conda_prefix_into,
)

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


def child_cpu() -> float:
    """User + system CPU seconds of every finished child process (and theirs): less
    sensitive to the other load of a shared machine than wall time."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(
    action: str, installer: str, state: Path, github: FakeGitHub
) -> tuple[float, float, float]:
    """(wall seconds to the outputs, wall seconds of the bootstrap alone, CPU seconds)."""
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
    cpu = child_cpu()
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
    cpu = child_cpu() - cpu
    if proc.returncode != 0 or not out_file.read_text():
        raise SystemExit(f"{action} failed: {proc.stdout}{proc.stderr}")
    shutil.rmtree(work)
    return elapsed, booted, cpu


#: One container job's steps inside the Debian root: the first action (a Python installed,
#: then its venv) and a later one, each the bootstrap and then verify-cuda-env. Times in µs
#: (bash's EPOCHREALTIME) and the CPU of each step's processes (bash's ``times``).
CONTAINER_JOB = r"""
set -u
export RUNNER_TEMP=/job/runner-temp RUNNER_TOOL_CACHE=/job/tool-cache
export FAKE_NVML_CONFIG=/etc/fake-nvml.cfg
export NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
mkdir -p "$RUNNER_TEMP" "$RUNNER_TOOL_CACHE"
if [ -f /etc/gpu-ci-tests-ca.crt ]; then  # this machine's way out (a proxy's CA), for
  # pip, uv and the Node.js that downloads uv
  export PIP_CERT=/etc/gpu-ci-tests-ca.crt SSL_CERT_FILE=/etc/gpu-ci-tests-ca.crt
  export NODE_EXTRA_CA_CERTS=/etc/gpu-ci-tests-ca.crt
fi
[ ! -f /job/pip.env ] || { set -a; . /job/pip.env; set +a; }
[ ! -f /job/path.env ] || { set -a; . /job/path.env; set +a; }
command -v python3 python >/dev/null && { echo "the root has a Python"; exit 3; }
cpu() {  # CPU=user + system seconds of this shell's finished children. `times` runs here,
  # not in $(...) or a pipe: a subshell's children are not this shell's.
  times > /job/.times
  CPU="$(tail -1 /job/.times | sed 's/m/ /g; s/s//g' | awk '{print ($1*60+$2)+($3*60+$4)}')"
}
step() {
  local t0 c0 t1
  t0="${EPOCHREALTIME/[.,]/}"; cpu; c0="$CPU"
  : > "/job/$1.env"; : > "/job/$1.out"
  GITHUB_ENV="/job/$1.env" bash /opt/gpu-ci/scripts/bootstrap.sh verify-cuda-env \
    > "/job/$1.bootstrap.log" 2>&1 || { cat "/job/$1.bootstrap.log"; exit 1; }
  t1="${EPOCHREALTIME/[.,]/}"
  set -a; . "/job/$1.env"; set +a
  GITHUB_OUTPUT="/job/$1.out" INPUT_REQUIRE_GPU=true \
    "$GPU_CI_PYTHON" /opt/gpu-ci/scripts/run.py verify-cuda-env > "/job/$1.verify.log" 2>&1 \
    || { cat "/job/$1.verify.log"; exit 1; }
  local t2="${EPOCHREALTIME/[.,]/}"
  cpu
  echo "$1 $((t1 - t0)) $((t2 - t0)) $c0 $CPU" >> /job/times
}
step cold
step warm
"""

#: The line that makes sure the root has no Python yet; the conda path puts one there.
NO_PYTHON_YET = """command -v python3 python >/dev/null && { echo "the root has a Python"; exit 3; }
"""
assert NO_PYTHON_YET in CONTAINER_JOB

#: The ways a job without Python gets one (issue 30 item 1), and conda's Python alone.
CONTAINER_PATHS = ("package manager", "uv present", "managed uv Python", "conda's Python")


def container_unavailable(path: str, standalone: StandalonePython | None) -> str:
    """Why ``path`` cannot be measured here ('' when it can)."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return "needs Linux and root (chroot into the Debian root)"
    if not all(shutil.which(tool) for tool in ("debootstrap", "unshare", "chroot")):
        return "needs debootstrap, unshare and chroot"
    mirror = os.environ.get("UV_PYTHON_INSTALL_MIRROR")
    built = standalone is not None and standalone.archive is not None
    if path not in ("", "package manager") and not mirror and not built:
        why = standalone.why if standalone is not None else "not built"
        return (
            "uv downloads Python from GitHub (python-build-standalone), which this "
            f"machine does not reach, and no standalone archive of this host's Python "
            f"could be built: {why}"
        )
    if path == "conda's Python" and not built:
        why = standalone.why if standalone is not None else "not built"
        return f"needs this host's Python packed as a conda-like prefix: {why}"
    if path == "managed uv Python" and not shutil.which("node"):
        return "needs Node.js to mount as the runner's /__e/node20 (the root has no curl/wget)"
    return ""


def container_run(path: str, standalone: StandalonePython | None = None) -> dict[str, float]:
    """One job in a fresh overlay of the cached Debian root (testkit/debian_root.py
    builds and keeps it): seconds and CPU seconds of its first action (Python installed,
    venv built) and of a later one, and the Python install's own seconds as the bootstrap
    reports them."""
    from testkit import debian_root as debian
    from testkit.cuda_env import build_fake_nvml, observed_h200, write_config

    work = Path(tempfile.mkdtemp(prefix="cold-container-"))
    try:
        for name in ("ovl", "root", "job", "checkout"):
            (work / name).mkdir()
        for name in debian.CHECKOUT:
            src = ROOT / name
            if src.is_dir():
                ignore = shutil.ignore_patterns("__pycache__")
                shutil.copytree(src, work / "checkout" / name, ignore=ignore)
            else:
                shutil.copy2(src, work / "checkout" / name)
        build_fake_nvml(work / "nvml")
        write_config(work / "nvml.cfg", observed_h200()[1])
        job = CONTAINER_JOB
        path_env = ""
        if path == "uv present":  # the runner's image has uv (e.g. ghcr.io/astral-sh/uv)
            shutil.copy2(ROOT / ".venv" / "bin" / "uv", work / "job" / "uv")
            path_env = "PATH=/job:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
        elif path == "managed uv Python":  # not root: no package manager; Node.js downloads
            node = Path(shutil.which("node") or "node").resolve()
            (work / "job" / "node").mkdir()
            shutil.copy2(node, work / "job" / "node" / "node")
            path_env = "GPU_CI_INSTALL_PYTHON=managed\n"
            job = job.replace(
                "set -u\n",
                "set -u\nmkdir -p /__e/node20/bin\ncp /job/node/node /__e/node20/bin/node\n",
                1,
            )
        if os.environ.get("UV_PYTHON_INSTALL_MIRROR"):
            path_env += f"UV_PYTHON_INSTALL_MIRROR={os.environ['UV_PYTHON_INSTALL_MIRROR']}\n"
        elif path not in ("package manager", "conda's Python") and standalone is not None:
            path_env += standalone.env()
        if path == "conda's Python":  # RAPIDS' ci-conda: conda's Python, and no other
            assert standalone is not None and standalone.archive is not None
            why = conda_prefix_into(work / "job", standalone.archive)
            if why:
                raise SystemExit(f"container job ({path}): {why}")
            job = job.replace(NO_PYTHON_YET, CONDA_PREFIX_SETUP, 1)
        (work / "job" / "path.env").write_text(path_env)
        (work / "job" / "job.sh").write_text(job)
        debian.pip_config_into(work)
        proc = subprocess.run(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "bash",
                "-c",
                debian.ENTER,
                "enter",
                str(debian.debian_root()),
                str(work),
                debian.MULTIARCH[platform.machine()],
            ],
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            capture_output=True,
            text=True,
            timeout=900,
        )
        if proc.returncode != 0:
            raise SystemExit(f"container job ({path}) failed: {proc.stdout}{proc.stderr}")
        times = {}
        for line in (work / "job" / "times").read_text().splitlines():
            name, booted, done, cpu0, cpu1 = line.split()
            times[name] = (int(booted) / 1e6, int(done) / 1e6, float(cpu1) - float(cpu0))
        log = (work / "job" / "cold.bootstrap.log").read_text()
        match = re.search(r"installed Python \S+, .*? in (\d+\.\d) s", log)
        if path == "conda's Python":
            if match or "creates the bootstrap's own venv" not in log:
                raise SystemExit(f"container job ({path}) did not use conda's Python:\n{log}")
            match = re.match("(0.0)", "0.0")  # no Python installed
        if not match:
            raise SystemExit(f"container job ({path}) installed no Python:\n{log}")
        return {
            "cold": times["cold"][1],
            "cold_cpu": times["cold"][2],
            "python": float(match.group(1)),
            "warm": times["warm"][1],
            "warm_cpu": times["warm"][2],
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def container_report(runs: int) -> dict[str, object]:
    """The container paths: measured where this machine allows, else why not."""
    print("\ncontainer job without Python (Debian bookworm minbase, verify-cuda-env):")
    print(f"{'path':24} {'cold s':>7} {'cpu s':>6} {'python s':>8} {'warm s':>7} {'cpu s':>6}")
    report: dict[str, object] = {}
    standalone = None
    if container_unavailable("", None) == "":  # the uv paths' Python, and conda's
        standalone = StandalonePython()
    try:
        for path in CONTAINER_PATHS:
            why = container_unavailable(path, standalone)
            if why:
                print(f"{path:24} not measured: {why}")
                report[path] = {"not_measured": why}
                continue
            entries = [container_run(path, standalone) for _ in range(runs)]
            med = {key: statistics.median(e[key] for e in entries) for key in entries[0]}
            print(
                f"{path:24} {med['cold']:7.2f} {med['cold_cpu']:6.2f} {med['python']:8.1f} "
                f"{med['warm']:7.2f} {med['warm_cpu']:6.2f}"
            )
            report[path] = {f"{key}_s": value for key, value in med.items()}
    finally:
        if standalone is not None:
            standalone.close()
    if standalone is not None and standalone.archive is not None:
        print(
            "(the uv paths install this host's Python from 127.0.0.1 in python-build-"
            "standalone's layout: a download from GitHub adds its transfer time)"
        )
    return report


def distributions(state: Path) -> int:
    pythons = list((state / "toolcache").glob("gpu-ci-actions/*/*/bin/python"))
    pythons = [p for p in pythons if ".tmp-" not in str(p) and ".trash-" not in str(p)]
    listing = "import importlib.metadata as m; print(len(list(m.distributions())))"
    out = subprocess.run([str(pythons[0]), "-c", listing], capture_output=True, text=True)
    return int(out.stdout.strip())


def file_creation_us(directory: Path, count: int = 300) -> float:
    """Microseconds to create a small file as installers and ``py_compile`` do (a new
    file, written, renamed into place) under ``directory``: a cold start creates ~1000 (the
    venv's files and their ``.pyc``), so a file system where this is slow decides it. (On
    the 2-core machine of issue 30, 0.5-1.5 ms under /tmp and ~70 us elsewhere on the same
    ext4 disk.)"""
    work = Path(tempfile.mkdtemp(prefix="files-", dir=directory))
    try:
        start = time.perf_counter()
        for i in range(count):
            sub = work / f"d{i % 30}"
            sub.mkdir(exist_ok=True)
            part = sub / f"f{i}.tmp"
            part.write_bytes(b"x" * 4096)
            os.replace(part, sub / f"f{i}")
        return (time.perf_counter() - start) / count * 1e6
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where each run's tool cache and installer caches live (default: the "
        "temporary directory); the time to create a file there is printed",
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--actions", default="gpu-gate,remove-label,verify-cuda-env,setup-conda-from-lock"
    )
    parser.add_argument(
        "--container-runs",
        type=int,
        default=1,
        help="runs of each container path (0: none); each installs Python from the network",
    )
    args = parser.parse_args()
    actions = args.actions.split(",")
    installers = ["pip"] + (["uv"] if (ROOT / ".venv" / "bin" / "uv").exists() else [])
    baseline = []
    load_before = os.getloadavg()
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
                    state = Path(tempfile.mkdtemp(prefix="state-", dir=args.dir))
                    cold, _, cold_cpu = one_run(action, installer, state, github)
                    warm, boot, warm_cpu = one_run(action, installer, state, github)
                    entry = results.setdefault((action, installer), {})
                    for key, value in (
                        ("cold", cold),
                        ("warm", warm),
                        ("boot", boot),
                        ("cold_cpu", cold_cpu),
                        ("warm_cpu", warm_cpu),
                    ):
                        entry.setdefault(key, []).append(value)
                    sizes[(action, installer)] = (0, distributions(state))
                    shutil.rmtree(state)
    load_after = os.getloadavg()
    downloads = {action: wheel_bytes(action) for action in actions}
    base = statistics.median(baseline)
    creation = file_creation_us(args.dir)
    print(
        f"medians of {args.runs} runs; python3 -c pass = {base * 1000:.0f} ms; "
        f"{os.cpu_count()} cores; load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after (1 min); caches in {args.dir}, where creating a "
        f"file takes {creation:.0f} us"
    )
    print(
        f"{'action':24} {'installer':9} {'cold s':>7} {'x pass':>7} {'cpu s':>6} "
        f"{'warm s':>7} {'x pass':>7} {'cpu s':>6} {'boot s':>7} {'MB wheels':>9} {'dists':>5}"
    )
    report = {}
    for (action, installer), entry in results.items():
        cold, warm = statistics.median(entry["cold"]), statistics.median(entry["warm"])
        boot = statistics.median(entry["boot"])
        cold_cpu, warm_cpu = (
            statistics.median(entry["cold_cpu"]),
            statistics.median(entry["warm_cpu"]),
        )
        _, dists = sizes[(action, installer)]
        mb = downloads[action]
        print(
            f"{action:24} {installer:9} {cold:7.2f} {cold / base:7.0f} {cold_cpu:6.2f} "
            f"{warm:7.2f} {warm / base:7.0f} {warm_cpu:6.2f} {boot:7.2f} {mb / 1e6:9.1f} "
            f"{dists:5d}"
        )
        report[f"{action}/{installer}"] = {
            "cold_s": cold,
            "cold_cpu_s": cold_cpu,
            "warm_s": warm,
            "warm_cpu_s": warm_cpu,
            "boot_s": boot,
            "bytes": mb,
            "distributions": dists,
        }
    out = ROOT / "benchmarks" / ".cache" / "cold_start.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    summary: dict[str, object] = {
        "python_pass_s": base,
        "state_dir": str(args.dir),
        "file_creation_us": creation,
        "load_average": [load_before, load_after],
    }
    if args.container_runs > 0:
        summary["container"] = container_report(args.container_runs)
        summary["load_average_after_container"] = os.getloadavg()
    out.write_text(json.dumps({**summary, "results": report}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
