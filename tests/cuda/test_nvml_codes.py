"""The NVML return-code table matches NVIDIA's nvml.h."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpu_ci.cuda import nvml_codes


def _nvml_h() -> Path:
    nvidia = pytest.importorskip("nvidia", reason="nvidia-nvml-dev (nvml.h) is not installed")
    for base in nvidia.__path__:
        found = sorted(Path(base).rglob("nvml.h"))
        if found:
            return found[0]
    pytest.skip("nvml.h not found in nvidia-nvml-dev")


def test_every_return_code_of_nvml_h_is_named_as_there():
    text = _nvml_h().read_text(encoding="utf-8", errors="replace")
    body = text[text.index("typedef enum nvmlReturn_enum") :]
    body = body[: body.index("} nvmlReturn_t;")]
    enum = {
        int(code): name for name, code in re.findall(r"NVML_(?:ERROR_)?(\w+)\s*=\s*(\d+)", body)
    }
    assert enum == nvml_codes.ERROR_NAMES


def test_an_unknown_code_is_named_as_unknown():
    assert nvml_codes.error_name(15) == "GPU_IS_LOST"
    assert nvml_codes.error_name(4242) == "UNKNOWN_4242"
