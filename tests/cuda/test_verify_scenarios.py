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

from tests.conftest import ROOT
from tests.cuda import wheelfacts
from tests.cuda_env import (
    build_fake_nvml,
    gpu_config,
    make_target,
    nvml_config,
    real_torch_target,
    write_config,
)

README = ROOT / "actions" / "verify-cuda-env" / "README.md"

RTX5090 = {"name": "NVIDIA GeForce RTX 5090", "cc": "12.0", "memory_mib": 32607, "brand": 5}
V100 = {"name": "Tesla V100-SXM2-32GB", "cc": "7.0", "memory_mib": 32768, "brand": 2}
A100 = {"name": "NVIDIA A100-SXM4-80GB", "cc": "8.0", "memory_mib": 81920, "brand": 2}
H200 = {"name": "NVIDIA H200", "cc": "9.0", "memory_mib": 143771, "brand": 2}
B200 = {"name": "NVIDIA B200", "cc": "10.0", "memory_mib": 183359, "brand": 2}

DRIVERS = {"535.104.05": 12020, "570.124.06": 12080, "580.95.05": 13000}


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


SCENARIOS = [
    Scenario("rtx5090-cu124", RTX5090, "570.124.06", "torch 2.6.0+cu124", 1,
             ("no-kernel-image",), ("whl/cu128", "sm_120")),
    Scenario("v100-cu130-no-sm70", V100, "580.95.05", "torch 2.14.1+cu130", 1,
             ("arch-dropped-by-cuda13",), ("whl/cu126", "ships sm_70")),
    Scenario("v100-cu128-with-sm70", V100, "580.95.05", "torch 2.10.0+cu128", 0, ()),
    Scenario("b200-sm90a-only", B200, "580.95.05", "build for sm_90a only", 1,
             ("no-kernel-image",), ("sm_100",)),
    Scenario("a100-535-cu126", A100, "535.104.05", "torch 2.7.1+cu126", 0,
             ("minor-version-compatibility",), ("560.28.03",)),
    Scenario("a100-535-cu132", A100, "535.104.05", "torch 2.16.0+cu132", 1,
             ("driver-too-old-for-cuda",), ("to 580 or newer", "whl/cu128")),
    Scenario("h200-580-cu130", H200, "580.95.05", "torch 2.14.1+cu130", 0, ()),
    Scenario("a100-mig-no-instances", A100, "580.95.05", "torch 2.14.1+cu130", 1,
             ("mig-no-instances",), ("nvidia-smi mig",), gpu_extra={"mig": 1, "mig__count": 0}),
    Scenario("nvml-without-libcuda", H200, "580.95.05", "torch 2.14.1+cu130", 1,
             ("libcuda-missing",), ("NVIDIA_DRIVER_CAPABILITIES=compute,utility",),
             env={"NVIDIA_DRIVER_CAPABILITIES": "utility"}, libcuda=False),
    Scenario("rtx5090-tensorflow-2.21", RTX5090, "580.95.05", "tensorflow 2.21.0", 0,
             ("arch-ptx-only",)),
    Scenario("a100-535-cupy-cuda12x-12.9", A100, "535.104.05",
             "cupy-cuda12x 14.2.0 + nvidia-cuda-runtime-cu12 12.9.79", 0,
             ("minor-version-compatibility",)),
]


def target_for(build: str, root: Path) -> Path:
    name, _, version = build.partition(" ")
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
        return make_target(root, {"tensorflow": version}, {
            "tensorflow/python/platform/build_info.py":
                wheelfacts.tensorflow_build_info()})
    return make_target(root, {"cupy-cuda12x": "14.2.0", "nvidia-cuda-runtime-cu12": "12.9.79"})


@pytest.fixture(scope="module")
def nvml_dirs(tmp_path_factory):
    return {True: build_fake_nvml(tmp_path_factory.mktemp("with-libcuda")),
            False: build_fake_nvml(tmp_path_factory.mktemp("nvml-only"), with_libcuda=False)}


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_scenario(sc, run_cli, tmp_path, nvml_dirs):
    gpu = gpu_config(0, name=sc.gpu["name"], cc=sc.gpu["cc"], memory_mib=sc.gpu["memory_mib"],
                     brand=sc.gpu["brand"], **sc.gpu_extra)
    config = write_config(tmp_path / "nvml.cfg",
                          nvml_config(gpu, driver=sc.driver, cuda=DRIVERS[sc.driver]))
    python = target_for(sc.build, tmp_path / "env")
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(nvml_dirs[sc.libcuda]),
           "FAKE_NVML_CONFIG": str(config), "INPUT_PYTHON": str(python), **sc.env}
    result = run_cli(["verify-cuda-env"], env)
    findings = json.loads(result.outputs.get("findings", "[]"))
    assert (result.returncode, tuple(f["code"] for f in findings)) == (sc.rc, sc.codes), \
        result.stdout + result.stderr
    for text in sc.fix:
        assert text in findings[0]["fix"], findings[0]
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
