"""Outputs, annotations, masks and the job summary."""

from __future__ import annotations

import io

from gpu_ci.runtime import Runtime, markdown_table
from tests.conftest import parse_output_file


def test_outputs_use_the_file_command_format_with_multiline_values(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.write_text("")
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    rt = Runtime()
    rt.set_output("run", "true")
    rt.set_output("reason", "line one\nline two")
    assert parse_output_file(out.read_text()) == {"run": "true",
                                                  "reason": "line one\nline two"}


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
        "::error title=gate::bad thing: 50%25 done%0Asecond line")


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
    assert "&lt;img src=\"https://evil/pixel\"&gt;" in text
