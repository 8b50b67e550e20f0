"""Peak memory where a framework's allocator knows it, read without sampling.

torch: ``torch.cuda.max_memory_allocated()``, reset before each test. CuPy: the default
pool's ``total_bytes()``, what the pool holds at teardown (its high-water mark since its
blocks were last freed; it has no peak counter). Only frameworks already imported are read.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

MIB = 1024 * 1024


def _torch_cuda() -> Any:
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    try:
        return cuda if cuda is not None and cuda.is_initialized() else None
    except Exception:
        return None


def reset() -> None:
    """Start torch's peak counter afresh for the next test."""
    cuda = _torch_cuda()
    if cuda is not None:
        with contextlib.suppress(Exception):  # a framework's failure is not the test's
            cuda.reset_peak_memory_stats()


def cached() -> int:
    """Bytes the frameworks' caches hold unused (NVML counts them for the process).

    torch: ``memory_reserved() - memory_allocated()``; CuPy: the default pool's
    ``free_bytes()``; both of the current device."""
    total = 0
    cuda = _torch_cuda()
    if cuda is not None:
        with contextlib.suppress(Exception):
            total += max(0, int(cuda.memory_reserved()) - int(cuda.memory_allocated()))
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        with contextlib.suppress(Exception):
            total += max(0, int(cupy.get_default_memory_pool().free_bytes()))
    return total


def read() -> tuple[float | None, str | None]:
    """The test's peak in MiB and its source, or (None, None)."""
    cuda = _torch_cuda()
    if cuda is not None:
        try:
            return round(cuda.max_memory_allocated() / MIB, 1), "torch max_memory_allocated"
        except Exception:
            pass
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            held = cupy.get_default_memory_pool().total_bytes()
        except Exception:
            return None, None
        return round(held / MIB, 1), "CuPy pool total_bytes at teardown"
    return None, None
