"""verify-cuda-env through the CLI with a fake libnvidia-ml.so.1 and the real nvidia-ml-py."""

from __future__ import annotations

import json

import pytest

from gpu_ci.cuda import nvml_codes
from testkit.cuda_env import (
    a100_one_slice,
    build_fake_libcuda,
    build_fake_nvml,
    gpu_config,
    make_target,
    nvml_config,
    observed_h200,
    rtx_4090,
    torch_target,
    write_config,
)


@pytest.fixture(scope="session")
def fake_nvml_dir(tmp_path_factory):
    return build_fake_nvml(tmp_path_factory.mktemp("fake-nvml"))


@pytest.fixture
def verify(run_cli, tmp_path, fake_nvml_dir):
    """Run gpu-ci verify-cuda-env; ``config=None`` means no NVML library at all."""

    def run(*args, config=None, env=None, python=None):
        full = {
            "PATH": "/usr/bin:/bin",
            "LD_LIBRARY_PATH": "",
            "FAKE_NVML_LOG": str(tmp_path / "nvml.log"),
        }
        if config is not None:
            full["LD_LIBRARY_PATH"] = str(fake_nvml_dir)
            full["FAKE_NVML_CONFIG"] = str(write_config(tmp_path / "nvml.cfg", config))
        if python is not None:
            full["INPUT_PYTHON"] = str(python)
        full.update(env or {})
        result = run_cli(["verify-cuda-env", *args], full)
        result.findings = json.loads(result.outputs.get("findings", "[]"))
        result.codes = [f["code"] for f in result.findings]
        return result

    return run


def test_cpu_machine_without_library_fails_by_default(verify):
    result = verify()
    assert result.returncode == 1
    assert result.codes == ["no-driver"]
    assert "No NVIDIA driver visible to this job" in result.errors[0]
    assert result.outputs["ok"] == "false" and result.outputs["gpu-count"] == "0"


def test_cpu_machine_with_require_gpu_false_reports_and_passes(verify):
    result = verify("--require-gpu", "false")
    assert result.returncode == 0
    assert result.outputs["ok"] == "true"
    assert result.findings[0]["level"] == "info"
    assert "::notice title=verify-cuda-env%3A no-driver::" in result.stdout
    assert result.errors == []


def test_observed_h200_reading(verify, tmp_path):
    machine, config = observed_h200()
    torch_version = machine["frameworks"]["torch"]
    python = torch_target(tmp_path / "env", torch_version, "13.0")
    report = tmp_path / "out" / "report.json"
    result = verify("--report-file", str(report), config=config, python=python)
    assert result.returncode == 0, result.stdout
    assert result.outputs["driver-version"] == "580.159.04"
    assert result.outputs["cuda-driver-version"] == "13.0"
    assert result.outputs["gpu-count"] == "1"
    (gpu,) = json.loads(result.outputs["gpus"])
    assert (gpu["name"], gpu["compute_capability"], gpu["memory_mib"]) == (
        "NVIDIA H200",
        "9.0",
        143771,
    )
    (torch,) = json.loads(result.outputs["frameworks"])
    assert (torch["name"], torch["version"], torch["cuda"]) == ("torch", torch_version, "13.0")
    assert result.findings == []
    data = json.loads(report.read_text())
    assert data["ok"] is True and data["snapshot"]["driver_version"] == "580.159.04"
    assert "| 0 | NVIDIA H200 | 9.0 | 143771 |" in result.summary


def test_report_file_replaces_a_link_planted_at_its_path(verify, tmp_path):
    # The report is written to a fresh name and renamed into place (runtime.write_report):
    # a link planted at the path is replaced, the file it points to is left as it was.
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    report = tmp_path / "out" / "report.json"
    report.parent.mkdir()
    report.symlink_to(victim)
    result = verify("--report-file", str(report), "--require-gpu", "false")
    assert result.returncode == 0, result.stdout
    assert victim.read_text() == "keep\n"
    assert not report.is_symlink()
    data = json.loads(report.read_text())
    assert list(data) == [
        "gpu_ci_version",
        "ok",
        "fail_on",
        "snapshot",
        "visible_gpus",
        "python",
        "frameworks",
        "deep",
        "findings",
        "timing_s",
    ]
    assert data["findings"] == result.findings
    assert sorted(p.name for p in report.parent.iterdir()) == ["report.json"]


