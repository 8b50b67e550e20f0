"""The commit status: its type, its limits, and reading GitHub's list of them.

gpu-status posts them; gpu-watchdog posts its own; the approval readings read them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_ci.errors import UsageError
from gpu_ci.values import required

#: GitHub rejects longer descriptions with 422 "description is too long (maximum is 140
#: characters)".
DESCRIPTION_LIMIT = 140
#: GitHub's REST documentation states no limit for ``context``. We chose 255, the width of
#: GitHub's other short name fields, and refuse longer ones up front rather than fail at
#: the POST after the decision (an assumption, stated in the README).
CONTEXT_LIMIT = 255
#: gpu-status's default ``context`` (what the budget reads where no other is configured).
DEFAULT_CONTEXT = "GPU CI"
#: Who writes our statuses: the inert workflows' GITHUB_TOKEN (input ``trusted-creators``
#: names an App's bot instead, where the workflows post with an App token).
DEFAULT_CREATORS = ("github-actions[bot]",)
FINAL = ("success", "failure", "error")
WATCHDOG_PREFIX = "No GPU runner picked this up"


@dataclass(frozen=True)
class Status:
    """One ``POST /repos/{owner}/{repo}/statuses/{sha}``."""

    sha: str
    state: str
    description: str
    target_url: str = ""

    def body(self, context: str) -> dict[str, str]:
        out = {"state": self.state, "context": context, "description": self.description}
        if self.target_url:
            out["target_url"] = self.target_url
        return out


def same_context(value: Any, context: str) -> bool:
    """Whether a status's ``context`` is ``context``, ignoring case.

    GitHub does not tell contexts apart by case: a status posted as ``gpu ci`` replaces
    ``GPU CI``'s in the combined status and satisfies a required check of that name."""
    return isinstance(value, str) and value.casefold() == context.casefold()


def validate_context(value: str) -> str:
    """The ``context`` input, checked: one line, not empty, not too long."""
    context = required(
        "context",
        value,
        "name the commit status, e.g. 'GPU CI' (the name a branch protection rule requires).",
    )
    if len(context) > CONTEXT_LIMIT:
        raise UsageError(
            f"input 'context' is {len(context)} characters long; GitHub accepts "
            f"at most {CONTEXT_LIMIT}: shorten it."
        )
    if "\n" in context or "\r" in context:
        raise UsageError("input 'context' spans several lines: give one line.")
    return context


def clip(text: str, limit: int = DESCRIPTION_LIMIT) -> str:
    """One line of at most ``limit`` characters (GitHub refuses longer descriptions)."""
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 1].rstrip() + "…"


def short(sha: str) -> str:
    """The 12-character commit id our descriptions show."""
    return sha[:12]


def latest_of(statuses: Sequence[Mapping[str, Any]], context: str) -> Mapping[str, Any] | None:
    """The newest status of ``context`` (``statuses`` newest first), or None."""
    return next((s for s in statuses if same_context(s.get("context"), context)), None)


def no_runner(sha: str, waited_seconds: float, labels: Sequence[str], link: str) -> Status:
    """The status gpu-watchdog posts when it cancels a run no runner took."""
    return Status(
        sha,
        "error",
        clip(
            f"{WATCHDOG_PREFIX} in {waited_seconds / 60:.0f} minutes (labels "
            f"{', '.join(labels)}): run cancelled; approve again to retry."
        ),
        link,
    )
