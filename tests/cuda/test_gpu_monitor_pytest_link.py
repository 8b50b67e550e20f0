"""gpu-monitor's report places the pytest plugin's findings in the job's time."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpu_ci.cuda import pytest_link
from gpu_ci.pytest_plugin import report
from testkit.cli import parse_output_file
from testkit.gpu_monitor_env import BUSY_SCRIPT, EPOCH, fake_gpu_env, wait_for_stop_line


def plugin_record(tests: list[dict[str, object]]) -> dict[str, object]:
    """A session report in the plugin's own shape, with these tests."""
    record = report.new_record()
    record["settings"] = {"oom_reruns": 1, "leak_threshold_mib": 64.0}
    base = {"path": "t.py", "line": 1, "worker": "main", "gpus": [0], "peak_mib": None}
    base.update(peak_source=None, context_created=False, oom=None, oom_reruns=0)
    record["tests"] = [{**base, **t} for t in tests]
    return record


def test_the_report_links_the_plugins_findings_by_time(run_cli, tmp_path: Path) -> None:
    """The plugin's OOM and leak are listed at their job times.

    The start exports the directory; an OOM at +1:05 (the script's 30 GiB phase) and a
    leak at +0:35 are listed in time order with the memory the sampler saw then."""
    env = fake_gpu_env(tmp_path, BUSY_SCRIPT, samples=90)
    env["GITHUB_ENV"] = str(tmp_path / "github_env")
    Path(env["GITHUB_ENV"]).write_text("")
    started = run_cli(["gpu-monitor", "--mode", "start"], env)
    assert started.returncode == 0, started.stdout + started.stderr
    exported = parse_output_file(Path(env["GITHUB_ENV"]).read_text())
    directory = Path(exported[pytest_link.REPORT_DIR_VARIABLE])
    assert directory.is_dir() and oct(directory.stat().st_mode & 0o777) == "0o700"
    wait_for_stop_line(env)
    record = plugin_record(
        [
            {
                "nodeid": "t.py::test_big",
                "start": EPOCH + 65,
                "end": EPOCH + 68,
                "outcome": "failed",
                "oom": "torch.OutOfMemoryError",
                "oom_reruns": 1,
                "leftover_mib": 0.0,
            },
            {
                "nodeid": "t.py::test_leaky",
                "start": EPOCH + 35,
                "end": EPOCH + 36,
                "outcome": "passed",
                "leftover_mib": 500.0,
            },
            {
                "nodeid": "t.py::test_fine",
                "start": EPOCH + 40,
                "end": EPOCH + 41,
                "outcome": "passed",
                "leftover_mib": 10.0,
            },
        ]
    )
    report.write(record, str(directory / "pytest-gpu-1.json"))
    done = run_cli(["gpu-monitor", "--mode", "report"], env)
    assert done.returncode == 0, done.stdout + done.stderr
    section = done.summary[done.summary.index("#### pytest (gpu-ci plugin), by time") :]
    rows = [line for line in section.splitlines() if line.startswith("| +")]
    assert rows == [
        "| +0:35 | t.py::test_leaky | left 500 MiB after teardown | 0 | 10,240 MiB |",
        "| +1:05 | t.py::test_big | out of memory, still failing after 1 rerun(s) | 0 "
        "| 30,720 MiB |",
    ]


def test_what_the_job_wrote_there_is_read_within_limits(tmp_path: Path) -> None:
    """PR code may write anything in the directory: a FIFO, a huge file, junk JSON, wrong
    types; only the plugin's shape is read, and nothing blocks or fails."""
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "huge.json").write_bytes(b" " * (pytest_link.MAX_BYTES + 1))
    (tmp_path / "junk.json").write_text("{not json")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "types.json").write_text(
        json.dumps({"tests": [1, {"start": "x"}, {"start": 1.0, "end": True, "oom": "y"}]})
    )
    good = plugin_record(
        [
            {
                "nodeid": "t.py::a",
                "start": 5.0,
                "end": 6.0,
                "outcome": "passed",
                "oom": "cupy.cuda.memory.OutOfMemoryError",
                "oom_reruns": 1,
                "leftover_mib": 0.0,
            }
        ]
    )
    (tmp_path / "good.json").write_text(json.dumps(good))
    records = pytest_link.read_reports(str(tmp_path))
    found = pytest_link.links(records)
    assert [(x.nodeid, x.finding) for x in found] == [
        ("t.py::a", "out of memory, passed after 1 rerun(s)")
    ]
    assert pytest_link.markdown(found, 0.0, []).splitlines()[-1] == (
        "| +0:05 | t.py::a | out of memory, passed after 1 rerun(s) | 0 | ? |"
    )


