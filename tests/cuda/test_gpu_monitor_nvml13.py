"""gpu-monitor reads temperature and clocks event reasons by NVML 13's names where the driver
has them, and by the old names (nvml.h: DEPRECATED(13.0)) on a driver that has only those.

nvml.h (13.x): nvmlDeviceGetTemperature "@deprecated Use nvmlDeviceGetTemperatureV instead";
nvmlDeviceGetCurrentClocksThrottleReasons "@deprecated Use
nvmlDeviceGetCurrentClocksEventReasons instead". The fake exports the new symbols only for a
current driver; its r470 generation has only the old ones.
"""

from __future__ import annotations

import pytest

from testkit.cuda_env import build_fake_nvml
from testkit.gpu_monitor_env import fake_gpu_env, wait_for_stop_line

SCRIPT = "0 gpu.0.util=50 gpu.0.temp=61 gpu.0.throttle=4 gpu.0.procs=-\n"


def sampled(run_cli, tmp_path, generation):
    env = fake_gpu_env(tmp_path, SCRIPT, samples=2)
    env["LD_LIBRARY_PATH"] = str(build_fake_nvml(tmp_path / generation, generation=generation))
    log = tmp_path / "nvml.log"
    env["FAKE_NVML_LOG"] = str(log)
    started = run_cli(["gpu-monitor", "--mode", "start"], env)
    assert started.returncode == 0, started.stdout + started.stderr
    records = wait_for_stop_line(env)
    assert not [r for r in records if r["kind"] == "error"], records
    (gpu, *_), *_ = [r["gpus"] for r in records if r["kind"] == "sample"]
    return gpu, log.read_text().split()


@pytest.mark.parametrize(
    ("generation", "used", "unused"),
    [
        (
            "current",
            ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetCurrentClocksEventReasons"),
            ("nvmlDeviceGetTemperature", "nvmlDeviceGetCurrentClocksThrottleReasons"),
        ),
        (
            "r470",
            ("nvmlDeviceGetTemperature", "nvmlDeviceGetCurrentClocksThrottleReasons"),
            ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetCurrentClocksEventReasons"),
        ),
    ],
)
def test_monitor_uses_nvml13_names_where_the_driver_has_them(
    run_cli, tmp_path, generation, used, unused
):
    gpu, calls = sampled(run_cli, tmp_path, generation)
    assert (gpu["temp"], gpu["throttle"]) == (61, 4)
    for name in used:
        assert name in calls, (name, calls)
    for name in unused:
        assert name not in calls, (name, calls)
