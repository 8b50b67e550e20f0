"""The event that triggered the workflow run, from GitHub's variables."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpu_ci.errors import GpuCiError

DEFAULT_API_URL = "https://api.github.com"
#: The pull request events: gpu-gate and gpu-status read the pull request from them.
PR_EVENTS = ("pull_request", "pull_request_target")
#: Events whose commit the repository already holds: a push, the default branch, a merge
#: queue's merge group. Any other event (a review, a comment) anyone who can see it triggers.
TRUSTED_EVENTS = ("push", "schedule", "workflow_dispatch", "merge_group")
#: Pull request actions that bring a head to the pull request.
NEW_HEAD = ("opened", "reopened", "ready_for_review", "synchronize")


@dataclass(frozen=True)
class EventContext:
    name: str
    payload: dict[str, Any] = field(repr=False)
    repository: str
    api_url: str
    sha: str


def api_url(environ: Mapping[str, str]) -> str:
    return (environ.get("GITHUB_API_URL") or DEFAULT_API_URL).rstrip("/")


def load_event(environ: Mapping[str, str], *, need_repository: bool = True) -> EventContext:
    """Read ``GITHUB_EVENT_NAME``/``GITHUB_EVENT_PATH``; errors name the variable at fault."""
    name = environ.get("GITHUB_EVENT_NAME", "").strip()
    if not name:
        raise GpuCiError(
            "GITHUB_EVENT_NAME is not set: run inside GitHub Actions, or set it (e.g. "
            "GITHUB_EVENT_NAME=pull_request) together with GITHUB_EVENT_PATH.",
            title="missing event",
        )
    path = environ.get("GITHUB_EVENT_PATH", "").strip()
    if not path:
        raise GpuCiError(
            "GITHUB_EVENT_PATH is not set: it must name the JSON file of the webhook payload.",
            title="missing event",
        )
    try:
        with open(path, encoding="utf-8") as handle:
            payload = json.load(handle)
    except OSError as exc:
        raise GpuCiError(
            f"GITHUB_EVENT_PATH={path} cannot be read ({exc.strerror}).", title="missing event"
        ) from None
    except json.JSONDecodeError as exc:
        raise GpuCiError(
            f"GITHUB_EVENT_PATH={path} is not valid JSON (line {exc.lineno}: {exc.msg}).",
            title="malformed event",
        ) from None
    if not isinstance(payload, dict):
        raise GpuCiError(
            f"GITHUB_EVENT_PATH={path} holds a JSON {type(payload).__name__}, not an object.",
            title="malformed event",
        )
    repository = environ.get("GITHUB_REPOSITORY", "").strip()
    if not repository:
        repository = str((payload.get("repository") or {}).get("full_name") or "")
    if need_repository and repository.count("/") != 1:
        raise GpuCiError(
            "GITHUB_REPOSITORY is not set to owner/name and the event payload has no "
            "repository.full_name.",
            title="missing repository",
        )
    return EventContext(
        name=name,
        payload=payload,
        repository=repository,
        api_url=api_url(environ),
        sha=environ.get("GITHUB_SHA", "").strip(),
    )


@dataclass(frozen=True)
class Subject:
    """What an event is about, as far as its payload says: the one parser of these fields.

    ``number`` is the pull request or issue number (``pull_request.number``, else the
    payload's ``number``; ``issue.number``; ``workflow_run.pull_requests[0].number``).
    ``head_sha`` and ``fork`` come only from a ``pull_request`` object: ``fork`` is true
    when the head repository differs from the base or was deleted.
    """

    number: int | None
    pull_request: bool = False
    head_sha: str = ""
    fork: bool = False


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def subject_of(payload: Mapping[str, Any]) -> Subject:
    pr = payload.get("pull_request")
    if isinstance(pr, dict):
        head_value = pr.get("head")
        head: dict[str, Any] = head_value if isinstance(head_value, dict) else {}
        sha = head.get("sha")
        base_repo = ((pr.get("base") or {}).get("repo") or {}).get("full_name")
        head_repo = (head.get("repo") or {}).get("full_name")  # None: the fork was deleted
        return Subject(
            number=_int(pr.get("number")) or _int(payload.get("number")),
            pull_request=True,
            head_sha=sha if isinstance(sha, str) else "",
            fork=head_repo is None or head_repo != base_repo,
        )
    issue = payload.get("issue")
    if isinstance(issue, dict) and _int(issue.get("number")) is not None:
        return Subject(number=_int(issue.get("number")))
    run = payload.get("workflow_run")
    if isinstance(run, dict):
        pulls = run.get("pull_requests") or []
        if pulls and isinstance(pulls[0], dict) and _int(pulls[0].get("number")) is not None:
            return Subject(number=_int(pulls[0].get("number")))
    return Subject(number=_int(payload.get("number")))


def label_of(payload: Mapping[str, Any]) -> str:
    """The label a ``labeled`` event applied, or ""."""
    return str((payload.get("label") or {}).get("name") or "")


def is_gate_label(name: str, gate_label: str) -> bool:
    """Whether ``name`` is the gate label.

    GitHub's label names ignore case, so this check does too."""
    return name.casefold() == gate_label.casefold()
