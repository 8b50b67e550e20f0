"""Building blocks for gpu-monitor tests: a fake GPU that plays a scripted time series.

The fake ``libnvidia-ml.so.1`` (tests/fake_nvml/fake_nvml.c) reads ``FAKE_NVML_SCRIPT``:
``<step> key=value ...`` lines, where a step is one sample. The sampler's clock is faked
through ``GPU_CI_MONITOR_FAKE_CLOCK`` (sample *i* is at ``epoch + i * interval``) and it stops
after ``GPU_CI_MONITOR_MAX_SAMPLES``, so every number is known in advance: no timed tests.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.cuda_env import build_fake_nvml, gpu_config, nvml_config, write_config

EPOCH = 1_790_000_000.0
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

LOST_SCRIPT = """\
0 gpu.0.util=30 gpu.0.mem_used_mib=2048 gpu.0.procs=4242:2000:python
5 gpu.0.xid=79
8 gpu.0.lost=1
"""


def fake_gpu_env(tmp: Path, script: str, *, samples: int | None = 90,
                 gpus: int = 1, interval: str = "1") -> dict[str, str]:
    """Environment for ``gpu-ci gpu-monitor`` against the fake GPU(s) playing ``script``."""
    lib = build_fake_nvml(tmp / "nvml")
    config = write_config(tmp / "nvml.cfg", nvml_config(*[gpu_config(
        i, uuid=UUID0 if i == 0 else None) for i in range(gpus)]))
    script_path = tmp / "nvml-script.txt"
    script_path.write_text(script)
    (tmp / "runner_temp").mkdir(exist_ok=True)
    env = {"LD_LIBRARY_PATH": str(lib), "FAKE_NVML_CONFIG": str(config),
           "FAKE_NVML_SCRIPT": str(script_path), "RUNNER_TEMP": str(tmp / "runner_temp"),
           "INPUT_INTERVAL": interval}
    if samples is not None:
        env["GPU_CI_MONITOR_FAKE_CLOCK"] = f"{EPOCH:.0f}"
        env["GPU_CI_MONITOR_MAX_SAMPLES"] = str(samples)
    return env


def monitor_dir(env: dict[str, str]) -> Path:
    from gpu_ci.cuda.monitor import job_directory

    return job_directory(env["RUNNER_TEMP"], env)


def wait_for_stop_line(env: dict[str, str], timeout: float = 60) -> list[dict]:
    """Wait until the (fake-clock) sampler wrote its last line; returns the file's records.
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
