"""The scenario table of actions/verify-cuda-env/README.md, each row run end to end.

Each scenario runs ``gpu-ci verify-cuda-env`` in a subprocess with the fake
``libnvidia-ml.so.1`` reporting the GPU and driver, and a real virtual environment holding
the build (files cut from the real wheels). The README table is checked against this list,
so the documentation cannot promise a row that is not tested.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from testkit import cudart_build, fatbin_build
from testkit.cuda import wheelfacts
from testkit.cuda_env import (
    build_fake_libcuda,
    build_fake_nvml,
    gpu_config,
    make_target,
    nvml_config,
    real_torch_target,
    write_config,
)
from testkit.shared import ROOT

README = ROOT / "actions" / "verify-cuda-env" / "README.md"

RTX5090 = {"name": "NVIDIA GeForce RTX 5090", "cc": "12.0", "memory_mib": 32607, "brand": 5}
V100 = {"name": "Tesla V100-SXM2-32GB", "cc": "7.0", "memory_mib": 32768, "brand": 2}
A100 = {"name": "NVIDIA A100-SXM4-80GB", "cc": "8.0", "memory_mib": 81920, "brand": 2}
H200 = {"name": "NVIDIA H200", "cc": "9.0", "memory_mib": 143771, "brand": 2}
B200 = {"name": "NVIDIA B200", "cc": "10.0", "memory_mib": 183359, "brand": 2}

DRIVERS = {
    "470.256.02": 11040,
    "535.104.05": 12020,
    "570.124.06": 12080,
    "580.95.05": 13000,
    "595.58.03": 13020,
}


@dataclass(frozen=True)
class Scenario:
    id: str
    gpu: dict
    driver: str
    build: str
    rc: int
    codes: tuple[str, ...]
    fix: tuple[str, ...] = ()
    """Substrings the fix of the first finding must contain."""
    gpu_extra: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    libcuda: bool = True
    generation: str = "current"
    """The fake driver's build: "r470" exports no _v3 process call (drivers before R510)."""
    absent: tuple[str, ...] = ()
    """Substrings no finding may contain."""
    compat: str = ""
    """'13.3/610.57.04': a cuda-compat libcuda first on LD_LIBRARY_PATH (its own CUDA
    version, 13.3, as a real forward-compatibility library has)."""


NUMBA_CUDA_BUILD = (
    "numba-cuda 0.30.4 + cuda-bindings 12.9.4 + nvidia-nvjitlink-cu12 12.9.86 "
    "+ nvidia-cuda-runtime-cu12 12.9.79"
)
CUPY_BUILD = "cupy-cuda13x 14.2.0 + nvidia-cuda-runtime 13.5.37"
#: onnxruntime-gpu 1.31.1's libonnxruntime_providers_cuda.so targets (tests/fixtures/README.md)
ORT_TARGETS = [["sm_75", "sm_80", "sm_86", "sm_89"], ["sm_90a"], ["sm_120a"]]

