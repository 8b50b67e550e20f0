"""Outputs, annotations, masks and the job summary."""

from __future__ import annotations

import io

import pytest

from gpu_ci.errors import GpuCiError
from gpu_ci.runtime import Runtime, markdown_table
from testkit.cli import parse_output_file


@pytest.fixture
def output_file(tmp_path, monkeypatch):
    """An empty file GITHUB_OUTPUT names, as the runner gives each step."""
    out = tmp_path / "out"
    out.write_text("")
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    return out


def test_outputs_use_the_file_command_format_with_multiline_values(output_file):
    out = output_file
    rt = Runtime()
    rt.set_output("run", "true")
    rt.set_output("reason", "line one\nline two")
    assert parse_output_file(out.read_text()) == {"run": "true", "reason": "line one\nline two"}


def test_file_commands_are_written_as_the_toolkit_writes_them_without_its_uuid(output_file):
    """Outputs and variables in the toolkit's heredoc format (each value between two lines
    of one fresh delimiter), written without ``actions_toolkit.file_command``: it imports
    ``uuid``, which imports ``platform`` (~5 ms of every action's start-up)."""
    import re
    import subprocess
    import sys

    from testkit.shared import ROOT

    out = output_file
    rt = Runtime()
    rt.set_output("a", "x")
    rt.set_output("b", "x")
    text = out.read_text()
    delimiters = re.findall(r"^[ab]<<(ghadelimiter_[0-9a-f]{32})$", text, re.M)
    assert len(set(delimiters)) == 2 and all(f"\n{d}\n" in text for d in delimiters), text
    code = "import sys, gpu_ci.runtime; print(sorted({'uuid', 'platform'} & set(sys.modules)))"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src")},
    )
    assert proc.stdout.strip() == "[]", proc.stderr


def test_file_commands_go_to_the_files_of_the_runtimes_environment(tmp_path):
    """The Runtime's environment decides where outputs go (the toolkit read the process's,
    after we had looked in ours); a file the runner did not create is a named error."""
    out = tmp_path / "out"
    out.write_text("")
    Runtime(environ={"GITHUB_OUTPUT": str(out)}).set_output("run", "true")
    assert parse_output_file(out.read_text()) == {"run": "true"}
    with pytest.raises(GpuCiError, match="GITHUB_ENV names .* which does not exist"):
        Runtime(environ={"GITHUB_ENV": str(tmp_path / "absent")}).export_variable("A", "1")


def test_outputs_are_name_value_lines_without_github_output():
    buf = io.StringIO()
    Runtime(environ={}, stdout=buf).set_output("run", "false")
    assert buf.getvalue() == "run=false\n"


def test_mask_only_inside_actions(capsys):
    Runtime(environ={}).mask("s3cret")
    assert "s3cret" not in capsys.readouterr().out
    Runtime(environ={"GITHUB_ACTIONS": "true"}).mask("s3cret")
    assert capsys.readouterr().out.strip() == "::add-mask::s3cret"


def test_annotation_has_only_the_title_property(capsys):
    Runtime(environ={}).error("bad thing: 50% done\nsecond line", title="gate")
    assert capsys.readouterr().out.strip() == (
        "::error title=gate::bad thing: 50%25 done%0Asecond line"
    )


def test_summary_is_appended_once(tmp_path):
    path = tmp_path / "summary"
    rt = Runtime(environ={"GITHUB_STEP_SUMMARY": str(path)})
    rt.summary("## one")
    rt.summary(markdown_table(["a", "b"], [["x|y", "multi\nline"]]))
    rt.flush_summary()
    rt.flush_summary()
    text = path.read_text()
    assert text.count("## one") == 1
    assert "| x\\|y | multi<br>line |" in text


def test_table_cells_cannot_plant_html():
    text = markdown_table(["a"], [['<img src="https://evil/pixel"><a href="x">click</a>']])
    assert "<img" not in text and "<a " not in text
    assert '&lt;img src="https\u2060://evil/pixel"&gt;' in text  # and no autolink


# -- the one report writer, the findings annotator, the repository input ----------------


def test_write_report_replaces_a_planted_link_instead_of_writing_through_it(tmp_path):
    from gpu_ci.runtime import write_report

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    report = tmp_path / "out" / "report.json"
    report.parent.mkdir()
    report.symlink_to(victim)
    write_report(report, "{}\n")
    assert victim.read_text() == "keep me\n"
    assert not report.is_symlink() and report.read_text() == "{}\n"
    assert [p.name for p in report.parent.iterdir()] == ["report.json"]


def test_write_report_on_an_unwritable_directory_names_the_input_and_leaves_nothing(tmp_path):
    import pytest

    from gpu_ci.errors import GpuCiError
    from gpu_ci.runtime import write_report

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    with pytest.raises(GpuCiError, match=r"cannot write report-file .*not-a-dir/r\.json"):
        write_report(blocker / "r.json", "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not-a-dir"]


def test_annotate_findings_dispatches_by_level_with_the_fix(capsys):
    from dataclasses import dataclass

    from gpu_ci.runtime import Runtime, annotate_findings

    @dataclass(frozen=True)
    class F:
        level: str
        code: str
        message: str
        fix: str = ""

    annotate_findings(
        Runtime({}),
        "verify-cuda-env",
        [F("error", "a", "bad.", "do x"), F("warning", "b", "hm."), F("info", "c", "ok.")],
    )
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "::error title=verify-cuda-env%3A a::[a] bad. Fix: do x",
        "::warning title=verify-cuda-env%3A b::[b] hm.",
        "::notice title=verify-cuda-env%3A c::[c] ok.",
    ]


def test_repository_from_input_then_environment_else_a_usage_error():
    import pytest

    from gpu_ci.errors import UsageError
    from gpu_ci.runtime import repository

    assert repository(" o/r ", {"GITHUB_REPOSITORY": "x/y"}) == "o/r"
    assert repository("", {"GITHUB_REPOSITORY": "x/y"}) == "x/y"
    cases = (("", {}), ("o", {}), ("o/r/s", {}), ("/r", {}), ("", {"GITHUB_REPOSITORY": "x"}))
    for bad, env in cases:
        with pytest.raises(UsageError, match="owner/name"):
            repository(bad, env)
