"""The pytest plugin against what others control: names, tests, a full disk, a kill.

Another job on the host names its processes; the job's tests raise and name what they like;
the disk fills; pytest is killed. None of it reaches a workflow command, the summary's markup,
a rerun it should not have, or the run's exit status.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_ci.cuda import pytest_link
from gpu_ci.pytest_plugin import gpus, oom, report
from testkit.cuda import plugin_env, plugin_standins
from testkit.cuda.plugin_env import PLUGIN

pytest_plugins = ["pytester"]


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return plugin_env.fake_nvml_lib(tmp_path_factory)


@pytest.fixture
def gpu_env(pytester: pytest.Pytester, fake_lib: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two 8 GiB GPUs, an empty ledger and the torch stand-in."""
    return plugin_env.two_gpus(pytester, fake_lib, monkeypatch)


#: A line that, printed to the job's log, would be a workflow command of its own.
PLANTED = "x\n::error title=gpu-ci pytest::t.py::t: out of memory (y); still failing after 1 rerun"


class _Names:
    """An NVML stand-in that names every process as the driver was told."""

    def __init__(self, name: str | None) -> None:
        self.name = name

    def process_name(self, pid: int) -> str | None:
        return self.name


def _plain(name: str) -> None:
    assert name.isprintable() and len(name) <= gpus.NAME_CHARS, repr(name)
    for mark in ("\n", "\r", "\x1b", "[", "]", "<", ">", "(", ")", "|", "`", ":"):
        assert mark not in name, repr(name)


def test_a_foreign_executables_name_is_plain_text() -> None:
    """NVML names a process by its executable's path, which another job chooses."""
    for name in (f"/tmp/{PLANTED}", "/tmp/[x](https://evil.example)<img src=x>", "\x1b[2Kok"):
        _plain(gpus.name_of(_Names(name), os.getpid()))  # type: ignore[arg-type]
    assert gpus.name_of(_Names("/usr/bin/python3.11"), 1) == "python3.11"  # type: ignore[arg-type]
    assert gpus.name_of(_Names("x" * 300), 1) == "x" * gpus.NAME_CHARS  # type: ignore[arg-type]


