"""Which libcuda.so.1 would a CUDA program load? Ask the dynamic loader itself.

NVML (libnvidia-ml) and the CUDA driver library (libcuda) are separate files: a container
started with NVIDIA_DRIVER_CAPABILITIES lacking ``compute`` gets the first, not the second,
and CUDA then finds no device while ``nvidia-smi`` works. And a forward-compatibility libcuda
(``/usr/local/cuda-X.Y/compat``) may come from LD_LIBRARY_PATH or, as NGC images do, from the
ldconfig cache. ``dlopen`` answers both questions the way CUDA will; ``/proc/self/maps`` then
says which file it mapped. Loading libcuda runs no CUDA code (no ``cuInit``).
"""

from __future__ import annotations

import os
from pathlib import Path

NAME = "libcuda.so.1"


def mapped_path(name: str = "libcuda.so", maps: Path = Path("/proc/self/maps")) -> str:
    try:
        text = maps.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        fields = line.split(None, 5)
        if len(fields) == 6 and os.path.basename(fields[5]).startswith(name):
            return os.path.realpath(fields[5])
    return ""


def locate_libcuda() -> tuple[str, str]:
    """(resolved path, error): the libcuda the loader takes for this process, or ('', why)."""
    import ctypes

    try:
        lib = ctypes.CDLL(NAME)
    except OSError as exc:
        return "", str(exc)
    path = mapped_path()
    del lib
    return path or NAME, ""
