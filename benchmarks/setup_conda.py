"""setup-conda-from-lock: cold and warm environment creation vs. the decompression floor.

Generates a local channel of ~150 real packages (a few MB in all), serves it on loopback,
and prints, measured side by side in one run (medians of --runs, interleaved):

* cold: ``gpu-ci setup-conda-from-lock`` into an empty tool cache (download, verify,
  extract, link; the CLI process included);
* warm: the same lock again (``reused``);
* floor: decompressing the same archives in parallel with rattler's own extractor (one
  process per core), measured right before each cold run; the ratio is the median of the
  per-iteration ratios.

Goals (issue: setup-conda-from-lock): cold <= 1.5x floor, warm <= 0.5 s.

    python benchmarks/setup_conda.py [--packages 150] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conda_channel import Archive, Channel, ChannelServer, _assemble  # noqa: E402

CACHE = ROOT / "benchmarks" / ".cache"
#: Work directories: RAM when available, so that the disk's write-back (which lands on
#: whichever measurement comes next) does not decide the comparison. --disk to use /tmp.
SCRATCH: str | None = "/dev/shm" if Path("/dev/shm").is_dir() else None
WORDS = [
    "cuda",
    "kernel",
    "tensor",
    "stream",
    "device",
    "memory",
    "launch",
    "block",
    "thread",
    "warp",
    "grid",
    "shared",
    "global",
    "atomic",
    "reduce",
    "scan",
    "sort",
    "gather",
    "scatter",
    "matmul",
    "conv",
    "norm",
]


def text_blob(rng: random.Random, size: int) -> str:
    out, n = [], 0
    while n < size:
        word = rng.choice(WORDS) + ("\n" if rng.random() < 0.1 else " ")
        out.append(word)
        n += len(word)
    return "".join(out)


def make_channel(count: int) -> Channel:
    root = CACHE / f"channel{count}"
    ready = root / ".ready"
    rng = random.Random(1234)
    if not ready.exists():
        shutil.rmtree(root, ignore_errors=True)
    archives: list[Archive] = []
    work = root / "work"
    for i in range(count):
        name = f"pkg{i:03d}"
        sizes = [rng.randint(2_000, 60_000) for _ in range(rng.randint(2, 6))]
        deps = [f"pkg{j:03d}" for j in rng.sample(range(i), min(i, 2))]
        files = {f"share/{name}/f{k}.txt": text_blob(rng, s) for k, s in enumerate(sizes)}
        files[f"bin/{name}"] = f"#!/bin/sh\necho {name}\n"
        if ready.exists():
            path = root / "channel" / "linux-64" / f"{name}-1.0-h0_0.conda"
            archives.append(Archive(name, "1.0", "h0_0", "linux-64", path, deps))
        else:
            archives.append(
                _assemble(
                    root / "channel", work, name, "1.0", "h0_0", "linux-64", files, depends=deps
                )
            )
    if not ready.exists():
        shutil.rmtree(work, ignore_errors=True)
        ready.write_text("")
    return Channel(root / "channel", archives, wheel=Path())


def _extract(job: tuple[Path, Path]) -> None:
    from rattler.package_streaming import extract

    extract(job[0], job[1])


def floor(archives: list[Archive], workers: int) -> float:
    """Decompress every archive, in parallel processes: rattler's extract holds the GIL,
    so threads would measure one core (measured: 1 thread 0.95 s, 4 threads 1.32 s)."""
    dest = Path(tempfile.mkdtemp(prefix="floor-", dir=SCRATCH))
    start = time.perf_counter()
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(_extract, [(a.path, dest / a.path.name) for a in archives],
                      chunksize=8))
    elapsed = time.perf_counter() - start
    shutil.rmtree(dest)
    return elapsed


PHASES: dict[str, list[float]] = {}


def run_cli(lock: Path, cache: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "RUNNER_TOOL_CACHE": str(cache),
           "GPU_CI_PRINT_SUMMARY": "1"}
    for key in ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_PATH", "GITHUB_STEP_SUMMARY"):
        env.pop(key, None)
    start = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpu_ci",
            "setup-conda-from-lock",
            "--lock-file",
            str(lock),
            "--miniforge",
            "false",
            "--activate",
            "false",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(proc.stdout + proc.stderr)
    for line in proc.stderr.splitlines():  # the job summary's phase rows
        if line.startswith("| time: "):
            name, value = (cell.strip() for cell in line.strip("| ").split("|"))
            PHASES.setdefault(name[len("time: "):], []).append(float(value.split()[0]))
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--packages", type=int, default=150)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--disk", action="store_true", help="work in /tmp, not in RAM")
    args = parser.parse_args()
    global SCRATCH
    if args.disk:
        SCRATCH = None
    channel = make_channel(args.packages)
    total = sum(a.path.stat().st_size for a in channel.archives)
    channel.server = ChannelServer(channel.root.parent).start()
    lock = CACHE / f"lock{args.packages}.txt"
    lock.write_text(channel.explicit_lock())
    workers = os.cpu_count() or 2
    cold, warm, floors = [], [], []
    try:
        for _ in range(args.runs):
            # floor and cold side by side in each iteration: the ratio is taken per pair,
            # so that the machine's drift (large for disk work here) hits both alike. Each
            # measurement starts after os.sync(): otherwise one pays for writing back the
            # files the other just extracted (measured: linking right after an extraction
            # took 0.5 s, the same link after the write-back 0.07 s).
            os.sync()
            floors.append(floor(channel.archives, workers))
            cache = Path(tempfile.mkdtemp(prefix="bench-tc-", dir=SCRATCH))
            os.sync()
            cold.append(run_cli(lock, cache))
            os.sync()
            warm.append(run_cli(lock, cache))
            shutil.rmtree(cache)
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", "import gpu_ci.cli"],
            check=True,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )
        startup = time.perf_counter() - start
    finally:
        channel.server.stop()
    c, w, f = (statistics.median(x) for x in (cold, warm, floors))
    print(
        f"{len(channel.archives)} packages, {total / 1e6:.1f} MB of .conda archives, "
        f"{os.cpu_count()} cores; medians of {args.runs} interleaved runs"
    )
    print(f"  cold create (CLI, download+verify+extract+link): {c:6.2f} s")
    print(f"  warm (reused):                                  {w:6.2f} s   (goal <= 0.5 s)")
    print(f"  floor (parallel decompression, {workers} processes):    {f:6.2f} s")
    ratios = sorted(x / y for x, y in zip(cold, floors))
    print(f"  ratio cold / floor: {statistics.median(ratios):.2f} median of paired runs "
          f"(range {ratios[0]:.2f}-{ratios[-1]:.2f}; goal <= 1.5)")
    print(f"  of which CLI start-up (python + imports): {startup:.2f} s")
    for name, values in PHASES.items():
        print(f"  of which {name} (cold runs): {statistics.median(values):.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
