"""Which CUDA each installed framework was built for, learned without importing it.

Importing torch costs seconds; reading what pip and conda recorded costs milliseconds. The
shell collects raw facts (distribution names and versions of the target interpreter, the
text of ``torch/version.py`` and TensorFlow's ``build_info.py``, ``conda-meta`` records,
the CUDA toolkit's ``version.json`` or ``nvcc --version``); this module interprets them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gpu_ci.cuda.verify.arch import tensorflow_arch_list

KNOWN = (
    "torch",
    "cupy",
    "jax",
    "numba",
    "tensorflow",
    "cuda-runtime",
    "conda",
    "nvcc",
    "onnxruntime",
    "paddle",
    "cuda-bindings",
    "tensorrt",
    "triton",
)

#: Files the probe reads (text) from the target's site-packages. Triton's bundled ``cuda.h``
#: says which CUDA its ptxas and headers are (``#define CUDA_VERSION 12080``, near the top).
FILES = (
    "torch/version.py",
    "tensorflow/python/platform/build_info.py",
    "onnxruntime/capi/build_and_package_info.py",
    "paddle/version/__init__.py",
    "triton/backends/nvidia/include/cuda.h",
)
#: Binary files whose path the probe reports (the shell memory-maps them and reads their
#: arch list: torch's literal, everyone else's ``.nv_fatbin`` entry headers, see .arch).
BINARIES = (
    "torch/lib/libtorch_python.so",
    "onnxruntime/capi/libonnxruntime_providers_cuda.so",
    "jax_plugins/xla_cuda12/xla_cuda_plugin.so",
    "jax_plugins/xla_cuda13/xla_cuda_plugin.so",
    "paddle/base/libpaddle.so",
)


@dataclass(frozen=True)
class CudaConsumer:
    """A component that needs the driver to support some CUDA version."""

    name: str
    version: str
    cuda: str | None
    """'12.6'; None when it is a CPU build or the CUDA version cannot be known."""
    source: str
    """How the CUDA version was learned (for the report)."""
    cpu_only: bool = False
    family: str = ""
    """Which `frameworks` input name selects it."""
    rocm: bool = False
    """A ROCm (HIP) build: it can only use AMD GPUs."""
    arch: tuple[str, ...] | None = None
    """Compiled GPU targets ('sm_90', 'compute_90'), when the build records them."""
    tag: str = ""
    """The build's name in the builds table (torch 'cu128', 'cupy-cuda12x', jax 'cuda12')."""

    @property
    def cuda_tuple(self) -> tuple[int, int] | None:
        if not self.cuda:
            return None
        parts = self.cuda.split(".")
        minor = parts[1] if len(parts) > 1 and parts[1].isdigit() else "0"
        return int(parts[0]), int(minor)

    @property
    def exact_minor(self) -> bool:
        """False for '12.x': any minor of the major (the runtime comes from the system)."""
        return bool(self.cuda) and not str(self.cuda).endswith(".x")

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("family")
        return data


@dataclass(frozen=True)
class ProbeFacts:
    """Raw facts from the target interpreter and its environment."""

    python: str = ""
    prefix: str = ""
    dists: Mapping[str, str] = None  # type: ignore[assignment]
    files: Mapping[str, str] = None  # type: ignore[assignment]
    conda_meta: Sequence[str] = ()
    """File names under <prefix>/conda-meta (name-version-build.json)."""
    conda_records: Mapping[str, Mapping[str, str]] = None  # type: ignore[assignment]
    """{'name': ..., 'version': ...} conda recorded in the CUDA packages' files, by file
    name (a file that could not be read is absent: its name is the evidence)."""
    nvcc: Mapping[str, str] = None  # type: ignore[assignment]
    """{'path': ..., 'version_json': ..., 'nvcc_output': ...}"""
    arch_lists: Mapping[str, Sequence[str]] = None  # type: ignore[assignment]
    """Arch lists read from binaries by the shell, by BINARIES path."""
    runtime_versions: Mapping[str, int] = None  # type: ignore[assignment]
    """``cudaRuntimeGetVersion()`` of a runtime linked into a framework (CuPy links cudart
    statically: the shell reads its CUDART_VERSION out of ``cupy_backends/cuda/api/
    runtime*.so``, see :mod:`.cudart`), by distribution name: {'cupy-cuda13x': 13020}."""

    def __post_init__(self) -> None:
        for name in ("dists", "files", "conda_records", "nvcc", "arch_lists", "runtime_versions"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, {})


