"""verify-cuda-env and gpu-monitor against the fake NVML configured as nvml.h says real
drivers behave (issue 27): no libcuda in a utility-only container, R470 without the _v3
process call, early R535's 32-byte process entries, MIG without privileges, containers.

Each test failed before the fix in ``gpu_ci.cuda.nvml`` / ``visibility`` (with the fake
already following the header).
"""

from __future__ import annotations

import json

import pytest

from testkit.cuda_env import (
    a100_one_slice,
    build_fake_libcuda,
    build_fake_nvml,
    gpu_config,
    nvml_config,
    write_config,
)
from testkit.gpu_monitor_env import fake_gpu_env, wait_for_stop_line

MIG_UUID = "MIG-aaaaaaaa-2222-3333-4444-555555555555"


def a100_mig(**extra):
    return a100_one_slice(MIG_UUID, **extra)


@pytest.fixture
def verify(run_cli, tmp_path):
    def run(config, *, generation="current", libcuda=True, env=None):
        lib = build_fake_nvml(
            tmp_path / f"nvml-{generation}-{libcuda}", with_libcuda=libcuda, generation=generation
        )
        log = tmp_path / "nvml.log"
        full = {
            "PATH": "/usr/bin:/bin",
            "LD_LIBRARY_PATH": str(lib),
            "FAKE_NVML_CONFIG": str(write_config(tmp_path / "nvml.cfg", config)),
            "FAKE_NVML_LOG": str(log),
            **(env or {}),
        }
        result = run_cli(["verify-cuda-env", "--require-gpu", "true"], full)
        result.findings = json.loads(result.outputs.get("findings", "[]"))
        result.codes = [f["code"] for f in result.findings]
        result.calls = log.read_text().split() if log.exists() else []
        assert "Traceback" not in result.stdout + result.stderr
        assert "internal error" not in result.stdout + result.stderr
        return result

    return run


# -- a utility-only container: NVML without libcuda ------------------------------------------


def test_utility_only_container_is_libcuda_missing_not_no_driver(verify):
    result = verify(
        nvml_config(gpu_config(0), cuda=12080),
        libcuda=False,
        env={"NVIDIA_DRIVER_CAPABILITIES": "utility"},
    )
    assert result.codes == ["libcuda-missing"]
    assert "lacks 'compute'" in result.findings[0]["message"]
    # _v2 failed with LIBRARY_NOT_FOUND, v1 answered the driver's own CUDA version
    assert result.calls.index("nvmlSystemGetCudaDriverVersion_v2") < result.calls.index(
        "nvmlSystemGetCudaDriverVersion"
    )
    assert result.outputs["cuda-driver-version"] == "12.8"


@pytest.mark.slow
def test_forward_compat_libcuda_is_the_cuda_version_nvml_reports(verify, tmp_path):
    # nvml.h: _v2 is cuDriverGetVersion() of the libcuda that loads: the compat one
    compat = tmp_path / "cuda-13.2" / "compat"
    build_fake_libcuda(compat, "595.45.04", cuda=13020)
    lib = build_fake_nvml(tmp_path / "nvml-current-True")
    result = verify(
        nvml_config(gpu_config(0), driver="580.159.04", cuda=13000),
        env={"LD_LIBRARY_PATH": f"{compat}:{lib}"},
    )
    assert result.outputs["cuda-driver-version"] == "13.2"
    assert result.outputs["driver-version"] == "580.159.04"
    # a guard (passes on the code before issue 27's fix too): the _v2 answer is taken as is,
    # the v1 fallback (the driver's own 13.0) is not reached
    assert "nvmlSystemGetCudaDriverVersion_v2" in result.calls
    assert "nvmlSystemGetCudaDriverVersion" not in result.calls


def test_gpu_monitor_starts_in_a_utility_only_container(run_cli, tmp_path):
    env = fake_gpu_env(tmp_path, "0 gpu.0.util=10 gpu.0.procs=-\n", samples=2)
    build_fake_nvml(tmp_path / "nvml-only", with_libcuda=False)
    env["LD_LIBRARY_PATH"] = str(tmp_path / "nvml-only")
    started = run_cli(["gpu-monitor", "--mode", "start"], env)
    assert started.returncode == 0 and started.outputs["gpu-count"] == "1", started.stdout
    wait_for_stop_line(env)


# -- R470: no nvmlDeviceGetComputeRunningProcesses_v3 -----------------------------------------


def test_r470_processes_are_read_without_v3(verify):
    result = verify(
        nvml_config(gpu_config(0, processes=2), driver="470.256.02", cuda=11040), generation="r470"
    )
    assert result.returncode == 0 and result.codes == ["gpu-busy"]
    assert "used by 2 other process(es)" in result.findings[0]["message"]
    assert "nvmlDeviceGetComputeRunningProcesses_v2" in result.calls


