"""What the pytest plugin costs per test, against the same suite without it.

Goal (issue 47): at most 1 ms per test, NVML reads included.

    python benchmarks/pytest_plugin.py [--rounds 9] [--tests 2000] [--gpus 1] [--others 3]

The suite is ``--tests`` trivial tests (the plugin's cost, not the tests', is measured), run
by ``python -m pytest`` with the fake libnvidia-ml.so.1 (testkit/fake_nvml) answering NVML:
``--gpus`` job GPUs, each with ``--others`` processes of other jobs in the driver's ledger,
so every read of the process list walks a real directory and decodes entries. Rounds
alternate with and without ``-p gpu_ci.pytest_plugin`` (after one warm-up each); the
per-test overhead is the difference of the medians over the number of tests, in CPU time
(user + system of the pytest process: on a shared machine wall time says little alone). The plugin
reads NVML twice per test (before setup, after teardown), one process list per job GPU.
A real driver's process list costs more than the fake's (an ioctl to the kernel module:
tens of microseconds) and is not in these numbers.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testkit.cuda_env import build_fake_nvml, gpu_config, nvml_config, write_config  # noqa: E402

#: The plugin's two reads per test (before setup, after teardown), timed alone.
NVML_READS = """
import os, sys, time
from gpu_ci.pytest_plugin import gpus
from gpu_ci.pytest_plugin.nvml import Nvml
nvml = Nvml.open()
devices, _ = gpus.job_devices(nvml, os.environ)
n = int(sys.argv[1])
start = time.process_time()
for _ in range(n):
    for d in devices:
        nvml.processes(d.handle)
        nvml.processes(d.handle)
print((time.process_time() - start) / n)
"""


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one run of ``cmd``."""
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - cpu.ru_utime + after.ru_stime - cpu.ru_stime


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--tests", type=int, default=2000)
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--others", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        lib = build_fake_nvml(work / "nvml", with_libcuda=False)
        config = write_config(
            work / "nvml.cfg", nvml_config(*[gpu_config(i) for i in range(args.gpus)])
        )
        ledger = work / "ledger"
        ledger.mkdir()
        for gpu in range(args.gpus):
            for k in range(args.others):
                (ledger / f"{gpu}.{900000 + k}").write_text("1024 other-job\n")
        suite = work / "suite"
        suite.mkdir()
        (suite / "test_many.py").write_text(
            "import pytest\n\n"
            f"@pytest.mark.parametrize('n', range({args.tests}))\n"
            "def test_n(n):\n    pass\n"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "CUDA_"))}
        env.update(
            LD_LIBRARY_PATH=str(lib),
            FAKE_NVML_CONFIG=str(config),
            FAKE_NVML_LEDGER=str(ledger),
            PYTHONPATH=str(ROOT / "src"),
            PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
        )
        bare = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        plugin = [*bare, "-p", "gpu_ci.pytest_plugin"]
        without, with_plugin = [], []
        for round_ in range(args.rounds + 1):  # one warm-up round of each
            a = timed(bare, env, suite)
            b = timed(plugin, env, suite)
            if round_:
                without.append(a)
                with_plugin.append(b)
        reads = subprocess.run(
            [sys.executable, "-c", NVML_READS, str(args.tests)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
    nvml_ms = float(reads.stdout) * 1000
    print(
        f"{args.tests} tests, {args.gpus} GPU(s), {args.others} other process(es) each, "
        f"{args.rounds} rounds, medians (CPU seconds: user + system; wall beside):"
    )
    results = {}
    for label, runs in (("without the plugin", without), ("with the plugin", with_plugin)):
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        results[label] = (wall, cpu)
        print(f"  {label:<20} {cpu:7.3f} CPU s  {wall:7.3f} wall s")
    (off_wall, off), (on_wall, on) = results.values()
    per_test_ms = (on - off) / args.tests * 1000
    print(f"  ratio                {on / off:7.2f}x CPU  {on_wall / off_wall:7.2f}x wall")
    print(
        f"  overhead per test    {per_test_ms:7.3f} ms CPU  "
        f"{(on_wall - off_wall) / args.tests * 1000:7.3f} ms wall  (goal <= 1 ms: "
        f"{'met' if per_test_ms <= 1 else 'NOT met'})"
    )
    print(
        f"  of which NVML reads  {nvml_ms:7.3f} ms CPU  (the fake driver's, {2 * args.gpus} "
        "process lists per test)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