def wants_arch_list(binary: str, files: Mapping[str, str]) -> bool:
    """Is the arch list in ``binary`` worth reading? Not for a CPU or ROCm torch, whose
    ``version.py`` says so (their library has no list: reading it is the slow case)."""
    if binary == "torch/lib/libtorch_python.so":
        text = files.get("torch/version.py", "")
        if re.search(r"^cuda\s*(?::[^=]+)?=\s*None", text, re.MULTILINE):
            return False
        if re.search(r"^hip\s*(?::[^=]+)?=\s*['\"]", text, re.MULTILINE):
            return False
    return True


def _cu_label(version: str) -> str | None:
    """'2.11.0+cu130' -> '13.0', '+cu118' -> '11.8', '+cu92' -> '9.2'."""
    match = re.search(r"\+cu(\d+)", version)
    if not match:
        return None
    digits = match.group(1)
    return f"{digits[:-1]}.{digits[-1]}"


def _major_minor(version: str) -> str | None:
    match = re.match(r"(\d+)\.(\d+)", version)
    return f"{match.group(1)}.{match.group(2)}" if match else None


def _runtime_wheel(dists: Mapping[str, str]) -> tuple[str, str] | None:
    for name in (
        "nvidia-cuda-runtime",
        "nvidia-cuda-runtime-cu13",
        "nvidia-cuda-runtime-cu12",
        "nvidia-cuda-runtime-cu11",
    ):
        if name in dists:
            return name, dists[name]
    return None


def _torch(facts: ProbeFacts) -> CudaConsumer | None:
    version = facts.dists.get("torch")
    if version is None:
        return None
    text = facts.files.get("torch/version.py", "")
    hip = re.search(r"^hip\s*(?::[^=]+)?=\s*['\"]([^'\"]*)['\"]", text, re.MULTILINE)
    if hip or re.search(r"\+rocm[\d.]+$", version):
        rocm = hip.group(1) if hip else version.rsplit("+rocm", 1)[1]
        return CudaConsumer(
            "torch",
            version,
            None,
            f"torch/version.py: hip = {rocm!r}" if hip else "version label",
            rocm=True,
        )
    arch = facts.arch_lists.get("torch/lib/libtorch_python.so")

    def built_for(cuda: str | None, how: str) -> CudaConsumer:
        return CudaConsumer(
            "torch",
            version,
            cuda,
            how,
            arch=tuple(arch) if arch is not None else None,
            tag="cu" + (cuda or "").replace(".", ""),
        )

    match = re.search(r"^cuda\s*(?::[^=]+)?=\s*(None|['\"]([\d.]+)['\"])", text, re.MULTILINE)
    if match:
        if match.group(1) == "None":
            return CudaConsumer("torch", version, None, "torch/version.py: cuda = None", True)
        return built_for(_major_minor(match.group(2)), "torch/version.py")
    if version.endswith("+cpu"):
        return CudaConsumer("torch", version, None, "version label +cpu", True)
    label = _cu_label(version)
    if label:
        return built_for(label, "version label")
    return _wheel_pinned(facts, "torch", version, "no CUDA record found")


def _wheel_pinned(facts: ProbeFacts, name: str, version: str, otherwise: str) -> CudaConsumer:
    """CUDA as the runtime wheel installed beside ``name`` pins it; else unknown."""
    runtime = _runtime_wheel(facts.dists)
    if runtime:
        return CudaConsumer(
            name, version, _major_minor(runtime[1]), f"wheel pin {runtime[0]}=={runtime[1]}"
        )
    return CudaConsumer(name, version, None, otherwise)


def _runtime_minor(facts: ProbeFacts, major: str, name: str) -> tuple[str, str]:
    """(cuda, how) for a wheel that takes any CUDA ``major``.x runtime: the exact minor from
    the CUDA runtime wheel installed next to it, else the major alone ('12.x')."""
    runtime = _runtime_wheel(facts.dists)
    if runtime and runtime[1].split(".")[0] == major:
        return (
            _major_minor(runtime[1]) or f"{major}.x",
            f"wheel name {name}; runtime {runtime[0]}=={runtime[1]}",
        )
    return f"{major}.x", f"wheel name {name} (any CUDA {major}.x; runtime from the system)"


