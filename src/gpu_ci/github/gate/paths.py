"""Glob patterns over changed files, as GitHub's ``on.<event>.paths`` filter reads them.

``*`` matches within one path segment, ``**`` across segments, ``?`` one character and
``[...]`` a class. A pattern starting with ``!`` excludes. Patterns are read in order and
the last one that matches a file decides whether that file counts, so ``!docs/**`` after
``**`` drops documentation and ``docs/keep.md`` after that brings one file back.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache


@lru_cache(maxsize=256)
def glob_to_regex(pattern: str) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif char == "*":
            out.append("[^/]*")
            i += 1
        elif char == "?":
            out.append("[^/]")
            i += 1
        elif char == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.append(re.escape(char))
                i += 1
            else:
                body = pattern[i + 1 : end]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = end + 1
        else:
            out.append(re.escape(char))
            i += 1
    return re.compile("".join(out) + r"\Z")


#: "it includes up to 300 changed files for the entire comparison" (repos/compare-commits)
COMPARE_FILES_MAX = 300
#: "Responses include a maximum of 3000 files." (pulls/list-files)
PULL_FILES_MAX = 3000


@dataclass(frozen=True)
class PathsMatch:
    matched: bool
    first_file: str | None
    """The first changed file that counts, for the summary."""
    files_seen: int
    capped: bool = False
    """No file matched, but the list held as many files as GitHub lists at most: files
    past the cap were never seen, so whether the change touches ``paths`` is unknown
    (the gate runs rather than skips)."""


def match_paths(
    patterns: Sequence[str], files: Iterable[str], cap: int | None = None
) -> PathsMatch:
    compiled = [
        (p.startswith("!"), glob_to_regex(p[1:] if p.startswith("!") else p)) for p in patterns
    ]
    seen = 0
    for name in files:
        seen += 1
        counts = False
        for negated, regex in compiled:
            if regex.match(name):
                counts = not negated
        if counts:
            return PathsMatch(True, name, seen)
    return PathsMatch(False, None, seen, capped=cap is not None and seen >= cap)
