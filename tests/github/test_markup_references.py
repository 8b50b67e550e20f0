"""The reusable workflow's bash escaping against the gate's push reason.

On a push (a maintainer merging a fork's pull request) with ``paths`` set, the gate's
reason names the first changed file that matches: a file name the fork chose. The results
job of ``.github/workflows/gpu-ci.yml`` writes that reason into the run's summary with its
bash twin of :func:`gpu_ci.markdown.escape`, whose ``sed`` consumes the character after
each ``@`` it breaks, so the next ``@`` of ``a@b@evil.example`` keeps its e-mail autolink.
"""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from gpu_ci.github import gate
from gpu_ci.markdown import escape
from testkit.shared import ROOT

FILE = "src/a@b@evil.example.py"


def _results_step() -> str:
    flow = yaml.safe_load((ROOT / ".github/workflows/gpu-ci.yml").read_text())
    (step,) = [s for s in flow["jobs"]["results"]["steps"] if s.get("name") == "Results"]
    return str(step["run"])


def _push_reason() -> str:
    config = gate.make_config(
        gate.GateInputs(
            label="CUDA CI",
            min_permission="write",
            run_on=["push"],
            require_fresh_head=True,
            paths=["src/**"],
            skip_draft=False,
            gpu_runs_on='["self-hosted","gpu"]',
            cpu_runs_on="ubuntu-latest",
        )
    )
    step = gate.PushCheck(before="1" * 40, after="2" * 40, sha="2" * 40)
    decision = gate.decide_push(step, config, [FILE])
    assert decision.run and FILE in decision.reason
    return decision.reason


def test_a_merged_file_named_a_at_b_at_evil_is_no_link_in_the_results_summary(tmp_path):
    """A merged fork file `src/a@b@evil.example.py` is a mailto link in the summary."""
    cmarkgfm = pytest.importorskip("cmarkgfm", reason="cmarkgfm (GitHub's cmark-gfm)")
    from cmarkgfm.cmark import Options

    reason = _push_reason()
    script = tmp_path / "results.sh"
    script.write_text(_results_step())
    summary = tmp_path / "summary.md"
    env = {
        "REASON": reason,
        "GATE": "success",
        "RUN": "true",
        "BUILD": "success",
        "TEST": "success",
        "GITHUB_STEP_SUMMARY": str(summary),
        "PATH": "/usr/bin:/bin",
        "LC_ALL": "C.UTF-8",
        "GATE_ATTEMPT": "1",
        "GITHUB_RUN_ATTEMPT": "1",
    }
    proc = subprocess.run(
        ["bash", "-e", str(script)], env=env, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    text = summary.read_text(encoding="utf-8")
    html = cmarkgfm.github_flavored_markdown_to_html(text, options=Options.CMARK_OPT_UNSAFE)
    assert re.findall(r'href="([^"]*)"', html) == [], html
    assert f"Gate: {escape(reason)}\n" in text  # the same rule as the Python summary


#: GitHub's references in an issue comment: each becomes a link (and a cross-reference in
#: the other repository's timeline), though no Markdown syntax is involved.
REFERENCES = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+#\d+|(?<![\w&])GH-\d+|(?<![\w&/])#\d+\b")


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("tests (evil-org/phish#1)", id="cross-repository"),
        pytest.param("tests: see #1 and GH-2", id="same-repository"),
    ],
)
def test_a_reference_in_a_job_name_is_no_link_in_the_pr_comment(name):
    """A job named `evil-org/phish#1` is a live cross-repository link in the comment."""
    from gpu_ci.github import status as statuses
    from gpu_ci.github.status import pr_comment

    config = pr_comment.make_config(
        "GPU CI", "CUDA CI", "write", "/gpu-ci run", "", "keep", statuses.DEFAULT_CREATORS
    )
    head = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
    description = f"GPU tests failed on {head[:12]} (approved by @maintainer): {name}: failure."
    body = pr_comment.render(config, pr_comment.Shown(2, head, "failure", description))
    state = body.splitlines()[3]
    assert REFERENCES.findall(state) == [], state
