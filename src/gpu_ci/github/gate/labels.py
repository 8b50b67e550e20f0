"""remove-label's core: which labels, which issue number, and what each answer means.

One ``DELETE /repos/{owner}/{repo}/issues/{number}/labels/{name}`` per label: it removes
just that label, so it cannot race with other label edits the way rewriting the whole set
would. The answer's status decides the outcome; nothing here does I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_ci.errors import UsageError
from gpu_ci.github.event import subject_of


def parse_labels(items: Sequence[str]) -> list[str]:
    """Labels in order, without case-insensitive duplicates (GitHub's label names)."""
    seen: set[str] = set()
    out = []
    for name in items:
        key = name.casefold()
        if key not in seen:
            seen.add(key)
            out.append(name)
    if not out:
        raise UsageError("input 'labels' is empty: name at least one label to remove.")
    return out


def number_from_event(event_name: str, payload: Mapping[str, Any]) -> int | None:
    """The pull request or issue number of ``pull_request*``, ``issue*`` and ``workflow_run``."""
    return subject_of(payload).number


def parse_number(text: str) -> int:
    value = text.strip().lstrip("#")
    if not value.isdigit() or int(value) <= 0:
        raise UsageError(f"input 'number' must be a positive integer, got {text!r}.")
    return int(value)


class Result(enum.Enum):
    REMOVED = "removed"
    ABSENT = "absent"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not found"
    FAILED = "failed"
    SKIPPED = "not attempted"


@dataclass(frozen=True)
class Outcome:
    label: str
    result: Result
    detail: str = ""

    @property
    def is_error(self) -> bool:
        return self.result not in (Result.REMOVED, Result.ABSENT)


PERMISSION_FIX = (
    "The job needs 'permissions: pull-requests: write' (or 'issues: write'). A pull_request "
    "run from a fork always gets a read-only token: remove the label from a "
    "pull_request_target workflow (without checking out the pull request) or from a "
    "workflow_run workflow instead."
)


def outcome_of(label: str, status: int, message: str, number: int, repository: str) -> Outcome:
    """The meaning of one DELETE's answer (after the client's retries)."""
    if 200 <= status < 300:
        return Outcome(label, Result.REMOVED)
    if status == 404 and "label does not exist" in message.lower():
        return Outcome(label, Result.ABSENT, f"'{label}' was not on #{number}.")
    if status == 404:
        return Outcome(
            label,
            Result.NOT_FOUND,
            (
                f"#{number} was not found in {repository} "
                f"(HTTP 404{': ' + message if message else ''}): check 'number' and "
                "'repository', and that the token can see the repository."
            ),
        )
    if status in (401, 403):
        return Outcome(
            label,
            Result.FORBIDDEN,
            (
                f"GitHub refused to remove '{label}' from #{number} (HTTP {status}"
                f"{': ' + message if message else ''}). {PERMISSION_FIX}"
            ),
        )
    return Outcome(
        label,
        Result.FAILED,
        (
            f"removing '{label}' from #{number} failed after retries (HTTP {status}"
            f"{': ' + message if message else ''})."
        ),
    )
