"""What watching costs: the gpu-monitor sampler's CPU and memory at its default 1 s interval.

Goal (issue: gpu-monitor): at most 1 % of one core and at most 30 MiB resident memory.

    python benchmarks/gpu_monitor.py [--seconds 30] [--gpus 1,8]

Measured against the fake libnvidia-ml.so.1 (tests/fake_nvml), playing a busy GPU with two
processes: the Python side (nvidia-ml-py, JSON lines, the event wait) is what is measured;
a real driver's NVML calls cost more per call (tens of microseconds each) and are not in
these numbers. CPU is utime + stime of the sampler from /proc/<pid>/stat after a 3 s
warm-up, over wall time; memory is the sampler's peak RSS (VmHWM).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.cuda_env import build_fake_nvml, gpu_config, nvml_config, write_config  # noqa: E402

SCRIPT = (
    "0 gpu.{i}.util=97 gpu.{i}.mem_used_mib=40960 gpu.{i}.power_mw=450000\n"
    "0 gpu.{i}.procs=4242:30000:python,4343:700:nccl-helper\n"
    "0 gpu.{i}.sm=80 gpu.{i}.occupancy=45 gpu.{i}.tensor=60 gpu.{i}.dram=35\n"
    "0 gpu.{i}.pcie_tx_mib=200 gpu.{i}.pcie_rx_mib=50 gpu.{i}.nvlink_tx_mib=900\n"
)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(gpus: int, seconds: float, work: Path) -> tuple[float, float, int]:
    lib = build_fake_nvml(work / "nvml")
    config = write_config(
        work / f"nvml-{gpus}.cfg",
        # with issue 28's signals: the driver's utilisation sample buffer (6 entries a
        # second), the energy and violation counters, GPM (an H200: SM/tensor/DRAM), PCIe
        # and NVLink counters (field values), ECC and remapped rows, the newer event types
        nvml_config(
            *[
                gpu_config(
                    i,
                    util_samples=6,
                    energy_counter=1,
                    violation=1,
                    reserved_mib=500,
                    pcie_counters=1,
                    nvlink=1,
                    event_types="0xFF0B",
                )
                for i in range(gpus)
            ]
        ),
    )
    script = work / f"script-{gpus}.txt"
    script.write_text("".join(SCRIPT.format(i=i) for i in range(gpus)))
    directory = work / f"monitor-{gpus}"
    directory.mkdir()
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": str(lib),
        "FAKE_NVML_CONFIG": str(config),
        "FAKE_NVML_SCRIPT": str(script),
        "PYTHONPATH": str(ROOT / "src"),
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpu_ci.cuda.monitor",
            str(directory),
            "1",
            ",".join(str(i) for i in range(gpus)),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(3)  # start-up (imports, nvmlInit) is paid once per job, not per second
        c0, t0 = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(seconds)
        c1, t1 = cpu_seconds(proc.pid), time.monotonic()
        rss = peak_rss_mib(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    lines = (directory / "samples.jsonl").read_text().count('"kind":"sample"')
    return 100 * (c1 - c0) / (t1 - t0), rss, lines


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--gpus", default="1,8")
    args = parser.parse_args()
    print(
        "gpu-monitor sampler at interval 1 s, against the fake NVML (tests/fake_nvml); "
        f"{args.seconds:g} s measured after a 3 s warm-up"
    )
    print(
        f"  {'GPUs':>4}  {'CPU % of one core':>18}  {'goal':>6}  {'peak RSS MiB':>12}  "
        f"{'goal':>6}  samples"
    )
    with tempfile.TemporaryDirectory(prefix="gpu-monitor-bench-") as tmp:
        for n in (int(x) for x in args.gpus.split(",")):
            cpu, rss, samples = measure(n, args.seconds, Path(tmp))
            print(f"  {n:>4}  {cpu:>18.2f}  {'<= 1':>6}  {rss:>12.1f}  {'<= 30':>6}  {samples}")
    tick = 100 / os.sysconf("SC_CLK_TCK") / args.seconds
    print(f"  (CPU resolution: one clock tick = {tick:.2f} % over {args.seconds:g} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
