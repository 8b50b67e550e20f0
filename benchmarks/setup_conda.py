"""setup-conda-from-lock vs ``rattler.install`` of the same records, and vs the decompression floor.

Generates local channels of real packages, serves them on loopback, and prints from one run
(medians of --runs, interleaved, each side a whole process: interpreter start-up included):

* ours: ``gpu-ci setup-conda-from-lock`` (CLI, engine rattler, miniforge false);
* rattler: ``rattler.install()`` of py-rattler with RepoDataRecords of the same archives and
  URLs, its own downloader and package cache;
* cases: cold (empty package cache, new prefix), warm (package cache kept, new prefix),
  reused (the same lock into the same prefix again);
* sizes: 150 and 600 small packages; ``--large``: a few ~200 MB packages of
  incompressible content (bandwidth and decompression dominate);
* servers (``PROFILES``, each at every size): plain loopback; keep-alive with Nagle's
  algorithm on (Python's ``http.server`` default: each GET after the first on a connection
  ~44 ms late, a HEAD not); 40 ms on each GET and none on HEAD; 40 ms on every request;
  HTTP/1.0, which closes every connection (as some mirrors and proxies do; the smallest
  size only, one run: rattler's defaults overflow its listen backlog, ~30 s);
* the connections each side opened (counted by the server), and the load average;
* ``--floor``: decompressing the same archives in parallel with rattler's own extractor
  (one process per core), measured right before each cold run of the plain profile.

Goals (issue 29): cold and warm <= 1.2x rattler.install on plain, nagle, get-delay and
all-delay at 150 and 600 packages; http10 no slower than before (0.53 s, 150 packages).

* ``--pixi``: ours from a ``pixi.lock`` (format 6) of the same archives, plain server.

    python benchmarks/setup_conda.py [--packages 150 600] [--runs 5] [--profiles ...] [--pixi]
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
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testkit.conda_channel import Archive, Channel, ChannelServer, _assemble  # noqa: E402

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
        list(pool.map(_extract, [(a.path, dest / a.path.name) for a in archives], chunksize=8))
    elapsed = time.perf_counter() - start
    shutil.rmtree(dest)
    return elapsed


def make_large(count: int, megabytes: int) -> Channel:
    """A few big packages of random (incompressible) bytes, like CUDA libraries' blobs."""
    import rattler_build

    root = CACHE / f"large{count}x{megabytes}"
    ready = root / ".ready"
    archives: list[Archive] = []
    if not ready.exists():
        shutil.rmtree(root, ignore_errors=True)
    for i in range(count):
        name = f"big{i}"
        path = root / "channel" / "linux-64" / f"{name}-1.0-h0_0.conda"
        if not ready.exists():
            files = root / "work" / name
            (files / "lib").mkdir(parents=True)
            with open(files / "lib" / f"lib{name}.so", "wb") as out:
                for _ in range(megabytes):
                    out.write(os.urandom(1 << 20))
            output = rattler_build.assemble_package(
                name,
                "1.0",
                "linux-64",
                "h0_0",
                root / "channel" / "linux-64",
                files_dir=files,
                compression_level=1,
                detect_prefix=False,
            )
            path = Path(output.path)
            shutil.rmtree(files)
        archives.append(Archive(name, "1.0", "h0_0", "linux-64", path, []))
    if not ready.exists():
        ready.write_text("")
    return Channel(root / "channel", archives, wheel=Path())


PHASES: dict[str, list[float]] = {}


#: ``--baseline``: another checkout's ``src``, run as a third side in the same interleaved
#: rounds, so that a change is measured against what it changes under the same load.
BASELINE: Path | None = None


def _clean_env(cache: Path, src: Path | None = None) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(src or ROOT / "src"),
        "RUNNER_TOOL_CACHE": str(cache),
        "GPU_CI_PRINT_SUMMARY": "1",
    }
    # as on a runner, where our checkout's byte code is written on the first run
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for key in ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_PATH", "GITHUB_STEP_SUMMARY"):
        env.pop(key, None)
    return env


#: CPU seconds (user + system) of the last run_cli / run_rattler child: on a runner with
#: few cores the wall-clock ratio follows this one; with idle cores, overlap decides.
LAST_CPU = [0.0]


def _run(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, Any]:
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    LAST_CPU[0] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, proc


