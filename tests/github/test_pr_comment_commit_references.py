"""The PR comment against commit references quoted from the pull request.

GitHub links a bare commit SHA (7 to 40 hex digits) in a comment to
``/<owner>/<repo>/commit/<sha>``, as it links ``#1``: a fork's commit resolves there too,
shown under the base repository's name. A job name is the pull request's to choose, and
gpu-status quotes it in its "GPU tests failed" status, which the comment shows.
"""

from __future__ import annotations

import re

import pytest

from gpu_ci.github import status as statuses
from gpu_ci.github.status import pr_comment

HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
#: A commit only the fork has, e.g. one that rewrites the release workflow.
FORK_COMMIT = "d6cd1e2bd19e03a81132a23b2025920577f84e37"
#: GitHub's commit references: a hex run of 7 to 40 digits that is a whole word.
COMMIT = re.compile(r"(?<![0-9A-Za-z_])[0-9a-f]{7,40}(?![0-9A-Za-z_])")


def _visible(markdown: str) -> str:
    """The text outside code spans, where GitHub's reference filter looks."""
    return re.sub(r"(`+)(?:(?!\1).)+\1", "", markdown)


def test_a_commit_sha_in_a_job_name_is_no_link_in_the_pr_comment():
    """A job named `tests (d6cd1e2…)` links a fork's commit in the comment."""
    config = pr_comment.make_config(
        "GPU CI", "CUDA CI", "write", "/gpu-ci run", "", "keep", statuses.DEFAULT_CREATORS
    )
    name = f"tests (fixed in {FORK_COMMIT}, see {FORK_COMMIT[:7]})"
    description = f"GPU tests failed on {HEAD[:12]} (approved by @maintainer): {name}: failure."
    body = pr_comment.render(config, pr_comment.Shown(2, HEAD, "failure", description))
    state = body.splitlines()[3]
    linked = [sha for sha in COMMIT.findall(_visible(state)) if FORK_COMMIT.startswith(sha)]
    assert linked == [], state


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(f"tests (a{FORK_COMMIT[:7]})", id="a-hex-digit-before-it"),
        pytest.param(f"tests (0{FORK_COMMIT[:39]})", id="forty-hex-digits"),
        pytest.param(f"tests (\u00e9{FORK_COMMIT[:7]})", id="a-non-ascii-letter-before-it"),
    ],
)
def test_a_commit_sha_behind_a_hex_digit_is_no_link_in_the_pr_comment(name):
    """A job named `tests (ad6cd1e2)` keeps `d6cd1e2` a live commit link after the break."""
    config = pr_comment.make_config(
        "GPU CI", "CUDA CI", "write", "/gpu-ci run", "", "keep", statuses.DEFAULT_CREATORS
    )
    description = f"GPU tests failed on {HEAD[:12]} (approved by @maintainer): {name}: failure."
    body = pr_comment.render(config, pr_comment.Shown(2, HEAD, "failure", description))
    state = body.splitlines()[3]
    linked = [sha for sha in COMMIT.findall(_visible(state)) if FORK_COMMIT.startswith(sha)]
    assert linked == [], state
