"""Building blocks for gpu-monitor tests: a fake GPU that plays a scripted time series.

The fake ``libnvidia-ml.so.1`` (testkit/fake_nvml/fake_nvml.c) reads ``FAKE_NVML_SCRIPT``:
``<step> key=value ...`` lines, where a step is one sample. The sampler's clock is faked
through ``GPU_CI_MONITOR_FAKE_CLOCK`` (sample *i* is at ``epoch + i * interval``) and it stops
after ``GPU_CI_MONITOR_MAX_SAMPLES``, so every number is known in advance: no timed tests.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from testkit.cuda_env import build_fake_nvml, gpu_config, nvml_config, write_config

EPOCH = 1_790_000_000.0


def start_line(name: str = "G", uuid: str = "U", memory_total: int = 2**30) -> str:
    """The sampler's first line: one GPU, 1 s interval, started at ``EPOCH``."""
    gpu = {"index": 0, "name": name, "uuid": uuid, "memory_total": memory_total}
    record = {"kind": "start", "version": 1, "ts": EPOCH, "interval": 1.0, "pid": 1}
    return json.dumps({**record, "gpus": [gpu]})


"""2026-09-21T14:13:20Z: the fake clock's start (a whole second)."""
UUID0 = "GPU-00000000-aaaa-bbbb-cccc-000000000000"

#: 90 one-second samples: 30 idle at 60 W, 30 busy at 100 % / 300 W with 10 GiB, then 30 at
#: 50 % / 200 W with 30 GiB (python 30000 MiB + a 700 MiB helper); thermal slowdown 70-79.
BUSY_SCRIPT = """\
# step key=value ...
0 gpu.0.util=0 gpu.0.mem_util=0 gpu.0.mem_used_mib=0 gpu.0.power_mw=60000 gpu.0.procs=-
30 gpu.0.util=100 gpu.0.mem_util=40 gpu.0.mem_used_mib=10240 gpu.0.power_mw=300000
30 gpu.0.procs=4242:10000:python
60 gpu.0.util=50 gpu.0.mem_used_mib=30720 gpu.0.power_mw=200000
60 gpu.0.procs=4242:30000:python,4343:700:nccl-helper
70 gpu.0.throttle=0x20 gpu.0.temp=88
80 gpu.0.throttle=0x0 gpu.0.temp=70
"""

IDLE_SCRIPT = "0 gpu.0.util=0 gpu.0.mem_used_mib=0 gpu.0.power_mw=60000 gpu.0.procs=-\n"

#: The act job (and `make demo`): 45 samples, 15 idle, then 30 at 100 % with python at 8 GiB.
E2E_SCRIPT = """\
0 gpu.0.util=0 gpu.0.mem_used_mib=0 gpu.0.power_mw=60000 gpu.0.procs=-
15 gpu.0.util=100 gpu.0.mem_used_mib=8192 gpu.0.power_mw=400000 gpu.0.procs=777:8000:python
"""

LOST_SCRIPT = """\
0 gpu.0.util=30 gpu.0.mem_used_mib=2048 gpu.0.procs=4242:2000:python
5 gpu.0.xid=79
8 gpu.0.lost=1
"""


def fake_gpu_env(
    tmp: Path,
    script: str,
    *,
    samples: int | None = 90,
    gpus: int = 1,
    interval: str = "1",
    machine: dict[str, object] | None = None,
    **gpu: object,
) -> dict[str, str]:
    """Environment for ``gpu-ci gpu-monitor`` against fake GPUs playing ``script``.

    ``gpu`` adds config keys to every GPU (``cc="8.0"``, ``pcie_counters=1``), ``machine``
    top-level ones (``container=1``)."""
    lib = build_fake_nvml(tmp / "nvml")
    config = write_config(
        tmp / "nvml.cfg",
        nvml_config(
            *[gpu_config(i, uuid=UUID0 if i == 0 else None, **gpu) for i in range(gpus)],
            **(machine or {}),
        ),
    )
    script_path = tmp / "nvml-script.txt"
    script_path.write_text(script)
    (tmp / "runner_temp").mkdir(exist_ok=True)
    env = {
        "LD_LIBRARY_PATH": str(lib),
        "FAKE_NVML_CONFIG": str(config),
        "FAKE_NVML_SCRIPT": str(script_path),
        "RUNNER_TEMP": str(tmp / "runner_temp"),
        "INPUT_INTERVAL": interval,
    }
    if samples is not None:
        env["GPU_CI_MONITOR_FAKE_CLOCK"] = f"{EPOCH:.0f}"
        env["GPU_CI_MONITOR_MAX_SAMPLES"] = str(samples)
    return env


