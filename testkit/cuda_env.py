"""Building blocks for verify-cuda-env tests: the fake NVML library and fake environments.

The fake ``libnvidia-ml.so.1`` is compiled from ``testkit/fake_nvml/fake_nvml.c`` with gcc
against NVIDIA's ``nvml.h`` (the nvidia-nvml-dev wheel of the test extra) and loaded by the
real nvidia-ml-py through LD_LIBRARY_PATH in a subprocess. One machine is one config: the
driver's CUDA version (``cuda_driver_version``) is answered by the fake libcuda, which the
fake NVML's ``nvmlSystemGetCudaDriverVersion_v2`` calls, as the real one does. Target
interpreters are real virtual environments whose site-packages hold the metadata (and the
few files) that pip or conda would have written for torch, cupy, jax and friends.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import venv
from pathlib import Path
from typing import Any

import pytest
import yaml

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fake_nvml" / "fake_nvml.c"
CUDA_SOURCE = HERE / "fake_nvml" / "fake_cuda.c"


def nvml_include_dir() -> Path | None:
    """The directory holding NVIDIA's nvml.h, from the nvidia-nvml-dev wheel.

    The test extra installs it: nvidia/cu13/include/nvml.h, or another nvidia/*/include in other
    releases."""
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for header in sorted(Path(root).glob("*/include/nvml.h")):
            return header.parent
    return None


def require_nvml_header() -> Path:
    """nvml.h's directory, or a skip where the header is absent.

    ``make test`` installs nvidia-nvml-dev through the test extra, so there it is present."""
    include = nvml_include_dir()
    if include is None:
        pytest.skip(
            "nvidia-nvml-dev (NVIDIA's nvml.h) is not installed: the fake "
            "libnvidia-ml.so.1 is compiled against it (pip install nvidia-nvml-dev)"
        )
    return include


def _gcc() -> str:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise RuntimeError("gcc is needed to build the fake libnvidia-ml.so.1 for the tests")
    return gcc


#: Driver generations that are a link-time fact (a missing symbol): the build flag for each.
GENERATIONS = {"current": [], "r470": ["-DFAKE_NVML_NO_V3", "-DFAKE_NVML_NO_NVML13_NAMES"]}


def _shared_library(target: Path, *args: str) -> None:
    """gcc builds ``target`` from ``args`` (flags, sources, then libraries), warnings as errors."""
    subprocess.run(
        [_gcc(), "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", str(target), *args],
        check=True,
    )


def build_fake_nvml(out_dir: Path, with_libcuda: bool = True, generation: str = "current") -> Path:
    """The fake libnvidia-ml.so.1 in ``out_dir``, compiled against nvml.h.

    -Werror: a signature that differs from NVIDIA's is a build error. ``generation="r470"``
    builds a driver before R510, which exports no ``nvmlDeviceGetComputeRunningProcesses_v3``."""
    include = require_nvml_header()
    out_dir.mkdir(parents=True, exist_ok=True)
    lib = out_dir / "libnvidia-ml.so.1"
    _shared_library(
        lib, "-Wextra", "-I", str(include), *GENERATIONS[generation], str(SOURCE), "-ldl"
    )
    if with_libcuda:
        build_fake_libcuda(out_dir)
    return out_dir


