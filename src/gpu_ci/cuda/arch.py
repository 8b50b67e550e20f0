"""GPU architecture targets: which compiled code reaches which GPU, read without imports.

A CUDA build ships SASS (``sm_XY``: machine code for one architecture family) and/or PTX
(``compute_XY``: virtual code the driver JIT-compiles). The rules, from NVIDIA's CUDA C++
Programming Guide ("Binary Compatibility", "Feature availability"):

- ``sm_XY`` runs on compute capability X.Z with Z >= Y (same major only);
- ``sm_XYf`` (family-specific, CUDA 12.9+) likewise within the family, nothing else;
- ``sm_XYa`` (architecture-specific) runs on X.Y exactly: never forward;
- ``compute_XY`` PTX JIT-compiles for X.Y and every newer GPU; ``compute_XYa``/``compute_XYf``
  PTX is as restricted as the matching SASS.

torch's list is the string literal ``CUDA_ARCH_FLAGS`` in ``torch/lib/libtorch_python.so``
(what ``torch.cuda.get_arch_list()`` splits), next to the path of
``torch/csrc/cuda/Module.cpp``; :func:`read_torch_arch_list` finds it through a memory map in
milliseconds instead of the seconds ``import torch`` takes.
"""

from __future__ import annotations

import mmap
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

TARGET = re.compile(r"(sm|compute)_(\d+)(\d)([af]?)")
LIST = re.compile(rb"(?:sm|compute)_\d{2,3}[af]?(?: (?:sm|compute)_\d{2,3}[af]?)*")
ANCHOR = b"torch/csrc/cuda/Module.cpp"
WINDOW = 4096


@dataclass(frozen=True)
class Target:
    kind: str
    """'sm' (SASS) or 'compute' (PTX)."""
    cc: tuple[int, int]
    suffix: str = ""
    """'' , 'a' (architecture-specific) or 'f' (family-specific)."""

    @property
    def text(self) -> str:
        return f"{self.kind}_{self.cc[0]}{self.cc[1]}{self.suffix}"


def parse_targets(entries: Iterable[str]) -> tuple[Target, ...]:
    out = []
    for entry in entries:
        match = TARGET.fullmatch(entry.strip())
        if match:
            kind, major, minor, suffix = match.groups()
            out.append(Target(kind, (int(major), int(minor)), suffix))
    return tuple(out)


def _covers(target: Target, cc: tuple[int, int]) -> bool:
    if target.suffix == "a":
        return target.cc == cc
    if target.kind == "sm" or target.suffix == "f":
        return target.cc[0] == cc[0] and target.cc[1] <= cc[1]
    return target.cc <= cc


def reach(targets: Sequence[Target], cc: tuple[int, int]) -> str | None:
    """'sass' when machine code runs on ``cc``, 'ptx' when only a JIT of PTX reaches it,
    None when nothing does ("no kernel image is available for execution on the device")."""
    if any(t.kind == "sm" and _covers(t, cc) for t in targets):
        return "sass"
    if any(t.kind == "compute" and _covers(t, cc) for t in targets):
        return "ptx"
    return None


def _lists_in(data: bytes | mmap.mmap, start: int, end: int) -> list[tuple[int, str]]:
    """NUL-terminated strings made only of arch targets, in one literal search per target
    kind (``sm_``, then ``compute_`` for PTX-only lists): linear in the size of ``data``."""
    found: dict[int, str] = {}
    for literal in (b"sm_", b"compute_"):
        pos = start
        while True:
            i = data.find(literal, pos, end)
            if i < 0:
                break
            head = data.rfind(b"\x00", max(0, i - 512), i) + 1 if i > 0 else 0
            stop = data.find(b"\x00", i, min(i + 512, len(data)))
            if stop < 0:
                stop = min(i + 512, len(data))
            if head not in found:
                chunk = bytes(data[head:stop])
                if LIST.fullmatch(chunk):
                    found[head] = chunk.decode("ascii")
            pos = max(stop, i + len(literal))
    return sorted(found.items())


def find_arch_list(data: bytes | mmap.mmap) -> list[str] | None:
    """The arch list literal in a ``libtorch_python.so`` image (or a cut of one)."""
    anchor = data.find(ANCHOR)
    if anchor >= 0:
        near = _lists_in(data, max(0, anchor - WINDOW), anchor)
        if near:
            return near[-1][1].split()
    found = _lists_in(data, 0, len(data))
    if not found:
        return None
    return max(found, key=lambda hit: len(hit[1]))[1].split()


def read_torch_arch_list(path: str | Path) -> tuple[list[str] | None, str]:
    """(arch list, error): the list compiled into torch, without importing it."""
    try:
        with open(path, "rb") as handle, \
                mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return find_arch_list(data), ""
    except (OSError, ValueError) as exc:
        return None, f"cannot read {path}: {exc}"


def tensorflow_arch_list(build_info: str) -> list[str] | None:
    """``cuda_compute_capabilities`` of TensorFlow's generated ``build_info.py``."""
    match = re.search(r"['\"]cuda_compute_capabilities['\"]\s*[,:]\s*\[([^\]]*)\]", build_info)
    if not match:
        return None
    return re.findall(r"['\"]([\w.]+)['\"]", match.group(1)) or None


def sm_name(cc: tuple[int, int]) -> str:
    return f"sm_{cc[0]}{cc[1]}"
