"""What watching costs: the gpu-monitor sampler's CPU and memory at its default 1 s interval.

Goal (issue: gpu-monitor): at most 1 % of one core and at most 30 MiB resident memory.

    python benchmarks/gpu_monitor.py [--seconds 30] [--gpus 1,8] [--mig 7]

Measured against the fake libnvidia-ml.so.1 (testkit/fake_nvml), playing a busy GPU with two
processes: the Python side (nvidia-ml-py, JSON lines, the event wait) is what is measured;
a real driver's NVML calls cost more per call (tens of microseconds each) and are not in
these numbers. CPU is utime + stime of the sampler from /proc/<pid>/stat after a 3 s
warm-up, over wall time; memory is the sampler's peak RSS (VmHWM).

``--mig N``: also an H200 split into N MIG slices, the job given the first (by its UUID in
``CUDA_VISIBLE_DEVICES``, as a MIG runner hands one out): the slice's own figures through
its device handle and GPM, the board's power, energy, ECC and PCIe/NVLink counters through
the parent handle, and the other tenants' processes and events to set aside.
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

from testkit.cuda_env import build_fake_nvml, gpu_config, nvml_config, write_config  # noqa: E402

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


#: Issue 28's signals, read every second: the driver's utilisation sample buffer (6 entries a
#: second), the energy and violation counters, PCIe and NVLink counters (field values), the
#: newer event types (GPM, ECC and remapped rows come with the H200 the fake plays).
SIGNALS = {
    "util_samples": 6,
    "energy_counter": 1,
    "violation": 1,
    "pcie_counters": 1,
    "nvlink": 1,
    "event_types": "0xFF0B",
}


def mig_uuid(slice_: int) -> str:
    return f"MIG-{slice_:08d}-2222-3333-4444-555555555555"


def mig_board(slices: int) -> tuple[dict[str, str], str]:
    """An H200 in MIG mode split into ``slices`` 1g slices, each busy with its own tenant
    (the job's is slice 0): its fake-NVML config and script."""
    config = nvml_config(
        gpu_config(
            0,
            mig=1,
            mig__count=slices,
            **SIGNALS,
            **{
                key: value
                for k in range(slices)
                for key, value in (
                    (f"mig__{k}__uuid", mig_uuid(k)),
                    (f"mig__{k}__name", "NVIDIA H200 MIG 1g.18gb"),
                    (f"mig__{k}__memory_mib", 18 * 1024),
                )
            },
        ),
        privileged=1,
    )
    script = "0 gpu.0.power_mw=450000\n" + "".join(
        f"0 gpu.0.mig.{k}.util={40 + 8 * k} gpu.0.mig.{k}.mem_used_mib={2048 + 512 * k}\n"
        f"0 gpu.0.mig.{k}.procs={4242 + k}:{2000 + k}:python\n"
        for k in range(slices)
    )
    return config, script


def whole_gpus(gpus: int) -> tuple[dict[str, str], str]:
    """``gpus`` whole H200s, each busy with two processes: config and script."""
    config = nvml_config(*[gpu_config(i, reserved_mib=500, **SIGNALS) for i in range(gpus)])
    return config, "".join(SCRIPT.format(i=i) for i in range(gpus))


def measure(gpus: int, seconds: float, work: Path, mig: int = 0) -> tuple[float, float, int]:
    """The sampler watching ``gpus`` whole GPUs, or (``mig``) the first slice of a MIG
    board of ``mig`` slices: CPU % of one core, peak RSS MiB, samples written."""
    lib = build_fake_nvml(work / "nvml")
    tag = f"mig-{mig}" if mig else str(gpus)
    config, text = mig_board(mig) if mig else whole_gpus(gpus)
    script = work / f"script-{tag}.txt"
    script.write_text(text)
    directory = work / f"monitor-{tag}"
    directory.mkdir()
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": str(lib),
        "FAKE_NVML_CONFIG": str(write_config(work / f"nvml-{tag}.cfg", config)),
        "FAKE_NVML_SCRIPT": str(script),
        "PYTHONPATH": str(ROOT / "src"),
    }
    if mig:  # the job's slice, as a MIG runner hands it out
        env["CUDA_VISIBLE_DEVICES"] = mig_uuid(0)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpu_ci.cuda.monitor.sampler",
            str(directory),
            "1",
            "0" if mig else ",".join(str(i) for i in range(gpus)),
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
    parser.add_argument(
        "--mig", type=int, default=7, help="slices of the MIG board (0: no MIG row)"
    )
    args = parser.parse_args()
    print(
        "gpu-monitor sampler at interval 1 s, against the fake NVML (testkit/fake_nvml); "
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
        if args.mig:
            cpu, rss, samples = measure(1, args.seconds, Path(tmp), mig=args.mig)
            print(
                f"  1 MIG slice of {args.mig}: {cpu:.2f} % (<= 1), {rss:.1f} MiB (<= 30), "
                f"{samples} samples"
            )
    tick = 100 / os.sysconf("SC_CLK_TCK") / args.seconds
    print(f"  (CPU resolution: one clock tick = {tick:.2f} % over {args.seconds:g} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
