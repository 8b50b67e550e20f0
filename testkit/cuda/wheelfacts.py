"""What real PyPI wheels record of their CUDA build; their files rebuilt.

verify-cuda-env reads a few files of installed wheels without importing them: the arch-list
string literal in ``torch/lib/libtorch_python.so`` (next to the path of
``torch/csrc/cuda/Module.cpp``), ``torch/version.py``, TensorFlow's generated
``build_info.py``, onnxruntime-gpu's ``build_and_package_info.py``, paddle's
``version/__init__.py``, cupy's ``.data/_wheel.json`` and ``METADATA``. The project keeps no
copy of those files: this module records, per wheel (file name and sha256 in
:data:`WHEELS`, also listed in tests/fixtures/README.md), only the facts the readers use, as
read from the real wheel, and writes files in the same format from them at test time. The
library is a real ELF shared object built with gcc whose ``.rodata`` holds the arch list and
the Module.cpp path in the order the wheel's library has them (the list first, the path a
few dozen bytes after it)."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

WHEELS: dict[str, tuple[str, str]] = {
    # key: (wheel file on PyPI, its sha256)
    "torch-2.14.1+cu130": (
        "torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.whl",
        "23011fe29a99b591eabb3a31a25080c62e2c2f0690a3c798744e5489dae50451",
    ),
    "torch-2.10.0+cu128": (
        "torch-2.10.0-3-cp312-cp312-manylinux_2_28_x86_64.whl",
        "98c01b8bb5e3240426dcde1446eed6f40c778091c8544767ef1168fc663a05a6",
    ),
    "torch-2.7.1+cu126": (
        "torch-2.7.1-cp312-cp312-manylinux_2_28_x86_64.whl",
        "c33360cfc2edd976c2633b3b66c769bdcbbf0e0b6550606d188431c81e7dd1fc",
    ),
    "torch-2.6.0+cu124": (
        "torch-2.6.0-cp312-cp312-manylinux1_x86_64.whl",
        "2bb8987f3bb1ef2675897034402373ddfc8f5ef0e156e2d8cfc47cacafdda4a9",
    ),
    "tensorflow-2.21.0": (
        "tensorflow-2.21.0-cp312-cp312-manylinux_2_27_x86_64.whl",
        "b3b95643c4e70eb925839938fb35cbe142f317ec84af6844ee61513713bb13c0",
    ),
    "onnxruntime-gpu-1.31.1": (
        "onnxruntime_gpu-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl",
        "05d548956197b9d01f59b625de740e0d6be3593f874e241a12dc0362650ecdf7",
    ),
    "paddlepaddle-gpu-2.6.2": (
        "paddlepaddle_gpu-2.6.2-cp312-cp312-manylinux1_x86_64.whl",
        "289d9dac958bbb075a62c0a3ede821d67415e23df9bd3f94807d2a4ddc68c879",
    ),
    "cupy-cuda12x-14.2.0": (
        "cupy_cuda12x-14.2.0-cp312-cp312-manylinux2014_x86_64.whl",
        "f82141761f2c81905d49387464ae29438887956d99063381c93a1d5d1b7d32e8",
    ),
    "jax-cuda12-plugin-0.12.0.1": (
        "jax_cuda12_plugin-0.12.0.1-cp312-cp312-manylinux_2_27_x86_64.whl",
        "61dc67a8341ad6a0bb59631307914581ad16055f6c5635a2b7e57dfffb77e466",
    ),
    "nvidia-cuda-runtime-cu12-12.9.79": (
        "nvidia_cuda_runtime_cu12-12.9.79-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "25bba2dfb01d48a9b59ca474a1ac43c6ebf7011f1b0b8cc44f54eb6ac48a96c3",
    ),
}


@dataclass(frozen=True)
class Torch:
    """What one torch wheel records: ``torch/version.py``'s fields and, in
    ``libtorch_python.so``, the arch-list literal and the source path that follows it."""

    version: str
    cuda: str
    git_version: str
    arch_list: str
    module_path: str
    gap: int
    """Bytes from the list's first byte to the path's in the wheel's .rodata."""
    names_rocm: bool
    """Whether version.py has ``rocm`` and its ``__all__`` lists ``rocm`` and ``xpu`` (2.10 on;
    before, ``__all__`` ends at ``hip`` though ``xpu`` is assigned)."""