def monitor_dir(env: dict[str, str]) -> Path:
    from gpu_ci.cuda.monitor.control import job_directory

    return job_directory(env["RUNNER_TEMP"], env)


def wait_for_stop_line(env: dict[str, str], timeout: float = 60) -> list[dict]:
    """Wait until the fake-clock sampler wrote its last line; return the records.

    Polls a file the sampler finishes by itself: the wait bounds a hang, it times nothing."""
    path = monitor_dir(env) / "samples.jsonl"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            lines = [json.loads(x) for x in path.read_text().splitlines() if x.endswith("}")]
            if lines and lines[-1]["kind"] == "stop":
                return lines
        time.sleep(0.05)
    raise AssertionError(f"the sampler did not finish: {path}")


def example_report():
    """The README's example summary, from a recording built here.

    No process, no clock: a 3-minute job whose tests used the GPU for 55 s, with an Xid 13
    near the end."""
    from decimal import Decimal

    from gpu_ci.cuda.monitor import recording as mr_recording
    from gpu_ci.cuda.monitor import report as mr
    from gpu_ci.cuda.monitor import results

    lines = [
        json.dumps(
            {
                "kind": "start",
                "version": 1,
                "ts": EPOCH,
                "interval": 1.0,
                "pid": 4100,
                "gpus": [
                    {
                        "index": 0,
                        "name": "NVIDIA H200",
                        "uuid": UUID0,
                        "memory_total": 143771 * 2**20,
                    }
                ],
            }
        )
    ]
    for i in range(150):
        busy = 70 <= i < 125
        procs = [[4242, (30000 if i >= 100 else 10000) * 2**20, "python"]] if busy else []
        lines.append(
            json.dumps(
                {
                    "kind": "sample",
                    "ts": EPOCH + i,
                    "gpus": [
                        {
                            "index": 0,
                            "util": (96 if i < 100 else 48) if busy else 0,
                            "mem_util": 35 if busy else 0,
                            "mem_used": (30720 if i >= 100 else 10240) * 2**20 if busy else 0,
                            "power_mw": 410000 if busy else 68000,
                            "temp": 81 if 105 <= i < 115 else 45,
                            "sm_mhz": 1980,
                            "throttle": 0x20 if 105 <= i < 115 else 0,
                            "procs": procs,
                        }
                    ],
                }
            )
        )
    lines.append(
        json.dumps({"kind": "event", "ts": EPOCH + 131, "gpu": 0, "type": "xid", "data": 13})
    )
    lines.append(
        json.dumps({"kind": "stop", "ts": EPOCH + 150, "reason": "signal", "samples": 150})
    )
    steps = [
        results.Phase("Set up job", EPOCH - 25, EPOCH - 21),
        results.Phase("Run actions/checkout", EPOCH - 21, EPOCH - 2),
        results.Phase("Run gpu-monitor (start)", EPOCH - 2, EPOCH),
        results.Phase("Run setup-conda-from-lock", EPOCH, EPOCH + 62),
        results.Phase("Run verify-cuda-env", EPOCH + 62, EPOCH + 66),
        results.Phase("Run python -m pytest -x", EPOCH + 66, EPOCH + 148),
        results.Phase("Run gpu-monitor (report)", EPOCH + 148, EPOCH + 150),
    ]
    return mr.compute(
        mr_recording.parse_recording("\n".join(lines)),
        end=EPOCH + 150,
        steps=steps,
        job_started=EPOCH - 25,
        pricing=results.Pricing(Decimal("0.052"), "linux_4_core_gpu on 2026-11-30"),
        limits=results.Limits(expect_gpu_use=True),
    )