def _runtime_version(value: int) -> str:
    """cudaRuntimeGetVersion's integer: 13020 -> '13.2'."""
    return f"{value // 1000}.{(value % 1000) // 10}"


def _cupy(facts: ProbeFacts) -> list[CudaConsumer]:
    """CuPy links cudart statically (CuPy installation guide): its CUDA minor is its own,
    never that of an ``nvidia-cuda-runtime`` wheel installed next to it."""
    out = []
    for name, version in facts.dists.items():
        match = re.fullmatch(r"cupy-cuda(\d+)(x?)", name)
        if match:
            digits, floating = match.groups()
            runtime = facts.runtime_versions.get(name)
            if runtime:
                cuda, how = (
                    _runtime_version(runtime),
                    f"{name}'s static cudart: runtimeGetVersion() = {runtime}",
                )
            elif floating:
                cuda, how = (
                    f"{digits}.x",
                    f"wheel name {name} (any CUDA {digits}.x; "
                    "cudart linked statically, its minor not read)",
                )
            else:
                cuda, how = f"{digits[:-1]}.{digits[-1]}", f"wheel name {name}"
            out.append(CudaConsumer(name, version, cuda, how, tag=name))
        elif name == "cupy":
            out.append(CudaConsumer("cupy", version, None, "built from source: CUDA unknown"))
    return out


def _jax(facts: ProbeFacts) -> list[CudaConsumer]:
    out = []
    for name, version in facts.dists.items():
        match = re.fullmatch(r"jax-cuda(\d+)-plugin", name)
        if match:
            cuda, how = _runtime_minor(facts, match.group(1), name)
            arch = facts.arch_lists.get(f"jax_plugins/xla_cuda{match.group(1)}/xla_cuda_plugin.so")
            out.append(
                CudaConsumer(
                    name,
                    version,
                    cuda,
                    how,
                    tag=f"cuda{match.group(1)}",
                    arch=tuple(arch) if arch else None,
                )
            )
    if not out and "jaxlib" in facts.dists:
        version = facts.dists["jaxlib"]
        match = re.search(r"\+cuda(\d+)", version)
        if match:
            out.append(
                CudaConsumer(
                    "jaxlib",
                    version,
                    f"{match.group(1)}.x",
                    "version label",
                    tag=f"cuda{match.group(1)}",
                )
            )
        elif "jax" in facts.dists:
            out.append(
                CudaConsumer("jax", facts.dists["jax"], None, "no jax-cuda plugin installed", True)
            )
    return out


def _numba(facts: ProbeFacts) -> CudaConsumer | None:
    version = facts.dists.get("numba-cuda") or facts.dists.get("numba")
    if version is None:
        return None
    name = "numba-cuda" if "numba-cuda" in facts.dists else "numba"
    return _wheel_pinned(facts, name, version, "CUDA comes from the toolkit at run time")


def _tensorflow(facts: ProbeFacts) -> CudaConsumer | None:
    for name in ("tensorflow", "tensorflow-gpu", "tensorflow-cpu"):
        if name in facts.dists:
            version = facts.dists[name]
            break
    else:
        return None
    if name == "tensorflow-cpu":
        return CudaConsumer(name, version, None, "tensorflow-cpu", True)
    text = facts.files.get("tensorflow/python/platform/build_info.py", "")
    # generated as collections.OrderedDict([('cuda_version', '12.5.1'), ...]) (older: a dict)
    if re.search(r"['\"]is_rocm_build['\"]\s*[,:]\s*True", text):
        return CudaConsumer(name, version, None, "build_info.py: is_rocm_build", rocm=True)
    match = re.search(r"['\"]cuda_version['\"]\s*[,:]\s*['\"]([\d.]+)['\"]", text)
    if match:
        arch = tensorflow_arch_list(text)
        return CudaConsumer(
            name,
            version,
            _major_minor(match.group(1)),
            "build_info.py",
            arch=tuple(arch) if arch else None,
        )
    if re.search(r"['\"]is_cuda_build['\"]\s*[,:]\s*False", text):
        return CudaConsumer(name, version, None, "build_info.py: not a CUDA build", True)
    return CudaConsumer(name, version, None, "no CUDA record found")