def test_an_unwritable_report_file_is_named(verify, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    result = verify("--report-file", str(blocker / "r.json"), "--require-gpu", "false")
    assert result.returncode == 1
    assert "cannot write report-file" in result.stdout and "not-a-dir/r.json" in result.stdout


def test_fast_path_never_imports_frameworks(verify, tmp_path):
    # torch/__init__.py of the fake install raises: only metadata may be read
    python = torch_target(tmp_path / "env", "2.9.0+cu126", "12.6")
    result = verify(config=observed_h200()[1], python=python)
    assert result.returncode == 0
    assert "must not import torch" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("torch_version", "cuda", "driver", "cuda_int", "code", "rc"),
    [
        ("2.7.1+cu118", "11.8", "580.159.04", 13000, None, 0),
        ("2.9.0+cu126", "12.6", "580.159.04", 13000, None, 0),
        ("2.11.0+cu130", "13.0", "570.124.06", 12080, "driver-too-old-for-cuda", 1),
        ("2.9.0+cu128", "12.8", "560.35.03", 12060, "minor-version-compatibility", 0),
        ("2.13.0+cpu", None, "580.159.04", 13000, "cpu-only-build", 0),
    ],
)
def test_torch_builds_against_drivers(
    verify, tmp_path, torch_version, cuda, driver, cuda_int, code, rc
):
    python = torch_target(tmp_path / "env", torch_version, cuda)
    config = nvml_config(gpu_config(0), driver=driver, cuda=cuda_int)
    result = verify(config=config, python=python)
    assert result.returncode == rc, result.stdout
    assert result.codes == ([code] if code else [])


def test_warnings_fail_with_fail_on_warning(verify, tmp_path):
    python = torch_target(tmp_path / "env", "2.13.0+cpu", None)
    result = verify("--fail-on", "warning", config=observed_h200()[1], python=python)
    assert result.returncode == 1 and result.outputs["ok"] == "false"


#: The init errors tested: nvml.h's codes (names from the table a test checks against it).
INIT_ERRORS = (*range(1, 5), 6, *range(8, 22), 23, 27, 28, 29, 999)
NVML_CODES = {c: nvml_codes.ERROR_NAMES[c] for c in INIT_ERRORS}


@pytest.mark.parametrize("code", sorted(NVML_CODES))
def test_every_nvml_init_error_is_named_never_a_traceback(verify, code):
    result = verify(config=nvml_config(gpu_config(0), fail={"nvmlInitWithFlags": code}))
    assert result.returncode == 1
    assert len(result.errors) == 1
    expected = "no-driver" if code == 12 else "nvml-" + NVML_CODES[code].lower().replace("_", "-")
    assert result.codes == [expected]
    assert "Traceback" not in result.stdout + result.stderr


def test_driver_not_loaded_and_version_mismatch_messages(verify, tmp_path):
    result = verify(config=nvml_config(gpu_config(0), fail={"nvmlInitWithFlags": 9}))
    assert "kernel module is not loaded" in result.errors[0]
    assert "DKMS" in result.errors[0]
    proc = tmp_path / "version"
    proc.write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06  Tue Feb 25"
        " 2025\nGCC version:  gcc version 12.2.0\n"
    )
    result = verify(
        config=nvml_config(gpu_config(0), fail={"nvmlInitWithFlags": 18}),
        env={"GPU_CI_NVIDIA_PROC_VERSION": str(proc)},
    )
    assert "The loaded kernel module is 570.124.06" in result.errors[0]
    assert "reboot" in result.errors[0]


def test_error_after_init_names_the_failure(verify):
    result = verify(config=nvml_config(gpu_config(0), fail={"nvmlDeviceGetCount_v2": 15}))
    assert result.codes == ["nvml-gpu-is-lost"]
    assert "take this GPU out of service" in result.errors[0]