TORCH: dict[str, Torch] = {
    t.version: t
    for t in (
        Torch(
            "2.14.1+cu130",
            "13.0",
            "5c4886908584029761b579af026dcfb627c84070",
            "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120",
            "/__w/pytorch/pytorch/torch/csrc/cuda/Module.cpp",
            40,
            True,
        ),
        Torch(
            "2.10.0+cu128",
            "12.8",
            "449b1768410104d3ed79d3bcfe4ba1d65c7f22c0",
            "sm_70 sm_75 sm_80 sm_86 sm_90 sm_100 sm_120",
            "/pytorch/torch/csrc/cuda/Module.cpp",
            120,
            True,
        ),
        Torch(
            "2.7.1+cu126",
            "12.6",
            "e2d141dbde55c2a4370fac5165b0561b6af4798b",
            "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90",
            "/pytorch/torch/csrc/cuda/Module.cpp",
            48,
            False,
        ),
        Torch(
            "2.6.0+cu124",
            "12.4",
            "2236df1770800ffea5697b11b0bb0d910b2e59e1",
            "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90",
            "/pytorch/torch/csrc/cuda/Module.cpp",
            48,
            False,
        ),
    )
}


def torch_version_py(version: str) -> str:
    """``torch/version.py`` with the wheel's fields, in the generated file's shape
    (``cuda: Optional[str] = '13.0'``; ``hip`` and ``xpu`` None: CUDA builds)."""
    t = TORCH[version]
    names = [
        "__version__",
        "debug",
        "cuda",
        "git_version",
        "hip",
        *(["rocm", "xpu"] if t.names_rocm else []),
    ]
    lines = [
        "from typing import Optional",
        "",
        f"__all__ = {names!r}",
        f"__version__ = {t.version!r}",
        "debug = False",
        f"cuda: Optional[str] = {t.cuda!r}",
        f"git_version = {t.git_version!r}",
        "hip: Optional[str] = None",
    ]
    if t.names_rocm:
        lines.append("rocm: Optional[str] = None")
    lines.append("xpu: Optional[str] = None")
    return "\n".join(lines) + "\n"


_LIBRARY_C = """\
/* Built by testkit/cuda/wheelfacts.py: the arch list of {wheel} as its
   libtorch_python.so holds it in .rodata, then the Module.cpp path {gap} bytes on. */
__attribute__((used, aligned(8))) const char gpu_ci_rodata[] =
    "{arch_list}\\0" "{padding}" "{module_path}";
const char *gpu_ci_arch_list(void) {{ return gpu_ci_rodata; }}
"""


@functools.cache
def _built_library(version: str) -> bytes:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip(
            "gcc is needed to build the libtorch_python.so stand-in (an ELF with the "
            "wheel's arch-list literal): install gcc"
        )
    t = TORCH[version]
    padding = "\\0" * (t.gap - len(t.arch_list) - 1)
    source = _LIBRARY_C.format(
        wheel=WHEELS[f"torch-{version}"][0],
        gap=t.gap,
        arch_list=t.arch_list,
        padding=padding,
        module_path=t.module_path,
    )
    with tempfile.TemporaryDirectory(prefix="gpu-ci-libtorch-") as work:
        c_file, so_file = Path(work) / "libtorch_python.c", Path(work) / "libtorch_python.so"
        c_file.write_text(source, encoding="ascii")
        subprocess.run(
            [gcc, "-shared", "-fPIC", "-O0", "-o", str(so_file), str(c_file)],
            check=True,
            capture_output=True,
        )
        return so_file.read_bytes()


def libtorch_python(version: str) -> bytes:
    """A real ELF ``libtorch_python.so`` for torch ``version``.

    Built by gcc once per session, it holds the version's arch list and Module.cpp path as the
    wheel's library does."""
    return _built_library(version)


