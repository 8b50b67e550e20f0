"""Read the CUDA runtime version linked into a library.

The CUDA runtime version linked statically into a library, read without loading it.

CuPy links cudart statically (CuPy installation guide), so ``cupy-cuda13x`` names only the
major: its minor is that of the toolkit it was built with, and an ``nvidia-cuda-runtime``
wheel installed next to it says nothing about it. ``cudaRuntimeGetVersion()`` of a static
cudart needs no GPU and no driver: it stores the build's ``CUDART_VERSION``, a constant.
In CuPy's wheels that store is an instruction of its own function (x86-64
``movl $CUDART_VERSION, (%rdi); xor %eax, %eax; ret``: ``c7 07 <imm32> 31 c0 c3``;
cupy-cuda13x 14.2.0 stores 13020, see tests/fixtures/README.md). Importing CuPy to call it
would cost an import in the target interpreter; reading the constant costs one scan.

The reading is only trusted when it is unambiguous: the library must carry cudart's
``cudaRuntimeGetVersion`` symbol and every such store must name the same plausible version.
Anything else (another architecture, a stripped or different build) gives ``None``, and the
caller keeps the wheel name's "13.x".
"""

from __future__ import annotations

import mmap
import re

_STORE = re.compile(rb"\xc7\x07(....)\x31\xc0\xc3", re.DOTALL)
_SYMBOL = b"cudaRuntimeGetVersion\x00"


def _plausible(value: int) -> bool:
    """CUDART_VERSION is major*1000 + minor*10 (13020 is 13.2); CUDA 9 to 99."""
    return 9000 <= value < 100000 and value % 10 == 0


def read_static_cudart_version(path: str) -> tuple[int | None, str]:
    """(CUDART_VERSION, '') of the cudart linked into ``path``, or (None, why not)."""
    try:
        with (
            open(path, "rb") as handle,
            mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data,
        ):
            if data[:4] != b"\x7fELF":
                return None, f"{path} is not an ELF file"
            if data.find(_SYMBOL) < 0:
                return None, f"{path} has no cudaRuntimeGetVersion: no static cudart"
            values = {int.from_bytes(m.group(1), "little") for m in _STORE.finditer(data)}
    except (OSError, ValueError) as exc:
        return None, f"{path} could not be read ({exc})"
    values = {v for v in values if _plausible(v)}
    if len(values) != 1:
        return None, (f"{path}: no single CUDART_VERSION store found ({sorted(values) or 'none'})")
    return values.pop(), ""
