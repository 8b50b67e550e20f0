"""Builders for the "GPU CI" commit statuses that gpu-gate and gpu-status write.

The wording is the product's (``gpu_ci.github.status``): tests that read an approval
build it here, so a change of wording is one change in the kit.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from gpu_ci.github.approval import approval_link
from testkit.github.runs import FORK, HEAD, REPO, WF
from testkit.github_server import FakeGitHub, PullRequest

BOT = "github-actions[bot]"
CONTEXT = "GPU CI"
#: The instant the pure-rule tests call now.
CLOCK = datetime(2026, 11, 2, 12, 0, tzinfo=timezone.utc)


def ts(minutes_ago: float, now: datetime = CLOCK) -> str:
    """GitHub's timestamp of ``minutes_ago`` minutes before ``now``."""
    return (now - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pr_run(
    run_id: int = 5,
    *,
    event: str = "pull_request",
    actor: str = "maintainer",
    trigger: str | None = None,
    head_repo: str | None = FORK,
    path: str = WF,
    created: float = 51,
    started: float | None = None,
    attempt: int = 1,
    pulls: tuple[int, ...] = (),
    repo: str = REPO,
) -> dict[str, Any]:
    """A run of the GPU workflow, as a ``workflow_run`` event carries it.

    ``created`` and ``started`` are minutes before :data:`CLOCK`; ``trigger`` (who
    started this attempt) defaults to ``actor``, ``started`` to ``created``."""
    return {
        "id": run_id,
        "head_sha": HEAD,
        "event": event,
        "path": path,
        "html_url": f"https://github.com/{repo}/actions/runs/{run_id}",
        "run_attempt": attempt,
        "created_at": ts(created),
        "run_started_at": ts(created if started is None else started),
        "triggering_actor": {"login": trigger or actor},
        "actor": {"login": actor},
        "head_repository": None if head_repo is None else {"full_name": head_repo},
        "pull_requests": [{"number": n} for n in pulls],
        "workflow_id": 9,
    }


def queued(by: str = "maintainer", sha: str = HEAD) -> str:
    """The description of an approval that waits for its run."""
    return f"Approved by @{by} for {sha[:12]}: GPU run queued."


def running(by: str = "maintainer") -> str:
    """The description once the approved run started."""
    return f"Approved by @{by}: GPU run in progress."


#: The GPU workflow file an approval covers unless a test says otherwise.
COVERED = (".github/workflows/cuda-ci.yml",)


def checks_url(pr: int = 2, repo: str = REPO, covers: tuple[str, ...] = COVERED) -> str:
    """Where an approval's status links: the pull request's checks, naming what it covers."""
    pull = f"https://github.com/{repo}/pull/{pr}/checks"
    return approval_link(pull, covers) if covers else pull


def post(
    github: FakeGitHub,
    description: str,
    *,
    repo: str = REPO,
    sha: str = HEAD,
    state: str = "pending",
    context: str = CONTEXT,
    url: str | None = None,
    creator: str = BOT,
    created_at: str | None = None,
) -> dict[str, Any]:
    """Put a commit status on ``sha``, newest first; return it."""
    target = github.repos[repo]
    body = {"context": context, "state": state, "description": description}
    if url is not None:
        body["target_url"] = url
    status = github.status_json(target, sha, body, creator)
    if created_at is not None:
        status["created_at"] = created_at
    target.statuses.setdefault(sha, []).insert(0, status)
    return status


def post_approval(
    github: FakeGitHub,
    *,
    by: str = "maintainer",
    repo: str = REPO,
    sha: str = HEAD,
    url: str | None = None,
    created_at: str | None = None,
) -> dict[str, Any]:
    """Put gpu-gate's approval of ``sha`` by ``by`` on the commit; return it."""
    return post(github, queued(by, sha), repo=repo, sha=sha, url=url, created_at=created_at)


def status(
    description: str,
    state: str = "pending",
    *,
    url: str = "",
    created_at: str,
    creator: str = BOT,
) -> dict[str, Any]:
    """A status as the pure rules of ``gpu_ci.github.status`` read it (no server)."""
    return {
        "context": CONTEXT,
        "state": state,
        "description": description,
        "target_url": url,
        "created_at": created_at,
        "creator": {"login": creator},
    }


def approved_pull(github: FakeGitHub, repo: str, sha: str, *, url: str | None = None) -> None:
    """Pull request #2 of ``repo`` at ``sha``, approved by @maintainer (gpu-gate's wording)."""
    github.add_repo(repo)
    github.add_pull(repo, PullRequest(2, sha))
    post_approval(github, repo=repo, sha=sha, url=url)
