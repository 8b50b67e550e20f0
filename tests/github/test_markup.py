"""Issue 25 item 6: markup from the API is text. Runner labels, job names, process names and
the gate's reason come from a fork's workflow file or code; the summaries a maintainer reads
show them as written, never as links, images, HTML or table cells of their own."""

from __future__ import annotations

import re
from datetime import datetime, timezone

import pytest

from gpu_ci.markdown import Markdown, escape, markdown_table
from testkit.github.runs import GPU_RUNS_ON, gpu_run, spend

LINK = "[Approve this PR](https://evil.example/approve)"
HOSTILE = [
    LINK,
    "![x](https://evil.example/pixel.png)",
    "<img src=x onerror=alert(1)>",
    "a | b",
    "<https://evil.example>",
    "line\n[ref]: https://evil.example",
]


def rendered_markup(text: str) -> list[str]:
    """What would be structure in CommonMark: an unescaped link or image opener, an HTML tag,
    an unescaped pipe (the line breaks ``escape`` writes as ``<br>`` aside)."""
    return re.findall(r"\]\(|<(?!br>)[A-Za-z/!]|(?<!\\)\|", text)


@pytest.mark.parametrize("text", HOSTILE)
def test_escape_shows_links_images_html_and_pipes_as_text(text):
    out = escape(text)
    assert rendered_markup(out) == [] and "\n" not in out


#: Text GitHub's Markdown turns into a link with no markup at all (its autolinks).
BARE = [
    "GPU tests failed: see https://evil.example/approve",
    "www.evil.example/approve",
    "mail maintainer.bot+gpu@evil.example",
    "HTTP://EVIL.EXAMPLE",
    "mailto:x@evil.example and xmpp:x@evil.example",
]


def github_html(markdown: str) -> str:
    """What GitHub shows for ``markdown``: its own renderer, cmark-gfm with autolinks."""
    cmarkgfm = pytest.importorskip("cmarkgfm", reason="cmarkgfm (GitHub's cmark-gfm)")
    from cmarkgfm.cmark import Options

    # raw HTML kept (GitHub keeps the <br> escape writes; it would drop a <script>)
    return cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)


@pytest.mark.parametrize("text", HOSTILE + BARE)
def test_github_renders_escaped_text_with_no_link_image_or_tag(text):
    html = github_html(escape(text))
    assert re.findall(r"<(?!/?p>|br>)[^>]*>", html) == [], html
    if text in BARE:
        assert "<a " in github_html(text)  # unescaped, GitHub links it


#: Red team (issue 44): cmark-gfm starts a URL's scheme after any non-letter and ``www.``
#: after ``_``, ``*``, ``~`` or ``(``; a word character there is no regex word boundary.
GLUED = [
    "job_https://evil.example/approve",
    "step1https://evil.example/approve",
    "caf\u00e9https://evil.example/approve",
    "gpu_www.evil.example/approve",
]


@pytest.mark.parametrize("text", GLUED)
def test_a_url_glued_to_a_word_makes_no_link(text):
    assert "<a " in github_html(text)  # unescaped, GitHub links it
    assert "<a " not in github_html(escape(text))


def test_a_table_cell_is_text_and_a_markdown_cell_is_ours():
    table = markdown_table(["runner", "link"], [(LINK, Markdown("[run 7](https://x/7)"))])
    row = table.splitlines()[2]
    assert "&#91;Approve this PR&#93;(https\u2060://evil.example/approve)" in row
    assert "[run 7](https://x/7)" in row and row.count(" | ") == 1


def test_a_fork_runner_label_is_no_link_in_the_spend_report(run_cli, server, tmp_path):
    gpu_run(
        server,
        datetime(2026, 11, 7, 9, tzinfo=timezone.utc),
        30,
        labels=("self-hosted", "gpu", LINK),
    )
    result = spend(run_cli, server, tmp_path, env=GPU_RUNS_ON)
    assert result.returncode == 0, result.stdout
    assert "Approve this PR" in result.summary
    assert "](https://evil.example" not in result.summary


def test_a_process_name_plants_no_html_in_the_monitor_table():
    from gpu_ci.cuda.monitor import views as mr

    table = mr._table(["process"], [("<img src=x onerror=alert(1)>",), ("[a](https://e.x)",)])
    assert "<img" not in table and "](https://e.x" not in table
    assert "&lt;img src=x onerror=alert(1)&gt;" in table


def _results_step() -> str:
    import yaml

    from testkit.shared import ROOT

    flow = yaml.safe_load((ROOT / ".github/workflows/gpu-ci.yml").read_text())
    (step,) = [s for s in flow["jobs"]["results"]["steps"] if s.get("name") == "Results"]
    return step["run"]


REASONS = [
    "a@b@evil.example and x@y@z@w.example",
    "skip\n::error title=GPU CI::all tests passed\n::stop-commands::x",
    f"label {LINK} by <b>x</b> | y \\ z\r\n[ref]: https://evil.example",
    "a\u2028b\u2029c ![i](https://evil.example/i.png)",
    "see HTTPS://evil.example, www.evil.example or gpu+ci@evil.example (mailto:x@y.z)\n",
    "job_https://evil.example, step1https://evil.example or gpu_www.evil.example",
    "user&#64;evil.example, &#x40;maintainer, x&commat;y.example, &#x68;ttps://e.example &amp;",
]


@pytest.mark.parametrize("reason", REASONS)
def test_the_reusable_workflow_prints_the_reason_by_the_same_rule(tmp_path, reason):
    """The results job runs the same escaping in bash (it has no Python): its summary line is
    ``escape(reason)`` and its log line is one line that starts no workflow command."""
    import subprocess

    from gpu_ci.runtime import escape_line

    script = tmp_path / "results.sh"
    script.write_text(_results_step())
    summary = tmp_path / "summary.md"
    base = {
        "REASON": reason,
        "GATE": "success",
        "GITHUB_STEP_SUMMARY": str(summary),
        "PATH": "/usr/bin:/bin",
        "LC_ALL": "C.UTF-8",
        "GATE_ATTEMPT": "1",
        "GITHUB_RUN_ATTEMPT": "1",
    }
    # the tests ran: the check passes and prints the reason as one plain log line
    env = dict(base, RUN="true", BUILD="success", TEST="success")
    proc = subprocess.run(
        ["bash", "-e", str(script)], env=env, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    assert f"Gate: {escape(reason)}\n" in summary.read_text(encoding="utf-8")
    assert proc.stdout == escape_line(f"GPU CI: {reason}") + "\n"
    assert not any(ln.lstrip().startswith("::") for ln in proc.stdout.splitlines())
    # the gate refused: the check fails with one ::error whose message is the reason as
    # workflow-command data (%, CR, LF encoded), so the reason starts no command of its own
    env = dict(base, RUN="false", BUILD="skipped", TEST="skipped")
    proc = subprocess.run(
        ["bash", "-e", str(script)], env=env, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 1, proc.stderr
    data = reason.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    assert proc.stdout == f"::error title=GPU CI::the GPU tests did not run: {data}.\n"
