"""verify-cuda-env vs importing torch, measured side by side in one run.

Goal (issues: verify-cuda-env; arch reading in the fast path): the whole check, including
reading torch's arch list out of ``libtorch_python.so``, takes at most 0.1x the time of
``python -c "import torch; torch.cuda.is_available()"`` in the same environment.

    python benchmarks/verify_cuda_env.py [--runs 7] [--torch torch==2.14.1]

Creates benchmarks/.cache/<spec>-venv on first use with that torch from PyPI (the default,
torch 2.14.1, is PyPI's CUDA 13.0 build with its nvidia-* dependencies, a few GB; pass
``--torch torch==2.13.0+cpu`` for the small CPU build, whose library has no arch list, so the
reader scans the whole file: its slowest case), and runs verify-cuda-env against a fake
libnvidia-ml.so.1 reporting the observed H200.

It also times the generic arch reader (:func:`gpu_ci.cuda.verify.arch.read_arch_list`, the
``.nv_fatbin`` entry-header walk every non-torch framework binary goes through) on the largest
library under ``torch/lib`` (``libtorch_cuda.so`` in a CUDA build: hundreds of MB of fatbin),
or on ``--fatbin PATH``.
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

from testkit.cuda_env import build_fake_nvml, observed_h200, write_config  # noqa: E402

CACHE = ROOT / "benchmarks" / ".cache"


def torch_venv(spec: str) -> Path:
    venv = CACHE / (spec.replace("=", "-").replace("+", "-") + "-venv")
    python = venv / "bin" / "python"
    if not (venv / ".ready").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", spec], check=True)
        (venv / ".ready").write_text("")
    return python


def arch_read_ms(lib: Path, runs: int) -> tuple[float, str]:
    """Median time of reading one library's arch list (memory map + search), in ms."""
    sys.path.insert(0, str(ROOT / "src"))
    from gpu_ci.cuda.verify.arch import read_arch_list

    times = []
    found: list[str] | None = None
    for _ in range(runs):
        start = time.perf_counter()
        found, _error = read_arch_list(lib)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000, " ".join(found or ["(none)"])


def torch_libs(python: Path) -> tuple[Path, Path]:
    """(libtorch_python.so, the largest library under torch/lib)."""
    lib_dir = next(python.parent.parent.glob("lib/python3*/site-packages/torch/lib"))
    largest = max(lib_dir.glob("*.so*"), key=lambda p: p.stat().st_size)
    return lib_dir / "libtorch_python.so", largest


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
    parser.add_argument("--torch", default="torch==2.14.1")
    parser.add_argument(
        "--fatbin",
        type=Path,
        default=None,
        help="a library to time the .nv_fatbin reader on (default: the largest "
        "library under torch/lib)",
    )
    args = parser.parse_args()
    python = torch_venv(args.torch)
    lib = build_fake_nvml(CACHE / "fake-nvml")
    config = write_config(CACHE / "nvml.cfg", observed_h200()[1])
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": str(lib),
        "FAKE_NVML_CONFIG": str(config),
        "PYTHONPATH": str(ROOT / "src"),
    }
    env.pop("GITHUB_OUTPUT", None)
    verify = [
        sys.executable,
        "-m",
        "gpu_ci",
        "verify-cuda-env",
        "--require-gpu",
        "false",
        "--python",
        str(python),
    ]
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
    version = subprocess.run(
        [str(python), "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    torch_python, largest = torch_libs(python)
    arch_ms, arch_list = arch_read_ms(torch_python, args.runs)
    fatbin_lib = args.fatbin or largest
    fatbin_ms, fatbin_list = arch_read_ms(fatbin_lib, args.runs)
    size_mb = fatbin_lib.stat().st_size / 2**20
    print(f"torch {version} ({args.torch}); runs: {args.runs} each, interleaved; medians")
    print(f"  arch list read from libtorch_python.so: {arch_ms:8.1f} ms  [{arch_list}]")
    print(
        f"  .nv_fatbin reader on {fatbin_lib.name} ({size_mb:.0f} MB): {fatbin_ms:8.1f} ms  "
        f"[{fatbin_list}]"
    )
    print(f"  gpu-ci verify-cuda-env (fake NVML, torch env): {v * 1000:8.1f} ms")
    print(f"  python -c 'import torch; torch.cuda.is_available()': {t * 1000:8.1f} ms")
    print(f"  ratio verify / torch import: {v / t:.3f}  (goal <= 0.1)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
