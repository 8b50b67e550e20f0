"""Build shared libraries with a real-format ``.nv_fatbin`` section at test time.

The layout is the one NVIDIA's ``fatbinary`` writes (facts and sources in
tests/fixtures/README.md, "Fatbin layout"): a 16-byte container header (magic 0xBA55ED50,
version 1, header size 16, size of the entries that follow), then per entry a header of 64
bytes (80 or 112 with the extension newer targets get) and its payload, padded to 8 bytes.
The payloads here are placeholders (a PTX text, bytes starting with the ELF magic): the
reader never looks at them. The section is put into a real ELF shared object by gcc, as
nvcc's generated ``.fatbin.c`` does with ``asm(".section .nv_fatbin")``.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

MAGIC = 0xBA55ED50
KIND = {"ptx": 1, "elf": 2}
#: Entry flags nvcc 13.0's fatbinary sets: 64-bit (0x1) | Linux host (0x10); a/f suffixes.
BASE_FLAGS = 0x11
SUFFIX_FLAGS = {"": 0, "a": 1 << 20, "f": 1 << 21}
COMPRESSED_LZ4 = 0x2000


@dataclass(frozen=True)
class Entry:
    kind: str
    """'elf' (SASS) or 'ptx'."""
    sm: int
    """10 * major + minor: 90, 100, 121."""
    suffix: str = ""
    header_size: int = 64
    """64, or 80 / 112 as fatbinary writes for PTX / SASS of sm_100 and newer."""
    extra_flags: int = 0

    @staticmethod
    def parse(target: str) -> Entry:
        """The entries of target names: 'sm_90a' is SASS, 'compute_120' PTX.

        Header sizes are nvcc 13.0's."""
        kind, _, rest = target.partition("_")
        suffix = rest[-1] if rest[-1] in "af" else ""
        sm = int(rest.rstrip("af"))
        ptx = kind == "compute"
        size = 80 if ptx else (112 if sm >= 100 else 64)
        return Entry("ptx" if ptx else "elf", sm, suffix, size)


def entry_bytes(entry: Entry) -> bytes:
    if entry.kind == "ptx":
        payload = f".version 9.0\n.target sm_{entry.sm}{entry.suffix}\n".encode() + b"\x00"
    else:
        payload = b"\x7fELF\x02\x01\x01\x33" + bytes(24)
    payload += bytes(-len(payload) % 8)
    header = struct.pack(
        "<HHIQIIHHIIIQQQ",
        KIND[entry.kind],
        0x0101,
        entry.header_size,
        len(payload),
        0,
        64 if entry.header_size > 64 else 0,
        0 if entry.kind == "ptx" else 8,
        1 if entry.kind == "elf" else 9,
        entry.sm,
        0,
        0,
        BASE_FLAGS | SUFFIX_FLAGS[entry.suffix] | entry.extra_flags,
        0,
        0,
    )
    return header + bytes(entry.header_size - len(header)) + payload


def container(entries: Iterable[Entry]) -> bytes:
    body = b"".join(entry_bytes(e) for e in entries)
    return struct.pack("<IHHQ", MAGIC, 1, 16, len(body)) + body


def section_for(targets_per_container: Sequence[Sequence[str]]) -> bytes:
    """A fatbin section, one container per inner list, 8-aligned.

    A library has one container per translation unit."""
    return b"".join(container(Entry.parse(t) for t in targets) for targets in targets_per_container)


def have_compiler() -> bool:
    return shutil.which("gcc") is not None


def build_library(path: Path, section: bytes, *, name: str = ".nv_fatbin", filler: int = 0) -> Path:
    """A shared object whose ``name`` section holds ``section``.

    ``filler`` bytes of ordinary read-only data make the image large."""
    data = ", ".join(str(b) for b in section) or "0"
    source = path.with_suffix(".c")
    source.write_text(
        f'__attribute__((section("{name}"), used, aligned(8)))\n'
        f"const unsigned char fatbin_data[] = {{{data}}};\n"
        + (
            f"__attribute__((used)) const unsigned char filler[{filler}] = {{1}};\n"
            if filler
            else ""
        )
        + "int gpu_ci_test_symbol(void) { return 1; }\n"
    )
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(path), str(source)], check=True, capture_output=True
    )
    return path
