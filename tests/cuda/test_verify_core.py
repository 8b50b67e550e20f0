"""verify-cuda-env's functional core: require grammar, visibility, frameworks, checks."""

from __future__ import annotations

import pytest
import yaml

from gpu_ci.cuda import require as require_spec
from gpu_ci.cuda.facts import Gpu, NvmlSnapshot
from gpu_ci.cuda.verify import checks as cuda_checks
from gpu_ci.cuda.verify import frameworks
from gpu_ci.cuda.verify.table import TABLE_PATH, driver_at_least, load_table
from gpu_ci.cuda.visibility import visible_gpus
from gpu_ci.errors import UsageError
from testkit import layout
from testkit.cuda import wheelfacts
from testkit.shared import ROOT, SHARED, shared_path

H200 = Gpu(
    0,
    "NVIDIA H200",
    "GPU-aaaa1111",
    (9, 0),
    143771 * 2**20,
    brand="tesla",
    mig_enabled=False,
    persistence_mode=True,
)
RTX = Gpu(
    1,
    "NVIDIA GeForce RTX 4090",
    "GPU-bbbb2222",
    (8, 9),
    24564 * 2**20,
    brand="geforce",
    mig_uuids=("MIG-cccc3333",),
)
V100 = Gpu(0, "Tesla V100-SXM2-32GB", "GPU-dddd", (7, 0), 32768 * 2**20, brand="tesla")


# -- the driver table ----------------------------------------------------------------------


def _extends(package: dict, reference: dict) -> None:
    """Every row and value of the reference is in the package table unchanged; the package
    may add rows (issue 27: 13.3 Update 1 under ``secondary``, 13.4 .. 13.5 under
    ``unconfirmed``)."""
    for section, rows in reference.items():
        if isinstance(rows, dict):
            for key, value in rows.items():
                assert package[section][key] == value, (section, key)
        else:
            assert package[section] == rows, section


def test_packaged_table_extends_the_shared_reference():
    if not (SHARED / "reference").exists():
        pytest.skip("../shared is absent (fresh clone elsewhere): nothing to compare with")
    shared = SHARED / "reference" / "cuda-toolkit-driver-table.yaml"
    _extends(yaml.safe_load(TABLE_PATH.read_text()), yaml.safe_load(shared.read_text()))


def test_the_rows_beyond_shareds_table_are_named_as_such():
    package = yaml.safe_load(TABLE_PATH.read_text())
    assert {"13.4.1", "13.4.2", "13.5.0"} <= set(package["unconfirmed"])
    # 13.3 Update 1's driver has a (secondary) source: its runfile's name
    assert package["secondary"]["13.3.1"] == ["610.43.02", None]
    assert "13.3.1" not in package["unconfirmed"]
    assert load_table().toolkit_driver["13.3.1"] == "610.43.02"


def test_the_packaged_table_is_the_projects_only_copy():
    """The code reads the copy in the package; no second copy sits in tests/ or elsewhere
    (the tests compare with ../shared itself)."""
    data = TABLE_PATH.read_bytes()
    copies = [p for p in layout.files(ROOT, "*.yaml") if p.read_bytes() == data]
    assert copies == [ROOT / "src" / "gpu_ci" / "data" / TABLE_PATH.name]


def test_json_rendering_equals_the_yaml_table():
    import json

    from gpu_ci.cuda.verify.table import TABLE_JSON

    assert json.loads(TABLE_JSON.read_text()) == yaml.safe_load(TABLE_PATH.read_text())


def test_table_lookups():
    table = load_table()
    # the minimum is the branch floor (minor-version compatibility), not Table 3's driver
    assert table.min_driver(13, 0) == table.min_driver(13, 2) == "580"
    assert table.min_driver(12, 6) == "525.60.13"
    assert table.min_driver(11, 8) == "450.80.02"
    assert table.min_driver(9, 9) is None
    # Table 3 is the driver bundled with a toolkit's first release
    assert table.bundled_driver(13, 0) == "580.65.06"
    assert table.bundled_driver(12, 6) == "560.28.03"
    # every row is read, the one under `secondary:` too
    assert table.bundled_driver(13, 3) == "610.43.02"
    assert table.newest() == (13, 3)
    assert table.compat_floor == {11: "450.80.02", 12: "525.60.13", 13: "580"}
    assert driver_at_least("570.124.06", "570.26")
    assert not driver_at_least("450.51.06", "450.80.02")


