"""Text a pull request controls never links or mentions through an entity.

``gpu_ci.markdown.escape`` breaks GitHub's autolinks by putting a word joiner after a
scheme, ``www`` or ``@``, and the PR comment puts one after every ``@``. A character
reference such as ``&#64;`` is decoded by cmark-gfm *before* its autolink and GitHub's
mention filters run, so ``user&#64;evil.example`` would be a live ``mailto:`` link and
``&#64;maintainer`` a live mention (notified at every edit of the bot's comment): the
escape writes ``&`` as ``&amp;``, and the text shows as written.
"""

from __future__ import annotations

import html as html_module
import re

import pytest

from gpu_ci.github import status as statuses
from gpu_ci.github.status import pr_comment
from gpu_ci.markdown import escape, markdown_table

HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
CONFIG = pr_comment.make_config(
    "GPU CI", "CUDA CI", "write", "/gpu-ci run", "", "keep", statuses.DEFAULT_CREATORS
)
#: Job names a fork's workflow can carry; gpu-status quotes them in "GPU tests failed …".
NAMES = [
    "tests user&#64;evil.example",
    "tests user&#x40;evil.example",
    "tests user&commat;evil.example",
]


def _html(markdown: str) -> str:
    cmarkgfm = pytest.importorskip("cmarkgfm", reason="cmarkgfm (GitHub's cmark-gfm)")
    from cmarkgfm.cmark import Options

    return cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)


@pytest.mark.parametrize("name", NAMES)
def test_an_entity_encoded_at_sign_in_a_job_name_is_no_link_in_a_summary(name):
    """A job named ``tests user&#64;evil.example`` is a mailto link in summaries."""
    html = _html(markdown_table(["job", "result"], [[name, "failure"]]))
    assert "<a " not in html, html
    assert "evil.example" in html  # still there to read


@pytest.mark.parametrize("name", NAMES)
def test_an_entity_encoded_at_sign_is_no_link_in_the_pr_comment(name):
    """A job name quoted in the PR comment: ``&#64;`` makes a mailto link."""
    shown = pr_comment.Shown(
        2, HEAD, "failure", f"GPU tests failed on {HEAD[:12]} (approved by @m): {name}: failure."
    )
    html = _html(pr_comment.render(CONFIG, shown))
    assert re.findall(r'href="(mailto:[^"]*)"', html) == []


def test_an_entity_encoded_mention_stays_no_mention_in_the_pr_comment():
    """A job name ``ping &#64;maintainer`` renders as a bare ``@maintainer``: a live mention."""
    shown = pr_comment.Shown(
        2, HEAD, "failure", f"GPU tests failed on {HEAD[:12]}: ping &#64;maintainer: failure."
    )
    html = _html(pr_comment.render(CONFIG, shown))
    text = re.sub(r"<[^>]+>", "", html)
    # what GitHub's mention filter reads: an @ directly followed by a login
    assert re.findall(r"@[A-Za-z0-9]", text) == [], text


def test_escape_leaves_no_character_reference_to_decode():
    """The one rule: whatever ``escape`` returns, cmark-gfm shows the characters it was given."""
    for text in ["a&#64;b.example", "&#x68;ttps://e.example", "&amp;#64;", "x&lt;y"]:
        shown = html_module.unescape(re.sub(r"<[^>]+>|\n", "", _html(escape(text))))
        assert shown.replace("\u2060", "") == text