SCENARIOS = [
    Scenario(
        "rtx5090-cu124",
        RTX5090,
        "570.124.06",
        "torch 2.6.0+cu124",
        1,
        ("no-kernel-image",),
        ("whl/cu128", "sm_120"),
    ),
    Scenario(
        "v100-cu130-no-sm70",
        V100,
        "580.95.05",
        "torch 2.14.1+cu130",
        1,
        ("arch-dropped-by-cuda13",),
        ("whl/cu126", "ships sm_70"),
    ),
    Scenario("v100-cu128-with-sm70", V100, "580.95.05", "torch 2.10.0+cu128", 0, ()),
    Scenario(
        "b200-sm90a-only",
        B200,
        "580.95.05",
        "build for sm_90a only",
        1,
        ("no-kernel-image",),
        ("sm_100",),
    ),
    Scenario(
        "a100-535-cu126",
        A100,
        "535.104.05",
        "torch 2.7.1+cu126",
        0,
        ("minor-version-compatibility",),
        ("560.28.03",),
    ),
    Scenario(
        "a100-535-cu132",
        A100,
        "535.104.05",
        "torch 2.16.0+cu132",
        1,
        ("driver-too-old-for-cuda",),
        ("to 580 or newer", "whl/cu128"),
    ),
    Scenario("h200-580-cu130", H200, "580.95.05", "torch 2.14.1+cu130", 0, ()),
    Scenario(
        "a100-mig-no-instances",
        A100,
        "580.95.05",
        "torch 2.14.1+cu130",
        1,
        ("mig-no-instances",),
        ("nvidia-smi mig",),
        gpu_extra={"mig": 1, "mig__count": 0},
    ),
    Scenario(
        "nvml-without-libcuda",
        H200,
        "580.95.05",
        "torch 2.14.1+cu130",
        1,
        ("libcuda-missing",),
        ("NVIDIA_DRIVER_CAPABILITIES=compute,utility",),
        env={"NVIDIA_DRIVER_CAPABILITIES": "utility"},
        libcuda=False,
    ),
    # a driver before R510: no nvmlDeviceGetComputeRunningProcesses_v3 (two processes run)
    Scenario(
        "a100-r470-cu126",
        A100,
        "470.256.02",
        "torch 2.7.1+cu126",
        1,
        ("driver-too-old-for-cuda", "gpu-busy"),
        ("525.60.13", "whl/cu118"),
        gpu_extra={"processes": 2},
        generation="r470",
    ),
    # MIG mode, an unprivileged job: the parent's aggregate queries answer NO_PERMISSION
    Scenario(
        "a100-mig-unprivileged",
        A100,
        "580.95.05",
        "torch 2.14.1+cu130",
        0,
        ("gpu-busy", "mig-enabled"),
        ("give this job its own GPU",),
        gpu_extra={
            "mig": 1,
            "mig__count": 1,
            "mig__0__uuid": "MIG-aaaaaaaa-2222-3333-4444-555555555555",
            "mig__0__name": "NVIDIA A100-SXM4-80GB MIG 1g.10gb",
            "mig__0__memory_mib": 9984,
            "mig__0__processes": 1,
        },
    ),
    Scenario(
        "rtx5090-tensorflow-2.21", RTX5090, "580.95.05", "tensorflow 2.21.0", 0, ("arch-ptx-only",)
    ),
    Scenario(
        "a100-535-cupy-cuda12x-12.9",
        A100,
        "535.104.05",
        "cupy-cuda12x 14.2.0 + nvidia-cuda-runtime-cu12 12.9.79",
        0,
        ("minor-version-compatibility",),
    ),
    Scenario(
        "a100-570-numba-cuda-12.9",
        A100,
        "570.124.06",
        NUMBA_CUDA_BUILD,
        0,
        ("minor-version-compatibility",),
        absent=("pynvjitlink",),
    ),
    Scenario(
        "h200-595-forward-compat",
        H200,
        "595.58.03",
        "torch 2.14.1+cu130 + cuda-compat 13.3",
        0,
        (),
        compat="13.3/610.57.04",
    ),
    Scenario(
        "b200-onnxruntime-gpu-1.31.1",
        B200,
        "580.95.05",
        "onnxruntime-gpu 1.31.1",
        1,
        ("no-kernel-image",),
        ("sm_100",),
    ),
    Scenario(
        "h200-595-cupy-cuda13x-static",
        H200,
        "595.58.03",
        CUPY_BUILD,
        0,
        ("minor-version-compatibility",),
        absent=("cupy-cuda13x",),
    ),
]


