"""The pytest plugin, run through pytester.

With the fake NVML and the frameworks' stand-ins.

Runs that read NVML start pytest in a subprocess (the fake libnvidia-ml.so.1 loads through
LD_LIBRARY_PATH, read once at process start); the others run in this process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_ci.pytest_plugin import oom, peaks
from testkit.cuda import plugin_env, plugin_standins
from testkit.cuda.plugin_env import PLUGIN
from testkit.cuda_env import gpu_config, nvml_config, write_config

pytest_plugins = ["pytester"]


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return plugin_env.fake_nvml_lib(tmp_path_factory)


@pytest.fixture
def gpu_env(
    pytester: pytest.Pytester, fake_lib: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """Two 8 GiB GPUs, an empty ledger and the torch stand-in."""
    yield plugin_env.two_gpus(pytester, fake_lib, monkeypatch)


def _outcomes(result: pytest.RunResult, **expected: int) -> None:
    """assert_outcomes, with the rerun count that it does not take."""
    counts = result.parseoutcomes()
    got = {k: counts.get(k, 0) + counts.get(k + "s", 0) for k in expected}
    assert got == expected, result.stdout.str()


def _junit_properties(path: Path) -> dict[str, dict[str, str]]:
    out = {}
    for case in ET.parse(path).iter("testcase"):
        props = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
        out[case.get("name", "")] = props
    return out


def test_an_oom_left_by_an_earlier_failure_is_rerun_and_passes(
    pytester: pytest.Pytester, gpu_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OOM left by an earlier failure's frames is rerun, and passes.

    The failed test's frames (sys.last_traceback) hold 6000 MiB: the next test's
    allocation fails, the plugin lets the frames go and empties torch's cache, the rerun
    passes; the terminal counts the rerun and JUnit XML carries it on the testcase. A test
    that asks for more than the GPU has fails after its rerun, naming who held memory."""
    pytester.makepyfile(
        test_a="""
        import torch

        def test_fails_holding():
            block = torch.cuda.alloc(6000)
            assert block is None

        def test_needs_memory():
            torch.cuda.alloc(3000)

        def test_needs_too_much():
            torch.cuda.alloc(9000)
        """
    )
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    result = pytester.runpytest_subprocess(*PLUGIN, "--junitxml=j.xml", "-rR")
    _outcomes(result, passed=1, failed=2, rerun=2)
    result.stdout.fnmatch_lines(["*test_needs_memory*passed after 1 rerun*"])
    result.stdout.fnmatch_lines(["*test_needs_too_much*still failing after 1 rerun*"])
    # annotations: the OOM that stayed is an error, first (GitHub keeps 10 per level)
    notes = [line for line in result.outlines if line.startswith("::")]
    assert notes[0].startswith("::error file=test_a.py,line=10,title=gpu-ci pytest::")
    assert notes[1].startswith("::warning file=test_a.py,line=7,")
    # the failure that stays says who held the memory then: this process, by its PID
    result.stdout.fnmatch_lines(
        [
            "*GPU memory at the out-of-memory failure*",
            "GPU 0: pid * (python) 300.0 MiB, this process",
        ]
    )
    props = _junit_properties(pytester.path / "j.xml")
    assert props["test_needs_memory"]["gpu_oom_reruns"] == "1"
    assert props["test_needs_memory"]["gpu_oom_rerun_1"] == (
        "torch.OutOfMemoryError; released torch.cuda.empty_cache"
    )
    assert "gpu_oom_reruns" not in props["test_fails_holding"]


FRAMEWORK_TESTS = """
import pytest
from errors import CUPY, JAX, RMM, NUMBA, CUDART, TF
import torch

def test_torch():
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

@pytest.mark.parametrize("err", [CUPY, JAX, RMM, NUMBA, CUDART, TF], ids=str)
def test_framework(err):
    raise err

def test_wrapped_twice():
    try:
        try:
            raise JAX
        except Exception as e:
            raise RuntimeError("step failed") from e
    except RuntimeError:
        raise KeyError("model")  # implicit __context__ on top of the explicit __cause__

def test_assertion_on_the_message_is_not_an_oom():
    assert "CUDA out of memory" == "no"

def test_host_memory_error_is_not_a_gpu_oom():
    raise MemoryError("cannot allocate 3 GiB of host memory")

def test_other_failure():
    raise ValueError("wrong shape")
"""


@pytest.mark.slow
def test_each_frameworks_oom_is_rerun_and_nothing_else(pytester: pytest.Pytester) -> None:
    """Every framework's OOM, raw or wrapped, is rerun once.

    An assertion that quotes an OOM message, a host MemoryError and any other failure
    never are."""
    pytester.makepyfile(errors=plugin_standins.FRAMEWORK_ERRORS, **plugin_standins.torch_files())
    pytester.makepyfile(test_f=FRAMEWORK_TESTS)
    result = pytester.runpytest(*PLUGIN, "--gpu-report=r.json", "-p", "no:randomly")
    _outcomes(result, failed=11, rerun=8)
    tests = json.loads((pytester.path / "r.json").read_text())["tests"]
    reruns = {t["nodeid"].split("::")[1]: t["oom_reruns"] for t in tests}
    assert reruns["test_wrapped_twice"] == 1
    assert reruns["test_torch"] == 1
    for name in ("assertion_on_the_message", "host_memory_error", "other_failure"):
        assert reruns[next(n for n in reruns if name in n)] == 0


