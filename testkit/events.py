"""Event payloads the project writes itself, for `make demo` and the benchmarks.

The tests use GitHub's own example payloads (octokit/webhooks, read from ../shared); the demo
and the benchmarks must run without ../shared, so they get these: only the fields our actions
and the example workflows read (``action``, ``label.name``, ``sender.login``,
``pull_request.number/state/draft/head/base``, ``repository.full_name``), nothing copied.
:func:`on_pull_request` is the tests' own: it edits GitHub's example payload in place.
"""

from __future__ import annotations

from typing import Any

REPO = "Codertocat/Hello-World"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"


def _repository(full_name: str) -> dict[str, Any]:
    owner, name = full_name.split("/")
    return {
        "full_name": full_name,
        "name": name,
        "owner": {"login": owner},
        "default_branch": "main",
        "private": False,
        "fork": False,
    }


def pull_request_labeled(
    label: str, sender: str, *, number: int = 2, head: str = HEAD, repository: str = REPO
) -> dict[str, Any]:
    """A ``pull_request`` ``labeled`` event: ``label`` added by ``sender`` to a same-repository
    pull request."""
    repo = _repository(repository)
    return {
        "action": "labeled",
        "number": number,
        "label": {"name": label},
        "sender": {"login": sender, "type": "User"},
        "repository": repo,
        "pull_request": {
            "number": number,
            "state": "open",
            "draft": False,
            "labels": [{"name": label}],
            "user": {"login": repo["owner"]["login"]},
            "head": {"sha": head, "ref": "changes", "repo": repo},
            "base": {"sha": "f" * 40, "ref": "main", "repo": repo},
        },
    }


def workflow_dispatch(sender: str = "Codertocat", *, repository: str = REPO) -> dict[str, Any]:
    """A ``workflow_dispatch`` event without inputs."""
    return {
        "inputs": {},
        "ref": "refs/heads/main",
        "sender": {"login": sender, "type": "User"},
        "repository": _repository(repository),
        "workflow": ".github/workflows/cuda-ci.yml",
    }


def on_pull_request(
    payload: dict[str, Any],
    *,
    body: str,
    commenter: str,
    number: int = 2,
    repository: str = REPO,
) -> dict[str, Any]:
    """GitHub's ``issue_comment`` payload, moved onto pull request ``number``.

    octokit/webhooks' example is on an issue. GitHub marks a pull request's issue with
    ``issue.pull_request`` (url, html_url, diff_url, patch_url, merged_at), and carries no head
    SHA."""
    html = f"https://github.com/{repository}/pull/{number}"
    payload["issue"]["number"] = number
    payload["issue"]["pull_request"] = {
        "url": f"https://api.github.com/repos/{repository}/pulls/{number}",
        "html_url": html,
        "diff_url": f"{html}.diff",
        "patch_url": f"{html}.patch",
        "merged_at": None,
    }
    payload["comment"]["body"] = body
    payload["comment"]["user"]["login"] = commenter
    payload["comment"]["html_url"] = f"{html}#issuecomment-{payload['comment']['id']}"
    payload["sender"]["login"] = commenter
    return payload
