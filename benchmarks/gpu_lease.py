"""What a lease costs: ``gpu-ci gpu-lease`` (mode lease) from start to its outputs, warm.

Goal (issue 33): at most 0.3 s warm (the interpreter's files in the page cache, the lease
directory made, a free GPU).

    python benchmarks/gpu_lease.py [--runs 15] [--gpus 8] [--lease 2]

Measured against the fake libnvidia-ml.so.1 (testkit/fake_nvml) on an 8-GPU host: the command
(imports, inputs, directory check) plus its detached holder (an interpreter start, nvmlInit,
one scan with flock per GPU, the answer). Each run leases, then its "job" ends and the next
run starts once the locks are free. Printed side by side with the yardstick of a bare
``python -c "import pynvml; pynvml.nvmlInit(); pynvml.nvmlDeviceGetCount()"`` against the
same library: a lease is about two such interpreter starts. A real driver's nvmlInit costs
more (tens of milliseconds; more without persistence mode) and is not in these numbers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testkit.cuda_env import build_fake_nvml, gpu_config, nvml_config, write_config  # noqa: E402

YARDSTICK = "import pynvml; pynvml.nvmlInit(); pynvml.nvmlDeviceGetCount()"


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def wait_free(leases: Path) -> None:
    from gpu_ci import locks

    deadline = time.monotonic() + 30
    while any(locks.held(p) for p in leases.glob("*.lock")):
        if time.monotonic() > deadline:
            raise SystemExit("a holder did not end")
        time.sleep(0.01)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--lease", type=int, default=2)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        lib = build_fake_nvml(work / "nvml")
        config = write_config(
            work / "nvml.cfg", nvml_config(*[gpu_config(i) for i in range(args.gpus)])
        )
        base = {
            k: v for k, v in os.environ.items() if not k.startswith(("INPUT_", "GITHUB_", "CUDA_"))
        }
        base.update(
            LD_LIBRARY_PATH=str(lib),
            FAKE_NVML_CONFIG=str(config),
            PYTHONPATH=str(ROOT / "src"),
            GPU_CI_LEASE_DIR=str(work / "leases"),
            GPU_CI_LEASE_POLL_S="0.01",
            INPUT_MODE="lease",
            INPUT_GPUS=str(args.lease),
            INPUT_WAIT_MINUTES="1",
            GITHUB_STEP_SUMMARY=os.devnull,
        )
        yard, lease = [], []
        for run in range(args.runs + 2):  # two warm-up runs of each
            yard.append(timed([sys.executable, "-c", YARDSTICK], base))
            job = subprocess.Popen(["sleep", "600"])
            env = dict(
                base, RUNNER_TEMP=str(work / f"temp-{run}"), GPU_CI_LEASE_JOB_PID=str(job.pid)
            )
            try:
                lease.append(timed([sys.executable, "-m", "gpu_ci", "gpu-lease"], env))
            finally:
                job.kill()
                job.wait()
            wait_free(work / "leases")
    y, t = statistics.median(yard[2:]), statistics.median(lease[2:])
    print(f"{args.gpus} GPUs, lease {args.lease}, median of {args.runs} warm runs:")
    print(f"  bare nvidia-ml-py init (yardstick): {y * 1000:7.1f} ms")
    print(
        f"  gpu-ci gpu-lease (lease):           {t * 1000:7.1f} ms  "
        f"({t / y:.1f}x the yardstick; goal <= 300 ms: {'met' if t <= 0.3 else 'NOT met'})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