@pytest.mark.parametrize("reruns", ["0", "3"])
def test_the_rerun_count_is_the_options(pytester: pytest.Pytester, reruns: str) -> None:
    pytester.makepyfile(errors=plugin_standins.FRAMEWORK_ERRORS)
    pytester.makepyfile(test_o="from errors import CUPY\n\ndef test_oom():\n    raise CUPY\n")
    result = pytester.runpytest(*PLUGIN, f"--gpu-oom-reruns={reruns}")
    _outcomes(result, failed=1, rerun=int(reruns))


def test_beside_pytest_rerunfailures_no_test_is_rerun_twice(pytester: pytest.Pytester) -> None:
    """With --reruns, pytest-rerunfailures alone reruns: 2, not 2 + 1.

    Without --reruns, the plugin reruns the OOM once and rerunfailures, loaded, leaves
    it be."""
    pytest.importorskip("pytest_rerunfailures")
    pytester.makepyfile(errors=plugin_standins.FRAMEWORK_ERRORS)
    pytester.makepyfile(test_r="from errors import JAX\n\ndef test_oom():\n    raise JAX\n")
    both = pytester.runpytest(*PLUGIN, "-p", "rerunfailures", "--reruns", "2", "-rA")
    _outcomes(both, failed=1, rerun=2)
    both.stdout.fnmatch_lines(["*test_oom*RESOURCE_EXHAUSTED*still failing after 2 reruns"])
    ours = pytester.runpytest(*PLUGIN, "-p", "rerunfailures")
    _outcomes(ours, failed=1, rerun=1)


def test_a_leaking_test_is_named_with_its_amount(
    pytester: pytest.Pytester, gpu_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVML's per-process memory after teardown minus before setup: the test that keeps
    400 MiB beyond torch's cache is listed in the terminal, the job summary's table and an
    annotation at its line; the first CUDA use (the context) is not a leak."""
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    pytester.makepyfile(test_l=plugin_standins.leak_suite("test_clean", 50, 500))
    result = pytester.runpytest_subprocess(*PLUGIN, "--gpu-report=r.json")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["leak: test_l.py::test_leaky (GPU 0,1, +400 MiB)*"])
    result.stdout.fnmatch_lines(["::warning file=test_l.py,line=10,*test_leaky left 400 MiB*"])
    assert "test_warm_up" not in "".join(line for line in result.outlines if "leak:" in line)
    table = summary.read_text()
    assert "| leak | test_l.py::test_leaky | 0,1 | +400 |" in table
    tests = {t["nodeid"]: t for t in json.loads((pytester.path / "r.json").read_text())["tests"]}
    assert tests["test_l.py::test_warm_up"]["context_created"] is True
    assert tests["test_l.py::test_clean"]["leftover_mib"] == 0
    assert tests["test_l.py::test_leaky"]["peak_source"] == "torch max_memory_allocated"


@pytest.fixture
def foreign_process(gpu_env: Path) -> Iterator[int]:
    """A process of another session holding 3000 MiB on GPU 1."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    (gpu_env / f"1.{proc.pid}").write_text("3000 other-runner\n")
    yield proc.pid
    proc.kill()
    proc.wait()


def test_memory_held_before_the_session_is_reported_by_pid(
    pytester: pytest.Pytester, foreign_process: int
) -> None:
    pytester.makepyfile(test_h="def test_ok():\n    pass\n")
    result = pytester.runpytest_subprocess(*PLUGIN, "--gpu-held-warning=2GiB")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            f"held before: pid {foreign_process} (other-runner) (GPU 1, 3,000 MiB) foreign*",
            f"WARNING: GPU 1: pid {foreign_process} (other-runner, foreign) held 3000.0 MiB*",
        ]
    )
    strict = pytester.runpytest_subprocess(*PLUGIN, "--gpu-require-free=90%")
    assert strict.ret == 1
    strict.stdout.fnmatch_lines(
        [f"*--gpu-require-free not met*GPU 1 has 5,192 MiB free*pid {foreign_process}*"]
    )
    assert "test_ok" not in strict.stdout.str()


def test_in_a_container_the_leftovers_say_they_are_unknown(
    pytester: pytest.Pytester, gpu_env: Path
) -> None:
    """NVML lists host PIDs (container=1): this process is not among them by its own PID,
    so no leftover is made up."""
    config = nvml_config(gpu_config(0, memory_mib=8192), container=1)
    write_config(pytester.path / "nvml.cfg", config)
    pytester.makepyfile(test_c="import torch\n\ndef test_a():\n    torch.cuda.alloc(10)\n")
    result = pytester.runpytest_subprocess(*PLUGIN, "--gpu-report=r.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*PIDs of another namespace*leftovers are unknown*"])
    (test,) = json.loads((pytester.path / "r.json").read_text())["tests"]
    assert test["leftover_mib"] is None


