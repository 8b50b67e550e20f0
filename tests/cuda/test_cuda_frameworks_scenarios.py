"""Issue 27's framework scenarios, each against NVIDIA's or the framework's own contract.

numba-cuda's minor-version compatibility (cuda-bindings + nvidia-nvjitlink, not pynvjitlink),
forward compatibility on R595 and on ended branches, onnxruntime-gpu's fatbin on B200 / GB10
(read from a real-format ELF through the probe), CuPy's statically linked cudart, and
cuda-bindings, tensorrt and triton detection.
"""

from __future__ import annotations

import pytest

from gpu_ci.cuda.facts import Gpu
from gpu_ci.cuda.verify import checks as cuda_checks
from gpu_ci.cuda.verify import compat, frameworks, probe
from gpu_ci.cuda.verify.table import load_builds
from testkit import fatbin_build as fb
from testkit.cuda.verify import check, snapshot
from testkit.cuda_env import make_target

GIB = 2**30
H200 = Gpu(0, "NVIDIA H200", "GPU-h200", (9, 0), 141 * GIB, brand="tesla")
B200 = Gpu(0, "NVIDIA B200", "GPU-b200", (10, 0), 180 * GIB, brand="tesla")
GB10 = Gpu(0, "NVIDIA GB10", "GPU-gb10", (12, 1), 128 * GIB, brand="nvidia")
A100 = Gpu(0, "NVIDIA A100-SXM4-80GB", "GPU-a100", (8, 0), 80 * GIB, brand="tesla")


def consumers(**kwargs):
    return {c.name: c for c in frameworks.consumers(frameworks.ProbeFacts(**kwargs))}


# -- numba-cuda: minor-version compatibility through cuda-bindings' nvJitLink ------------------

NUMBA_CUDA = {"numba": "0.62.1", "numba-cuda": "0.30.4", "nvidia-cuda-runtime-cu12": "12.9.79"}
DRIVER_12_8 = {"driver": "570.124.06", "cuda": 12080}


def test_numba_cuda_with_cuda_bindings_and_nvjitlink_needs_nothing_more():
    dists = {**NUMBA_CUDA, "cuda-bindings": "12.9.4", "nvidia-nvjitlink-cu12": "12.9.86"}
    found = list(consumers(dists=dists).values())
    codes = [
        f.code for f in check(snapshot(A100, **DRIVER_12_8), found, installed=frozenset(dists))
    ]
    assert "numba-minor-version-compatibility" not in codes
    assert "minor-version-compatibility" in codes  # the general caveat stays


def test_numba_cuda_without_its_helpers_is_told_its_own_fix():
    found = list(consumers(dists=NUMBA_CUDA).values())
    (numba,) = [
        f
        for f in check(snapshot(A100, **DRIVER_12_8), found, installed=frozenset(NUMBA_CUDA))
        if f.code == "numba-minor-version-compatibility"
    ]
    assert numba.level == "error"
    assert "cuda-bindings" in numba.message and "nvidia-nvjitlink" in numba.message
    assert "numba-cuda[cu12]" in numba.fix
    assert "pynvjitlink" not in numba.message + numba.fix
    assert "NUMBA_CUDA_ENABLE_PYNVJITLINK" not in numba.fix  # numba-cuda ignores it
    # pynvjitlink alone does not help numba-cuda
    installed = frozenset({*NUMBA_CUDA, "pynvjitlink-cu12"})
    assert "numba-minor-version-compatibility" in [
        f.code for f in check(snapshot(A100, **DRIVER_12_8), found, installed=installed)
    ]


# -- forward compatibility: supported branches, ended branches, unlisted branches --------------


def compat_env(version="610.57.04", cuda="13.3"):
    return cuda_checks.EnvFacts(libcuda_path=f"/usr/local/cuda-{cuda}/compat/libcuda.so.{version}")


def test_r595_runs_forward_compatibility_without_803():
    found = check(snapshot(H200, driver="595.58.03", cuda=13020), env=compat_env())
    assert not [f for f in found if f.code == "forward-compat-mismatch" or "803" in f.message]