# -- require grammar -------------------------------------------------------------------------


def facts(*gpus, cuda="13.0", driver="580.159.04"):
    return require_spec.Facts(cuda=cuda, driver=driver, gpus=gpus)


@pytest.mark.parametrize(
    ("line", "holds"),
    [
        ("cuda>=12.4", True),
        ("cuda>=13.1", False),
        ("driver>=550,arch>=8.0", True),
        ("driver>=590", False),
        ("driver>=590 brand=tesla", True),  # space = OR
        ("driver>=590 brand=geforce", False),
        ("arch=9.0", True),
        ("arch<9.0", False),
        ("gpu-count>=1", True),
        ("gpu-count>=2", False),
        ("memory>=140GiB", True),
        ("memory>=141GB", True),  # 150.7 GB
        ("memory>=141GiB", False),
        ("name=H200", True),
        ("name=h100", False),
        ("name!=A100", True),
        ("brand=TESLA,cuda>=12.0,name=H200", True),  # comma = AND, case-insensitive
    ],
)
def test_requirements(line, holds):
    req = require_spec.parse_requirement(line)
    assert (require_spec.unmet(req, facts(H200)) is None) is holds


def test_gpu_conditions_hold_for_every_gpu():
    req = require_spec.parse_requirement("arch>=8.9")
    assert require_spec.unmet(req, facts(H200, RTX)) is None
    req = require_spec.parse_requirement("memory>=40GiB")
    assert [str(c) for c in require_spec.unmet(req, facts(H200, RTX))] == ["memory>=40GiB"]


def test_gpu_conditions_fail_without_gpus():
    assert require_spec.unmet(require_spec.parse_requirement("arch>=7.0"), facts()) is not None


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("cuda~=12", "cannot read"),
        ("vram>=4GiB", "cannot read 'vram>=4GiB'"),
        ("cuda>=twelve", "unreadable value 'twelve'"),
        ("memory>=lots", "unreadable value"),
        ("name>=H100", "name takes only = or !="),
    ],
)
def test_unreadable_requirements_are_usage_errors(line, match):
    with pytest.raises(UsageError, match=match):
        require_spec.parse_lines([line])


# -- visibility --------------------------------------------------------------------------------