def test_deep_json_and_odd_numbers_are_skipped_not_a_traceback(tmp_path: Path) -> None:
    """Deep JSON and odd numbers are skipped.

    JSON nested past the parser's recursion, infinite or NaN times (Python's json reads
    ``Infinity``), a non-list ``gpus``: skipped, and the good test still listed."""
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "deep_dict.json").write_text('{"tests": ' + "[" * 100_000 + "]" * 100_000 + "}")
    odd = plugin_record(
        [
            {"nodeid": "t.py::inf", "start": 1.0, "end": 2.0, "oom": "x", "gpus": 5},
            {"nodeid": "t.py::big", "start": 1e308 * 10, "end": 2.0, "oom": "x"},
            {"nodeid": "t.py::nan", "start": float("nan"), "end": 2.0, "oom": "x"},
            {"nodeid": "t.py::neg", "start": 1.0, "end": float("-inf"), "oom": "x"},
            {"nodeid": "t.py::runs", "start": 1.0, "end": 2.0, "oom": "x", "oom_reruns": 1e400},
            {"nodeid": "t.py::ok", "start": 3.0, "end": 4.0, "oom": "x", "oom_reruns": 1},
        ]
    )
    (tmp_path / "odd.json").write_text(json.dumps(odd))
    found = pytest_link.links(pytest_link.read_reports(str(tmp_path)))
    text = pytest_link.markdown(found, 0.0, [])
    assert [x.nodeid for x in found] == ["t.py::inf", "t.py::runs", "t.py::ok"]
    assert "| +0:03 | t.py::ok | out of memory, still failing after 1 rerun(s) | 0 | ? |" in text
    assert "inf" not in text.replace("t.py::inf", "")


def test_a_planted_symlink_is_not_followed_out_of_the_directory(tmp_path: Path) -> None:
    """A planted link is not followed.

    A link in the reports' directory to a file elsewhere on the host is not read."""
    outside = tmp_path / "outside.json"
    outside.write_text(
        json.dumps(plugin_record([{"nodeid": "secret", "start": 1.0, "end": 2.0, "oom": "x"}]))
    )
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "link.json").symlink_to(outside)
    assert pytest_link.read_reports(str(reports)) == []


def test_many_big_reports_are_read_within_one_total(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reports are read within one total.

    64 files each just under the per-file limit are not all held at once: the bytes
    read in all stay within the total."""
    monkeypatch.setattr(pytest_link, "MAX_BYTES", 1000)
    monkeypatch.setattr(pytest_link, "MAX_TOTAL_BYTES", 4000)
    one = plugin_record([{"nodeid": "t.py::a", "start": 1.0, "end": 2.0, "oom": "x"}])
    raw = json.dumps(one)
    raw += " " * (900 - len(raw))
    for i in range(pytest_link.MAX_FILES):
        (tmp_path / f"r{i:02d}.json").write_text(raw)
    records = pytest_link.read_reports(str(tmp_path))
    assert len(records) == 4


def test_a_test_id_is_text_in_the_monitors_table() -> None:
    """The job names its tests: HTML, a link or a code span in an id stays text."""
    link = pytest_link.Link(5.0, 6.0, "t.py::t[<img src=x>[a](https://e.example)`c`]", "f", (0,))
    row = pytest_link.markdown([link], 0.0, []).splitlines()[-1]
    assert row == (
        "| +0:05 | t.py::t\\[&lt;img src=x&gt;\\[a\\](https://e.example)\\`c\\`\\] | f | 0 | ? |"
    )


def test_the_reports_directory_replaced_by_a_link_is_not_read(tmp_path: Path) -> None:
    """The job swaps the directory for a link to another: nothing is read through it."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    record = plugin_record([{"nodeid": "x", "start": 1.0, "end": 2.0, "oom": "y"}])
    (elsewhere / "r.json").write_text(json.dumps(record))
    assert len(pytest_link.read_reports(str(elsewhere))) == 1
    (tmp_path / "pytest").symlink_to(elsewhere)
    assert pytest_link.read_reports(str(tmp_path / "pytest")) == []
