"""verify-cuda-env judges the CUDA the tests load: the job's environment before the system.

The conda environment (a real venv with conda-meta records as conda-forge writes them) and
the system toolkit (an nvcc that answers ``--version``) are built at test time; the driver
is the fake NVML's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_ci.cuda.verify import frameworks, probe
from gpu_ci.cuda.verify.frameworks import CudaConsumer, ProbeFacts
from gpu_ci.cuda.verify.source import choose
from gpu_ci.cuda.verify.table import load_table
from testkit.cuda_env import (
    build_fake_nvml,
    conda_cuda_env,
    fake_toolkit,
    gpu_config,
    make_target,
    nvml_config,
    torch_target,
    write_config,
)

#: A T4 (Turing, 7.5) on an R535 driver (CUDA 12.2), as in the issue's report.
T4_535 = nvml_config(
    gpu_config(0, name="Tesla T4", cc="7.5", memory_mib=15360, brand=2),
    driver="535.104.05",
    cuda=12020,
)


@pytest.fixture(scope="module")
def fake_nvml_dir(tmp_path_factory):
    return build_fake_nvml(tmp_path_factory.mktemp("fake-nvml"))


@pytest.fixture
def verify(run_cli, tmp_path, fake_nvml_dir):
    def run(*args, python, path="", config=T4_535, env=None):
        full = {
            "PATH": f"{path}:/usr/bin:/bin" if path else "/usr/bin:/bin",
            "LD_LIBRARY_PATH": str(fake_nvml_dir),
            "FAKE_NVML_CONFIG": str(write_config(tmp_path / "nvml.cfg", config)),
            "INPUT_PYTHON": str(python),
            **(env or {}),
        }
        result = run_cli(["verify-cuda-env", *args], full)
        result.findings = json.loads(result.outputs.get("findings", "[]"))
        result.codes = sorted(f["code"] for f in result.findings)
        result.by_code = {f["code"]: f for f in result.findings}
        return result

    return run


def test_the_conda_envs_cuda_is_judged_and_a_shadowed_system_nvcc_is_a_note(verify, tmp_path):
    python = conda_cuda_env(tmp_path / "env", "12.9")
    system = fake_toolkit(tmp_path / "cuda-13.0", "13.0.88")
    result = verify(python=python, path=str(system))
    assert result.returncode == 0, result.stdout
    assert result.codes == ["cuda-not-judged", "minor-version-compatibility"]
    # judged by 12.9: R535 runs it through minor-version compatibility; the advice is the
    # driver the shipped table bundles with 12.9, never CUDA 13's 580
    minor = result.by_code["minor-version-compatibility"]
    bundled = load_table().bundled_driver(12, 9)
    assert bundled and f"(the one bundled with it is {bundled})" in minor["fix"]
    assert "conda cuda-version 12.9" in minor["message"]
    assert "580" not in json.dumps(result.findings)
    note = result.by_code["cuda-not-judged"]
    assert note["level"] == "info"
    assert f"nvcc 13.0.88 (CUDA 13.0) from {system}/nvcc --version" in note["message"]
    assert "conda cuda-version 12.9 (CUDA 12.9)" in note["message"]
    assert "cuda-from: system" in note["fix"]
    assert (
        "CUDA 12.9 judged (conda cuda-cudart 12.9.79 (CUDA 12.9), conda cuda-version 12.9 "
        "(CUDA 12.9)): the job's environment provides CUDA" in result.summary
    )
    found = {c["name"]: c["cuda"] for c in json.loads(result.outputs["frameworks"])}
    assert found["nvcc"] == "13.0" and found["conda cuda-version"] == "12.9"
    assert "| nvcc | 13.0.88 | 13.0 |" in result.summary and "| no |" in result.summary


def test_a_job_without_cuda_in_its_environment_judges_the_system_toolkit(verify, tmp_path):
    python = make_target(tmp_path / "env", {"numpy": "2.3.0"})
    system = fake_toolkit(tmp_path / "cuda-13.0", "13.0.88")
    result = verify(python=python, path=str(system))
    assert result.returncode == 1
    assert result.codes == ["driver-too-old-for-cuda"]
    error = result.by_code["driver-too-old-for-cuda"]
    assert "nvcc 13.0.88 (CUDA 13.0" in error["message"]
    assert "upgrade the driver to 580" in error["fix"]
    assert "nothing in the job's environment provides CUDA" in result.summary


def test_cuda_from_system_judges_the_system_toolkit(verify, tmp_path):
    python = conda_cuda_env(tmp_path / "env", "12.9")
    system = fake_toolkit(tmp_path / "cuda-13.0", "13.0.88")
    result = verify("--cuda-from", "system", python=python, path=str(system))
    assert result.returncode == 1
    assert result.codes == ["cuda-not-judged", "driver-too-old-for-cuda"]
    assert "nvcc 13.0.88" in result.by_code["driver-too-old-for-cuda"]["message"]
    assert "conda cuda-version" not in result.by_code["driver-too-old-for-cuda"]["message"]
    assert "conda cuda-version 12.9" in result.by_code["cuda-not-judged"]["message"]
    assert "cuda-from is system" in result.summary


def test_cuda_from_a_source_that_holds_no_cuda_is_an_error_saying_where(verify, tmp_path):
    python = make_target(tmp_path / "env", {"numpy": "2.3.0"})
    result = verify("--cuda-from", "env", python=python)
    assert result.returncode == 1 and result.codes == ["cuda-from-not-found"]
    message = result.by_code["cuda-from-not-found"]["message"]
    assert "cuda-from is env, but the conda environment holds no CUDA" in message
    assert "cuda-from: auto" in result.by_code["cuda-from-not-found"]["fix"]
    wheels = verify("--cuda-from", "wheels", python=conda_cuda_env(tmp_path / "c", "12.9"))
    assert wheels.codes == ["cuda-from-not-found", "cuda-not-judged"]


def test_unknown_cuda_from_is_a_usage_error(verify, tmp_path):
    result = verify("--cuda-from", "toolkit", python=make_target(tmp_path / "env"))
    assert result.returncode == 2
    assert "input 'cuda-from' must be one of auto, env, wheels, system" in result.stdout


def test_cuda_from_a_source_frameworks_leaves_out_is_a_usage_error(verify, tmp_path):
    python = conda_cuda_env(tmp_path / "env", "12.9")
    result = verify("--cuda-from", "env", "--frameworks", "torch", python=python)
    assert result.returncode == 2
    assert "'frameworks' (torch) leaves out conda, which env judges: add conda" in result.stdout
    ok = verify("--cuda-from", "env", "--frameworks", "conda", python=python)
    assert ok.returncode == 0 and ok.codes == ["minor-version-compatibility"]


def test_framework_builds_shadow_the_system_toolkit_and_stay_judged(verify, tmp_path):
    python = torch_target(tmp_path / "env", "2.7.1+cu126", "12.6")
    system = fake_toolkit(tmp_path / "cuda-13.0", "13.0.88")
    result = verify(python=python, path=str(system))
    assert result.codes == ["cuda-not-judged", "minor-version-compatibility"]
    assert "torch 2.7.1+cu126" in result.by_code["minor-version-compatibility"]["message"]
    judged = verify("--cuda-from", "system", python=python, path=str(system))
    assert judged.codes == ["driver-too-old-for-cuda", "minor-version-compatibility"]
    assert "nvcc 13.0.88" in judged.by_code["driver-too-old-for-cuda"]["message"]
    assert "torch 2.7.1+cu126" in judged.by_code["minor-version-compatibility"]["message"]


def test_an_nvcc_inside_the_conda_env_is_the_envs_not_the_system(tmp_path):
    prefix = tmp_path / "env"
    conda_cuda_env(prefix, "12.9")
    fake_toolkit(prefix, "12.9.86")
    environ = {"PATH": str(prefix / "bin")}
    assert probe.find_nvcc(environ, str(prefix)) == {}
    assert probe.find_nvcc(environ)["path"] == str(prefix / "bin" / "nvcc")


def test_the_conda_env_is_the_interpreters_else_its_base_else_conda_prefix(tmp_path):
    conda = tmp_path / "conda"
    (conda / "conda-meta").mkdir(parents=True)
    venv_prefix = str(tmp_path / "venv")
    assert probe.conda_prefix({"prefix": venv_prefix, "base_prefix": str(conda)}, {}) == str(conda)
    assert probe.conda_prefix({"prefix": venv_prefix}, {"CONDA_PREFIX": str(conda)}) == str(conda)
    assert probe.conda_prefix({"prefix": venv_prefix}, {}) == venv_prefix


def test_conda_records_are_read_and_others_skipped(tmp_path):
    python = conda_cuda_env(tmp_path / "env", "12.9")
    meta = tmp_path / "env" / "conda-meta"
    (meta / "cuda-pathfinder-1.2.0-pyhd8ed1ab_0.json").write_text('{"name": "cuda-pathfinder"}')
    (meta / "cuda-nvcc-12.8.93-h5888daf_0.json").write_text("{not json")
    facts, error = probe.collect(str(python), {"PATH": ""})
    assert error == "" and facts.prefix == str(tmp_path / "env")
    assert facts.conda_records["cuda-version-12.9-h4f385c5_3.json"]["version"] == "12.9"
    found = {c.name: (c.version, c.cuda) for c in frameworks.consumers(facts)}
    # a record that cannot be read leaves its file name; cuda-pathfinder is no CUDA package
    assert found == {
        "conda cuda-version": ("12.9", "12.9"),
        "conda cuda-cudart": ("12.9.79", "12.9"),
        "conda cuda-nvcc": ("12.8.93", "12.8"),
    }


@pytest.mark.parametrize(
    ("dists", "expected"),
    [
        ({"nvidia-cublas-cu12": "12.9.1.4", "nvidia-cufft-cu12": "11.4.1.4"}, ("cublas", "12.x")),
        ({"nvidia-nvjitlink-cu12": "12.9.86", "nvidia-cufft-cu12": "11.4.1.4"}, ("nvjit", "12.9")),
        ({"nvidia-cuda-runtime-cu12": "12.8.90", "nvidia-cublas-cu12": "12.9"}, ("runt", "12.8")),
    ],
)
def test_nvidia_library_wheels_bring_their_cuda(dists, expected):
    found = frameworks.consumers(ProbeFacts(dists=dists))
    (wheel,) = [c for c in found if c.family == "cuda-runtime"]
    assert expected[0] in wheel.name and wheel.cuda == expected[1]


def consumer(name: str, cuda: str | None, family: str, **kw) -> CudaConsumer:
    return CudaConsumer(name, "1", cuda, "test", family=family, **kw)


def test_a_cpu_build_provides_no_cuda_so_the_system_toolkit_is_judged():
    cpu = consumer("torch", None, "torch", cpu_only=True)
    nvcc = consumer("nvcc", "13.0", "nvcc")
    source = choose([cpu, nvcc], "auto")
    assert source.judged == (cpu, nvcc) and source.noted == () and source.findings == ()
    assert source.cuda_text == "13.0"


def test_the_newest_judged_cuda_is_the_jobs():
    source = choose(
        [consumer("jax", "12.x", "jax"), consumer("conda cuda-version", "12.9", "conda")], "auto"
    )
    assert source.cuda_text == "12.9" and source.cuda == (12, 9)
    assert choose([], "auto").cuda is None
    assert "no CUDA version judged" in choose([], "auto").describe()


def test_report_names_the_prefix_it_read(tmp_path):
    python = conda_cuda_env(tmp_path / "env", "12.9")
    facts, _error = probe.collect(str(python), {"PATH": ""})
    source = choose(frameworks.consumers(facts), "env", facts.prefix)
    assert source.findings == () and source.cuda_text == "12.9"
    empty = choose([], "env", str(Path("/nowhere")))
    assert "/nowhere/conda-meta" in empty.findings[0].message


def test_a_fifo_planted_as_a_conda_record_is_not_opened(tmp_path):
    # opening a FIFO without a writer blocks forever: the record is skipped, its name read
    import os
    import threading

    python = conda_cuda_env(tmp_path / "env", "12.9")
    meta = tmp_path / "env" / "conda-meta"
    (meta / "cuda-version-12.9-h4f385c5_3.json").unlink()
    os.mkfifo(meta / "cuda-version-12.9-h4f385c5_3.json")
    got: list[ProbeFacts] = []
    worker = threading.Thread(
        target=lambda: got.append(probe.collect(str(python), {"PATH": ""})[0]), daemon=True
    )
    worker.start()
    worker.join(30)
    assert not worker.is_alive() and got
    found = {c.name: c.cuda for c in frameworks.consumers(got[0])}
    assert found["conda cuda-version"] == "12.9"