GPUS = (H200, RTX)


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({}, ["NVIDIA H200", "NVIDIA GeForce RTX 4090"]),
        ({"CUDA_VISIBLE_DEVICES": ""}, []),
        ({"CUDA_VISIBLE_DEVICES": "1"}, ["NVIDIA GeForce RTX 4090"]),
        ({"CUDA_VISIBLE_DEVICES": "1,0"}, ["NVIDIA GeForce RTX 4090", "NVIDIA H200"]),
        ({"CUDA_VISIBLE_DEVICES": "GPU-aaaa"}, ["NVIDIA H200"]),  # unique prefix
        ({"CUDA_VISIBLE_DEVICES": "MIG-cccc3333"}, ["NVIDIA GeForce RTX 4090"]),
        ({"CUDA_VISIBLE_DEVICES": "0,7,1"}, ["NVIDIA H200"]),  # stops at 7
        # the container runtime's variable (host indices, read at container start) filters
        # nothing inside: NVML lists the injected GPUs, numbered from 0
        ({"NVIDIA_VISIBLE_DEVICES": "none"}, ["NVIDIA H200", "NVIDIA GeForce RTX 4090"]),
        ({"NVIDIA_VISIBLE_DEVICES": "void"}, ["NVIDIA H200", "NVIDIA GeForce RTX 4090"]),
        ({"NVIDIA_VISIBLE_DEVICES": "all"}, ["NVIDIA H200", "NVIDIA GeForce RTX 4090"]),
        ({"NVIDIA_VISIBLE_DEVICES": "GPU-bbbb2222"}, ["NVIDIA H200", "NVIDIA GeForce RTX 4090"]),
        ({"NVIDIA_VISIBLE_DEVICES": "3", "CUDA_VISIBLE_DEVICES": "1"}, ["NVIDIA GeForce RTX 4090"]),
    ],
)
def test_visible_devices(env, names):
    # NVML's order (PCI bus): the default order on this 2-model host is in
    # tests/test_device_order.py
    env = {**env, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert [g.name for g in visible_gpus(GPUS, env).gpus] == names


def test_unresolved_entry_is_reported():
    vis = visible_gpus(GPUS, {"CUDA_VISIBLE_DEVICES": "0,7,1"})
    assert vis.unresolved == "CUDA_VISIBLE_DEVICES entry '7'"
    assert visible_gpus(GPUS, {"CUDA_VISIBLE_DEVICES": ""}).hidden_by == ("CUDA_VISIBLE_DEVICES=''")


# -- frameworks --------------------------------------------------------------------------------


def consumers(dists=None, files=None, conda_meta=(), nvcc=None):
    return frameworks.consumers(
        frameworks.ProbeFacts(
            dists=dists or {}, files=files or {}, conda_meta=conda_meta, nvcc=nvcc or {}
        )
    )


@pytest.mark.parametrize(
    ("version", "version_py", "cuda", "cpu"),
    [
        ("2.7.1+cu118", "cuda: Optional[str] = '11.8'\n", "11.8", False),
        ("2.9.0+cu126", "cuda: Optional[str] = '12.6'\n", "12.6", False),
        ("2.11.0+cu130", "cuda = '13.0'\n", "13.0", False),
        ("2.13.0+cpu", "cuda: Optional[str] = None\n", None, True),
        ("2.13.0", "cuda: Optional[str] = None\nhip: Optional[str] = '6.4.1'\n", None, False),
        ("2.9.0+cu128", "", "12.8", False),  # label when no version.py
    ],
)
def test_torch_builds(version, version_py, cuda, cpu):
    files = {"torch/version.py": version_py} if version_py else {}
    (torch,) = consumers({"torch": version}, files)
    assert (torch.cuda, torch.cpu_only) == (cuda, cpu)
    assert torch.rocm == ("hip" in version_py)


def test_torch_from_pypi_without_label_uses_the_runtime_wheel_pin():
    found = consumers({"torch": "2.9.0", "nvidia-cuda-runtime-cu12": "12.8.90"})
    torch = next(c for c in found if c.name == "torch")
    assert torch.cuda == "12.8" and "nvidia-cuda-runtime-cu12==12.8.90" in torch.source
    assert any(c.name == "nvidia-cuda-runtime-cu12" for c in found)


def test_cupy_jax_numba_tensorflow_conda_nvcc():
    found = {
        c.name: c
        for c in consumers(
            {
                "cupy-cuda12x": "13.6.0",
                "cupy-cuda13x": "14.2.0",
                "jax": "0.11.2",
                "jax-cuda13-plugin": "0.11.2",
                "numba-cuda": "0.20.0",
                "nvidia-cuda-runtime": "13.0.96",
                "tensorflow": "2.21.0",
                "cuda-toolkit": "13.0.2",
            },
            {"tensorflow/python/platform/build_info.py": wheelfacts.tensorflow_build_info()},
            [
                "cuda-version-12.4-h3060b56_3.json",
                "python-3.12.1-h_cpython.json",
                "cudatoolkit-11.8.0-h6a678d5_0.json",
            ],
            {
                "path": "/opt/cuda/bin/nvcc",
                "version_json": '{"cuda": {"name": "CUDA SDK", "version": "12.4.1"}}',
            },
        )
    }
    # no CUDA 12 runtime wheel next to it: any 12.x from the system, the minor is unknown
    assert found["cupy-cuda12x"].cuda == "12.x" and "any CUDA 12.x" in found["cupy-cuda12x"].source
    assert found["cupy-cuda12x"].cuda_tuple == (12, 0) and not found["cupy-cuda12x"].exact_minor
    assert found["cupy-cuda13x"].cuda == "13.x"  # static cudart: not the runtime wheel's
    assert found["jax-cuda13-plugin"].cuda == "13.0"
    assert found["numba-cuda"].cuda == "13.0"
    assert found["tensorflow"].cuda == "12.5"  # the real generated OrderedDict format
    assert found["tensorflow"].arch == ("sm_60", "sm_70", "sm_80", "sm_89", "compute_90")
    assert found["cuda-toolkit"].cuda == "13.0"
    assert found["conda cuda-version"].cuda == "12.4"
    assert found["conda cudatoolkit"].cuda == "11.8"
    assert "conda python" not in found
    assert found["nvcc"].cuda == "12.4" and found["nvcc"].version == "12.4.1"


def test_nvcc_version_output_and_cpu_only_jax():
    found = {
        c.name: c
        for c in consumers(
            {"jax": "0.11.2", "jaxlib": "0.11.2"},
            nvcc={
                "path": "/usr/bin/nvcc",
                "nvcc_output": "Cuda compilation tools, release 12.4, V12.4.131\n",
            },
        )
    }
    assert found["nvcc"].cuda == "12.4" and found["nvcc"].version == "12.4.131"
    assert found["jax"].cpu_only


# -- checks ------------------------------------------------------------------------------------


def snapshot(*gpus, driver="580.159.04", cuda=13000):
    return NvmlSnapshot(ok=True, driver_version=driver, cuda_driver_version=cuda, gpus=gpus)


def check(snap, found=(), env=None, requirements=(), deep=(), require_gpu=True, environ=None):
    return cuda_checks.run_checks(
        cuda_checks.CheckInput(
            snapshot=snap,
            visibility=visible_gpus(snap.gpus, environ or {}),
            consumers=found,
            table=load_table(),
            env=env or cuda_checks.EnvFacts(),
            requirements=requirements,
            deep=deep,
            require_gpu=require_gpu,
        )
    )


def codes(findings):
    return [f.code for f in findings]


def consumer(name, cuda, version="1.0", family=None, arch=None):
    return frameworks.CudaConsumer(name, version, cuda, "test", family=family or name, arch=arch)


def test_h200_with_matching_torch_is_clean():
    assert check(snapshot(H200), [consumer("torch", "13.0", "2.11.0+cu130")]) == []


def test_newer_major_than_the_driver_is_an_error_with_the_minimum_driver():
    (finding,) = check(
        snapshot(H200, driver="570.124.06", cuda=12080), [consumer("torch", "13.0", "2.11.0+cu130")]
    )
    assert finding.level == "error" and finding.code == "driver-too-old-for-cuda"
    assert "torch 2.11.0+cu130 (CUDA 13.0" in finding.message
    assert "supports CUDA 12.8 at most" in finding.message
    assert "needs driver 580 or newer" in finding.message
    assert "upgrade the driver to 580 or newer" in finding.fix
    # Table 3's driver is named only as the newest
    assert "the newest, bundled with CUDA 13.3.1, is 610.43.02" in finding.fix
    # a torch build that exists, runs on 570 (CUDA 12.8) and ships sm_90
    assert "https://download.pytorch.org/whl/cu128" in finding.fix and "sm_90" in finding.fix


def test_same_major_newer_minor_above_floor_is_a_warning():
    (finding,) = check(snapshot(H200, driver="560.35.03", cuda=12060), [consumer("torch", "12.8")])
    assert (finding.level, finding.code) == ("warning", "minor-version-compatibility")
    assert "PTX JIT" in finding.message


def test_same_major_below_the_compat_floor_is_an_error():
    (finding,) = check(
        snapshot(V100, driver="450.51.06", cuda=11000), [consumer("cupy-cuda11x", "11.2")]
    )
    assert finding.code == "driver-too-old-for-cuda"
    assert "minor-version compatibility floor 450.80.02" in finding.message


def test_older_cuda_than_the_driver_is_fine():
    assert check(snapshot(H200), [consumer("torch", "11.8")]) == []


def test_cpu_only_build_is_a_warning():
    found = [frameworks.CudaConsumer("torch", "2.13.0+cpu", None, "x", cpu_only=True)]
    assert codes(check(snapshot(H200), found)) == ["cpu-only-build"]


def test_cuda13_needs_compute_capability_7_5():
    found = check(snapshot(V100), [consumer("torch", "13.0")])
    assert codes(found) == ["arch-dropped-by-cuda13"]
    assert "needs compute capability 7.5 or newer" in found[0].message
    # the fix names a build that still ships sm_70 (cu126), not the cu128/cu130 ones
    assert "whl/cu126" in found[0].fix and "ships sm_70" in found[0].fix


@pytest.mark.parametrize(
    ("arch_list", "expected"),
    [
        (["sm_80", "sm_86", "sm_90"], []),
        (["sm_75", "sm_80", "compute_80"], ["arch-ptx-only"]),
        (["sm_75", "sm_80"], ["no-kernel-image"]),
        (["sm_90a"], []),
        (["sm_100", "sm_120"], ["no-kernel-image"]),
    ],
)
def test_deep_arch_lists(arch_list, expected):
    deep = [
        {
            "name": "torch",
            "ok": True,
            "arch_list": arch_list,
            "computations": [{"gpu": 0, "ok": True}],
        }
    ]
    found = check(snapshot(H200), deep=deep)
    assert codes(found) == expected
    if expected == ["no-kernel-image"]:
        assert "no kernel image is available" in found[0].message


def test_deep_failures():
    deep = [
        {
            "name": "torch",
            "ok": False,
            "arch_list": ["sm_90"],
            "error": "RuntimeError: x",
            "computations": [{"gpu": 0, "ok": False, "error": "CUDA error: boom"}],
        }
    ]
    assert codes(check(snapshot(H200), deep=deep)) == [
        "deep-check-failed",
        "gpu-computation-failed",
    ]


def test_forward_compat_on_consumer_gpu_is_error_804():
    env = cuda_checks.EnvFacts(libcuda_path="/usr/local/cuda-13.0/compat/libcuda.so.1")
    found = check(snapshot(H200, RTX), env=env, environ={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert codes(found) == ["forward-compat-unsupported"]
    assert "804" in found[0].message and "GPU 1" in found[0].message


def test_nvidia_require_cuda_and_disable_require():
    env = cuda_checks.EnvFacts(nvidia_require_cuda="cuda>=13.1 brand=tesla,driver>=600")
    found = check(snapshot(H200), env=env)
    assert codes(found) == ["nvidia-require-cuda-unmet"]
    env = cuda_checks.EnvFacts(nvidia_require_cuda="cuda>=13.1", nvidia_disable_require=True)
    assert codes(check(snapshot(H200), env=env)) == ["nvidia-disable-require"]


def test_require_lines_must_all_hold():
    reqs = require_spec.parse_lines(["cuda>=12.4", "gpu-count>=2"])
    found = check(snapshot(H200), requirements=reqs)
    assert codes(found) == ["require-unmet"]
    assert "'gpu-count>=2'" in found[0].message


SICK = Gpu(
    0,
    "NVIDIA H200",
    "GPU-1",
    (9, 0),
    1,
    brand="tesla",
    mig_enabled=True,
    mig_uuids=("MIG-1", "MIG-2"),
    persistence_mode=False,
    ecc_uncorrected_volatile=3,
    retired_pages_pending=True,
    remapped_rows_pending=True,
    remapped_rows_failure=False,
    other_processes=2,
    unreadable=("brand: UNKNOWN",),
)


def test_hardware_faults_are_errors_by_default():
    found = check(snapshot(SICK))
    assert codes(found) == [
        "ecc-uncorrected-errors",
        "retired-pages-pending",
        "remapped-rows-pending",
        "gpu-busy",
        "mig-enabled",
        "persistence-mode-off",
        "health-unreadable",
    ]
    levels = {f.code: f.level for f in found}
    assert [c for c, lv in levels.items() if lv == "error"] == [
        "ecc-uncorrected-errors",
        "retired-pages-pending",
        "remapped-rows-pending",
    ]
    assert "MIG-1, MIG-2" in found[4].message
    # "out of service" only for hardware faults, not for a pending remap or a busy GPU
    assert "take this GPU out of service" in found[0].fix
    assert "out of service" not in found[2].fix + found[3].fix


def test_health_warn_downgrades_hardware_faults():
    found = cuda_checks.run_checks(
        cuda_checks.CheckInput(
            snapshot=snapshot(SICK),
            visibility=visible_gpus((SICK,), {}),
            consumers=(),
            table=load_table(),
            health="warning",
        )
    )
    assert cuda_checks.failing(found, "error") == []
    assert len(cuda_checks.failing(found, "warning")) == 6


def test_no_driver_is_info_when_no_gpu_is_required():
    snap = NvmlSnapshot(ok=False, error_code=12, error_name="LIBRARY_NOT_FOUND")
    (finding,) = check(snap, require_gpu=False)
    assert (finding.level, finding.code) == ("info", "no-driver")
    assert "CPU runner" in finding.message
    (finding,) = check(snap)
    assert finding.level == "error"


def test_hidden_gpus_name_the_variable():
    found = check(snapshot(H200), environ={"CUDA_VISIBLE_DEVICES": ""})
    assert codes(found) == ["no-visible-gpu"]
    assert "CUDA_VISIBLE_DEVICES=''" in found[0].message


def test_observed_fixture_is_what_the_tests_use():
    data = yaml.safe_load(shared_path("reference", "observed-gpu-machines.yaml").read_text())
    assert data[0]["gpus"][0]["name"] == "NVIDIA H200"
    assert data[0]["cuda_driver_version"] == 13000


# -- options -----------------------------------------------------------------------------------


def test_options_are_validated_once():
    from gpu_ci.cuda.verify.options import VerifyInputs, VerifyOptions, parse_options

    opts = parse_options(
        VerifyInputs(
            require=["cuda>=12.4"],
            fail_on="Warning",
            frameworks_text="torch, cupy",
            health="warn",
            python=" /env/bin/python ",
        )
    )
    assert isinstance(opts, VerifyOptions)
    assert (opts.fail_on, opts.health, opts.frameworks, opts.python) == (
        "warning",
        "warning",
        ("torch", "cupy"),
        "/env/bin/python",
    )
    assert [r.text for r in opts.requirements] == ["cuda>=12.4"]
    assert parse_options().frameworks is None and parse_options().health == "error"
    with pytest.raises(UsageError, match="'fail-on' must be one of error, warning"):
        parse_options(VerifyInputs(fail_on="always"))
    with pytest.raises(UsageError, match="'health' must be error or warn"):
        parse_options(VerifyInputs(health="ignore"))
    with pytest.raises(UsageError, match="'frameworks' names pytorch"):
        parse_options(VerifyInputs(frameworks_text="pytorch"))
    with pytest.raises(UsageError, match="require line 1"):
        parse_options(VerifyInputs(require=["vram>=1GiB"]))
    with pytest.raises(AttributeError):
        opts.deep = True  # frozen


def test_python_and_selection_findings_live_in_the_wing():
    from gpu_ci.cuda.verify.findings import python_findings, selection_findings

    assert [f.level for f in python_findings("/no/python", None, "")] == ["error"]
    assert [f.level for f in python_findings("", None, "")] == ["info"]
    assert [f.code for f in python_findings("", "/usr/bin/python3", "exited 1")] == [
        "python-probe-failed"
    ]
    assert python_findings("", "/usr/bin/python3", "") == []
    (missing,) = selection_findings(("torch", "cupy"), ["cupy"], "/env/bin/python")
    assert missing.code == "framework-not-found" and "torch" in missing.message