@pytest.fixture
def named_process() -> Iterator[int]:
    """A process that named itself (prctl PR_SET_NAME) with a workflow command."""
    code = (
        "import ctypes, sys, time\n"
        "ctypes.CDLL(None).prctl(15, b'a\\n::error::b', 0, 0, 0)\n"
        "print('named', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"named\n"
    yield proc.pid
    proc.kill()
    proc.wait()


def test_a_foreign_process_comm_is_plain_text(named_process: int) -> None:
    """Where NVML does not name it, /proc/PID/comm does: it may hold a newline."""
    with open(f"/proc/{named_process}/comm") as f:
        assert "\n::error::" in f.read()
    name = gpus.name_of(_Names(None), named_process)  # type: ignore[arg-type]
    _plain(name)
    assert name.startswith("a")


def test_a_foreign_name_reaches_neither_markup_nor_the_terminal_raw(
    pytester: pytest.Pytester,
    gpu_env: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """End to end: a foreign process's name in the ledger, in the summary and the log."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    try:
        (gpu_env / f"0.{proc.pid}").write_text("2000 \x1b[2K[x](evil.example)<b>\n")
        summary = pytester.path / "summary.md"
        monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
        monkeypatch.setenv("GITHUB_ACTIONS", "true")
        pytester.makepyfile(test_n="def test_ok():\n    pass\n")
        result = pytester.runpytest_subprocess(*PLUGIN, "--gpu-held-warning=1GiB")
    finally:
        proc.kill()
        proc.wait()
    result.assert_outcomes(passed=1)
    log = result.stdout.str()
    assert f"pid {proc.pid}" in log
    for text in (log, summary.read_text()):
        assert "\x1b[2K" not in text and "](evil" not in text and "<b>" not in text


FLAKY_TESTS = """
import sys
import pytest
from errors import CUPY

runs = {}

def first(name):
    runs[name] = runs.get(name, 0) + 1
    return runs[name] == 1

@pytest.fixture
def frees_badly(request):
    yield
    if first(request.node.name + "-teardown"):
        raise CUPY

def test_assertion_then_an_oom_in_teardown(frees_badly):
    assert not first("assertion"), "the real failure"

def test_fallback_asserted_after_an_oom():
    try:
        raise CUPY
    except MemoryError:
        assert not first("fallback"), "the fallback is wrong"

def test_a_group_with_a_real_failure_beside_the_oom():
    if first("group"):
        raise ExceptionGroup("tasks", [CUPY, ValueError("wrong shape")])

def test_a_group_of_ooms_only():
    if first("ooms"):
        wrapped = RuntimeError("worker died")
        wrapped.__cause__ = CUPY
        raise ExceptionGroup("tasks", [wrapped, CUPY])
"""


def test_a_rerun_never_hides_a_failure_that_is_not_an_oom(pytester: pytest.Pytester) -> None:
    """Only an attempt whose every failure is an OOM is rerun.

    An assertion beside an OOM in teardown, an assertion raised while handling an OOM, an
    exception group holding another error: each a real failure, shown, not rerun away."""
    pytester.makepyfile(errors=plugin_standins.FRAMEWORK_ERRORS)
    pytester.makepyfile(test_k=FLAKY_TESTS)
    result = pytester.runpytest(*PLUGIN, "--gpu-report=r.json", "-p", "no:randomly", "-rA")
    record = json.loads((pytester.path / "r.json").read_text())
    tests = {t["nodeid"].split("::")[1]: t for t in record["tests"]}
    assert {n: t["oom_reruns"] for n, t in tests.items()} == {
        "test_assertion_then_an_oom_in_teardown": 0,
        "test_fallback_asserted_after_an_oom": 0,
        "test_a_group_with_a_real_failure_beside_the_oom": 0,
        "test_a_group_of_ooms_only": 1,
    }
    assert tests["test_a_group_of_ooms_only"]["outcome"] == "passed"
    result.stdout.fnmatch_lines(["*the real failure*", "*the fallback is wrong*"])


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs, filled to its last byte."""
    mount = tmp_path / "full"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"no tmpfs can be mounted here (needs root): {done.stderr.decode()[:200]}")
    try:
        fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            with pytest.raises(OSError):
                while True:
                    os.write(fd, b"x" * 512)
        finally:
            os.close(fd)
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_full_disk_turns_no_passing_run_into_a_failure(
    pytester: pytest.Pytester, full_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report and the job summary cannot be written: the run passes, says so, and
    leaves no half-written file behind."""
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(full_disk / "summary.md"))
    pytester.makepyfile(errors=plugin_standins.FRAMEWORK_ERRORS)
    pytester.makepyfile(test_d="def test_ok():\n    pass\n")
    result = pytester.runpytest(*PLUGIN, f"--gpu-report={full_disk / 'r.json'}")
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*GPU memory report not written*No space left on device*"])
    assert sorted(p.name for p in full_disk.iterdir()) in (["filler"], ["filler", "summary.md"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_two_sessions_with_one_pid_keep_both_reports(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sessions with one PID keep two reports.

    Two test steps of one job in fresh containers have the same small PID: the second
    session's report does not replace the first's in gpu-monitor's directory."""
    reports = pytester.path / "reports"
    monkeypatch.setenv(pytest_link.REPORT_DIR_VARIABLE, str(reports))
    monkeypatch.setattr(os, "getpid", lambda: 7)
    pytester.makepyfile(test_p="def test_ok():\n    pass\n")
    for _ in range(2):
        pytester.runpytest(*PLUGIN).assert_outcomes(passed=1)
    assert len(pytest_link.read_reports(str(reports))) == 2


def test_memory_a_caching_allocator_keeps_free_is_no_leak(
    pytester: pytest.Pytester,
    gpu_env: Path,
) -> None:
    """torch keeps a freed block reserved: NVML still counts it for the process, but the
    test left nothing in use. Only memory the test took and still uses is its leftover."""
    pytester.makepyfile(test_c=plugin_standins.leak_suite("test_big_then_freed", 2000, 3000))
    result = pytester.runpytest_subprocess(*PLUGIN, "--gpu-report=r.json")
    result.assert_outcomes(passed=3)
    tests = {t["nodeid"]: t for t in json.loads((pytester.path / "r.json").read_text())["tests"]}
    assert tests["test_c.py::test_big_then_freed"]["leftover_mib"] == 0
    # 1000 MiB taken from the GPU beyond the 2000 cached, all of it still in use
    assert tests["test_c.py::test_leaky"]["leftover_mib"] == 1000
    assert "test_big_then_freed" not in "".join(x for x in result.outlines if "leak:" in x)
    result.stdout.fnmatch_lines(["leak: test_c.py::test_leaky (GPU 0,1, +1,000 MiB)*"])


# Each test raises the one CUPY instance afresh: re-raising an instance keeps its old
# traceback, so the 44th failure would carry every earlier one's frames (pytest took ~1 s
# a failure to render them, and the test ~55 s on a loaded 2-core machine).
MANY_TESTS = """
import pytest
from errors import CUPY

@pytest.mark.parametrize("u", ["<img src=x>", "[a](https://e.example)", "`c`*b*&amp;", "x" * 5000])
def test_markup(u):
    raise CUPY.with_traceback(None)

@pytest.mark.parametrize("n", range(40))
def test_many(n):
    raise CUPY.with_traceback(None)
"""


def test_the_summary_and_annotations_stay_bounded_and_plain(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Test ids are the job's: HTML, links and code spans in them stay text in the job
    summary; thousands of findings do not make a summary past GitHub's 1 MiB limit, nor
    a log of annotations GitHub would drop (it keeps 10 of each level per step)."""
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    pytester.makepyfile(errors=plugin_standins.FRAMEWORK_ERRORS)
    pytester.makepyfile(test_m=MANY_TESTS)
    result = pytester.runpytest(*PLUGIN, "-p", "no:randomly")
    _ = result.parseoutcomes()
    text = summary.read_text()
    for planted in ("<img", "[a](", "`c`", "*b*", "x" * 400):
        assert planted not in text, planted
    assert "&lt;img src=x&gt;" in text and "\\[a\\](https" in text and "&amp;amp;" in text
    rows = [line for line in text.splitlines() if line.startswith("| out-of-memory |")]
    assert len(rows) == report.MAX_ROWS
    assert f"{44 - report.MAX_ROWS} more out-of-memory findings" in text
    commands = [line for line in result.outlines if line.startswith("::")]
    assert len(commands) == 10 and all(len(line) < 1000 for line in commands)


def test_a_session_killed_leaves_the_earlier_report_whole(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kill -9 mid-session: no report, no half-written JSON; the earlier one reads whole."""
    reports = pytester.path / "reports"
    monkeypatch.setenv(pytest_link.REPORT_DIR_VARIABLE, str(reports))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile(test_ok="def test_ok():\n    pass\n")
    pytester.runpytest_subprocess(*PLUGIN, "test_ok.py").assert_outcomes(passed=1)
    pytester.makepyfile(
        test_kill="import os, signal\n\n"
        "def test_killed():\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    killed = pytester.runpytest_subprocess(*PLUGIN, "test_kill.py")
    assert killed.ret == -9
    (record,) = pytest_link.read_reports(str(reports))
    assert [t["nodeid"] for t in record["tests"]] == ["test_ok.py::test_ok"]
    assert len(list(reports.iterdir())) == 1


@pytest.mark.slow
def test_an_xdist_worker_that_crashes_loses_only_its_own_record(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker dies (os._exit): xdist replaces it; the controller still writes one JSON with
    the tests of the workers that finished, and the run fails for the crash alone."""
    pytest.importorskip("xdist")
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile(
        test_x="""
        import os
        import pytest

        @pytest.mark.parametrize("n", range(6))
        def test_fine(n):
            pass

        def test_dies():
            os._exit(3)
        """
    )
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "xdist", "-n", "2", "--gpu-report=r.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in out and "Traceback" not in out
    record = json.loads((pytester.path / "r.json").read_text())
    names = {t["nodeid"] for t in record["tests"]}
    assert names and "test_x.py::test_dies" not in names
    assert names <= {f"test_x.py::test_fine[{n}]" for n in range(6)}


def test_a_rerunfailures_rerun_of_another_failure_is_no_oom(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pytest-rerunfailures reruns every failure: an assertion it reran twice is not listed,
    annotated or reported as an out-of-memory failure (gpu-watchdog reads that as the
    tests' own OOM, outranking a lost GPU)."""
    pytest.importorskip("pytest_rerunfailures")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    pytester.makepyfile(test_a="def test_wrong():\n    assert 1 == 2\n")
    result = pytester.runpytest(
        *PLUGIN, "-p", "rerunfailures", "--reruns", "2", "--gpu-report=r.json"
    )
    (test,) = json.loads((pytester.path / "r.json").read_text())["tests"]
    assert test["oom"] is None
    out = result.stdout.str()
    assert "out of memory" not in out and "out-of-memory" not in out, out


def _raised_in_handler(outer: BaseException, inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException:
            raise outer  # noqa: B904 -- the implicit __context__ is the point
    except BaseException as e:
        return e


class OutOfMemoryError(Exception):
    """A project's own exception, named as torch's and CuPy's are."""


def _nested_group(depth: int) -> BaseException:
    exc: BaseException = MemoryError("cudaErrorMemoryAllocation")
    for _ in range(depth):
        exc = ExceptionGroup("g", [exc])  # noqa: F821 -- Python 3.11 here
    return exc


@pytest.mark.parametrize(
    ("exc", "is_oom"),
    [
        (OutOfMemoryError("Out of memory in the queue"), False),
        (MemoryError("out of memory"), False),
        (
            _raised_in_handler(
                AssertionError("fallback wrong"), RuntimeError("CUDA out of memory")
            ),
            False,
        ),
        (
            _raised_in_handler(pytest.fail.Exception("no"), RuntimeError("CUDA out of memory")),
            False,
        ),
        (_raised_in_handler(KeyError("model"), RuntimeError("CUDA out of memory")), True),
        (pytest.fail.Exception("expected no CUDA out of memory"), False),
        (_nested_group(3), True),
        (_nested_group(5000), False),
    ],
    ids=[
        "own-class",
        "host",
        "assert-in-handler",
        "fail-in-handler",
        "wrapped",
        "fail-quoting",
        "group",
        "deep",
    ],
)
def test_what_counts_as_an_oom(exc: BaseException, is_oom: bool) -> None:
    """What is an OOM, and what is not.

    A project's class named OutOfMemoryError is not a framework's; an assertion or
    pytest.fail raised while handling an OOM is the test's verdict; groups nested past
    Python's recursion give no answer rather than an internal error."""
    assert (oom.reason(exc) is not None) is is_oom


def test_two_sessions_writing_one_report_at_once_leave_it_whole(tmp_path: Path) -> None:
    """Two writers of one report never leave half of it.

    Two processes write the same --gpu-report path over and over while it is read: every
    read is one whole record, and no temporary file stays."""
    path = tmp_path / "r.json"
    code = (
        "import sys\n"
        "from gpu_ci.pytest_plugin import report\n"
        "rec = report.new_record()\n"
        "rec['tests'] = [{'nodeid': sys.argv[2] * 2000}] * 20\n"
        "for _ in range(100):\n"
        "    assert report.write(rec, sys.argv[1]) is None\n"
    )
    writers = [subprocess.Popen([sys.executable, "-c", code, str(path), n]) for n in "ab"]
    reads = 0
    while any(w.poll() is None for w in writers):
        if path.exists():
            record = json.loads(path.read_text())
            assert {t["nodeid"][0] for t in record["tests"]} in ({"a"}, {"b"})
            reads += 1
    assert [w.returncode for w in writers] == [0, 0]
    assert reads > 0 and [p.name for p in tmp_path.iterdir()] == ["r.json"]