def test_r470_gpu_monitor_samples_processes(run_cli, tmp_path):
    env = fake_gpu_env(tmp_path, "0 gpu.0.util=50 gpu.0.procs=4242:1000:python\n", samples=2)
    build_fake_nvml(tmp_path / "nvml", generation="r470")
    started = run_cli(["gpu-monitor", "--mode", "start"], env)
    assert started.returncode == 0, started.stdout + started.stderr
    records = wait_for_stop_line(env)
    samples = [r for r in records if r["kind"] == "sample"]
    assert samples and samples[0]["gpus"][0]["procs"] == [[4242, 1000 * 2**20, "python"]]
    assert not [r for r in records if r["kind"] == "error"]


# -- early R535: _v3 entries 32 bytes apart ---------------------------------------------------


def test_early_r535_process_entries_are_read_at_their_stride(run_cli, tmp_path):
    script = "0 gpu.0.util=50 gpu.0.procs=4242:1000:python,4343:700:helper,4444:10:x\n"
    env = fake_gpu_env(tmp_path, script, samples=2)
    config = tmp_path / "nvml.cfg"
    config.write_text(config.read_text() + "driver.generation=r535early\n")
    started = run_cli(["gpu-monitor", "--mode", "start"], env)
    assert started.returncode == 0, started.stdout + started.stderr
    sample = next(r for r in wait_for_stop_line(env) if r["kind"] == "sample")
    assert [p[0] for p in sample["gpus"][0]["procs"]] == [4242, 4343, 4444]
    assert [p[1] for p in sample["gpus"][0]["procs"]] == [1000 * 2**20, 700 * 2**20, 10 * 2**20]


def test_early_r535_process_count_in_verify(verify):
    # a guard (passes on the code before the fix too: verify reports only a count, which the
    # stride does not change): the stride detection must neither drop nor add entries
    result = verify(
        nvml_config(
            gpu_config(0, processes=3),
            driver="535.54.03",
            cuda=12020,
            driver__generation="r535early",
        )
    )
    assert result.codes == ["gpu-busy"]
    assert "used by 3 other process(es)" in result.findings[0]["message"]


# -- MIG without privileges --------------------------------------------------------------------


@pytest.mark.slow
def test_mig_without_privileges_reads_the_mig_devices(verify):
    result = verify(nvml_config(a100_mig(mig__0__processes=1)))
    assert result.returncode == 0, result.stdout
    assert "nvml-no-permission" not in result.codes
    assert result.codes == ["gpu-busy", "mig-enabled"]
    (gpu,) = json.loads(result.outputs["gpus"])
    assert gpu["mig_instances"] == [MIG_UUID] and gpu["memory_mib"] == 9984
    selected = verify(
        nvml_config(a100_mig(mig__0__processes=1)), env={"CUDA_VISIBLE_DEVICES": MIG_UUID}
    )
    assert selected.codes == ["gpu-busy"]
    assert "MIG 1g.10gb" in selected.findings[0]["message"]


def test_mig_privileged_reads_the_parent(verify):
    # a guard (passes on the code before the fix too): a privileged job keeps the parent's
    # own memory, not the sum of its MIG devices
    result = verify(nvml_config(a100_mig(), privileged=1))
    (gpu,) = json.loads(result.outputs["gpus"])
    assert gpu["memory_mib"] == 81920 and result.codes == ["mig-enabled"]


def test_gpu_monitor_starts_on_an_unprivileged_mig_gpu(run_cli, tmp_path):
    env = fake_gpu_env(tmp_path, "0 gpu.0.mem_used_mib=100 gpu.0.procs=-\n", samples=2)
    write_config(tmp_path / "nvml.cfg", nvml_config(a100_mig()))
    started = run_cli(["gpu-monitor", "--mode", "start"], env)
    assert started.returncode == 0 and started.outputs["gpu-count"] == "1", started.stdout
    records = wait_for_stop_line(env)
    assert records[0]["gpus"][0]["memory_total"] == 9984 * 2**20
    assert not [r for r in records if r["kind"] == "error"]


# -- containers ---------------------------------------------------------------------------------


def test_container_gpu_is_numbered_from_zero_whatever_the_host_index(verify):
    result = verify(nvml_config(gpu_config(0), container=1), env={"NVIDIA_VISIBLE_DEVICES": "3"})
    assert result.returncode == 0 and result.codes == []
    assert result.outputs["gpu-count"] == "1"


def test_container_without_gpus_names_the_runtime_variable(verify):
    config = nvml_config()
    result = verify(config, env={"NVIDIA_VISIBLE_DEVICES": "void"})
    assert result.codes == ["no-visible-gpu"]
    assert "NVIDIA_VISIBLE_DEVICES='void'" in result.findings[0]["message"]


def test_container_host_pids_are_counted(verify):
    # a guard (passes on the code before the fix too): host-namespace PIDs still count
    result = verify(nvml_config(gpu_config(0, processes=1), container=1))
    assert result.codes == ["gpu-busy"]