def test_xdist_workers_use_the_lease_map_and_their_reports_merge(
    pytester: pytest.Pytester, gpu_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gpu-lease's GPU_CI_WORKER_DEVICES (gw0 -> GPU 1, gw1 -> GPU 0): each worker's tests
    allocate on its GPU, the plugin reads that GPU, and one JSON holds both workers."""
    uuids = [gpu_config(i)[f"gpu.{i}.uuid"] for i in (0, 1)]
    monkeypatch.setenv("GPU_CI_WORKER_DEVICES", f"{uuids[1]},{uuids[0]}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(uuids))
    pytester.makepyfile(
        test_x="""
        import os
        import pytest
        import torch

        @pytest.mark.parametrize("n", range(6))
        def test_alloc(n):
            torch.cuda.alloc(100)
            print(os.environ["PYTEST_XDIST_WORKER"], os.environ["CUDA_VISIBLE_DEVICES"])
        """
    )
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "xdist", "-n", "2", "--gpu-report=r.json")
    result.assert_outcomes(passed=6)
    record = json.loads((pytester.path / "r.json").read_text())
    workers = record["workers"]
    assert workers["gw0"]["devices"] == [{"index": 1, "uuid": uuids[1]}]
    assert workers["gw1"]["devices"] == [{"index": 0, "uuid": uuids[0]}]
    assert len(record["tests"]) == 6
    for test in record["tests"]:
        assert test["gpus"] == [1 if test["worker"] == "gw0" else 0]
        assert test["leftover_mib"] is not None
    assert {t["worker"] for t in record["tests"]} == {"gw0", "gw1"}


def test_a_bad_option_value_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_u="def test_ok():\n    pass\n")
    result = pytester.runpytest(*PLUGIN, "--gpu-leak-threshold=lots")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpu-leak-threshold='lots' is not a size*"])


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (RuntimeError("CUDA error: out of memory"), "RuntimeError: CUDA error: out of memory"),
        (RuntimeError("RESOURCE_EXHAUSTED: too many open files"), None),
        (AssertionError("CUDA_ERROR_OUT_OF_MEMORY"), None),
    ],
)
def test_messages_count_only_outside_assertions(exc: BaseException, expected: str | None) -> None:
    assert oom.reason(exc) == expected


def test_caches_are_released_only_for_frameworks_already_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("torch", "cupy", "jax"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert oom.release_caches() == []
    peaks.reset()
    assert peaks.read() == (None, None)
    assert not {"torch", "cupy", "jax"} & set(sys.modules)


class _Pool:
    """CuPy's MemoryPool as the plugin calls it: total_bytes and free_all_blocks."""

    def __init__(self, held: int) -> None:
        self.held = held

    def total_bytes(self) -> int:
        return self.held

    def free_all_blocks(self) -> None:
        self.held = 0


def test_cupy_and_jax_already_imported_are_read_and_released(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CuPy's default pool gives the peak (what it holds at teardown) and is emptied before
    a rerun; jax.clear_caches is called; torch, absent, is left alone."""
    import types

    pool, pinned, cleared = _Pool(1536 * 2**20), _Pool(10), []
    cupy = types.SimpleNamespace(
        get_default_memory_pool=lambda: pool, get_default_pinned_memory_pool=lambda: pinned
    )
    jax = types.SimpleNamespace(clear_caches=lambda: cleared.append(True))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "jax", jax)
    assert peaks.read() == (1536.0, "CuPy pool total_bytes at teardown")
    assert oom.release_caches() == ["cupy default memory pool", "jax.clear_caches"]
    assert pool.held == 0 and pinned.held == 0 and cleared == [True]


class _Driver:
    """Three GPUs as the plugin's NVML reader lists them."""

    uuids = ("GPU-aaaa-0", "GPU-bbbb-1", "GPU-bbbc-2")

    def count(self) -> int:
        return 3

    def handle(self, index: int) -> int:
        return index

    def uuid(self, handle: int) -> str:
        return self.uuids[handle]


@pytest.mark.parametrize(
    ("visible", "indices", "noted"),
    [
        (None, [0, 1, 2], False),
        ("2,0", [2, 0], False),
        ("GPU-aaaa,GPU-bbbc", [0, 2], False),
        ("1,GPU-bbb,0", [1], True),  # an ambiguous prefix ends the list, as in CUDA
        ("", [], False),
        ("7", [], True),
    ],
)
def test_the_job_devices_are_read_as_cuda_reads_them(
    visible: str | None, indices: list[int], noted: bool
) -> None:
    from gpu_ci.pytest_plugin import gpus

    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    devices, notes = gpus.job_devices(_Driver(), environ)  # type: ignore[arg-type]
    assert [d.index for d in devices] == indices
    assert bool(notes) == noted