def arch_list(version: str) -> list[str]:
    return TORCH[version].arch_list.split()


# -- TensorFlow 2.21.0: tensorflow/python/platform/build_info.py -------------------------------

TENSORFLOW_BUILD_INFO = (
    ("cpu_compiler", "clang"),
    ("cuda_compute_capabilities", ["sm_60", "sm_70", "sm_80", "sm_89", "compute_90"]),
    ("cuda_version", "12.5.1"),
    ("cudnn_version", "9"),
    ("is_cuda_build", True),
    ("is_rocm_build", False),
    ("is_tensorrt_build", False),
)


def tensorflow_build_info() -> str:
    """The generated module's shape: one ``collections.OrderedDict([...])`` of the fields."""
    fields = ", ".join(f"({k!r}, {v!r})" for k, v in TENSORFLOW_BUILD_INFO)
    return (
        '"""Written by testkit/cuda/wheelfacts.py with the fields of tensorflow 2.21.0."""\n'
        f"import collections\n\nbuild_info = collections.OrderedDict([{fields}])\n"
    )


# -- onnxruntime-gpu 1.31.1 and paddlepaddle-gpu 2.6.2 -----------------------------------------


def onnxruntime_build_info() -> str:
    """``onnxruntime/capi/build_and_package_info.py``: three assignments."""
    return "package_name = 'onnxruntime-gpu'\n__version__ = '1.31.1'\ncuda_version = '13.0'\n"


def paddle_version_py() -> str:
    """``paddle/version/__init__.py``: the generated assignments (aligned as generated); the
    functions that follow them in the wheel are not read."""
    fields = (
        ("full_version", "2.6.2"),
        ("major", "2"),
        ("minor", "6"),
        ("patch", "2"),
        ("rc", "0"),
        ("cuda_version", "11.8"),
        ("cudnn_version", "8.6.0"),
        ("xpu_version", "False"),
        ("xpu_xccl_version", "False"),
    )
    lines = ["# Written by testkit/cuda/wheelfacts.py with the fields of paddlepaddle-gpu 2.6.2"]
    lines += [f"{name:<16} = {value!r}" for name, value in fields]
    lines += ["istaged          = True", "", "def cuda():", "    return cuda_version"]
    return "\n".join(lines) + "\n"


# -- cupy-cuda12x 14.2.0, jax-cuda12-plugin 0.12.0.1, nvidia-cuda-runtime-cu12 12.9.79 --------

DIST_INFO: dict[str, tuple[str, str, tuple[str, ...]]] = {
    # dist-info folder: (Name, Version, the Requires-Dist lines the CUDA reading concerns)
    "cupy_cuda12x-14.2.0.dist-info": (
        "cupy-cuda12x",
        "14.2.0",
        ("numpy<2.6,>=2.0", "cuda-pathfinder==1.*,>=1.3.4"),
    ),
    "jax_cuda12_plugin-0.12.0.1.dist-info": (
        "jax-cuda12-plugin",
        "0.12.0.1",
        (
            "jax-cuda12-pjrt==0.12.0.1",
            'nvidia-cuda-runtime-cu12>=12.1.105; sys_platform == "linux" and extra == "with-cuda"',
        ),
    ),
    "nvidia_cuda_runtime_cu12-12.9.79.dist-info": ("nvidia-cuda-runtime-cu12", "12.9.79", ()),
}


def metadata(dist_info: str) -> str:
    """A core-metadata ``METADATA`` with the wheel's Name, Version and Requires-Dist."""
    name, version, requires = DIST_INFO[dist_info]
    lines = [
        "Metadata-Version: 2.4",
        f"Name: {name}",
        f"Version: {version}",
        "Summary: written by testkit/cuda/wheelfacts.py from the wheel's METADATA",
    ]
    lines += [f"Requires-Dist: {r}" for r in requires]
    return "\n".join(lines) + "\n"


def cupy_wheel_json() -> str:
    """``cupy/.data/_wheel.json`` of cupy-cuda12x 14.2.0: the CUDA field says only 12.x."""
    return json.dumps({"cuda": "12.x", "packaging": "pip"})
