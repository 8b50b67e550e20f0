"""The generic arch reader: fatbin entry headers of a ``.nv_fatbin`` section in a real ELF."""

from __future__ import annotations

import struct

import pytest

from gpu_ci.cuda.verify import arch
from testkit import fatbin_build as fb

pytestmark = pytest.mark.skipif(not fb.have_compiler(), reason="gcc is needed to link a test .so")

#: onnxruntime-gpu 1.31.1's libonnxruntime_providers_cuda.so (tests/fixtures/README.md).
ORT_1_31_1 = ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90a", "sm_120a"]


def test_onnxruntime_providers_list_is_read_from_the_section(tmp_path):
    # one container per translation unit, as the real library has; sm_90a/sm_120a kernels
    # only in some of them
    section = fb.section_for(
        [
            ["sm_75", "sm_80", "sm_86", "sm_89"],
            ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90a", "sm_120a"],
            ["sm_90a"],
        ]
    )
    lib = fb.build_library(tmp_path / "libonnxruntime_providers_cuda.so", section)
    assert arch.read_arch_list(lib) == (ORT_1_31_1, "")
    targets = arch.parse_targets(ORT_1_31_1)
    assert arch.reach(targets, (10, 0)) is None  # B200: no kernel image
    assert arch.reach(targets, (12, 1)) is None  # GB10: sm_120a is 12.0 only
    assert arch.reach(targets, (12, 0)) == "sass"
    assert arch.reach(targets, (9, 0)) == "sass"


def test_suffix_flags_and_ptx_entries(tmp_path):
    section = fb.section_for(
        [["sm_90", "sm_100f", "compute_100f", "sm_120a", "compute_120", "compute_90a"]]
    )
    lib = fb.build_library(tmp_path / "xla_cuda_plugin.so", section)
    found, error = arch.read_arch_list(lib)
    assert error == ""
    assert found == ["sm_90", "sm_100f", "sm_120a", "compute_90a", "compute_100f", "compute_120"]
    targets = arch.parse_targets(found)
    assert arch.reach(targets, (10, 3)) == "sass"  # sm_100f: the 10.x family
    assert arch.reach(targets, (12, 1)) == "ptx"  # compute_120 JITs forward


def test_compressed_payloads_do_not_hide_the_headers(tmp_path):
    entries = [
        fb.Entry("elf", 80, extra_flags=fb.COMPRESSED_LZ4),
        fb.Entry("ptx", 80, header_size=72, extra_flags=fb.COMPRESSED_LZ4),
    ]
    lib = fb.build_library(tmp_path / "libpaddle.so", fb.container(entries))
    assert arch.read_arch_list(lib)[0] == ["sm_80", "compute_80"]


def test_padding_between_containers_is_skipped():
    one = fb.container([fb.Entry.parse("sm_86")])
    two = fb.container([fb.Entry.parse("sm_89")])
    assert arch.fatbin_targets(one + bytes(8) + two) == ["sm_86", "sm_89"]


def test_a_library_without_device_code_has_no_list(tmp_path):
    lib = fb.build_library(tmp_path / "libcpu.so", b"", name=".rodata.other")
    assert arch.read_arch_list(lib) == (None, "")
    not_elf = tmp_path / "text.so"
    not_elf.write_bytes(b"not an ELF image at all" * 10)
    assert arch.read_arch_list(not_elf) == (None, "")


def test_a_damaged_entry_ends_its_container_without_an_exception():
    good = fb.container([fb.Entry.parse("sm_80"), fb.Entry.parse("sm_90")])
    damaged = bytearray(good)
    # the second entry claims a 16-byte header: nothing after it can be trusted
    second = 16 + len(fb.entry_bytes(fb.Entry.parse("sm_80")))
    struct.pack_into("<I", damaged, second + 4, 16)
    assert arch.fatbin_targets(bytes(damaged)) == ["sm_80"]
    truncated = good[: len(good) - 40]  # size field points past the end
    assert arch.fatbin_targets(truncated) == ["sm_80"]


def test_the_section_is_found_by_name_among_others(tmp_path):
    section = fb.section_for([["sm_89"]])
    lib = fb.build_library(tmp_path / "libbig.so", section, filler=1 << 20)
    data = lib.read_bytes()
    offset, size = arch.elf_section(data, arch.FATBIN_SECTION) or (0, 0)
    assert data[offset : offset + size].startswith(struct.pack("<I", arch.FATBIN_MAGIC))
    assert arch.elf_section(data, b".no_such_section") is None
