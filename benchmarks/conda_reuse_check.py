"""The cost of ``reused: true``: checking an environment's files against its conda-meta.

Builds a synthetic prefix shaped like a large conda-forge environment (``--packages``
records of ``--files`` files each; a 300-package CUDA/PyTorch environment has ~30-60k
files), then prints, medians of ``--runs``, side by side:

* check: ``gpu_ci.conda.integrity.environment_problems`` (an ``lstat`` and a size compare per
  recorded file, every record parsed), what a reuse costs now;
* marker only: reading the marker JSON, what a reuse cost before (the yardstick: no check);

Goal (issue 12): check <= 0.15 s for a 300-package environment, warm file-system cache.

    python benchmarks/conda_reuse_check.py [--packages 300] [--files 150] [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from gpu_ci.conda.integrity import environment_problems  # noqa: E402


def build(prefix: Path, packages: int, files: int) -> int:
    meta = prefix / "conda-meta"
    meta.mkdir(parents=True)
    total = 0
    for p in range(packages):
        paths = []
        for f in range(files):
            rel = f"lib/pkg{p}/mod{f // 20}/file{f}.py"
            path = prefix / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            data = f"# {p} {f}\n".encode() * (1 + f % 7)
            path.write_bytes(data)
            paths.append(
                {
                    "_path": rel,
                    "path_type": "hardlink",
                    "sha256": "0" * 64,
                    "size_in_bytes": len(data),
                }
            )
            total += 1
        record = {
            "name": f"pkg{p}",
            "version": "1.0",
            "build": "h0_0",
            "files": [e["_path"] for e in paths],
            "paths_data": {"paths_version": 1, "paths": paths},
        }
        (meta / f"pkg{p}-1.0-h0_0.json").write_text(json.dumps(record, indent=2))
    (meta / "gpu-ci-lock.json").write_text(json.dumps({"lock_sha256": "0" * 64}))
    return total


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--packages", type=int, default=300)
    parser.add_argument("--files", type=int, default=150)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    prefix = Path(tempfile.mkdtemp(prefix="bench-reuse-")) / "env"
    try:
        count = build(prefix, args.packages, args.files)
        assert environment_problems(prefix, args.packages) == []
        check, cpu, marker = [], [], []
        for _ in range(args.runs):
            start, start_cpu = time.perf_counter(), time.process_time()
            environment_problems(prefix, args.packages)
            check.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
            start = time.perf_counter()
            json.loads((prefix / "conda-meta" / "gpu-ci-lock.json").read_text())
            marker.append(time.perf_counter() - start)
    finally:
        shutil.rmtree(prefix.parent)
    c, m, u = statistics.median(check), statistics.median(marker), statistics.median(cpu)
    with open("/proc/loadavg") as handle:
        load = handle.read().split()[0]
    print(f"{args.packages} packages, {count} files; medians of {args.runs} runs (warm cache)")
    print(f"  check (lstat + size per recorded file): {c:7.3f} s   (goal <= 0.15 s)")
    print(f"    of which CPU time of this process:    {u:7.3f} s   (load average {load})")
    print(f"  marker only (the old reuse, no check):  {m:7.4f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