def test_branch_table_has_kinds_and_end_of_life():
    builds = load_builds()
    r595, r620, r580 = builds.branch(595), builds.branch(620), builds.branch(580)
    assert r595 is not None and r595.kind == "production" and r595.end_of_life == "2027-03"
    assert r620 is not None and r620.kind == "long-term support"
    assert r580 is not None and (r580.kind, r580.end_of_life) == ("long-term support", "2028-08")
    assert not r595.ended("2026-12-01") and r595.ended("2027-04-01")


def test_an_ended_branch_is_no_longer_supported_not_803():
    path = "/usr/local/cuda-13.3/compat/libcuda.so.610.57.04"
    (finding,) = compat.forward_compat_branch_findings(
        load_builds(), "535.288.01", path, today="2026-12-01"
    )
    assert (finding.level, finding.code) == ("warning", "forward-compat-branch-ended")
    assert "no longer supported" in finding.message and "2026-06" in finding.message
    assert "803" not in finding.message
    assert "R580 (long-term support)" in finding.fix and "R535" not in finding.fix
    # through the whole check: R570 ended in February 2026
    found = check(snapshot(H200, driver="570.195.03", cuda=12080), env=compat_env())
    assert [f.code for f in found] == ["forward-compat-branch-ended"]
    assert (
        compat.forward_compat_branch_findings(load_builds(), "580.95.05", path, today="2026-12-01")
        == []
    )


def test_a_new_feature_branch_still_fails_with_803():
    (finding,) = check(snapshot(H200, driver="560.35.03", cuda=12060), env=compat_env())
    assert finding.code == "forward-compat-mismatch" and "803" in finding.message
    # it names the branches still supported, with their kind, never an ended one
    assert "R580 (long-term support)" in finding.message
    assert "R470" not in finding.message and "R570" not in finding.message


# -- onnxruntime-gpu's fatbin: sm_90a / sm_120a and no PTX do not reach B200 or GB10 ----------

ORT_SECTION = [["sm_75", "sm_80", "sm_86", "sm_89"], ["sm_90a"], ["sm_120a"]]
ORT_INFO = "package_name = 'onnxruntime-gpu'\n__version__ = '1.31.1'\ncuda_version = '12.8'\n"


@pytest.fixture(scope="module")
def ort_target(tmp_path_factory):
    if not fb.have_compiler():
        pytest.skip("gcc is needed to link a test .so")
    root = tmp_path_factory.mktemp("ort")
    python = make_target(
        root / "env",
        {"onnxruntime-gpu": "1.31.1"},
        {"onnxruntime/capi/build_and_package_info.py": ORT_INFO},
    )
    site = next((root / "env" / "lib").glob("python3*/site-packages"))
    fb.build_library(
        site / "onnxruntime/capi/libonnxruntime_providers_cuda.so", fb.section_for(ORT_SECTION)
    )
    return python


def test_onnxruntime_arch_list_comes_through_the_probe(ort_target):
    facts, error = probe.collect(str(ort_target), {"PATH": ""})
    assert error == ""
    (ort,) = [c for c in frameworks.consumers(facts) if c.name == "onnxruntime-gpu"]
    assert ort.cuda == "12.8"
    assert ort.arch == ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90a", "sm_120a")


@pytest.mark.parametrize("gpu", [B200, GB10], ids=["B200", "GB10"])
def test_onnxruntime_on_blackwell_without_its_sass_is_no_kernel_image(ort_target, gpu):
    facts, _error = probe.collect(str(ort_target), {"PATH": ""})
    found = check(snapshot(gpu, driver="580.95.05", cuda=13000), frameworks.consumers(facts))
    assert [(f.level, f.code) for f in found] == [("error", "no-kernel-image")]
    assert (
        "onnxruntime-gpu 1.31.1 is built for sm_75 sm_80 sm_86 sm_89 sm_90a sm_120a"
        in found[0].message
    )


