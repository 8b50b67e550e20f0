"""verify-cuda-env's architecture rules and the readers of real build records.

The inputs are written at test time from the facts of real wheels (testkit/cuda/wheelfacts.py
and tests/fixtures/README.md name each wheel and its sha256): ``torch/lib/libtorch_python.so``
(an ELF built by gcc with the wheel's arch-list literal), TensorFlow's generated
``build_info.py``, onnxruntime-gpu's ``build_and_package_info.py``, paddle's
``version/__init__.py``, and METADATA of cupy-cuda12x, jax-cuda12-plugin and
nvidia-cuda-runtime-cu12.
"""

from __future__ import annotations

import pytest

from gpu_ci.cuda.facts import Gpu
from gpu_ci.cuda.verify import arch, frameworks
from gpu_ci.cuda.verify import checks as cuda_checks
from gpu_ci.cuda.verify.table import load_builds
from testkit.cuda import wheelfacts
from testkit.cuda.verify import check, snapshot

GIB = 2**30
H200 = Gpu(0, "NVIDIA H200", "GPU-h200", (9, 0), 141 * GIB, brand="tesla")
A100 = Gpu(0, "NVIDIA A100-SXM4-80GB", "GPU-a100", (8, 0), 80 * GIB, brand="tesla")
V100 = Gpu(0, "Tesla V100-SXM2-32GB", "GPU-v100", (7, 0), 32 * GIB, brand="tesla")
B200 = Gpu(0, "NVIDIA B200", "GPU-b200", (10, 0), 180 * GIB, brand="tesla")
GB300 = Gpu(0, "NVIDIA GB300", "GPU-gb300", (10, 3), 279 * GIB, brand="tesla")
RTX5090 = Gpu(0, "NVIDIA GeForce RTX 5090", "GPU-5090", (12, 0), 32 * GIB, brand="geforce")

