"""verify-cuda-env vs importing torch, measured side by side in one run.

Goal (issue: verify-cuda-env): the whole check takes at most 0.1x the time of
``python -c "import torch; torch.cuda.is_available()"`` in the same environment.

    python benchmarks/verify_cuda_env.py [--runs 7]

Creates benchmarks/.cache/torch-venv with the CPU build of torch 2.13.0 on first use, and
runs verify-cuda-env against a fake libnvidia-ml.so.1 reporting the observed H200.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.cuda_env import build_fake_nvml, observed_h200, write_config  # noqa: E402

CACHE = ROOT / "benchmarks" / ".cache"


def torch_venv() -> Path:
    venv = CACHE / "torch-venv"
    python = venv / "bin" / "python"
    if not (venv / ".ready").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "torch==2.13.0"], check=True)
        (venv / ".ready").write_text("")
    return python


def timed(cmd: list[str], env: dict[str, str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"{cmd[:3]} failed: {proc.stdout}{proc.stderr}")
    return times


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    python = torch_venv()
    lib = build_fake_nvml(CACHE / "fake-nvml")
    config = write_config(CACHE / "nvml.cfg", observed_h200()[1])
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib), "FAKE_NVML_CONFIG": str(config),
           "PYTHONPATH": str(ROOT / "src")}
    env.pop("GITHUB_OUTPUT", None)
    verify = [sys.executable, "-m", "gpu_ci", "verify-cuda-env", "--require-gpu", "false",
              "--python", str(python)]
    torch_cmd = [str(python), "-c", "import torch; torch.cuda.is_available()"]
    # interleave, so that machine noise hits both alike
    v_times: list[float] = []
    t_times: list[float] = []
    timed(verify, env, 1)
    timed(torch_cmd, env, 1)  # warm the page cache for both
    for _ in range(args.runs):
        v_times += timed(verify, env, 1)
        t_times += timed(torch_cmd, env, 1)
    v, t = statistics.median(v_times), statistics.median(t_times)
    print(f"runs: {args.runs} each, interleaved; medians")
    print(f"  gpu-ci verify-cuda-env (fake NVML, torch env): {v * 1000:8.1f} ms")
    print(f"  python -c 'import torch; torch.cuda.is_available()': {t * 1000:8.1f} ms")
    print(f"  ratio verify / torch import: {v / t:.3f}  (goal <= 0.1)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