def target_for(build: str, root: Path) -> Path:
    name, _, version = build.partition(" ")
    if build == NUMBA_CUDA_BUILD:  # numba-cuda[cu12]: its MVC helpers are installed
        return make_target(root, dict(p.rsplit(" ", 1) for p in build.split(" + ")))
    if build == CUPY_BUILD:  # with its runtime module: the static cudart's 13020 is read
        python = make_target(root, dict(p.rsplit(" ", 1) for p in build.split(" + ")))
        cudart_build.add_cupy_runtime(next(root.glob("lib/python3*/site-packages")))
        return python
    if build.endswith(" + cuda-compat 13.3"):
        return real_torch_target(root, "2.14.1+cu130")
    if name == "onnxruntime-gpu":
        python = make_target(
            root,
            {name: version},
            {"onnxruntime/capi/build_and_package_info.py": wheelfacts.onnxruntime_build_info()},
        )
        site = next(root.glob("lib/python3*/site-packages"))
        fatbin_build.build_library(
            site / "onnxruntime/capi/libonnxruntime_providers_cuda.so",
            fatbin_build.section_for(ORT_TARGETS),
        )
        return python
    if build == "build for sm_90a only":
        # an in-house build: only the arch list differs from a real torch record
        python = real_torch_target(root, "2.14.1+cu130")
        lib = next(root.glob("lib/python3*/site-packages/torch/lib/libtorch_python.so"))
        data = lib.read_bytes()
        real = b"sm_75 sm_80 sm_86 sm_90 sm_100 sm_120\x00"
        lib.write_bytes(data.replace(real, b"sm_90a" + b"\x00" * (len(real) - 6)))
        return python
    if name == "torch" and version.endswith("+cu132"):
        # no wheel of it to cut from: the version label alone is what pip records
        return make_target(root, {"torch": version})
    if name == "torch":
        return real_torch_target(root, version)
    if name == "tensorflow":
        return make_target(
            root,
            {"tensorflow": version},
            {"tensorflow/python/platform/build_info.py": wheelfacts.tensorflow_build_info()},
        )
    return make_target(root, {"cupy-cuda12x": "14.2.0", "nvidia-cuda-runtime-cu12": "12.9.79"})


@pytest.fixture(scope="module")
def nvml_dirs(tmp_path_factory):
    return {
        (True, "current"): build_fake_nvml(tmp_path_factory.mktemp("with-libcuda")),
        (False, "current"): build_fake_nvml(
            tmp_path_factory.mktemp("nvml-only"), with_libcuda=False
        ),
        (True, "r470"): build_fake_nvml(tmp_path_factory.mktemp("r470"), generation="r470"),
    }


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.id for s in SCENARIOS])
@pytest.mark.slow
def test_scenario(sc, run_cli, tmp_path, nvml_dirs):
    gpu = gpu_config(
        0,
        name=sc.gpu["name"],
        cc=sc.gpu["cc"],
        memory_mib=sc.gpu["memory_mib"],
        brand=sc.gpu["brand"],
        **sc.gpu_extra,
    )
    config = write_config(
        tmp_path / "nvml.cfg", nvml_config(gpu, driver=sc.driver, cuda=DRIVERS[sc.driver])
    )
    python = target_for(sc.build, tmp_path / "env")
    libs = str(nvml_dirs[sc.libcuda, sc.generation])
    if sc.compat:
        cuda, version = sc.compat.split("/")
        major, minor = cuda.split(".")
        compat = tmp_path / f"cuda-{cuda}" / "compat"
        build_fake_libcuda(compat, version, cuda=int(major) * 1000 + int(minor) * 10)
        libs = f"{compat}:{libs}"
    env = {
        "PATH": "/usr/bin:/bin",
        "LD_LIBRARY_PATH": libs,
        "FAKE_NVML_CONFIG": str(config),
        "INPUT_PYTHON": str(python),
        **sc.env,
    }
    result = run_cli(["verify-cuda-env"], env)
    findings = json.loads(result.outputs.get("findings", "[]"))
    assert (result.returncode, tuple(f["code"] for f in findings)) == (sc.rc, sc.codes), (
        result.stdout + result.stderr
    )
    for text in sc.fix:
        assert text in findings[0]["fix"], findings[0]
    for text in sc.absent:
        assert not [f for f in findings if text in f["message"] + f["fix"]], findings
    assert "Traceback" not in result.stdout + result.stderr


def readme_rows() -> dict[str, list[str]]:
    text = README.read_text(encoding="utf-8")
    block = text.split("<!-- BEGIN scenarios -->", 1)[1].split("<!-- END scenarios -->", 1)[0]
    rows = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 7 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells
    return rows


def test_readme_scenario_table_matches_the_tested_scenarios():
    rows = readme_rows()
    assert sorted(rows) == sorted(s.id for s in SCENARIOS)
    for sc in SCENARIOS:
        _id, gpu, driver, build, rc, codes, _fix = rows[sc.id][:7]
        assert sc.gpu["name"].replace("NVIDIA ", "") in gpu, sc.id
        assert driver == sc.driver and build == sc.build, sc.id
        assert rc == str(sc.rc), sc.id
        assert re.findall(r"`([\w.-]+)`", codes) == list(sc.codes), sc.id