TORCH_CUTS = {
    "2.14.1+cu130": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
    "2.10.0+cu128": ["sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
    "2.6.0+cu124": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
}


# -- reading real build records ------------------------------------------------------------


@pytest.mark.parametrize("version", sorted(TORCH_CUTS))
def test_arch_list_from_real_libtorch_python_bytes(version, tmp_path):
    data = wheelfacts.libtorch_python(version)
    assert arch.find_arch_list(data) == TORCH_CUTS[version]
    # and through the memory-mapped reader the shell uses
    path = tmp_path / "libtorch_python.so"
    path.write_bytes(data)
    assert arch.read_arch_list(path) == (TORCH_CUTS[version], "")


def test_arch_list_without_the_module_anchor_is_still_found():
    data = wheelfacts.libtorch_python("2.14.1+cu130")
    cut = data.replace(arch.ANCHOR, b"x" * len(arch.ANCHOR))
    assert arch.find_arch_list(cut) == TORCH_CUTS["2.14.1+cu130"]


def test_unreadable_binary_is_an_error_not_a_crash(tmp_path):
    assert arch.read_arch_list(tmp_path / "missing.so")[0] is None
    empty = tmp_path / "empty.so"
    empty.write_bytes(b"")
    assert arch.read_arch_list(empty)[0] is None  # mmap of an empty file


def test_real_torch_version_py_and_arch_make_one_consumer():
    (torch,) = frameworks.consumers(
        frameworks.ProbeFacts(
            dists={"torch": "2.14.1+cu130"},
            files={"torch/version.py": wheelfacts.torch_version_py("2.14.1+cu130")},
            arch_lists={"torch/lib/libtorch_python.so": TORCH_CUTS["2.14.1+cu130"]},
        )
    )
    assert (torch.cuda, torch.tag, torch.arch) == (
        "13.0",
        "cu130",
        tuple(TORCH_CUTS["2.14.1+cu130"]),
    )


def test_real_tensorflow_build_info():
    text = wheelfacts.tensorflow_build_info()
    assert "collections.OrderedDict([(" in text  # the real generated shape
    assert arch.tensorflow_arch_list(text) == ["sm_60", "sm_70", "sm_80", "sm_89", "compute_90"]
    (tf,) = frameworks.consumers(
        frameworks.ProbeFacts(
            dists={"tensorflow": "2.21.0"}, files={"tensorflow/python/platform/build_info.py": text}
        )
    )
    assert tf.cuda == "12.5" and not tf.cpu_only


def test_real_onnxruntime_and_paddle_records():
    found = {
        c.name: c
        for c in frameworks.consumers(
            frameworks.ProbeFacts(
                dists={"onnxruntime-gpu": "1.31.1", "paddlepaddle-gpu": "2.6.2"},
                files={
                    "onnxruntime/capi/build_and_package_info.py": (
                        wheelfacts.onnxruntime_build_info()
                    ),
                    "paddle/version/__init__.py": wheelfacts.paddle_version_py(),
                },
            )
        )
    }
    assert found["onnxruntime-gpu"].cuda == "13.0"
    assert found["onnxruntime-gpu"].family == "onnxruntime"
    assert found["paddlepaddle-gpu"].cuda == "11.8"
    assert found["paddlepaddle-gpu"].family == "paddle"


def _metadata(dist_info: str) -> tuple[str, str]:
    text = wheelfacts.metadata(dist_info)
    fields = dict(line.split(": ", 1) for line in text.splitlines()[:4] if ": " in line)
    return fields["Name"], fields["Version"]


def test_jax_takes_the_exact_minor_from_the_runtime_wheel_cupy_its_static_cudart():
    dists = dict(
        _metadata(d)
        for d in (
            "cupy_cuda12x-14.2.0.dist-info",
            "jax_cuda12_plugin-0.12.0.1.dist-info",
            "nvidia_cuda_runtime_cu12-12.9.79.dist-info",
        )
    )
    assert dists == {
        "cupy-cuda12x": "14.2.0",
        "jax-cuda12-plugin": "0.12.0.1",
        "nvidia-cuda-runtime-cu12": "12.9.79",
    }
    found = {c.name: c for c in frameworks.consumers(frameworks.ProbeFacts(dists=dists))}
    # CuPy links cudart statically: an nvidia-cuda-runtime wheel says nothing about it
    assert found["cupy-cuda12x"].cuda == "12.x"
    assert "statically" in found["cupy-cuda12x"].source
    assert found["jax-cuda12-plugin"].cuda == "12.9"
    # cupy's own wheel record only says "12.x": without a runtime wheel the minor is unknown
    assert '"cuda": "12.x"' in wheelfacts.cupy_wheel_json()
    del dists["nvidia-cuda-runtime-cu12"]
    found = {c.name: c for c in frameworks.consumers(frameworks.ProbeFacts(dists=dists))}
    assert found["cupy-cuda12x"].cuda == "12.x" and found["jax-cuda12-plugin"].cuda == "12.x"


def test_rocm_torch_is_named_as_such():
    text = (
        wheelfacts.torch_version_py("2.14.1+cu130")
        .replace("cuda: Optional[str] = '13.0'", "cuda: Optional[str] = None")
        .replace("hip: Optional[str] = None", "hip: Optional[str] = '6.4.43482-0f2d60242'")
    )
    (torch,) = frameworks.consumers(
        frameworks.ProbeFacts(dists={"torch": "2.14.1+rocm6.4"}, files={"torch/version.py": text})
    )
    assert torch.rocm and not torch.cpu_only
    found = check(snapshot(H200), [torch])
    assert [f.code for f in found] == ["rocm-build"]
    assert "ROCm (HIP) build" in found[0].message and "CPU-only" not in found[0].message
    assert "download.pytorch.org/whl/cu130" in found[0].fix


# -- which code reaches which GPU -----------------------------------------------------------


@pytest.mark.parametrize(
    ("targets", "cc", "expected"),
    [
        (["sm_80"], (8, 6), "sass"),  # same major, newer minor
        (["sm_86"], (8, 0), None),  # never backwards
        (["sm_80"], (9, 0), None),  # never across majors
        (["compute_80"], (9, 0), "ptx"),  # PTX JIT-compiles forward
        (["compute_90"], (12, 0), "ptx"),
        (["sm_90a"], (9, 0), "sass"),
        (["sm_90a"], (10, 0), None),  # arch-specific: exact GPU only
        (["sm_100a"], (10, 3), None),
        (["compute_90a"], (10, 0), None),  # arch-specific PTX does not JIT forward
        (["sm_100f"], (10, 3), "sass"),  # family-specific: within the family
        (["sm_100f"], (12, 0), None),
        (["compute_100f"], (12, 0), None),
    ],
)
def test_reach(targets, cc, expected):
    assert arch.reach(arch.parse_targets(targets), cc) == expected


def torch(version, cuda, targets=None):
    return frameworks.CudaConsumer(
        "torch",
        version,
        cuda,
        "test",
        family="torch",
        arch=tuple(targets) if targets is not None else None,
        tag="cu" + cuda.replace(".", ""),
    )


def test_sm_90a_only_on_b200_is_an_error():
    (finding,) = check(snapshot(B200), [torch("2.9.0+cu128", "12.8", ["sm_90a"])])
    assert (finding.level, finding.code) == ("error", "no-kernel-image")
    assert "sm_100" in finding.fix and "whl/cu130" in finding.fix


def test_sm_100a_reaches_only_the_b200_not_the_gb300():
    build = torch("2.9.0+cu128", "12.8", ["sm_100a"])
    assert check(snapshot(B200), [build]) == []
    assert [f.code for f in check(snapshot(GB300), [build])] == ["no-kernel-image"]


def test_blackwell_needs_cuda_12_8_when_the_arch_list_is_unknown():
    # torch 2.6.0+cu124 read from its version label only: CUDA 12.4 cannot reach 12.0
    (finding,) = check(
        snapshot(RTX5090, driver="570.124.06", cuda=12080), [torch("2.6.0+cu124", "12.4")]
    )
    assert finding.code == "no-kernel-image" and "needs CUDA 12.8" in finding.message
    assert "whl/cu128" in finding.fix
    # a run-time compiler (cupy's NVRTC) reaches it through PTX: a warning
    cupy = frameworks.CudaConsumer("cupy-cuda12x", "13.6.0", "12.4", "test", family="cupy")
    (finding,) = check(snapshot(RTX5090, driver="570.124.06", cuda=12080), [cupy])
    assert (finding.level, finding.code) == ("warning", "arch-ptx-only")


def test_the_arch_list_not_the_version_decides():
    # a cu128 build without sm_70 (as published for cu128 from torch 2.11): V100 fails
    cu128 = next(b for b in load_builds().builds_of("torch") if b.tag == "cu128")
    assert "sm_70" not in cu128.arch
    (finding,) = check(
        snapshot(V100, driver="580.95.05"), [torch("2.11.0+cu128", "12.8", cu128.arch)]
    )
    assert finding.code == "no-kernel-image"
    assert "whl/cu126" in finding.fix and "ships sm_70" in finding.fix
    # PyPI's torch 2.10.0+cu128 still ships sm_70 (read from the real wheel): fine
    assert (
        check(
            snapshot(V100, driver="580.95.05"),
            [torch("2.10.0+cu128", "12.8", TORCH_CUTS["2.10.0+cu128"])],
        )
        == []
    )


def test_volta_on_an_old_driver_with_cuda13_gets_r580_as_its_last_branch():
    found = check(
        snapshot(V100, driver="535.104.05", cuda=12020),
        [torch("2.14.1+cu130", "13.0", TORCH_CUTS["2.14.1+cu130"])],
    )
    assert [f.code for f in found] == ["driver-too-old-for-cuda", "arch-dropped-by-cuda13"]
    assert "R580 is the last branch for Volta" in found[0].fix
    assert "610.43.02" not in found[0].fix  # the newest driver no longer runs Volta


def test_one_finding_per_root_cause_lists_every_consumer():
    consumers = [
        torch("2.14.1+cu130", "13.0", TORCH_CUTS["2.14.1+cu130"]),
        frameworks.CudaConsumer(
            "cuda-toolkit", "13.0.3", "13.0", "wheel version", family="cuda-runtime"
        ),
        frameworks.CudaConsumer(
            "nvidia-cuda-runtime", "13.0.96", "13.0", "wheel version", family="cuda-runtime"
        ),
        frameworks.CudaConsumer("conda cuda-version", "13.0", "13.0", "conda-meta", family="conda"),
    ]
    found = check(snapshot(A100, driver="535.104.05", cuda=12020), consumers)
    assert [f.code for f in found] == ["driver-too-old-for-cuda"]
    for name in (
        "torch 2.14.1+cu130",
        "cuda-toolkit 13.0.3",
        "nvidia-cuda-runtime 13.0.96",
        "conda cuda-version 13.0",
    ):
        assert name in found[0].message


def test_numba_under_minor_version_compatibility_needs_pynvjitlink():
    # the CUDA target built into numba; numba-cuda: tests/test_cuda_frameworks_numba.py
    numba = frameworks.CudaConsumer("numba", "0.60.0", "12.9", "test", family="numba")
    snap = snapshot(A100, driver="535.104.05", cuda=12020)
    assert [f.code for f in check(snap, [numba])] == [
        "numba-minor-version-compatibility",
        "minor-version-compatibility",
    ]
    assert check(snap, [numba])[0].level == "error"
    assert [f.code for f in check(snap, [numba], installed=frozenset({"pynvjitlink-cu12"}))] == [
        "minor-version-compatibility"
    ]


def test_forward_compat_via_the_loader_cache_and_error_803():
    # NGC images register /usr/local/cuda/compat with ldconfig: the loader's answer is the path
    compat = "/usr/local/cuda-13.2/compat/libcuda.so.595.45.04"
    env = cuda_checks.EnvFacts(libcuda_path=compat)
    assert check(snapshot(H200, driver="580.95.05"), env=env) == []
    # compat older than the installed driver: 803
    (finding,) = check(snapshot(H200, driver="595.58.03", cuda=13020), env=env)
    assert finding.code == "forward-compat-mismatch" and "803" in finding.message
    # kernel driver on a branch forward compatibility is not supported from: 803
    (finding,) = check(snapshot(H200, driver="560.35.03", cuda=12060), env=env)
    assert finding.code == "forward-compat-mismatch" and "R560" in finding.message


def test_nvml_without_libcuda_names_the_container_capability():
    env = cuda_checks.EnvFacts(
        libcuda_path="", libcuda_error="libcuda.so.1: cannot open", driver_capabilities="utility"
    )
    (finding,) = check(snapshot(H200), env=env)
    assert (finding.level, finding.code) == ("error", "libcuda-missing")
    assert "NVIDIA_DRIVER_CAPABILITIES='utility' lacks 'compute'" in finding.message
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in finding.fix


def test_fixes_never_name_the_bundled_driver_as_the_minimum():
    (finding,) = check(
        snapshot(A100, driver="570.124.06", cuda=12080), [torch("2.16.0+cu132", "13.2")]
    )
    assert "needs driver 580 or newer" in finding.message
    assert "595.45.04" not in finding.message + finding.fix


def test_cpu_and_rocm_torch_libraries_are_not_scanned():
    cpu = wheelfacts.torch_version_py("2.14.1+cu130").replace(
        "cuda: Optional[str] = '13.0'", "cuda: Optional[str] = None"
    )
    lib = "torch/lib/libtorch_python.so"
    assert frameworks.wants_arch_list(
        lib, {"torch/version.py": wheelfacts.torch_version_py("2.14.1+cu130")}
    )
    assert not frameworks.wants_arch_list(lib, {"torch/version.py": cpu})
    rocm = cpu.replace("hip: Optional[str] = None", "hip: Optional[str] = '6.4.43482'")
    assert not frameworks.wants_arch_list(lib, {"torch/version.py": rocm})
