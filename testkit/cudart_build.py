"""A library shaped like CuPy's runtime module, built at test time.

No wheel bytes are kept. cupy-cuda13x 14.2.0's
``cupy_backends/cuda/api/runtime.cpython-311-x86_64-linux-gnu.so`` links cudart statically;
its ``cudaRuntimeGetVersion`` reaches a function that stores the constant CUDART_VERSION
(13020) and returns 0 (tests/fixtures/README.md). ``gcc -O2`` compiles
``int f(int *v) { *v = 13020; return 0; }`` to the same instruction bytes."""

from __future__ import annotations

import subprocess
from pathlib import Path

RUNTIME_SO = "cupy_backends/cuda/api/runtime.cpython-311-x86_64-linux-gnu.so"


def static_cudart_library(path: Path, *versions: int) -> Path:
    """A shared object shaped like CuPy's runtime module: cudart's entry point plus one
    internal function per version given that stores it and returns cudaSuccess."""
    path.parent.mkdir(parents=True, exist_ok=True)
    source = path.with_suffix(".c")
    stores = "".join(
        f"__attribute__((noinline, used)) int cudart_store_{i}(int *v) {{ *v = {v}; return 0; }}\n"
        for i, v in enumerate(versions)
    )
    source.write_text(
        stores
        + "int cudaRuntimeGetVersion(int *v) { return "
        + ("cudart_store_0(v)" if versions else "0")
        + "; }\n"
    )
    subprocess.run(
        ["gcc", "-O2", "-shared", "-fPIC", "-o", str(path), str(source)],
        check=True,
        capture_output=True,
    )
    return path


def add_cupy_runtime(site: Path, version: int = 13020) -> Path:
    """CuPy's runtime module, with its static cudart's ``version``, in ``site``."""
    return static_cudart_library(site / RUNTIME_SO, version)
