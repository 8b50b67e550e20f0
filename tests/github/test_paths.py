"""GitHub-style path globs for gpu-gate's ``paths`` input."""

from __future__ import annotations

import pytest

from gpu_ci.github.gate.paths import glob_to_regex, match_paths


@pytest.mark.parametrize(
    ("pattern", "name", "expected"),
    [
        ("*.py", "setup.py", True),
        ("*.py", "src/setup.py", False),  # * stays within one segment
        ("**.py", "src/deep/x.py", True),
        ("**/*.cu", "kernels/a/b.cu", True),
        ("**/*.cu", "b.cu", True),  # **/ may match nothing
        ("src/**", "src/a/b/c.txt", True),
        ("src/**", "srcx/a", False),
        ("docs/?.md", "docs/a.md", True),
        ("docs/?.md", "docs/ab.md", False),
        ("[abc].txt", "b.txt", True),
        ("[!abc].txt", "b.txt", False),
        ("a+b(c).txt", "a+b(c).txt", True),  # regex metacharacters are literal
    ],
)
def test_glob(pattern, name, expected):
    assert bool(glob_to_regex(pattern).match(name)) is expected


def test_last_matching_pattern_decides():
    patterns = ["**", "!docs/**", "docs/keep.md"]
    assert not match_paths(patterns, ["docs/a.md", "docs/b/c.md"]).matched
    assert match_paths(patterns, ["docs/a.md", "docs/keep.md"]).first_file == "docs/keep.md"
    assert match_paths(patterns, ["src/x.cu"]).matched


def test_only_negative_patterns_match_nothing():
    assert not match_paths(["!docs/**"], ["src/x.py"]).matched


def test_no_files_no_match():
    result = match_paths(["**"], [])
    assert (result.matched, result.files_seen) == (False, 0)