def _assigned(text: str, name: str) -> str | None:
    match = re.search(rf"^{name}\s*=\s*['\"]([^'\"]*)['\"]", text, re.MULTILINE)
    return match.group(1) if match else None


def _recorded(
    facts: ProbeFacts, dist: str, record: str, library: str, no_cuda: str = ""
) -> CudaConsumer | None:
    """A wheel whose own Python file assigns its CUDA version.

    As ``cuda_version = '12.4'``; ``library``: its CUDA library, whose kernels' architectures
    are read; ``no_cuda``: the value a CPU build assigns."""
    version = facts.dists.get(dist)
    if version is None:
        return None
    cuda = _assigned(facts.files.get(record, ""), "cuda_version")
    arch = facts.arch_lists.get(library)
    if cuda and cuda != no_cuda:
        return CudaConsumer(
            dist, version, _major_minor(cuda), record, arch=tuple(arch) if arch else None
        )
    return CudaConsumer(dist, version, None, "no CUDA record found")


_RECORDED = (
    (
        "onnxruntime",
        "onnxruntime-gpu",
        "onnxruntime/capi/build_and_package_info.py",
        "onnxruntime/capi/libonnxruntime_providers_cuda.so",
        "",
    ),
    (
        "paddle",
        "paddlepaddle-gpu",
        "paddle/version/__init__.py",
        "paddle/base/libpaddle.so",
        "False",
    ),
)
"""(framework, distribution, the file assigning cuda_version, CUDA library, a CPU build's value)."""


def _cuda_bindings(facts: ProbeFacts) -> CudaConsumer | None:
    """The CUDA version of a cuda-bindings release.

    cuda-bindings X.Y.* is generated from CUDA X.Y's headers and loads the driver's libcuda at run
    time (cuda-python docs): it needs a driver of CUDA X, and X.Y for the newest APIs.
    ``cuda-python`` is its meta package.
    """
    for name in ("cuda-bindings", "cuda-python"):
        version = facts.dists.get(name)
        if version:
            return CudaConsumer(name, version, _major_minor(version), "wheel version")
    return None


def _tensorrt(facts: ProbeFacts) -> CudaConsumer | None:
    """tensorrt-cu12 / tensorrt-cu13 (the ``tensorrt`` meta package pulls one in): built for
    one CUDA major, running on its minor-version compatibility."""
    for name, version in facts.dists.items():
        match = re.fullmatch(r"tensorrt-cu(\d+)", name)
        if match:
            return CudaConsumer(name, version, f"{match.group(1)}.x", f"wheel name {name}")
    if "tensorrt" in facts.dists:
        return CudaConsumer(
            "tensorrt", facts.dists["tensorrt"], None, "no tensorrt-cuNN wheel found"
        )
    return None


def _triton(facts: ProbeFacts) -> CudaConsumer | None:
    """The CUDA version Triton's bundled ptxas comes from.

    Triton compiles kernels at run time with the ptxas it bundles; its ``cuda.h`` says which CUDA
    that is: the driver must run that CUDA (natively, or its major through minor-version
    compatibility, as for any build).
    """
    version = facts.dists.get("triton")
    if version is None:
        return None
    text = facts.files.get("triton/backends/nvidia/include/cuda.h", "")
    match = re.search(r"^#define\s+CUDA_VERSION\s+(\d+)", text, re.MULTILINE)
    if match:
        return CudaConsumer(
            "triton",
            version,
            _runtime_version(int(match.group(1))),
            "triton/backends/nvidia/include/cuda.h: CUDA_VERSION",
        )
    return CudaConsumer("triton", version, None, "no bundled cuda.h found")


#: NVIDIA wheels whose version is the CUDA version they come from (cuBLAS, cuFFT, ... have
#: their own numbering: their ``-cuXX`` suffix gives only the major).
VERSIONED_WHEELS = re.compile(r"nvidia-(cuda-nvrtc|cuda-nvcc|cuda-cupti|nvjitlink)(-cu\d+)?")


