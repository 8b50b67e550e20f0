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
``torch/csrc/cuda/Module.cpp``; :func:`find_arch_list` finds it through a memory map in
milliseconds instead of the seconds ``import torch`` takes.

Every other framework binary (onnxruntime-gpu's CUDA provider, jax's ``xla_cuda_plugin.so``,
paddle's ``libpaddle.so``, CuPy's ahead-of-time kernels) carries its device code in the ELF
section ``.nv_fatbin``: a run of fatbin containers, each a 16-byte header (magic 0xBA55ED50,
version, header size, size of the entries) followed by entries, each with its own header
(kind 1 PTX / 2 ELF, header size, payload size, SM arch as 10*major+minor, flags). The entry
headers are never compressed (only payloads are), so :func:`fatbin_targets` reads the target
list by jumping from header to header: no payload is touched. The ``a``/``f`` suffixes are flag
bits of the entry (calibrated with nvcc 13.0's ``fatbinary``; see tests/fixtures/README.md).
"""

from __future__ import annotations

import mmap
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

TARGET = re.compile(r"(sm|compute)_(\d+)(\d)([af]?)")
LIST = re.compile(rb"(?:sm|compute)_\d{2,3}[af]?(?: (?:sm|compute)_\d{2,3}[af]?)*")
ANCHOR = b"torch/csrc/cuda/Module.cpp"
WINDOW = 4096

FATBIN_SECTION = b".nv_fatbin"
FATBIN_MAGIC = 0xBA55ED50
FATBIN_KIND_PTX = 1
FATBIN_KIND_ELF = 2
#: Entry flag bits for the target's suffix (nvcc 13.0's fatbinary: sm_90a -> 0x100000,
#: sm_100f / compute_100f -> 0x200000; plain targets carry neither).
FATBIN_FLAG_ARCH_SPECIFIC = 1 << 20
FATBIN_FLAG_FAMILY_SPECIFIC = 1 << 21
_CONTAINER = struct.Struct("<IHHQ")
_ENTRY = struct.Struct("<HHIQ12xI8xQ")
"""kind, version, header size, payload size, (compressed size, options offset, code
version), SM arch, (object name offset and length), flags: the first 48 bytes of an entry
header, read in one call (the walk is the fast path's cost on a library with 100k entries)."""
_SUFFIX_BITS = FATBIN_FLAG_ARCH_SPECIFIC | FATBIN_FLAG_FAMILY_SPECIFIC


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
    """How code for ``targets`` reaches compute capability ``cc``.

    'sass' when machine code runs on ``cc``, 'ptx' when only a JIT of PTX reaches it, None when
    nothing does ("no kernel image is available for execution on the device").
    """
    if any(t.kind == "sm" and _covers(t, cc) for t in targets):
        return "sass"
    if any(t.kind == "compute" and _covers(t, cc) for t in targets):
        return "ptx"
    return None


def _lists_in(data: bytes | mmap.mmap, start: int, end: int) -> list[tuple[int, str]]:
    """A regex for NUL-terminated arch-list strings.

    NUL-terminated strings made only of arch targets, in one literal search per target kind
    (``sm_``, then ``compute_`` for PTX-only lists): linear in the size of ``data``.
    """
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
    """Find the arch list literal in a libtorch_python image.

    The arch list literal in a ``libtorch_python.so`` image (or a cut of one).
    """
    anchor = data.find(ANCHOR)
    if anchor >= 0:
        near = _lists_in(data, max(0, anchor - WINDOW), anchor)
        if near:
            return near[-1][1].split()
    found = _lists_in(data, 0, len(data))
    if not found:
        return None
    return max(found, key=lambda hit: len(hit[1]))[1].split()


def elf_section(data: bytes | mmap.mmap, name: bytes) -> tuple[int, int] | None:
    """Locate a named section in an ELF64 image.

    (file offset, size) of the section called ``name`` in a little-endian ELF64 image, from its
    section header table; None when the image is not one or has no such section.
    """
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shentsize < 64 or not shoff or shstrndx >= shnum or shoff + shnum * shentsize > len(data):
        return None
    _name, _type, _flags, _addr, stroff, strsize = struct.unpack_from(
        "<IIQQQQ", data, shoff + shstrndx * shentsize
    )
    for index in range(shnum):
        base = shoff + index * shentsize
        name_at, sh_type, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", data, base)
        if name_at >= strsize or sh_type == 8:  # SHT_NOBITS has no bytes in the file
            continue
        start = stroff + name_at
        if data[start : start + len(name) + 1] == name + b"\x00":
            if offset + size > len(data):
                return None
            return offset, size
    return None


def _target_text(kind: int, sm: int, flags: int) -> str | None:
    if sm < 10 or sm > 999:
        return None
    suffix = (
        "a"
        if flags & FATBIN_FLAG_ARCH_SPECIFIC
        else "f"
        if flags & FATBIN_FLAG_FAMILY_SPECIFIC
        else ""
    )
    return f"{'compute' if kind == FATBIN_KIND_PTX else 'sm'}_{sm}{suffix}"


def fatbin_targets(data: bytes | mmap.mmap, start: int = 0, end: int | None = None) -> list[str]:
    """The targets of every fatbin container in a byte range.

    The distinct targets (``sm_90a``, ``compute_120``) of every fatbin container found in
    ``data[start:end]``, in arch order: SASS entries as ``sm_``, PTX entries as ``compute_``.
    Containers are found by their magic, so padding between them is skipped; an entry that runs past
    its container ends that container (a damaged image gives what could be read, never an
    exception).
    """
    stop = len(data) if end is None else min(end, len(data))
    magic = struct.pack("<I", FATBIN_MAGIC)
    unpack = _ENTRY.unpack_from
    seen: set[tuple[int, int, int]] = set()
    pos = start
    while True:
        at = data.find(magic, pos, stop)
        if at < 0 or at + _CONTAINER.size > stop:
            break
        _magic, _version, header, size = _CONTAINER.unpack_from(data, at)
        last = min(at + header + size, stop)
        entry = at + header
        while header >= _CONTAINER.size and entry + _ENTRY.size <= last:
            kind, _ver, entry_header, payload, sm, flags = unpack(data, entry)
            following = entry + entry_header + payload
            if entry_header < 64 or following > last:
                break
            seen.add((kind, sm, flags & _SUFFIX_BITS))
            entry = following
        pos = max(last, at + 4)
    found = set()
    for kind, sm, flags in seen:
        text = _target_text(kind, sm, flags) if kind in (FATBIN_KIND_PTX, FATBIN_KIND_ELF) else None
        if text:
            found.add((kind != FATBIN_KIND_ELF, sm, text))
    return [text for _ptx, _sm, text in sorted(found)]


def read_fatbin_arch_list(data: bytes | mmap.mmap) -> list[str] | None:
    """The targets in a library's ``.nv_fatbin`` section.

    Targets of the ``.nv_fatbin`` section; None when the image has no such section (a CPU build, or
    device code kept elsewhere).
    """
    section = elf_section(data, FATBIN_SECTION)
    if section is None:
        return None
    return fatbin_targets(data, section[0], section[0] + section[1]) or None


def read_arch_list(path: str | Path) -> tuple[list[str] | None, str]:
    """(arch list, error) of a framework binary, without importing the framework: torch's
    ``libtorch_python.so`` by its arch-list literal, every other library by the fatbin
    entry headers of its ``.nv_fatbin`` section."""
    try:
        with (
            open(path, "rb") as handle,
            mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data,
        ):
            if Path(path).name == "libtorch_python.so":
                return find_arch_list(data), ""
            return read_fatbin_arch_list(data), ""
    except (OSError, ValueError, struct.error) as exc:
        return None, f"cannot read {path}: {exc}"


def tensorflow_arch_list(build_info: str) -> list[str] | None:
    """``cuda_compute_capabilities`` of TensorFlow's generated ``build_info.py``."""
    match = re.search(r"['\"]cuda_compute_capabilities['\"]\s*[,:]\s*\[([^\]]*)\]", build_info)
    if not match:
        return None
    return re.findall(r"['\"]([\w.]+)['\"]", match.group(1)) or None


def sm_name(cc: tuple[int, int]) -> str:
    return f"sm_{cc[0]}{cc[1]}"