def build_fake_libcuda(out_dir: Path, version: str = "", cuda: int | None = None) -> Path:
    """A loadable libcuda.so.1 for the fake NVML's driver.

    With a version, it is ``libcuda.so.<version>`` with the soname link, the way the driver
    and the cuda-compat package install it. Its
    ``cuDriverGetVersion`` answers ``cuda`` when given (a forward-compatibility library has
    its own CUDA version), else the driver's ``cuda_driver_version`` from the fake NVML's
    config."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / (f"libcuda.so.{version}" if version else "libcuda.so.1")
    fixed = [f"-DFAKE_CUDA_VERSION={cuda}"] if cuda is not None else []
    _shared_library(target, *fixed, "-Wl,-soname,libcuda.so.1", str(CUDA_SOURCE))
    if version:
        (out_dir / "libcuda.so.1").symlink_to(target.name)
    return target


def gpu_config(
    index: int,
    *,
    name: str = "NVIDIA H200",
    cc: str = "9.0",
    memory_mib: int = 143771,
    brand: int = 2,
    uuid: str | None = None,
    persistence: int = 1,
    **extra: Any,
) -> dict[str, str]:
    cfg = {
        "name": name,
        "uuid": uuid or f"GPU-{index:08d}-aaaa-bbbb-cccc-{index:012d}",
        "cc": cc,
        "memory_mib": str(memory_mib),
        "brand": str(brand),
        "persistence": str(persistence),
    }
    cfg.update({k.replace("__", "."): str(v) for k, v in extra.items()})
    return {f"gpu.{index}.{k}": v for k, v in cfg.items()}


def a100_one_slice(slice_uuid: str, **extra: Any) -> dict[str, str]:
    """GPU 0: an A100 80GB in MIG mode, one 1g.10gb slice (``slice_uuid``)."""
    return gpu_config(
        0,
        name="NVIDIA A100-SXM4-80GB",
        cc="8.0",
        memory_mib=81920,
        mig=1,
        mig__count=1,
        mig__0__uuid=slice_uuid,
        mig__0__name="NVIDIA A100-SXM4-80GB MIG 1g.10gb",
        mig__0__memory_mib=9984,
        **extra,
    )


def rtx_4090(index: int = 1, **extra: Any) -> dict[str, str]:
    """A GeForce RTX 4090's NVML facts: a two-model host's second GPU."""
    return gpu_config(
        index,
        name="NVIDIA GeForce RTX 4090",
        cc="8.9",
        memory_mib=24564,
        brand=5,
        uuid="GPU-4090aaaa-0000-0000-0000-000000000000",
        **extra,
    )


def nvml_config(
    *gpus: dict[str, str],
    driver: str = "580.159.04",
    cuda: int = 13000,
    fail: dict[str, int] | None = None,
    **machine: Any,
) -> dict[str, str]:
    """A fake-NVML config of these GPUs.

    ``machine`` adds top-level keys (``driver__generation="r535early"``, ``privileged=1``,
    ``container=1``; ``__`` stands for ``.``)."""
    cfg = {"driver_version": driver, "cuda_driver_version": str(cuda), "gpu.count": str(len(gpus))}
    cfg.update({k.replace("__", "."): str(v) for k, v in machine.items()})
    for gpu in gpus:
        cfg.update(gpu)
    for fn, code in (fail or {}).items():
        cfg[f"fail.{fn}"] = str(code)
    return cfg


def observed_h200() -> tuple[dict[str, Any], dict[str, str]]:
    """The first observed H200 reading, and a fake-NVML config of it.

    Read from ../shared/reference/observed-gpu-machines.yaml; the caller is skipped where
    ../shared is absent."""
    from testkit.shared import shared_path

    observed = shared_path("reference", "observed-gpu-machines.yaml")
    machine = yaml.safe_load(observed.read_text())[0]
    gpus = [
        gpu_config(
            i,
            name=g["name"],
            cc="{}.{}".format(*g["compute_capability"]),
            memory_mib=g["memory_total_mib"],
        )
        for i, g in enumerate(machine["gpus"])
    ]
    return machine, nvml_config(
        *gpus, driver=machine["driver_version"], cuda=machine["cuda_driver_version"]
    )


def write_config(path: Path, config: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
    return path


def dist_info(site: Path, name: str, version: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text("")


def make_target(
    root: Path,
    dists: dict[str, str] | None = None,
    files: dict[str, str] | None = None,
    conda_meta: list[str] | None = None,
) -> Path:
    """A real venv without pip, holding these distributions and files.

    Returns its python."""
    venv.create(root, with_pip=False, symlinks=True)
    site = next((root / "lib").glob("python3*/site-packages"))
    for name, version in (dists or {}).items():
        dist_info(site, name, version)
    for rel, text in (files or {}).items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if conda_meta is not None:
        (root / "conda-meta").mkdir()
        for filename in conda_meta:
            (root / "conda-meta" / filename).write_text("{}")
    return root / "bin" / "python"


TORCH_VERSION_PY = """\
from typing import Optional
__version__ = '{version}'
debug = False
cuda: Optional[str] = {cuda}
git_version = 'deadbeef'
hip: Optional[str] = None
"""


NO_IMPORT = "raise ImportError('the fast path must not import torch')\n"


def torch_target(root: Path, version: str, cuda: str | None, **extra_dists: str) -> Path:
    cuda_literal = "None" if cuda is None else repr(cuda)
    return make_target(
        root,
        {"torch": version, **extra_dists},
        {
            "torch/version.py": TORCH_VERSION_PY.format(version=version, cuda=cuda_literal),
            "torch/__init__.py": NO_IMPORT,
        },
    )


def real_torch_target(root: Path, version: str, **extra_dists: str) -> Path:
    """A venv holding torch ``version``, as far as the fast path reads.

    The files are as its real wheel laid them out: ``torch/version.py`` and
    ``torch/lib/libtorch_python.so`` (an ELF built by gcc holding the wheel's arch-list
    literal), both written from the wheel's facts (testkit/cuda/wheelfacts.py); ``import torch``
    raises."""
    from testkit.cuda import wheelfacts

    python = make_target(
        root,
        {"torch": version, **extra_dists},
        {"torch/version.py": wheelfacts.torch_version_py(version), "torch/__init__.py": NO_IMPORT},
    )
    site = next((root / "lib").glob("python3*/site-packages"))
    lib = site / "torch" / "lib"
    lib.mkdir(parents=True)
    (lib / "libtorch_python.so").write_bytes(wheelfacts.libtorch_python(version))
    return python


#: What ``nvcc --version`` prints (CUDA 13.0's, with the release and build fields filled in).
NVCC_VERSION = """\
nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:58:59_PM_PDT_2025
Cuda compilation tools, release {release}, V{version}
Build cuda_{release}.r{release}/compiler.36424714_0
"""


def fake_toolkit(root: Path, version: str) -> Path:
    """A system CUDA toolkit whose nvcc answers ``--version`` as NVIDIA's does.

    ``version`` is '13.0.88'; there is no version.json, so the version comes from nvcc
    itself. Returns the ``bin`` folder (to put on PATH).
    """
    release = ".".join(version.split(".")[:2])
    text = NVCC_VERSION.format(release=release, version=version)
    nvcc = root / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True, exist_ok=True)
    nvcc.write_text(f"#!/bin/sh\ncat <<'END'\n{text}END\n")
    nvcc.chmod(0o755)
    return nvcc.parent


def conda_record(name: str, version: str, build: str, cuda: str = "") -> dict[str, Any]:
    """A ``conda-meta`` record as conda and rattler write it.

    It holds the fields verify reads, and the cuda-version pin a CUDA component of
    conda-forge depends on.
    """
    depends = [f"cuda-version >={cuda},<{cuda}.1.0a0"] if cuda and name != "cuda-version" else []
    return {
        "name": name,
        "version": version,
        "build": build,
        "build_number": int(build.split("_")[1]),
        "channel": "https://conda.anaconda.org/conda-forge/",
        "subdir": "noarch" if name == "cuda-version" else "linux-64",
        "depends": depends,
        "files": [],
    }


def conda_cuda_env(root: Path, cuda: str, **dists: str) -> Path:
    """A conda environment holding CUDA ``cuda`` ('12.9') as conda-forge installs it.

    A prefix with cuda-version, cuda-cudart and cuda-nvrtc records in ``conda-meta``;
    returns its python.
    """
    python = make_target(root, dists)
    meta = root / "conda-meta"
    meta.mkdir()
    minor = {"12.9": "79", "12.8": "57", "13.0": "96"}.get(cuda, "0")
    for name, version, build in (
        ("cuda-version", cuda, "h4f385c5_3"),
        ("cuda-cudart", f"{cuda}.{minor}", "h5888daf_0"),
        ("cuda-nvrtc", f"{cuda}.86", "h5888daf_0"),
        ("python", "3.12.11", "h9e4cc4f_0_cpython"),
    ):
        record = conda_record(name, version, build, cuda)
        (meta / f"{name}-{version}-{build}.json").write_text(json.dumps(record))
    return python