def test_onnxruntime_on_h200_is_fine(ort_target):
    facts, _error = probe.collect(str(ort_target), {"PATH": ""})
    assert check(snapshot(H200, driver="580.95.05", cuda=13000), frameworks.consumers(facts)) == []


def test_jax_plugin_and_paddle_take_their_fatbin_lists():
    found = consumers(
        dists={"jax": "0.8.0", "jax-cuda13-plugin": "0.8.0", "paddlepaddle-gpu": "3.2.0"},
        files={"paddle/version/__init__.py": "cuda_version = '12.6'\n"},
        arch_lists={
            "jax_plugins/xla_cuda13/xla_cuda_plugin.so": ["sm_90a", "compute_90"],
            "paddle/base/libpaddle.so": ["sm_80", "sm_90"],
        },
    )
    assert found["jax-cuda13-plugin"].arch == ("sm_90a", "compute_90")
    assert found["paddlepaddle-gpu"].arch == ("sm_80", "sm_90")
    for rel in (
        "jax_plugins/xla_cuda13/xla_cuda_plugin.so",
        "paddle/base/libpaddle.so",
        "onnxruntime/capi/libonnxruntime_providers_cuda.so",
    ):
        assert rel in frameworks.BINARIES


# -- CuPy links cudart statically ---------------------------------------------------------------

CUPY = {"cupy-cuda13x": "14.2.0", "nvidia-cuda-runtime": "13.5.37"}


def test_cupy_reports_its_own_static_runtime_not_the_runtime_wheel():
    found = consumers(dists=CUPY, runtime_versions={"cupy-cuda13x": 13020})
    assert found["cupy-cuda13x"].cuda == "13.2"
    assert "runtimeGetVersion() = 13020" in found["cupy-cuda13x"].source
    assert consumers(dists=CUPY)["cupy-cuda13x"].cuda == "13.x"


def test_cupy_on_a_13_2_driver_is_not_told_to_install_itself():
    found = consumers(dists=CUPY, runtime_versions={"cupy-cuda13x": 13020})
    cupy = [found["cupy-cuda13x"]]
    assert (
        check(snapshot(H200, driver="595.58.03", cuda=13020), cupy, installed=frozenset(CUPY)) == []
    )
    # on a 13.0 driver it is minor-version compatibility, and the fix never names cupy-cuda13x
    (finding,) = check(
        snapshot(H200, driver="580.95.05", cuda=13000), cupy, installed=frozenset(CUPY)
    )
    assert finding.code == "minor-version-compatibility" and "CUDA 13.2" in finding.message
    assert "pip install cupy-cuda13x" not in finding.fix


# -- cuda-bindings, tensorrt, triton ----------------------------------------------------------

TRITON_CUDA_H = "#ifndef __cuda_cuda_h__\n#define __cuda_cuda_h__\n#define CUDA_VERSION 12080\n"


def test_cuda_bindings_tensorrt_and_triton_are_detected():
    found = consumers(
        dists={
            "cuda-bindings": "13.1.1",
            "cuda-python": "13.1.1",
            "tensorrt": "10.14.1.48",
            "tensorrt-cu13": "10.14.1.48",
            "triton": "3.5.1",
        },
        files={"triton/backends/nvidia/include/cuda.h": TRITON_CUDA_H},
    )
    assert found["cuda-bindings"].cuda == "13.1"
    assert found["tensorrt-cu13"].cuda == "13.x"
    assert found["triton"].cuda == "12.8"
    assert {"cuda-bindings", "tensorrt", "triton"} <= set(frameworks.KNOWN)
    # triton's ptxas is CUDA 12.8: a 12.4 driver runs it only under minor-version compatibility
    codes = [
        f.code for f in check(snapshot(A100, driver="550.54.15", cuda=12040), [found["triton"]])
    ]
    assert codes == ["minor-version-compatibility"]
    # and a CUDA 13 cuda-bindings on a CUDA 12 driver is too new
    codes = [
        f.code
        for f in check(snapshot(A100, driver="570.124.06", cuda=12080), [found["cuda-bindings"]])
    ]
    assert codes == ["driver-too-old-for-cuda"]