def test_unsupported_health_queries_are_silent_other_failures_noted(verify):
    config = nvml_config(
        gpu_config(0), fail={"nvmlDeviceGetRemappedRows": 3, "nvmlDeviceGetBrand": 999}
    )
    result = verify(config=config)
    assert result.returncode == 0
    assert result.codes == ["health-unreadable"]
    assert "brand: UNKNOWN" in result.findings[0]["message"]


def two_gpus():
    return nvml_config(
        gpu_config(0),
        rtx_4090(
            mig=1,
            mig__count=2,
            mig__0__uuid="MIG-11111111-2222-3333-4444-555555555555",
            mig__1__uuid="MIG-66666666-2222-3333-4444-555555555555",
        ),
    )


@pytest.mark.parametrize(
    ("env", "count", "codes"),
    [
        ({}, 2, ["mig-enabled"]),
        ({"CUDA_VISIBLE_DEVICES": ""}, 0, ["no-visible-gpu"]),
        # NVIDIA_VISIBLE_DEVICES is the container runtime's, read on the host at container
        # start: the GPUs NVML lists are the ones injected, and CUDA never reads it
        ({"NVIDIA_VISIBLE_DEVICES": "void"}, 2, ["mig-enabled"]),
        ({"NVIDIA_VISIBLE_DEVICES": "none"}, 2, ["mig-enabled"]),
        ({"NVIDIA_VISIBLE_DEVICES": "3"}, 2, ["mig-enabled"]),
        ({"CUDA_VISIBLE_DEVICES": "0"}, 1, []),
        ({"CUDA_VISIBLE_DEVICES": "GPU-4090aaaa"}, 1, ["mig-enabled"]),
        # a correctly selected MIG instance is fine: no notice
        ({"CUDA_VISIBLE_DEVICES": "MIG-66666666-2222-3333-4444-555555555555"}, 1, []),
        ({"CUDA_VISIBLE_DEVICES": "0,5"}, 1, ["visible-devices-unresolved"]),
    ],
)
def test_visible_devices(verify, env, count, codes):
    # NVML's order (PCI bus): the default order on this 2-model host is in
    # tests/test_device_order.py
    result = verify(config=two_gpus(), env={**env, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert result.outputs["gpu-count"] == str(count)
    assert result.codes == codes
    if count == 0:
        assert result.returncode == 1


def test_mig_instances_are_reported(verify):
    result = verify(config=two_gpus())
    gpus = json.loads(result.outputs["gpus"])
    assert gpus[1]["mig"] == "enabled" and len(gpus[1]["mig_instances"]) == 2


def test_forward_compat_with_fake_nvml_reachable(verify, tmp_path, fake_nvml_dir):
    compat = tmp_path / "cuda-13.2" / "compat"
    build_fake_libcuda(compat, "595.45.04", cuda=13020)  # the compat library's own CUDA
    geforce = nvml_config(gpu_config(0, name="NVIDIA GeForce RTX 4090", cc="8.9", brand=5))
    result = verify(config=geforce, env={"LD_LIBRARY_PATH": f"{compat}:{fake_nvml_dir}"})
    assert result.codes == ["forward-compat-unsupported"]
    assert "forward compatibility was attempted on non supported HW" in result.errors[0]
    result = verify(config=observed_h200()[1], env={"LD_LIBRARY_PATH": f"{compat}:{fake_nvml_dir}"})
    assert result.codes == []


def test_nvidia_require_cuda_from_the_image(verify):
    result = verify(config=observed_h200()[1], env={"NVIDIA_REQUIRE_CUDA": "cuda>=13.2"})
    assert result.codes == ["nvidia-require-cuda-unmet"] and result.returncode == 1
    result = verify(
        config=observed_h200()[1],
        env={"NVIDIA_REQUIRE_CUDA": "cuda>=13.2", "NVIDIA_DISABLE_REQUIRE": "true"},
    )
    assert result.codes == ["nvidia-disable-require"] and result.returncode == 0


def test_require_input_lines(verify):
    ok = verify(
        "--require",
        "cuda>=12.4\ndriver>=550,arch>=8.0\nmemory>=140GiB name=H200",
        config=observed_h200()[1],
    )
    assert ok.returncode == 0 and ok.codes == []
    bad = verify("--require", "cuda>=12.4\ngpu-count>=8", config=observed_h200()[1])
    assert bad.returncode == 1 and bad.codes == ["require-unmet"]
    assert "'gpu-count>=8' does not hold" in bad.errors[0]


def test_unreadable_require_is_exit_2(verify):
    result = verify("--require", "cuda>=12.4\nvram>=8GiB", config=observed_h200()[1])
    assert result.returncode == 2
    assert "require line 2: cannot read 'vram>=8GiB'" in result.errors[0]


def test_health_faults_from_nvml_fail_unless_health_warn(verify):
    config = nvml_config(
        gpu_config(
            0, persistence=0, ecc_uncorrected=2, retired_pending=1, remap_failure=1, processes=3
        )
    )
    result = verify(config=config)
    assert result.returncode == 1
    assert result.codes == [
        "ecc-uncorrected-errors",
        "retired-pages-pending",
        "remapped-rows-failure",
        "gpu-busy",
        "persistence-mode-off",
    ]
    assert len(result.errors) == 3
    warned = verify("--health", "warn", config=config)
    assert warned.returncode == 0 and warned.codes == result.codes
    assert verify("--health", "warn", "--fail-on", "warning", config=config).returncode == 1
    bad = verify("--health", "maybe", config=config)
    assert bad.returncode == 2 and "input 'health' must be error or warn" in bad.errors[0]


def test_frameworks_input(verify, tmp_path):
    python = make_target(
        tmp_path / "env",
        {"cupy-cuda12x": "13.6.0", "jax": "0.11.2", "jax-cuda12-plugin": "0.11.2"},
        conda_meta=["cuda-version-12.4-h3060b56_3.json"],
    )
    result = verify("--frameworks", "cupy,conda", config=observed_h200()[1], python=python)
    names = [f["name"] for f in json.loads(result.outputs["frameworks"])]
    assert names == ["cupy-cuda12x", "conda cuda-version"]
    missing = verify("--frameworks", "torch", config=observed_h200()[1], python=python)
    assert missing.returncode == 1 and missing.codes == ["framework-not-found"]
    unknown = verify("--frameworks", "pytorch", config=observed_h200()[1], python=python)
    assert unknown.returncode == 2 and "'frameworks' names pytorch" in unknown.errors[0]


def test_nvcc_from_cuda_home(verify, tmp_path):
    home = tmp_path / "cuda-12.4"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "nvcc").write_text("#!/bin/sh\nexit 1\n")
    (home / "version.json").write_text('{"cuda": {"name": "CUDA SDK", "version": "12.4.1"}}')
    result = verify(config=observed_h200()[1], env={"CUDA_HOME": str(home)})
    (nvcc,) = json.loads(result.outputs["frameworks"])
    assert (nvcc["name"], nvcc["cuda"], nvcc["version"]) == ("nvcc", "12.4", "12.4.1")


def test_missing_python_input_is_an_error_finding(verify):
    result = verify(config=observed_h200()[1], python="/nonexistent/python")
    assert result.returncode == 1 and result.codes == ["python-not-found"]


FAKE_TORCH = """\
__version__ = '2.11.0+cu130'
class _Cuda:
    def get_arch_list(self):
        return {arch!r}
    def is_available(self):
        return True
    def device_count(self):
        return 1
cuda = _Cuda()
class _T:
    def __init__(self, v): self.v = v
    def __mul__(self, k): return _T(self.v * k)
    def sum(self): return _T(self.v * 4)
    def item(self): return self.v
def ones(n, device=None):
    {fail}
    return _T(1.0)
"""


@pytest.mark.parametrize(
    ("arch", "fail", "codes"),
    [
        (["sm_80", "sm_90"], "", []),
        (["sm_75", "sm_80"], "", ["no-kernel-image"]),
        (["sm_80", "compute_80"], "", ["arch-ptx-only"]),
        (
            ["sm_90"],
            "raise RuntimeError('CUDA error: an illegal memory access')",
            ["gpu-computation-failed"],
        ),
        # a build problem, not a sick GPU: named as such, no "out of service" advice
        (
            ["sm_90"],
            "raise RuntimeError('CUDA error: no kernel image is available for execution "
            "on the device')",
            ["no-kernel-image"],
        ),
    ],
)
def test_deep_probe_imports_the_framework(verify, tmp_path, arch, fail, codes):
    # a stand-in for torch's API surface, imported for real by the deep probe subprocess
    python = make_target(
        tmp_path / "env",
        {"torch": "2.11.0+cu130"},
        {
            "torch/version.py": "cuda = '13.0'\n",
            "torch/__init__.py": FAKE_TORCH.format(arch=arch, fail=fail or "pass"),
        },
    )
    result = verify("--deep", "true", config=observed_h200()[1], python=python)
    assert result.codes == codes, result.stdout
    if "gpu-computation-failed" in codes:
        assert "illegal memory access" in result.errors[0]
        assert "take this GPU out of service" in result.errors[0]
    if codes == ["no-kernel-image"]:
        assert "out of service" not in result.errors[0] and "drain" not in result.errors[0]


def test_numba_and_tensorflow_trees(verify, tmp_path):
    python = make_target(
        tmp_path / "env",
        {
            "numba": "0.62.1",
            "numba-cuda": "0.20.0",
            "nvidia-cuda-runtime-cu12": "12.9.79",
            "tensorflow": "2.20.0",
        },
        {
            "tensorflow/python/platform/build_info.py": (
                "build_info = {'cuda_version': '12.5.1', 'cudnn_version': '9',"
                " 'is_cuda_build': True}\n"
            )
        },
    )
    result = verify(
        config=nvml_config(gpu_config(0), driver="575.57.08", cuda=12090), python=python
    )
    found = {f["name"]: f["cuda"] for f in json.loads(result.outputs["frameworks"])}
    assert found == {"numba-cuda": "12.9", "tensorflow": "12.5", "nvidia-cuda-runtime-cu12": "12.9"}
    assert result.returncode == 0 and result.codes == []


def test_requirements_apply_to_the_selected_mig_slice(verify):
    slice_uuid = "MIG-aaaaaaaa-2222-3333-4444-555555555555"
    config = nvml_config(a100_one_slice(slice_uuid), privileged=1)
    # privileged: a MIG parent's aggregate memory is readable only so (nvml.h)
    whole = verify("--require", "memory>=40GiB", config=config)
    assert whole.codes == ["mig-enabled"] and whole.returncode == 0
    chosen = verify(
        "--require", "memory>=40GiB", config=config, env={"CUDA_VISIBLE_DEVICES": slice_uuid}
    )
    assert chosen.codes == ["require-unmet"] and chosen.returncode == 1
    assert "MIG 1g.10gb (arch 8.0, 10 GiB" in chosen.errors[0]
    (gpu,) = json.loads(chosen.outputs["gpus"])
    assert gpu["memory_mib"] == 9984 and gpu["mig_selected"] == slice_uuid
    assert (
        verify(
            "--require",
            "memory>=8GiB,name=1g.10gb",
            config=config,
            env={"CUDA_VISIBLE_DEVICES": slice_uuid},
        ).codes
        == []
    )


def test_torch_arch_list_is_read_in_the_fast_path_without_import(verify, tmp_path):
    from testkit.cuda_env import real_torch_target

    python = real_torch_target(tmp_path / "env", "2.14.1+cu130")
    config = nvml_config(gpu_config(0, name="Tesla V100-SXM2-32GB", cc="7.0", memory_mib=32768))
    result = verify(config=config, python=python)
    (torch,) = json.loads(result.outputs["frameworks"])
    assert torch["arch"] == ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    assert result.codes == ["arch-dropped-by-cuda13"] and result.returncode == 1
    assert "sm_75 sm_80" in result.errors[0] and "no kernel image" in result.errors[0]
    assert "must not import torch" not in result.stdout + result.stderr