def _library_wheel(dists: Mapping[str, str]) -> CudaConsumer | None:
    """One NVIDIA library wheel (``nvidia-*-cu12``) standing for the CUDA it brings."""
    for name in sorted(dists):
        version = dists[name]
        if VERSIONED_WHEELS.fullmatch(name):
            return CudaConsumer(name, version, _major_minor(version), "wheel version")
    for name in sorted(dists):
        match = re.fullmatch(r"nvidia-[a-z0-9-]+-cu(\d+)", name)
        if match:
            cuda = f"{match.group(1)}.x"
            return CudaConsumer(name, dists[name], cuda, f"wheel name {name} (CUDA {cuda})")
    return None


def _runtime_wheels(facts: ProbeFacts) -> list[CudaConsumer]:
    out = []
    runtime = _runtime_wheel(facts.dists)
    if runtime:
        out.append(CudaConsumer(runtime[0], runtime[1], _major_minor(runtime[1]), "wheel version"))
    else:
        library = _library_wheel(facts.dists)
        out += [library] if library else []
    if "cuda-toolkit" in facts.dists:
        version = facts.dists["cuda-toolkit"]
        out.append(CudaConsumer("cuda-toolkit", version, _major_minor(version), "wheel version"))
    return out


#: conda packages that say which CUDA a conda environment holds (``cuda-version`` is the
#: pin every CUDA 12+ component of conda-forge and the nvidia channel depends on).
CONDA_CUDA = ("cuda-version", "cudatoolkit", "pytorch-cuda", "cuda-cudart", "cuda-nvcc")


def _conda(facts: ProbeFacts) -> list[CudaConsumer]:
    out = []
    for filename in facts.conda_meta:
        record = facts.conda_records.get(filename)
        if record and record.get("version"):
            name, version = record["name"], record["version"]
        else:
            parts = (filename[:-5] if filename.endswith(".json") else filename).rsplit("-", 2)
            if len(parts) != 3:
                continue
            name, version = parts[0], parts[1]
        if name in CONDA_CUDA:
            out.append(
                CudaConsumer(
                    f"conda {name}", version, _major_minor(version), f"conda-meta/{filename}"
                )
            )
    return out


def _nvcc(facts: ProbeFacts) -> CudaConsumer | None:
    info = facts.nvcc
    if not info.get("path"):
        return None
    match = re.search(
        r'"cuda"\s*:\s*\{[^}]*"version"\s*:\s*"([\d.]+)"', info.get("version_json", "")
    )
    if match:
        return CudaConsumer(
            "nvcc", match.group(1), _major_minor(match.group(1)), f"{info['path']} (version.json)"
        )
    match = re.search(r"release (\d+\.\d+), V([\d.]+)", info.get("nvcc_output", ""))
    if match:
        return CudaConsumer("nvcc", match.group(2), match.group(1), f"{info['path']} --version")
    return CudaConsumer("nvcc", "?", None, f"{info['path']}: version unreadable")


def consumers(facts: ProbeFacts) -> list[CudaConsumer]:
    """Every CUDA consumer found, tagged with the `frameworks` family that selects it."""
    found: list[tuple[str, CudaConsumer | None]] = [("torch", _torch(facts))]
    found += [("cupy", c) for c in _cupy(facts)]
    found += [("jax", c) for c in _jax(facts)]
    found += [("numba", _numba(facts)), ("tensorflow", _tensorflow(facts))]
    found += [("cuda-runtime", c) for c in _runtime_wheels(facts)]
    found += [("conda", c) for c in _conda(facts)]
    found.append(("nvcc", _nvcc(facts)))
    found += [(key, _recorded(facts, *row)) for key, *row in _RECORDED]
    found += [
        ("cuda-bindings", _cuda_bindings(facts)),
        ("tensorrt", _tensorrt(facts)),
        ("triton", _triton(facts)),
    ]
    out = []
    for family, consumer in found:
        if consumer is not None:
            out.append(CudaConsumer(**{**asdict(consumer), "family": family}))
    return out


def parse_selection(text: str) -> tuple[str, ...] | None:
    """None for 'auto', else the chosen families (validated by the caller)."""
    names = tuple(n.strip().lower() for n in text.replace("\n", ",").split(",") if n.strip())
    return None if names in ((), ("auto",)) else names
