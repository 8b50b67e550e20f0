"""CuPy's CUDA end to end: its statically linked cudart's version, read by the probe.

cupy-cuda13x 14.2.0's ``cupy_backends/cuda/api/runtime.cpython-311-x86_64-linux-gnu.so``
carries cudart 13.2 (``runtimeGetVersion()`` 13020; tests/fixtures/README.md). The library
here is built at test time in that format: a shared object whose ``cudaRuntimeGetVersion``
stores the constant as the real static cudart's does (gcc -O2 emits the same instruction).
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

import pytest

from gpu_ci.cuda.verify.cudart import read_static_cudart_version
from gpu_ci.cuda.verify.probe import collect
from testkit.cuda_env import build_fake_nvml, gpu_config, make_target, nvml_config, write_config
from testkit.cudart_build import add_cupy_runtime, static_cudart_library
from testkit.fatbin_build import have_compiler

pytestmark = [
    pytest.mark.skipif(not have_compiler(), reason="needs gcc to build the test libraries"),
    pytest.mark.skipif(
        platform.machine() != "x86_64",
        reason="the static cudart's store is read in its x86-64 encoding",
    ),
]

CUPY = {"cupy-cuda13x": "14.2.0", "nvidia-cuda-runtime": "13.5.37"}


def test_reads_cudart_version_13020(tmp_path):
    lib = static_cudart_library(tmp_path / "runtime.so", 13020)
    assert read_static_cudart_version(str(lib)) == (13020, "")


def test_ambiguous_or_absent_store_claims_nothing(tmp_path):
    two = static_cudart_library(tmp_path / "two.so", 13020, 12090)
    version, why = read_static_cudart_version(str(two))
    assert version is None and "no single CUDART_VERSION" in why
    none = static_cudart_library(tmp_path / "none.so")
    assert read_static_cudart_version(str(none))[0] is None
    text = tmp_path / "not-elf.so"
    text.write_text("cudaRuntimeGetVersion\0 not a library")
    assert read_static_cudart_version(str(text)) == (None, f"{text} is not an ELF file")


def cupy_target(root: Path, dists: dict[str, str] = CUPY) -> Path:
    python = make_target(root, dists)
    add_cupy_runtime(next(root.glob("lib/python3*/site-packages")))
    return python


def test_probe_fills_runtime_versions_from_cupys_binary(tmp_path):
    python = cupy_target(tmp_path / "env")
    facts, error = collect(str(python), {"PATH": "/usr/bin:/bin"})
    assert error == ""
    assert facts.runtime_versions == {"cupy-cuda13x": 13020}


def test_two_cupy_distributions_share_the_folder_and_claim_nothing(tmp_path):
    python = cupy_target(tmp_path / "env", {**CUPY, "cupy-cuda12x": "14.2.0"})
    facts, _ = collect(str(python), {"PATH": "/usr/bin:/bin"})
    assert facts.runtime_versions == {}


def test_verify_cuda_env_reports_cupys_own_cuda_13_2(run_cli, tmp_path):
    """The issue's case: a 13.2 driver (R595), cupy-cuda13x 14.2.0 next to an unrelated 13.5
    runtime wheel. CuPy needs 13.2, which the driver has: no finding names it."""
    gpu = gpu_config(0, name="NVIDIA H200", cc="9.0", memory_mib=143771, brand=2)
    config = write_config(tmp_path / "nvml.cfg", nvml_config(gpu, driver="595.58.03", cuda=13020))
    python = cupy_target(tmp_path / "env")
    env = {
        "PATH": "/usr/bin:/bin",
        "LD_LIBRARY_PATH": str(build_fake_nvml(tmp_path / "lib")),
        "FAKE_NVML_CONFIG": str(config),
        "INPUT_PYTHON": str(python),
    }
    result = run_cli(["verify-cuda-env"], env)
    frameworks = {f["name"]: f for f in json.loads(result.outputs["frameworks"])}
    assert frameworks["cupy-cuda13x"]["cuda"] == "13.2", frameworks
    assert "runtimeGetVersion() = 13020" in frameworks["cupy-cuda13x"]["source"]
    findings = json.loads(result.outputs.get("findings", "[]"))
    assert not [f for f in findings if "cupy-cuda13x" in f["message"] + f["fix"]], findings
    assert "Traceback" not in result.stdout + result.stderr