def run_cli(lock: Path, cache: Path, phases: bool = False, src: Path | None = None) -> float:
    """Ours, whole process: ``gpu-ci setup-conda-from-lock`` into the tool cache ``cache``
    (``src``: the package from there, ``--baseline``)."""
    # as the composite action runs it: the action's name alone, its inputs in INPUT_<NAME>
    env = {
        **_clean_env(cache, src),
        "INPUT_LOCK_FILE": str(lock),
        "INPUT_MINIFORGE": "false",
        "INPUT_ACTIVATE": "false",
    }
    elapsed, proc = _run([sys.executable, "-m", "gpu_ci", "setup-conda-from-lock"], env)
    if proc.returncode != 0:
        raise SystemExit(f"ours failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
    for line in proc.stderr.splitlines() if phases else ():  # the job summary's phase rows
        if line.startswith("| time: "):
            name, value = (cell.strip() for cell in line.strip("| ").split("|"))
            PHASES.setdefault(name[len("time: ") :], []).append(float(value.split()[0]))
    return elapsed


RATTLER = """
import asyncio, json, os, sys
import rattler
records = []
for r in json.load(open(sys.argv[1])):
    record = rattler.PackageRecord(r["name"], r["version"], rattler.BuildString(r["build"]), 0,
                                   "linux-64", depends=r["depends"],
                                   sha256=bytes.fromhex(r["sha256"]), md5=bytes.fromhex(r["md5"]),
                                   size=r["size"])
    records.append(rattler.RepoDataRecord(record, r["fn"], r["url"], r["channel"]))
asyncio.run(rattler.install(records, target_prefix=sys.argv[2], cache_dir=sys.argv[3],
                            show_progress=False, execute_link_scripts=False))
# Measured: this process sometimes crashed while the interpreter finalized after a complete
# install (SIGSEGV, or "PyGILState_Release: thread state ... must be current"), on a loaded
# machine; the install itself had finished, so the yardstick ends here.
sys.stdout.flush()
os._exit(0)
"""


def run_rattler(records: Path, prefix: Path, cache: Path) -> float:
    """The yardstick, whole process: ``rattler.install()`` of the same records and URLs."""
    elapsed, proc = _run([sys.executable, "-c", RATTLER, str(records), str(prefix), str(cache)])
    if proc.returncode != 0:
        raise SystemExit(
            f"rattler.install failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
        )
    return elapsed


def write_records(channel: Channel, path: Path) -> None:
    import json

    path.write_text(
        json.dumps(
            [
                {
                    "name": a.name,
                    "version": a.version,
                    "build": a.build,
                    "depends": a.depends,
                    "sha256": a.sha256,
                    "md5": a.md5,
                    "size": a.path.stat().st_size,
                    "fn": a.filename,
                    "url": channel.archive_url(a),
                    "channel": channel.url("channel"),
                }
                for a in channel.archives
            ]
        )
    )


#: Servers as real ones behave (issue 29), each a ``ChannelServer``'s settings. Every GET
#: after the first on a kept-alive connection to a server with Nagle's algorithm on takes
#: ~44 ms (the body waits for the delayed ACK of the headers) while a HEAD takes < 1 ms.
PROFILES: dict[str, dict[str, Any]] = {
    "plain": {},
    "nagle": {"nagle": True},
    "get-delay": {"latency": 0.040, "head_latency": 0.0},
    "all-delay": {"latency": 0.040},
    "http10": {"protocol": "HTTP/1.0"},
}
PROFILE_TEXT = {
    "plain": "plain loopback",
    "nagle": "keep-alive, Nagle on (http.server default)",
    "get-delay": "40 ms on each GET, none on HEAD",
    "all-delay": "40 ms on every request",
    "http10": "HTTP/1.0 (closes every connection)",
}


#: The servers' listen backlog, as real servers set it: nginx's default is 511 (its ``listen``
#: directive: "backlog=number ... By default, backlog is set to -1 on FreeBSD, DragonFly BSD,
#: and macOS, and to 511 on other platforms", https://nginx.org/en/docs/http/ngx_http_core_module.html#listen),
#: and Linux caps it at net.core.somaxconn (4096 since 5.4). ``http.server``'s default, 5,
#: overflowed 64-82 times per cold 600-package run here (a dropped SYN waits 1 s, then 3 s, to
#: be retried), stalling both sides by seconds: a property of the test server, not of either
#: installer.
BACKLOG = 511


def compare(
    label: str,
    channel: Channel,
    runs: int,
    workers: int,
    *,
    protocol: str = "HTTP/1.1",
    floor_too: bool = True,
    latency: float = 0.0,
    pixi: bool = False,
    **server: Any,
) -> list[tuple[Any, ...]]:
    """Rows (case, ours, rattler, CPU ours, CPU rattler, connections ours, connections
    rattler) of medians, interleaved runs; phases of our cold runs. ``server``: more
    ``ChannelServer`` settings (``PROFILES``). ``pixi``: ours reads a pixi.lock of the
    same archives, not an @EXPLICIT lock."""
    channel.server = ChannelServer(
        channel.root.parent, protocol=protocol, latency=latency, backlog=BACKLOG, **server
    ).start()
    conns: dict[str, list[int]] = {}
    work = Path(tempfile.mkdtemp(prefix="bench-", dir=SCRATCH))
    baseline = None if pixi else BASELINE  # an older checkout may not read a pixi.lock
    lock, records = work / ("pixi.lock" if pixi else "lock.txt"), work / "records.json"
    lock.write_text(channel.pixi_lock() if pixi else channel.explicit_lock())
    write_records(channel, records)
    times: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    floors: list[float] = []
    PHASES.clear()
    try:
        for _ in range(runs):
            if floor_too:
                os.sync()
                floors.append(floor(channel.archives, workers))
            ours, theirs, base = work / "ours", work / "theirs", work / "base"
            for case in ("cold", "warm", "reused"):
                if case == "warm":  # keep the package caches, start new prefixes
                    shutil.rmtree(ours / "miniforge3" / "26.3.2-3" / "envs")
                    shutil.rmtree(theirs / "prefix")
                    if baseline is not None:
                        shutil.rmtree(base / "miniforge3" / "26.3.2-3" / "envs")
                if baseline is not None:
                    os.sync()
                    channel.server.peers = set()
                    times.setdefault(f"{case} base", []).append(run_cli(lock, base, src=baseline))
                    cpu.setdefault(f"{case} base", []).append(LAST_CPU[0])
                os.sync()
                # the connections a GET came on (one the other side left queued in the
                # listen backlog, accepted after its process ended, is not counted)
                channel.server.peers = set()
                times.setdefault(f"{case} ours", []).append(
                    run_cli(lock, ours, phases=case == "cold")
                )
                cpu.setdefault(f"{case} ours", []).append(LAST_CPU[0])
                conns.setdefault(f"{case} ours", []).append(len(channel.server.peers))
                os.sync()
                channel.server.peers = set()
                times.setdefault(f"{case} rattler", []).append(
                    run_rattler(records, theirs / "prefix", theirs / "pkgs")
                )
                cpu.setdefault(f"{case} rattler", []).append(LAST_CPU[0])
                conns.setdefault(f"{case} rattler", []).append(len(channel.server.peers))
            shutil.rmtree(ours)
            shutil.rmtree(theirs)
            shutil.rmtree(base, ignore_errors=True)
    finally:
        channel.server.stop()
        shutil.rmtree(work, ignore_errors=True)
    total = sum(a.path.stat().st_size for a in channel.archives)
    print(
        f"\n{label}: {len(channel.archives)} packages, {total / 1e6:.1f} MB of .conda "
        f"archives, {protocol} server; medians of {runs} interleaved runs"
    )
    rows = []
    for case in ("cold", "warm", "reused"):
        ours, theirs = times[f"{case} ours"], times[f"{case} rattler"]
        rows.append(
            (
                case,
                statistics.median(ours),
                statistics.median(theirs),
                statistics.median(cpu[f"{case} ours"]),
                statistics.median(cpu[f"{case} rattler"]),
                statistics.median(conns[f"{case} ours"]),
                statistics.median(conns[f"{case} rattler"]),
                statistics.median(times[f"{case} base"]) if baseline is not None else None,
                statistics.median(cpu[f"{case} base"]) if baseline is not None else None,
                # each round runs both sides back to back: its ratio is taken under one load
                statistics.median(o / t for o, t in zip(ours, theirs)),
            )
        )
    if floors:
        f = statistics.median(floors)
        ratios = sorted(o / x for o, x in zip(times["cold ours"], floors))
        print(
            f"  floor (parallel decompression, {workers} processes): {f:.2f} s; cold ours / "
            f"floor {statistics.median(ratios):.2f} (range {ratios[0]:.2f}-{ratios[-1]:.2f})"
        )
    for name, values in PHASES.items():
        print(f"  of which {name} (ours, cold): {statistics.median(values):.2f} s")
    print(
        "  CPU (user + system, medians): "
        + "; ".join(
            f"{case} {statistics.median(cpu[f'{case} ours']):.2f} vs "
            f"{statistics.median(cpu[f'{case} rattler']):.2f} s"
            for case in ("cold", "warm", "reused")
        )
    )
    return rows


def _untar(blob: Path, into: Path) -> float:
    """Seconds to restore ``blob`` into ``into`` as actions/cache does (tar + zstd -d)."""
    start = time.perf_counter()
    subprocess.run(
        [
            "tar",
            "-xf",
            str(blob),
            "-P",
            "-C",
            str(into),
            "--use-compress-program",
            "zstd -d --long=30",
        ],
        check=True,
    )
    return time.perf_counter() - start


def cache_case(label: str, channel: Channel, runs: int) -> None:
    """cache: true on an ephemeral runner: restoring the package cache the way actions/cache
    does (a ``tar`` of the directory through ``zstd -T0 --long=30``; its ``archives/`` are
    excluded) and installing from it, vs installing with an empty cache. The blob's transfer
    is not measured here (loopback): its size is printed, to weigh against the archives'."""
    channel.server = ChannelServer(channel.root.parent, backlog=BACKLOG).start()
    work = Path(tempfile.mkdtemp(prefix="bench-cache-", dir=SCRATCH))
    lock = work / "lock.txt"
    lock.write_text(channel.explicit_lock())
    pkgs = work / "seed" / "miniforge3" / "26.3.2-3" / "pkgs"
    fresh, restore, warm = [], [], []
    env_restore, env_reused = [], []
    try:
        run_cli(lock, work / "seed")
        blob = work / "cache.tzst"
        subprocess.run(
            f"tar --posix --exclude=archives -cf - -C {pkgs} . | zstd -q -T0 --long=30 -o {blob}",
            shell=True,
            check=True,
        )
        # The finished environment as a second cache (same path, as on a runner's tool
        # cache): restore it and let the action find it reusable.
        envs = pkgs.parent / "envs"
        env_blob = work / "env.tzst"
        subprocess.run(
            f"tar --posix -cf - -C {envs} . | zstd -q -T0 --long=30 -o {env_blob}",
            shell=True,
            check=True,
        )
        for _ in range(runs):
            shutil.rmtree(envs)
            envs.mkdir()
            os.sync()
            env_restore.append(_untar(env_blob, envs))
            env_reused.append(run_cli(lock, work / "seed"))
        env_size = env_blob.stat().st_size
        for _ in range(runs):
            os.sync()
            fresh.append(run_cli(lock, work / "fresh"))
            shutil.rmtree(work / "fresh")
            target = work / "restored" / "miniforge3" / "26.3.2-3" / "pkgs"
            target.mkdir(parents=True)
            os.sync()
            restore.append(_untar(blob, target))
            warm.append(run_cli(lock, work / "restored"))
            shutil.rmtree(work / "restored")
        archives = sum(a.path.stat().st_size for a in channel.archives)
        size = blob.stat().st_size
    finally:
        channel.server.stop()
        shutil.rmtree(work, ignore_errors=True)
    f, r, w = (statistics.median(x) for x in (fresh, restore, warm))
    print(
        f"\ncache: true, {label} (medians of {runs}): archives {archives / 1e6:.0f} MB, cache "
        f"blob {size / 1e6:.0f} MB"
    )
    print(f"  empty cache, download from the (loopback) channel: {f:.2f} s")
    print(
        f"  restore (untar + zstd -d) {r:.2f} s + install from it {w:.2f} s = {r + w:.2f} s "
        "+ the blob's transfer"
    )
    print(
        f"  break-even: the cache pays when its blob ({size / 1e6:.0f} MB) arrives "
        f"{max(f - r - w, 0):.2f} s faster than the archives ({archives / 1e6:.0f} MB)"
    )
    er, eu = statistics.median(env_restore), statistics.median(env_reused)
    print(
        f"  finished environment as the cache instead: blob {env_size / 1e6:.0f} MB, "
        f"restore {er:.2f} s + reuse check {eu:.2f} s = {er + eu:.2f} s, vs "
        f"{r + w:.2f} s for the package cache"
    )


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--packages", type=int, nargs="*", default=[150, 600])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--profiles",
        nargs="*",
        default=list(PROFILES),
        choices=list(PROFILES),
        help="server profiles (default: all); http10 runs at the smallest --packages only "
        "and with one run (rattler's defaults take ~30 s there)",
    )
    parser.add_argument("--floor", action="store_true", help="also the decompression floor")
    parser.add_argument(
        "--large",
        action="store_true",
        help="also 3 packages of ~200 MB of random bytes (slow to generate)",
    )
    parser.add_argument("--large-mb", type=int, default=200)
    parser.add_argument(
        "--cache",
        action="store_true",
        help="also cache: true (restore + install) vs an empty cache",
    )
    parser.add_argument(
        "--pixi",
        action="store_true",
        help="also ours from a pixi.lock of the same archives (plain server)",
    )
    parser.add_argument("--disk", action="store_true", help="work in /tmp, not in RAM")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout's src (e.g. of git archive HEAD~1 src): run as a third side "
        "in the same rounds, for a before/after column",
    )
    args = parser.parse_args()
    global SCRATCH, BASELINE
    if args.disk:
        SCRATCH = None
    BASELINE = args.baseline
    workers = os.cpu_count() or 2
    loads = [_load()]
    table: list[tuple[Any, ...]] = []
    for count in args.packages:
        channel = make_channel(count)
        for profile in args.profiles:
            if profile == "http10" and count != min(args.packages):
                continue
            rows = compare(
                f"{count} packages, {PROFILE_TEXT[profile]}",
                channel,
                1 if profile == "http10" else args.runs,
                workers,
                floor_too=args.floor and profile == "plain",
                **PROFILES[profile],
            )
            table += [(f"{count}, {profile}", *row) for row in rows]
            loads.append(_load())
        if args.pixi:
            rows = compare(
                f"{count} packages, pixi.lock, {PROFILE_TEXT['plain']}",
                channel,
                args.runs,
                workers,
                floor_too=False,
                pixi=True,
            )
            table += [(f"{count}, plain, pixi.lock", *row) for row in rows]
            loads.append(_load())
    if args.large:
        for case, *row in compare(
            f"large ({args.large_mb} MB x 3)",
            make_large(3, args.large_mb),
            max(1, args.runs // 2),
            workers,
        ):
            table.append((f"large {args.large_mb} MB x 3, plain", case, *row))
    if args.cache:
        for count in args.packages:
            cache_case(f"{count} packages", make_channel(count), args.runs)
        if args.large:
            cache_case(
                f"large ({args.large_mb} MB x 3)",
                make_large(3, args.large_mb),
                max(1, args.runs // 2),
            )
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import gpu_ci.cli"],
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    print(
        f"\nCLI start-up (python + gpu_ci.cli imports): {time.perf_counter() - start:.2f} s; "
        f"{workers} cores; load average (1, 5, 15 min) at the start {loads[0]}, after each "
        f"profile {'; '.join(loads[1:])}"
    )
    print(
        "\nratio: of the medians; per round: the median of each round's ratio (both sides "
        "back to back, so a load that changes between rounds cancels out)"
    )
    print(
        "\n| packages, server | case | setup-conda-from-lock | rattler.install | ratio | "
        "per round | connections, ours vs rattler | CPU s, ours vs rattler |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for profile, case, ours, theirs, cpu_ours, cpu_theirs, c_ours, c_theirs, *_, per_round in table:
        print(
            f"| {profile} | {case} | {ours:.3f} s | {theirs:.3f} s | {ours / theirs:.2f}x | "
            f"{per_round:.2f}x | {c_ours:g} vs {c_theirs:g} | {cpu_ours:.2f} vs {cpu_theirs:.2f} |"
        )
    if BASELINE is not None:
        print(
            f"\nbefore ({BASELINE}) and after (this checkout), the same interleaved rounds:\n"
            "\n| packages, server | case | before | after | after / before | before / rattler "
            "| after / rattler | CPU s, before vs after |\n|---|---|---|---|---|---|---|---|"
        )
        for profile, case, ours, theirs, cpu_ours, _, _, _, before, cpu_before, _ in table:
            if before is None:  # a pixi.lock row: the baseline does not run it
                continue
            print(
                f"| {profile} | {case} | {before:.3f} s | {ours:.3f} s | {ours / before:.2f}x | "
                f"{before / theirs:.2f}x | {ours / theirs:.2f}x | {cpu_before:.2f} vs "
                f"{cpu_ours:.2f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
