"""A stateful GitHub REST server on 127.0.0.1 for tests: real HTTP, GitHub's shapes.

It answers the endpoints the actions use with the JSON shapes, status codes and headers of
GitHub's REST documentation (``X-RateLimit-*``, ``Retry-After``, ``Link`` pagination), logs
every request for assertions, and injects faults on demand: 5xx, 403 secondary rate limits
and 429 with ``Retry-After``, primary rate limit exhaustion, and slow responses.

Actions state (``WorkflowRun`` / ``Job``): runs with their jobs (labels, runner group,
attempts, steps, timestamps), moved through queued → in_progress → completed by the test
(``FakeGitHub.start_job`` / ``complete_job``) or cancelled over the API; commit statuses per
SHA; and the enhanced billing platform's usage report per organization.

GitHub's contract: every request must name an operation of GitHub's OpenAPI description and
every answer is validated against that operation's response schema (testkit/openapi_contract.py;
a violation answers 500 naming the field and fails the test at ``stop()``). GitHub's documented
limits are served: 1,000 results for a filtered run listing, compare's 300 files on page 1 only,
``per_page`` at most 100, ``created`` bounds to the second, every job state, ``head_repository:
null`` for a deleted fork and no ``pull_requests`` for a fork's run, the artifact zip behind a
302 to a second host (``BlobStorage`` on 127.0.0.2, no token), and secondary rate limits (on
demand: ``secondary_rate_limit``; automatic: 100 concurrent requests, 80 writes a minute).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import threading
import time
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

DOCS = "https://docs.github.com/rest"


@dataclass
class PullRequest:
    number: int
    head_sha: str
    head_ref: str = "feature"
    head_repo: str | None = None
    """full_name of the head repository; None means the base repository (not a fork)."""
    base_ref: str = "main"
    state: str = "open"
    draft: bool = False
    merged: bool = False
    user: str = "contributor"
    labels: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    reviews: list[tuple[str, str, str]] = field(default_factory=list)
    """(login, state, commit_id) in submission order: APPROVED, CHANGES_REQUESTED, ..."""
    base_sha: str = "b" * 40
    """The base branch's commit as GitHub reports it now."""
    mergeable: bool | None = None
    """None: GitHub is still computing; False: a conflict (then no merge commit)."""
    merge_commit_sha: str | None = None
    """``refs/pull/N/merge``: serve its parents through ``Repo.commits``."""


@dataclass
class IssueComment:
    """A comment on an issue or pull request.

    The ``issue-comment`` schema's fields we keep."""

    id: int
    issue_number: int
    user: str
    body: str
    created_at: str = "2026-11-02T10:00:00Z"
    updated_at: str = "2026-11-02T10:00:00Z"


@dataclass
class Commit:
    """Who made a commit, as ``GET /repos/{o}/{r}/commits/{ref}`` (repos/get-commit) shows it:
    ``author``/``committer`` are the GitHub accounts linked to the commit's emails (None: an
    email linked to no account, served as null), ``verified`` its signature verification."""

    sha: str
    author: str | None = "contributor"
    committer: str | None = "contributor"
    verified: bool = False
    reason: str = "unsigned"
    parents: list[str] = field(default_factory=list)
    """Parent SHAs in order (a merge commit: the base, then the merged head)."""


@dataclass
class Repo:
    full_name: str
    private: bool = False
    default_branch: str = "main"
    roles: dict[str, str] = field(default_factory=dict)
    """login -> role_name (read, triage, write, maintain, admin, or a custom role)."""
    legacy_only: set[str] = field(default_factory=set)
    """logins whose permission answer omits role_name (older GHES)."""
    pulls: dict[int, PullRequest] = field(default_factory=dict)
    compares: dict[str, list[str]] = field(default_factory=dict)
    """'base...head' -> changed file names."""
    runs: list[WorkflowRun] = field(default_factory=list)
    statuses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """sha -> commit statuses, newest first (as GitHub lists them)."""
    artifacts: list[Artifact] = field(default_factory=list)
    issue_comments: list[IssueComment] = field(default_factory=list)
    """Comments of every issue and pull request, in creation order (ids ascending)."""
    commits: dict[str, Commit] = field(default_factory=dict)
    """sha -> the commit served by repos/get-commit (a sha not here: 404)."""
    files: dict[str, dict[str, str]] = field(default_factory=dict)
    """branch -> {path: text}: what repos/get-content serves at ``?ref=<branch>``."""


@dataclass
class Artifact:
    """A workflow run's artifact: ``data`` is the zip ``/zip`` redirects to."""

    id: int
    name: str
    data: bytes
    workflow_run: dict[str, Any]
    """id, repository_id, head_repository_id, head_branch, head_sha (as GitHub lists)."""
    created_at: str = "2026-11-02T10:00:00Z"
    expired: bool = False


@dataclass
class Step:
    name: str
    number: int
    status: str = "completed"
    conclusion: str | None = "success"
    started_at: str | None = None
    completed_at: str | None = None


@dataclass
class Job:
    """A workflow job as ``GET /repos/{o}/{r}/actions/jobs/{id}`` shows it."""

    id: int
    name: str
    labels: list[str]
    status: str = "queued"
    """queued, waiting, pending, requested, in_progress or completed (the ``job`` schema's
    enum)."""
    conclusion: str | None = None
    created_at: str = "2026-11-02T10:00:00Z"
    started_at: str | None = None
    completed_at: str | None = None
    runner_name: str | None = None
    runner_group_id: int | None = None
    runner_group_name: str | None = None
    steps: list[Step] = field(default_factory=list)
    run_attempt: int = 1
    annotations: list[tuple[str, str]] = field(default_factory=list)
    """(annotation_level, message) of the job's check run, as the runner and the server
    leave them (``GET /repos/{o}/{r}/check-runs/{check_run_id}/annotations``)."""


@dataclass
class WorkflowRun:
    """A workflow run; ``jobs`` holds the jobs of every attempt (``Job.run_attempt``)."""

    id: int
    name: str
    path: str
    """``.github/workflows/<file>.yml``."""
    head_sha: str
    event: str = "pull_request"
    status: str = "queued"
    conclusion: str | None = None
    head_branch: str = "feature"
    run_attempt: int = 1
    created_at: str = "2026-11-02T10:00:00Z"
    updated_at: str | None = None
    run_started_at: str | None = None
    actor: str = "contributor"
    triggering_actor: str | None = None
    pull_requests: list[int] = field(default_factory=list)
    """Numbers of the open pull requests whose head this is; served only for a head in the
    base repository (GitHub lists none for a fork's run)."""
    jobs: list[Job] = field(default_factory=list)
    workflow_id: int = 161335
    head_repo: str | None = None
    """full_name of the head repository; None means the base repository (not a fork)."""
    fork_deleted: bool = False
    """The head repository was a fork that is gone: ``head_repository`` is served as null."""
    ignores_cancel: bool = False
    """A run that ignores cancel: ``cancel`` answers 202 and changes nothing; only
    ``force-cancel`` stops it."""


@dataclass
class Organization:
    login: str
    usage_items: list[dict[str, Any]] = field(default_factory=list)
    """Items of the billing usage report: date, product, sku, quantity, unitType,
    pricePerUnit, grossAmount, discountAmount, netAmount, organizationName, repositoryName."""
    billing_tokens: set[str] | None = None
    """Tokens that may read billing (None: any token)."""
    members: set[str] = field(default_factory=set)
    """Logins of its members (orgs/check-membership-for-user: 204, else 404)."""


@dataclass
class Fault:
    method: str
    path: re.Pattern[str]
    status: int
    times: int
    headers: dict[str, str]
    body: dict[str, Any] | None
    delay: float


@dataclass
class LoggedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    status: int
    at: float


#: The list-runs parameters that make a listing a search, capped at 1,000 results.
RUN_SEARCH_PARAMETERS = (
    "actor",
    "branch",
    "check_suite_id",
    "created",
    "event",
    "head_sha",
    "status",
)
#: "it includes up to 300 changed files for the entire comparison" (repos/compare-commits).
COMPARE_FILES_MAX = 300
#: GitHub refuses a longer issue comment body with 422 ("body is too long (maximum is 65536
#: characters)").
COMMENT_BODY_MAX = 65536
#: "Responses include a maximum of 3000 files." (pulls/list-files)
PULL_FILES_MAX = 3000
#: A route's header (never sent) marking an answer GitHub.com's description does not cover on
#: purpose (an older GHES's shape); recorded in ``FakeGitHub.outside_contract``.
OUTSIDE_CONTRACT = "X-Test-Outside-Contract"
SECONDARY_RATE_LIMIT_DOCS = (
    "https://docs.github.com/free-pro-team@latest/rest/overview/"
    "rate-limits-for-the-rest-api#about-secondary-rate-limits"
)


#: GitHub's legacy ``permission`` field for each role (maintain→write, triage→read).
LEGACY_PERMISSION = {
    "admin": "admin",
    "maintain": "write",
    "write": "write",
    "triage": "read",
    "read": "read",
    "none": "none",
}


class FakeGitHub:
    """State plus an HTTP server. Use as a context manager or call start()/stop()."""

    def __init__(
        self,
        *,
        per_page_max: int = 100,
        run_search_cap: int | None = 1000,
        contract: bool = True,
        max_concurrent: int | None = 100,
        writes_per_minute: int | None = 80,
    ) -> None:
        """``run_search_cap``: GitHub's 1,000-result limit of filtered run listings (None:
        off). ``contract``: validate every request and response against GitHub's OpenAPI
        description (testkit/openapi_contract.py). ``max_concurrent`` / ``writes_per_minute``:
        GitHub's documented secondary rate limits ("No more than 100 concurrent requests",
        "no more than 80 content-generating requests per minute"), answered as 403 with
        ``retry-after``; None: off."""
        self.repos: dict[str, Repo] = {}
        self.log: list[LoggedRequest] = []
        self.faults: list[Fault] = []
        self.read_only_tokens: set[str] = set()
        self.label_writes: list[tuple[str, int, str, str]] = []
        """(method, issue number, label, login of the token) of every label added or removed:
        which account applied a label (GitHub's ``sender`` of the event it makes)."""
        self.token_users: dict[str, str] = {}
        """token -> the login its writes are authored by (default ``github-actions[bot]``,
        the identity of a workflow's GITHUB_TOKEN)."""
        self.valid_tokens: set[str] | None = None
        self.rate_limit = 5000
        self.rate_remaining = 5000
        self.per_page_max = per_page_max
        self.orgs: dict[str, Organization] = {}
        self.run_search_cap = run_search_cap
        self.max_concurrent = max_concurrent
        self.writes_per_minute = writes_per_minute
        self._in_flight = 0
        self._writes: list[float] = []
        self.contract = _load_contract() if contract else None
        self.contract_violations: list[str] = []
        """Every way a request or a response broke GitHub's contract; ``stop()`` raises."""
        self.outside_contract: list[str] = []
        """Answers deliberately outside GitHub.com's description (older GHES shapes)."""
        self.storage = BlobStorage(self)
        self.runners: dict[str, list[SelfHostedRunner]] = {}
        """full_name -> the repository's self-hosted runners (see the runners block)."""
        self._ids = 1000
        self.hooks: list[tuple[str, re.Pattern[str], Any]] = []
        """(method, path regex, callback(path)) run before a matching request is answered."""
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- state helpers ------------------------------------------------------------------
    def add_repo(self, full_name: str, **kwargs: Any) -> Repo:
        repo = Repo(full_name, **kwargs)
        self.repos[full_name] = repo
        return repo

    def add_pull(self, full_name: str, pr: PullRequest) -> PullRequest:
        self.repos[full_name].pulls[pr.number] = pr
        return pr

    def add_issue_comment(
        self, full_name: str, number: int, user: str, body: str, at: str = "2026-11-02T10:00:00Z"
    ) -> IssueComment:
        """Plant a comment (e.g. a contributor's, or ``number`` of them for pagination)."""
        comment = IssueComment(self.next_id(), number, user, body, at, at)
        self.repos[full_name].issue_comments.append(comment)
        return comment

    def comments_of(self, full_name: str, number: int) -> list[IssueComment]:
        return [c for c in self.repos[full_name].issue_comments if c.issue_number == number]

    def add_org(self, login: str, **kwargs: Any) -> Organization:
        org = Organization(login, **kwargs)
        self.orgs[login.lower()] = org
        return org

    def next_id(self) -> int:
        with self._lock:
            self._ids += 1
            return self._ids

    def add_run(self, full_name: str, run: WorkflowRun) -> WorkflowRun:
        self.repos[full_name].runs.append(run)
        return run

    def add_artifact(
        self,
        full_name: str,
        name: str,
        files: dict[str, bytes],
        *,
        head_branch: str = "main",
        fork: bool = False,
        run_id: int | None = None,
        created_at: str = "2026-11-02T10:00:00Z",
    ) -> Artifact:
        """An artifact as ``actions/upload-artifact`` leaves it: a zip of ``files``, made by a
        run on ``head_branch`` (of a fork when ``fork``)."""
        import io
        import zipfile

        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
            for member, data in files.items():
                archive.writestr(member, data)
        repo_id = self.repo_id(full_name)
        art = Artifact(
            self.next_id(),
            name,
            buf.getvalue(),
            {
                "id": run_id or self.next_id(),
                "repository_id": repo_id,
                "head_repository_id": repo_id + 1 if fork else repo_id,
                "head_branch": head_branch,
                "head_sha": "c" * 40,
            },
            created_at,
        )
        self.repos[full_name].artifacts.append(art)
        return art

    def find_job(self, job_id: int) -> tuple[Repo, WorkflowRun, Job]:
        for repo in self.repos.values():
            for run in repo.runs:
                for job in run.jobs:
                    if job.id == job_id:
                        return repo, run, job
        raise KeyError(job_id)

    def start_job(
        self,
        job_id: int,
        at: str,
        *,
        runner: str = "gpu-runner-1",
        group: tuple[int, str] | None = None,
    ) -> Job:
        """A runner picked the job up: queued → in_progress (its run too)."""
        _repo, run, job = self.find_job(job_id)
        job.status, job.started_at, job.runner_name = "in_progress", at, runner
        if group:
            job.runner_group_id, job.runner_group_name = group
        run.status = "in_progress"
        run.run_started_at = run.run_started_at or at
        run.updated_at = at
        return job

    def complete_job(self, job_id: int, at: str, conclusion: str = "success") -> Job:
        """in_progress → completed; the run completes when all its latest jobs have."""
        _repo, run, job = self.find_job(job_id)
        job.status, job.conclusion, job.completed_at = "completed", conclusion, at
        latest = [j for j in run.jobs if j.run_attempt == run.run_attempt]
        if all(j.status == "completed" for j in latest):
            run.status = "completed"
            bad = [j.conclusion for j in latest if j.conclusion not in ("success", "skipped")]
            run.conclusion = bad[0] if bad else "success"
        run.updated_at = at
        return job

    def inject(
        self,
        method: str,
        path_regex: str,
        status: int,
        *,
        times: int = 1,
        retry_after: float | None = None,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
    ) -> None:
        """Answer the next ``times`` matching requests with ``status`` (0 = only delay)."""
        hdrs = dict(headers or {})
        if retry_after is not None:
            hdrs["Retry-After"] = str(retry_after)
        self.faults.append(
            Fault(method.upper(), re.compile(path_regex), status, times, hdrs, body, delay)
        )

    def forbid(self, method: str, path_regex: str, *, times: int = 20) -> None:
        """Answer the next ``times`` matching requests as a token lacking the permission."""
        body = {"message": "Resource not accessible by integration"}
        self.inject(method, path_regex, 403, times=times, body=body)

    def on_request(self, method: str, path_regex: str, callback: Any) -> None:
        """Call ``callback(path)`` before answering each matching request: state changes
        between two calls of a client (a runner picks a job up between list and re-read)."""
        self.hooks.append((method.upper(), re.compile(path_regex), callback))

    def secondary_rate_limit(
        self,
        method: str = "*",
        path_regex: str = "",
        *,
        times: int = 1,
        retry_after: int = 60,
        status: int = 403,
    ) -> None:
        """Answer the next ``times`` matching requests as GitHub's secondary rate limit does:
        "you will receive a 403 or 429 response and an error message that indicates that you
        exceeded a secondary rate limit. If the retry-after response header is present, you
        should not retry your request until after that many seconds has elapsed."
        (docs.github.com, Rate limits for the REST API)."""
        self.inject(
            method,
            path_regex,
            status,
            times=times,
            retry_after=retry_after,
            body=_secondary_body(len(self.log)),
        )

    def requests(self, method: str | None = None, path_contains: str = "") -> list[LoggedRequest]:
        return [
            r
            for r in self.log
            if (method is None or r.method == method) and path_contains in r.path
        ]

    # -- server ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeGitHub:
        handler = type("Handler", (_Handler,), {"gh": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.storage.start()
        return self

    def stop(self) -> None:
        """Stop both servers; fail on a broken contract.

        A test whose requests or answers broke GitHub's contract fails here even when the product
        swallowed the 500 it got for it."""
        if self._server:
            self._server.shutdown()
            self._server.server_close()
        self.storage.stop()
        if self.contract_violations:
            listed = "\n  ".join(self.contract_violations[:20])
            raise AssertionError(
                f"the test GitHub server broke GitHub's REST contract "
                f"({len(self.contract_violations)} violation(s)):\n  {listed}"
            )

    def __enter__(self) -> FakeGitHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- JSON shapes ------------------------------------------------------------------------
    # Complete objects, as GitHub's OpenAPI description requires them (every response is
    # validated against it: testkit/openapi_contract.py): a field the product reads but GitHub
    # never sends, or one GitHub always sends that is missing here, fails the test.
    def user_json(self, login: str) -> dict[str, Any]:
        """A ``simple-user``."""
        uid = _stable_id(login, 10**7)
        api = f"{self.url}/users/{quote(login)}"
        return {
            "login": login,
            "id": uid,
            "node_id": f"U_kgDO{uid}",
            "avatar_url": f"https://avatars.githubusercontent.com/u/{uid}?v=4",
            "gravatar_id": "",
            "url": api,
            "html_url": f"https://github.com/{login}",
            "followers_url": f"{api}/followers",
            "following_url": f"{api}/following{{/other_user}}",
            "gists_url": f"{api}/gists{{/gist_id}}",
            "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
            "subscriptions_url": f"{api}/subscriptions",
            "organizations_url": f"{api}/orgs",
            "repos_url": f"{api}/repos",
            "events_url": f"{api}/events{{/privacy}}",
            "received_events_url": f"{api}/received_events",
            "type": "Bot" if login.endswith("[bot]") else "User",
            "user_view_type": "public",
            "site_admin": False,
        }

    def repo_id(self, full_name: str) -> int:
        return _stable_id(full_name, 10**8)

    def repo_json(self, repo: Repo, *, fork: bool = False) -> dict[str, Any]:
        """A ``repository`` as GitHub serves it.

        A superset of ``minimal-repository``, and of ``full-repository`` once ``has_discussions``,
        ``network_count`` and ``subscribers_count`` are added."""
        owner, name = repo.full_name.split("/")
        api = f"{self.url}/repos/{repo.full_name}"
        out: dict[str, Any] = {
            "id": self.repo_id(repo.full_name),
            "node_id": f"R_kgDO{self.repo_id(repo.full_name)}",
            "name": name,
            "full_name": repo.full_name,
            "private": repo.private,
            "owner": self.user_json(owner),
            "html_url": f"https://github.com/{repo.full_name}",
            "description": None,
            "fork": fork,
            "url": api,
            "visibility": "private" if repo.private else "public",
            "default_branch": repo.default_branch,
            "homepage": None,
            "language": "Python",
            "license": None,
            "mirror_url": None,
            "archived": False,
            "disabled": False,
            "is_template": False,
            "topics": [],
            "forks": 0,
            "forks_count": 0,
            "open_issues": len(repo.pulls),
            "open_issues_count": len(repo.pulls),
            "size": 108,
            "stargazers_count": 0,
            "watchers": 0,
            "watchers_count": 0,
            "has_downloads": True,
            "has_issues": True,
            "has_projects": True,
            "has_wiki": True,
            "has_pages": False,
            "allow_forking": True,
            "web_commit_signoff_required": False,
            "pushed_at": "2026-11-02T09:00:00Z",
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-11-02T09:00:00Z",
            "git_url": f"git://github.com/{repo.full_name}.git",
            "ssh_url": f"git@github.com:{repo.full_name}.git",
            "clone_url": f"https://github.com/{repo.full_name}.git",
            "svn_url": f"https://github.com/{repo.full_name}",
        }
        for key, tail in _REPO_URLS.items():
            out[key] = f"{api}{tail}"
        return out

    def full_repo_json(self, repo: Repo) -> dict[str, Any]:
        """A ``full-repository`` (``GET /repos/{owner}/{repo}``)."""
        return {
            **self.repo_json(repo),
            "has_discussions": False,
            "network_count": 0,
            "subscribers_count": 1,
        }

    def label_json(self, repo: Repo, name: str) -> dict[str, Any]:
        lid = _stable_id(name, 10**7)
        return {
            "id": lid,
            "node_id": f"LA_kwDO{lid}",
            "name": name,
            "color": "ededed",
            "default": False,
            "description": None,
            "url": f"{self.url}/repos/{repo.full_name}/labels/{quote(name, safe='')}",
        }

    def pull_json(self, repo: Repo, pr: PullRequest) -> dict[str, Any]:
        """A ``pull-request``: ``head`` and ``base`` carry whole ``repository`` objects."""
        head_name = pr.head_repo or repo.full_name
        head_repo = self.repos.get(head_name) or Repo(head_name)
        head_repo_json = self.repo_json(head_repo, fork=head_name != repo.full_name)
        owner = head_name.split("/")[0]
        base_owner = repo.full_name.split("/")[0]
        api = f"{self.url}/repos/{repo.full_name}"
        html = f"https://github.com/{repo.full_name}/pull/{pr.number}"
        closed = None if pr.state == "open" else "2026-11-03T10:00:00Z"
        return {
            "url": f"{api}/pulls/{pr.number}",
            "id": 1000 + pr.number,
            "node_id": f"PR_kwDO{1000 + pr.number}",
            "number": pr.number,
            "state": pr.state,
            "locked": False,
            "title": f"PR {pr.number}",
            "body": None,
            "draft": pr.draft,
            "merged": pr.merged,
            "user": self.user_json(pr.user),
            "labels": [self.label_json(repo, n) for n in pr.labels],
            "head": {
                "label": f"{owner}:{pr.head_ref}",
                "ref": pr.head_ref,
                "sha": pr.head_sha,
                "user": self.user_json(owner),
                "repo": head_repo_json,
            },
            "base": {
                "label": f"{base_owner}:{pr.base_ref}",
                "ref": pr.base_ref,
                "sha": pr.base_sha,
                "user": self.user_json(base_owner),
                "repo": self.repo_json(repo),
            },
            "html_url": html,
            "diff_url": f"{html}.diff",
            "patch_url": f"{html}.patch",
            "issue_url": f"{api}/issues/{pr.number}",
            "commits_url": f"{api}/pulls/{pr.number}/commits",
            "review_comments_url": f"{api}/pulls/{pr.number}/comments",
            "review_comment_url": f"{api}/pulls/comments{{/number}}",
            "comments_url": f"{api}/issues/{pr.number}/comments",
            "statuses_url": f"{api}/statuses/{pr.head_sha}",
            "_links": {
                key: {"href": href}
                for key, href in (
                    ("self", f"{api}/pulls/{pr.number}"),
                    ("html", html),
                    ("issue", f"{api}/issues/{pr.number}"),
                    ("comments", f"{api}/issues/{pr.number}/comments"),
                    ("review_comments", f"{api}/pulls/{pr.number}/comments"),
                    ("review_comment", f"{api}/pulls/comments{{/number}}"),
                    ("commits", f"{api}/pulls/{pr.number}/commits"),
                    ("statuses", f"{api}/statuses/{pr.head_sha}"),
                )
            },
            "created_at": "2026-11-01T10:00:00Z",
            "updated_at": "2026-11-02T10:00:00Z",
            "closed_at": closed,
            "merged_at": closed if pr.merged else None,
            "merge_commit_sha": pr.merge_commit_sha,
            "assignee": None,
            "assignees": [],
            "requested_reviewers": [],
            "requested_teams": [],
            "milestone": None,
            "author_association": "CONTRIBUTOR",
            "auto_merge": None,
            "active_lock_reason": None,
            "mergeable": pr.mergeable,
            "rebaseable": pr.mergeable,
            "mergeable_state": {None: "unknown", True: "clean", False: "dirty"}[pr.mergeable],
            "merged_by": None,
            "comments": 0,
            "review_comments": 0,
            "maintainer_can_modify": False,
            "commits": 1,
            "additions": len(pr.files),
            "deletions": 0,
            "changed_files": len(pr.files),
        }

    def review_json(
        self, repo: Repo, pr: PullRequest, index: int, review: tuple[str, str, str]
    ) -> dict[str, Any]:
        """A pull request review as ``GET /repos/{o}/{r}/pulls/{n}/reviews`` lists it."""
        login, state, commit_id = review
        html = (
            f"https://github.com/{repo.full_name}/pull/{pr.number}#pullrequestreview-{80 + index}"
        )
        pull_url = f"{self.url}/repos/{repo.full_name}/pulls/{pr.number}"
        return {
            "id": 80 + index,
            "node_id": f"PRR_{index}",
            "user": self.user_json(login),
            "body": "",
            "state": state,
            "commit_id": commit_id,
            "html_url": html,
            "pull_request_url": pull_url,
            "_links": {"html": {"href": html}, "pull_request": {"href": pull_url}},
            "author_association": "COLLABORATOR",
            "submitted_at": f"2026-01-0{1 + index % 9}T00:00:00Z",
        }

    def file_json(self, repo: Repo, name: str, ref: str) -> dict[str, Any]:
        """A ``diff-entry`` (pull request files, compare files)."""
        path = quote(name)
        return {
            "sha": "f" * 40,
            "filename": name,
            "status": "modified",
            "additions": 1,
            "deletions": 0,
            "changes": 1,
            "patch": "@@ -1 +1 @@\n-a\n+b",
            "blob_url": f"https://github.com/{repo.full_name}/blob/{ref}/{path}",
            "raw_url": f"https://github.com/{repo.full_name}/raw/{ref}/{path}",
            "contents_url": f"{self.url}/repos/{repo.full_name}/contents/{path}?ref={ref}",
        }

    def commit_json(self, repo: Repo, sha: str) -> dict[str, Any]:
        """A ``commit`` (compare's commits and base commits)."""
        api = f"{self.url}/repos/{repo.full_name}"
        person = {
            "name": "contributor",
            "email": "contributor@example.com",
            "date": "2026-11-02T09:00:00Z",
        }
        return {
            "url": f"{api}/commits/{sha}",
            "sha": sha,
            "node_id": f"C_kwDO{sha[:12]}",
            "html_url": f"https://github.com/{repo.full_name}/commit/{sha}",
            "comments_url": f"{api}/commits/{sha}/comments",
            "commit": {
                "url": f"{api}/git/commits/{sha}",
                "author": person,
                "committer": person,
                "message": "A change",
                "comment_count": 0,
                "tree": {"sha": "e" * 40, "url": f"{api}/git/trees/{'e' * 40}"},
            },
            "author": self.user_json("contributor"),
            "committer": self.user_json("contributor"),
            "parents": [],
        }

    def get_commit_json(self, repo: Repo, commit: Commit) -> dict[str, Any]:
        """A ``commit`` as repos/get-commit serves it: linked accounts and verification."""
        body = self.commit_json(repo, commit.sha)
        body["author"] = self.user_json(commit.author) if commit.author else None
        body["committer"] = self.user_json(commit.committer) if commit.committer else None
        signed = commit.verified or commit.reason != "unsigned"
        body["commit"]["verification"] = {
            "verified": commit.verified,
            "reason": "valid" if commit.verified else commit.reason,
            "payload": "tree " + "e" * 40 if signed else None,
            "signature": "-----BEGIN PGP SIGNATURE-----" if signed else None,
            "verified_at": "2026-11-02T09:00:01Z" if commit.verified else None,
        }
        body["parents"] = [
            {
                "sha": parent,
                "url": f"{self.url}/repos/{repo.full_name}/commits/{parent}",
                "html_url": f"https://github.com/{repo.full_name}/commit/{parent}",
            }
            for parent in commit.parents
        ]
        body["stats"] = {"additions": 1, "deletions": 0, "total": 1}
        body["files"] = []
        return body

    def run_json(self, repo: Repo, run: WorkflowRun) -> dict[str, Any]:
        """A ``workflow-run``. A run from a fork lists no ``pull_requests`` (GitHub fills them
        only for heads in the base repository), and a run whose fork was deleted has
        ``head_repository: null`` (github/rest-api-description#1586)."""
        api = f"{self.url}/repos/{repo.full_name}"
        base = f"{api}/actions/runs/{run.id}"
        fork = run.fork_deleted or run.head_repo not in (None, repo.full_name)
        head: dict[str, Any] | None = None
        if not run.fork_deleted:
            head_name = run.head_repo or repo.full_name
            head = self.minimal_repo_json(
                self.repos.get(head_name) or Repo(head_name), fork=head_name != repo.full_name
            )
        pulls = [] if fork else [self.pull_minimal_json(repo, run, n) for n in run.pull_requests]
        return {
            "id": run.id,
            "name": run.name,
            "node_id": f"WFR_kwLO{run.id}",
            "check_suite_id": run.id + 1,
            "check_suite_node_id": f"CS_kwDO{run.id + 1}",
            "head_branch": run.head_branch,
            "head_sha": run.head_sha,
            "path": run.path,
            "display_title": run.name,
            "run_number": run.id % 1000,
            "event": run.event,
            "status": run.status,
            "conclusion": run.conclusion,
            "workflow_id": run.workflow_id,
            "url": base,
            "html_url": f"https://github.com/{repo.full_name}/actions/runs/{run.id}",
            "pull_requests": pulls,
            "referenced_workflows": [],
            "created_at": run.created_at,
            "updated_at": run.updated_at or run.created_at,
            "actor": self.user_json(run.actor),
            "triggering_actor": self.user_json(run.triggering_actor or run.actor),
            "run_attempt": run.run_attempt,
            "run_started_at": run.run_started_at or run.created_at,
            "jobs_url": f"{base}/jobs",
            "logs_url": f"{base}/logs",
            "check_suite_url": f"{api}/check-suites/{run.id + 1}",
            "artifacts_url": f"{base}/artifacts",
            "cancel_url": f"{base}/cancel",
            "rerun_url": f"{base}/rerun",
            "previous_attempt_url": (
                f"{base}/attempts/{run.run_attempt - 1}" if run.run_attempt > 1 else None
            ),
            "workflow_url": f"{api}/actions/workflows/{run.workflow_id}",
            "head_commit": {
                "id": run.head_sha,
                "tree_id": "e" * 40,
                "message": "A change",
                "timestamp": run.created_at,
                "author": {"name": run.actor, "email": f"{run.actor}@example.com"},
                "committer": {"name": "GitHub", "email": "noreply@github.com"},
            },
            "repository": self.minimal_repo_json(repo),
            "head_repository": head,
        }

    def minimal_repo_json(self, repo: Repo, *, fork: bool = False) -> dict[str, Any]:
        """A ``minimal-repository`` (runs): the hypermedia URLs, no counts or dates."""
        full = self.repo_json(repo, fork=fork)
        keep = set(_REPO_URLS) | {
            "id",
            "node_id",
            "name",
            "full_name",
            "private",
            "owner",
            "html_url",
            "description",
            "fork",
            "url",
        }
        return {k: v for k, v in full.items() if k in keep}

    def pull_minimal_json(self, repo: Repo, run: WorkflowRun, number: int) -> dict[str, Any]:
        """A ``pull-request-minimal`` (a run's ``pull_requests``)."""
        pr = repo.pulls.get(number)
        rid = self.repo_id(repo.full_name)
        ref = {
            "id": rid,
            "url": f"{self.url}/repos/{repo.full_name}",
            "name": repo.full_name.split("/")[1],
        }
        return {
            "id": 1000 + number,
            "number": number,
            "url": f"{self.url}/repos/{repo.full_name}/pulls/{number}",
            "head": {
                "ref": pr.head_ref if pr else run.head_branch,
                "sha": pr.head_sha if pr else run.head_sha,
                "repo": ref,
            },
            "base": {
                "ref": pr.base_ref if pr else repo.default_branch,
                "sha": "b" * 40,
                "repo": ref,
            },
        }

    def job_json(self, repo: Repo, run: WorkflowRun, job: Job) -> dict[str, Any]:
        """A ``job``. ``started_at`` is required and not nullable: GitHub fills it with the
        creation time while the job waits."""
        return {
            "id": job.id,
            "run_id": run.id,
            "node_id": f"CR_kwDO{job.id}",
            "run_url": f"{self.url}/repos/{repo.full_name}/actions/runs/{run.id}",
            "run_attempt": job.run_attempt,
            "head_sha": run.head_sha,
            "head_branch": run.head_branch,
            "workflow_name": run.name,
            "url": f"{self.url}/repos/{repo.full_name}/actions/jobs/{job.id}",
            "html_url": f"https://github.com/{repo.full_name}/actions/runs/{run.id}/job/{job.id}",
            "status": job.status,
            "conclusion": job.conclusion,
            "created_at": job.created_at,
            "started_at": job.started_at or job.created_at,
            "completed_at": job.completed_at,
            "name": job.name,
            "steps": [
                {
                    "name": s.name,
                    "status": s.status,
                    "conclusion": s.conclusion,
                    "number": s.number,
                    "started_at": s.started_at,
                    "completed_at": s.completed_at,
                }
                for s in job.steps
            ],
            "check_run_url": f"{self.url}/repos/{repo.full_name}/check-runs/{job.id}",
            "labels": list(job.labels),
            "runner_id": None if job.runner_name is None else 1,
            "runner_name": job.runner_name,
            "runner_group_id": job.runner_group_id,
            "runner_group_name": job.runner_group_name,
        }

    def annotation_json(self, repo: Repo, level: str, message: str) -> dict[str, Any]:
        """A ``check-annotation`` as the runner's own messages appear: on ``.github``, line 1
        (GitHub's annotations of a job that lost its runner carry no file of the repository)."""
        return {
            "path": ".github",
            "blob_href": f"https://github.com/{repo.full_name}/blob/{'0' * 40}/.github",
            "start_line": 1,
            "end_line": 1,
            "start_column": None,
            "end_column": None,
            "annotation_level": level,
            "title": "",
            "message": message,
            "raw_details": None,
        }

    def rerun_failed_jobs(self, run: WorkflowRun, at: str, by: str, *, every: bool = False) -> None:
        """``rerun-failed-jobs``: a new attempt; its failed and cancelled jobs queued again
        (new job ids), the others carried over with their results (``every``: ``rerun``, all
        of them queued again). As on GitHub, the new attempt's ``triggering_actor`` is the
        token's user (``actor`` stays the first one's)."""
        previous = [j for j in run.jobs if j.run_attempt == run.run_attempt]
        run.run_attempt += 1
        run.triggering_actor = by
        for job in previous:
            again = every or job.conclusion in ("failure", "cancelled", "timed_out")
            run.jobs.append(
                Job(
                    self.next_id(),
                    job.name,
                    list(job.labels),
                    status="queued" if again else job.status,
                    conclusion=None if again else job.conclusion,
                    created_at=at if again else job.created_at,
                    started_at=None if again else job.started_at,
                    completed_at=None if again else job.completed_at,
                    runner_name=None if again else job.runner_name,
                    runner_group_id=job.runner_group_id,
                    runner_group_name=job.runner_group_name,
                    steps=[] if again else list(job.steps),
                    run_attempt=run.run_attempt,
                )
            )
        run.status, run.conclusion, run.updated_at = "queued", None, at
        run.run_started_at = at

    def artifact_json(self, repo: Repo, art: Artifact) -> dict[str, Any]:
        base = f"{self.url}/repos/{repo.full_name}/actions/artifacts/{art.id}"
        return {
            "id": art.id,
            "node_id": f"MDg6QXJ0aWZhY3Q{art.id}",
            "name": art.name,
            "size_in_bytes": len(art.data),
            "url": base,
            "archive_download_url": f"{base}/zip",
            "expired": art.expired,
            "digest": None,
            "created_at": art.created_at,
            "updated_at": art.created_at,
            "expires_at": "2027-02-28T10:00:00Z",
            "workflow_run": dict(art.workflow_run),
        }

    def issue_comment_json(self, repo: Repo, comment: IssueComment) -> dict[str, Any]:
        """An ``issue-comment`` (issues/list-comments, create-comment, update-comment)."""
        api = f"{self.url}/repos/{repo.full_name}"
        association = (
            "OWNER"
            if comment.user == repo.full_name.split("/")[0]
            else "COLLABORATOR"
            if comment.user in repo.roles
            else "CONTRIBUTOR"
            if not comment.user.endswith("[bot]")
            else "NONE"
        )
        return {
            "id": comment.id,
            "node_id": f"IC_kwDO{comment.id}",
            "url": f"{api}/issues/comments/{comment.id}",
            "html_url": f"https://github.com/{repo.full_name}/pull/{comment.issue_number}"
            f"#issuecomment-{comment.id}",
            "issue_url": f"{api}/issues/{comment.issue_number}",
            "body": comment.body,
            "user": self.user_json(comment.user),
            "created_at": comment.created_at,
            "updated_at": comment.updated_at,
            "author_association": association,
            "performed_via_github_app": None,
        }

    def status_json(
        self, repo: Repo, sha: str, payload: dict[str, Any], creator: str
    ) -> dict[str, Any]:
        sid = self.next_id()
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return {
            "url": f"{self.url}/repos/{repo.full_name}/statuses/{sha}",
            "id": sid,
            "node_id": f"SC_{sid}",
            "state": payload["state"],
            "description": payload.get("description"),
            "target_url": payload.get("target_url"),
            "context": payload.get("context") or "default",
            "created_at": now,
            "updated_at": now,
            "creator": self.user_json(creator),
            "avatar_url": None,
        }


def _instant(text: str, *, end: bool) -> str:
    """A ``created`` bound as a comparable UTC ``YYYY-MM-DDTHH:MM:SSZ``: a bare date is the
    whole day (its first second as a lower bound, its last as an upper one); a time part
    (``2026-11-01T10:00:00Z``, ``+00:00`` or no zone) is kept to the second."""
    from datetime import datetime, timezone

    text = text.strip()
    if len(text) == 10:
        return text + ("T23:59:59Z" if end else "T00:00:00Z")
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def created_matches(created: str, value: str) -> bool:
    """GitHub's search date syntax for ``created``: ``>=X``, ``>X``, ``<=X``, ``<X``,
    ``X..Y`` (``*`` open), or ``X`` (that day, or that second when it has a time part)."""
    at = _instant(created, end=False)
    for op in (">=", "<=", ">", "<"):
        if value.startswith(op):
            bound = _instant(value[len(op) :], end=op in ("<=", ">"))
            return {">=": at >= bound, "<=": at <= bound, ">": at > bound, "<": at < bound}[op]
    if ".." in value:
        lo, hi = value.split("..", 1)
        return (lo == "*" or at >= _instant(lo, end=False)) and (
            hi == "*" or at <= _instant(hi, end=True)
        )
    return _instant(value, end=False) <= at <= _instant(value, end=True)


def _runs_filter(runs: list[WorkflowRun], query: dict[str, list[str]]) -> list[WorkflowRun]:
    """The list-runs API's filters, newest first.

    ``status``, ``event``, ``head_sha``, ``branch`` and ``created`` (GitHub's search syntax:
    ``created_matches``)."""

    def one(name: str) -> str | None:
        return (query.get(name) or [None])[0]

    out = list(runs)
    status = one("status")
    if status:
        out = [r for r in out if status in (r.status, r.conclusion)]
    for name in ("event", "head_sha"):
        value = one(name)
        if value:
            out = [r for r in out if getattr(r, name) == value]
    branch = one("branch")
    if branch:
        out = [r for r in out if r.head_branch == branch]
    created = one("created")
    if created:
        out = [r for r in out if created_matches(r.created_at, created)]
    return sorted(out, key=lambda r: (r.created_at, r.id), reverse=True)


def _stable_id(text: str, modulo: int) -> int:
    """An id that is the same in every process.

    ``hash()`` of a str is salted per process."""
    return zlib.crc32(text.encode()) % modulo + 1


#: A repository's hypermedia URLs, after ``{api}/repos/{owner}/{repo}``, as GitHub lists them.
_REPO_URLS = {
    "forks_url": "/forks",
    "keys_url": "/keys{/key_id}",
    "collaborators_url": "/collaborators{/collaborator}",
    "teams_url": "/teams",
    "hooks_url": "/hooks",
    "issue_events_url": "/issues/events{/number}",
    "events_url": "/events",
    "assignees_url": "/assignees{/user}",
    "branches_url": "/branches{/branch}",
    "tags_url": "/tags",
    "blobs_url": "/git/blobs{/sha}",
    "git_tags_url": "/git/tags{/sha}",
    "git_refs_url": "/git/refs{/sha}",
    "trees_url": "/git/trees{/sha}",
    "statuses_url": "/statuses/{sha}",
    "languages_url": "/languages",
    "stargazers_url": "/stargazers",
    "contributors_url": "/contributors",
    "subscribers_url": "/subscribers",
    "subscription_url": "/subscription",
    "commits_url": "/commits{/sha}",
    "git_commits_url": "/git/commits{/sha}",
    "comments_url": "/comments{/number}",
    "issue_comment_url": "/issues/comments{/number}",
    "contents_url": "/contents/{+path}",
    "compare_url": "/compare/{base}...{head}",
    "merges_url": "/merges",
    "archive_url": "/{archive_format}{/ref}",
    "downloads_url": "/downloads",
    "issues_url": "/issues{/number}",
    "pulls_url": "/pulls{/number}",
    "milestones_url": "/milestones{/number}",
    "notifications_url": "/notifications{?since,all,participating}",
    "labels_url": "/labels{/name}",
    "releases_url": "/releases{/id}",
    "deployments_url": "/deployments",
}


class _Handler(BaseHTTPRequestHandler):
    gh: FakeGitHub
    protocol_version = "HTTP/1.1"
    server_version = "GitHub.com"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    # -- plumbing -------------------------------------------------------------------------
    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        gh = self.gh
        data = (
            b""
            if status == 204 or body is None
            else (body if isinstance(body, bytes) else json.dumps(body).encode())
        )
        self.send_response(status)
        if "Content-Type" not in (headers or {}):
            self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-GitHub-Api-Version-Selected", "2022-11-28")
        self.send_header("X-GitHub-Request-Id", f"TEST:{len(gh.log)}")
        self.send_header("X-RateLimit-Limit", str(gh.rate_limit))
        self.send_header("X-RateLimit-Remaining", str(max(gh.rate_remaining, 0)))
        self.send_header("X-RateLimit-Used", str(gh.rate_limit - max(gh.rate_remaining, 0)))
        self.send_header("X-RateLimit-Reset", str(int(time.time()) + 3600))
        self.send_header("X-RateLimit-Resource", "core")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _not_found(self) -> tuple[int, Any, dict[str, str]]:
        return 404, {"message": "Not Found", "documentation_url": DOCS, "status": "404"}, {}

    def _forbidden(self) -> tuple[int, Any, dict[str, str]]:
        """GitHub's answer to a token that lacks the permission."""
        return 403, _forbidden_body(), {}

    def _handle(self, method: str) -> None:
        gh = self.gh
        split = urlsplit(self.path)
        query = parse_qs(split.query)
        length = int(self.headers.get("Content-Length") or 0)
        raw_body = self.rfile.read(length) if length else b""
        entry = LoggedRequest(
            method, split.path, query, dict(self.headers.items()), 0, time.monotonic()
        )
        with gh._lock:
            gh.log.append(entry)  # on arrival, so a request the client gave up on is seen
            gh.rate_remaining -= 1
            fault = next(
                (
                    f
                    for f in gh.faults
                    if f.times > 0 and f.method in (method, "*") and f.path.search(split.path)
                ),
                None,
            )
            if fault:
                fault.times -= 1
        for hook_method, hook_path, callback in list(gh.hooks):
            if hook_method in (method, "*") and hook_path.search(split.path):
                callback(split.path)
        if fault and fault.delay:
            time.sleep(fault.delay)
        limited = self._secondary_limited(method)
        try:
            if fault and fault.status:
                status, body, headers = fault.status, fault.body, dict(fault.headers)
                if body is None:
                    body = _fault_body(fault.status, len(gh.log))
            elif limited is not None:
                status, body, headers = limited
            else:
                status, body, headers = self._route(method, split.path, query, raw_body)
            status, body, headers = self._checked(method, split.path, query, status, body, headers)
        finally:
            with gh._lock:
                gh._in_flight -= 1
        entry.status = status
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # client gave up
            self._send(status, body, headers)

    def _secondary_limited(self, method: str) -> tuple[int, Any, dict[str, str]] | None:
        """GitHub's documented secondary rate limits (when switched on): "No more than 100
        concurrent requests are allowed", "no more than 80 content-generating requests per
        minute" (POST, PATCH, PUT, DELETE)."""
        gh = self.gh
        now = time.monotonic()
        with gh._lock:
            gh._in_flight += 1
            over = gh.max_concurrent is not None and gh._in_flight > gh.max_concurrent
            if method in ("POST", "PATCH", "PUT", "DELETE") and gh.writes_per_minute is not None:
                gh._writes = [t for t in gh._writes if now - t < 60] + [now]
                over = over or len(gh._writes) > gh.writes_per_minute
        if not over:
            return None
        return 403, _secondary_body(len(gh.log)), {"Retry-After": "60"}

    def _checked(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        status: int,
        body: Any,
        headers: dict[str, str],
    ) -> tuple[int, Any, dict[str, str]]:
        """The answer, or a 500 naming what broke GitHub's contract.

        The break is also recorded, so the test fails at ``stop()`` even where the product copes
        with a 500."""
        contract = self.gh.contract
        outside = headers.pop(OUTSIDE_CONTRACT, None)
        if contract is None:
            return status, body, headers
        problems = contract.check_request(method, path, query)
        if outside is not None and not problems:
            with self.gh._lock:
                self.gh.outside_contract.append(f"{method} {path}: {outside}")
        elif not problems:
            problems = contract.check_response(method, path, status, body)
        if not problems:
            return status, body, headers
        with self.gh._lock:
            self.gh.contract_violations.extend(problems)
        return (
            500,
            {
                "message": "The test GitHub server broke GitHub's REST contract: "
                + "; ".join(problems),
                "documentation_url": DOCS,
                "status": "500",
            },
            {},
        )

    def do_GET(self) -> None:
        self._handle("GET")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def _token(self) -> str:
        auth = self.headers.get("Authorization", "")
        for prefix in ("token ", "Bearer ", "bearer "):
            if auth.startswith(prefix):
                return auth[len(prefix) :]
        return ""

    # -- routes ---------------------------------------------------------------------------
    def _route(
        self, method: str, path: str, query: dict[str, list[str]], raw_body: bytes
    ) -> tuple[int, Any, dict[str, str]]:
        gh = self.gh
        token = self._token()
        if gh.valid_tokens is not None and token not in gh.valid_tokens:
            return (
                401,
                {"message": "Bad credentials", "documentation_url": DOCS, "status": "401"},
                {},
            )
        if gh.rate_remaining < 0:
            return (
                403,
                {"message": "API rate limit exceeded for installation.", "documentation_url": DOCS},
                {},
            )
        if path.startswith("/api/v3/"):  # GitHub Enterprise Server's prefix
            path = path[len("/api/v3") :]
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if (
            method == "GET"
            and len(parts) == 5
            and parts[0] == "organizations"
            and parts[2:] == ["settings", "billing", "usage"]
        ):
            return self._billing_usage(parts[1], query, token)
        if parts == ["rate_limit"]:
            reset = int(time.time()) + 3600
            core = {
                "limit": gh.rate_limit,
                "remaining": max(gh.rate_remaining, 0),
                "used": gh.rate_limit - max(gh.rate_remaining, 0),
                "reset": reset,
                "resource": "core",
            }
            search = {"limit": 30, "remaining": 30, "used": 0, "reset": reset, "resource": "search"}
            return 200, {"resources": {"core": core, "search": search}, "rate": core}, {}
        if method == "GET" and len(parts) == 4 and parts[0] == "orgs" and parts[2] == "members":
            # orgs/check-membership-for-user, as an organisation member's token sees it
            org = gh.orgs.get(parts[1].lower())
            if org is not None and parts[3].lower() in {m.lower() for m in org.members}:
                return 204, None, {}
            return 404, None, {}  # GitHub documents no body for this 404
        if len(parts) < 3 or parts[0] != "repos":
            return self._not_found()
        repo = gh.repos.get(f"{parts[1]}/{parts[2]}")
        if repo is None:
            return self._not_found()
        rest = parts[3:]
        if method == "GET" and not rest:
            return 200, gh.full_repo_json(repo), {}
        if (
            method == "GET"
            and len(rest) == 3
            and rest[0] == "collaborators"
            and rest[2] == "permission"
        ):
            login = rest[1]
            role = repo.roles.get(login, "read")
            legacy = LEGACY_PERMISSION.get(role, "read")
            user = {
                **gh.user_json(login),
                "role_name": role,
                "permissions": {
                    "admin": legacy == "admin",
                    "maintain": role in ("admin", "maintain"),
                    "push": legacy in ("admin", "write"),
                    "triage": role != "read",
                    "pull": True,
                },
            }
            body: dict[str, Any] = {"permission": legacy, "role_name": role, "user": user}
            if login in repo.legacy_only:  # older GHES: no role_name, outside the contract
                del body["role_name"], user["role_name"]
                return 200, body, {OUTSIDE_CONTRACT: "an older GHES omits role_name"}
            return 200, body, {}
        if rest[:1] == ["pulls"] and len(rest) >= 2 and rest[1].isdigit():
            pr = repo.pulls.get(int(rest[1]))
            if pr is None:
                return self._not_found()
            if method == "GET" and len(rest) == 2:
                return 200, gh.pull_json(repo, pr), {}
            if method == "GET" and rest[2:] == ["files"]:
                return self._paginate(
                    path,
                    query,
                    pr.files[:PULL_FILES_MAX],
                    render=lambda f: gh.file_json(repo, f, pr.head_sha),
                )
            if method == "GET" and rest[2:] == ["reviews"]:
                return self._paginate(
                    path, query, [gh.review_json(repo, pr, i, r) for i, r in enumerate(pr.reviews)]
                )
        if method == "GET" and len(rest) >= 2 and rest[0] == "contents":
            return self._content(repo, "/".join(rest[1:]), query)
        if method == "GET" and rest[:1] == ["compare"] and len(rest) >= 2:
            basehead = "/".join(rest[1:])
            if basehead not in repo.compares:
                return self._not_found()
            return self._compare(path, query, repo, basehead)
        if rest[:1] == ["issues"] and len(rest) >= 3 and rest[1].isdigit() and rest[2] == "labels":
            pr = repo.pulls.get(int(rest[1]))
            if pr is None:
                return self._not_found()
            if method == "GET" and len(rest) == 3:
                return 200, [gh.label_json(repo, n) for n in pr.labels], {}
            if token in gh.read_only_tokens:
                return self._forbidden()
            if method == "DELETE" and len(rest) == 4:
                name = rest[3]
                match = next((n for n in pr.labels if n.lower() == name.lower()), None)
                if match is None:
                    return (
                        404,
                        {
                            "message": "Label does not exist",
                            "documentation_url": DOCS,
                            "status": "404",
                        },
                        {},
                    )
                pr.labels.remove(match)
                who = gh.token_users.get(token, "github-actions[bot]")
                gh.label_writes.append(("DELETE", pr.number, match, who))
                return 200, [gh.label_json(repo, n) for n in pr.labels], {}
            if method == "POST" and len(rest) == 3:
                payload = json.loads(raw_body or b"{}")
                who = gh.token_users.get(token, "github-actions[bot]")
                for name in payload.get("labels", []):
                    if name not in pr.labels:
                        pr.labels.append(name)
                        gh.label_writes.append(("POST", pr.number, name, who))
                return 200, [gh.label_json(repo, n) for n in pr.labels], {}
        if rest[:1] == ["issues"] and "comments" in rest[1:3]:
            return self._issue_comments(method, path, query, repo, rest[1:], token, raw_body)
        if (
            method == "GET"
            and len(rest) == 3
            and rest[0] == "check-runs"
            and rest[1].isdigit()
            and rest[2] == "annotations"
        ):  # checks/list-annotations: a job's check run has the job's id
            try:
                found, _run, job = gh.find_job(int(rest[1]))
            except KeyError:
                return self._not_found()
            if found is not repo:
                return self._not_found()
            notes = [gh.annotation_json(repo, lvl, msg) for lvl, msg in job.annotations]
            return self._paginate(path, query, notes)
        if rest[:2] == ["actions", "runners"]:
            return runner_route(self, method, path, query, repo, rest[2:], raw_body)
        if rest[:1] == ["actions"]:
            return self._actions(method, path, query, repo, rest[1:], token)
        if rest[:1] == ["statuses"] and len(rest) == 2 and method == "POST":
            if token in gh.read_only_tokens:
                return self._forbidden()
            payload = json.loads(raw_body or b"{}")
            if payload.get("state") not in ("error", "failure", "pending", "success"):
                return (
                    422,
                    {
                        "message": "Validation Failed",
                        "documentation_url": DOCS,
                        "errors": [{"resource": "Status", "field": "state", "code": "custom"}],
                        "status": "422",
                    },
                    {},
                )
            if len(str(payload.get("description") or "")) > 140:  # GitHub's documented 422
                return (
                    422,
                    {
                        "message": "Validation Failed",
                        "documentation_url": DOCS,
                        "errors": [
                            {
                                "resource": "Status",
                                "field": "description",
                                "code": "custom",
                                "message": "description is too long (maximum is 140 characters)",
                            }
                        ],
                        "status": "422",
                    },
                    {},
                )
            status = gh.status_json(repo, rest[1], payload, "github-actions[bot]")
            repo.statuses.setdefault(rest[1], []).insert(0, status)
            return 201, status, {}
        if method == "GET" and rest[:1] == ["commits"] and len(rest) == 2:
            commit = repo.commits.get(rest[1])
            if commit is None:
                return self._not_found()
            return 200, gh.get_commit_json(repo, commit), {}
        if method == "GET" and rest[:1] == ["commits"] and len(rest) == 3:
            statuses = repo.statuses.get(rest[1], [])
            if rest[2] == "statuses":
                return self._paginate(path, query, statuses)
            if rest[2] == "status":
                latest: dict[str, dict[str, Any]] = {}
                for s in statuses:  # newest first: the first per context wins
                    latest.setdefault(s["context"], s)
                states = {s["state"] for s in latest.values()}
                state = (
                    "failure"
                    if states & {"failure", "error"}
                    else "pending"
                    if "pending" in states or not states
                    else "success"
                )
                api = f"{gh.url}/repos/{repo.full_name}"
                return (
                    200,
                    {
                        "state": state,
                        "sha": rest[1],
                        "total_count": len(latest),
                        "statuses": list(latest.values()),
                        "repository": gh.minimal_repo_json(repo),
                        "commit_url": f"{api}/commits/{rest[1]}",
                        "url": f"{api}/commits/{rest[1]}/status",
                    },
                    {},
                )
        return self._not_found()

    def _content(
        self, repo: Repo, path: str, query: dict[str, list[str]]
    ) -> tuple[int, Any, dict[str, str]]:
        """repos/get-content of a file (``content-file``: base64, its blob's SHA)."""
        import base64
        import hashlib

        ref = (query.get("ref") or [repo.default_branch])[0]
        text = repo.files.get(ref, {}).get(path)
        if text is None:
            return self._not_found()
        data = text.encode()
        sha = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        api = f"{self.gh.url}/repos/{repo.full_name}"
        html = f"https://github.com/{repo.full_name}/blob/{ref}/{path}"
        git = f"{api}/git/blobs/{sha}"
        url = f"{api}/contents/{path}?ref={ref}"
        return (
            200,
            {
                "type": "file",
                "encoding": "base64",
                "size": len(data),
                "name": path.rsplit("/", 1)[-1],
                "path": path,
                "content": base64.b64encode(data).decode(),
                "sha": sha,
                "url": url,
                "git_url": git,
                "html_url": html,
                "download_url": f"https://raw.githubusercontent.com/{repo.full_name}/{ref}/{path}",
                "_links": {"git": git, "html": html, "self": url},
            },
            {},
        )

    def _issue_comments(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        repo: Repo,
        rest: list[str],
        token: str,
        raw_body: bytes,
    ) -> tuple[int, Any, dict[str, str]]:
        """issues/list-comments (``GET .../issues/{n}/comments``: ascending ids, ``since`` on
        ``updated_at``), issues/create-comment (``POST``, 201), issues/get-comment (``GET
        .../issues/comments/{id}``), issues/update-comment (``PATCH``, 200) and
        issues/delete-comment (``DELETE``, 204). A body over 65,536 characters is GitHub's
        422. Any write token may edit or delete any comment (as a GITHUB_TOKEN with
        ``pull-requests: write`` may): whose comment to touch is the client's to decide."""
        gh = self.gh
        if method != "GET" and token in gh.read_only_tokens:
            return 403, _forbidden_body(), {}
        if len(rest) == 2 and rest[0].isdigit() and rest[1] == "comments":
            number = int(rest[0])
            if number not in repo.pulls:
                return self._not_found()
            if method == "GET":
                since = (query.get("since") or [""])[0]
                listed = [
                    c
                    for c in repo.issue_comments
                    if c.issue_number == number and (not since or c.updated_at >= since)
                ]
                return self._paginate(
                    path, query, listed, render=lambda c: gh.issue_comment_json(repo, c)
                )
            if method == "POST":
                body = str(json.loads(raw_body or b"{}").get("body") or "")
                if not body or len(body) > COMMENT_BODY_MAX:
                    return 422, _comment_invalid(body), {}
                now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                login = gh.token_users.get(token, "github-actions[bot]")
                comment = IssueComment(gh.next_id(), number, login, body, now, now)
                repo.issue_comments.append(comment)
                return 201, gh.issue_comment_json(repo, comment), {}
        if len(rest) == 2 and rest[0] == "comments" and rest[1].isdigit():
            comment = next((c for c in repo.issue_comments if c.id == int(rest[1])), None)
            if comment is None:
                return self._not_found()
            if method == "GET":  # issues/get-comment
                return 200, gh.issue_comment_json(repo, comment), {}
            if method == "PATCH":
                body = str(json.loads(raw_body or b"{}").get("body") or "")
                if not body or len(body) > COMMENT_BODY_MAX:
                    return 422, _comment_invalid(body), {}
                comment.body = body
                comment.updated_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                return 200, gh.issue_comment_json(repo, comment), {}
            if method == "DELETE":
                repo.issue_comments.remove(comment)
                return 204, None, {}
        return self._not_found()

    def _actions(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        repo: Repo,
        rest: list[str],
        token: str,
    ) -> tuple[int, Any, dict[str, str]]:
        gh = self.gh

        def wrap(
            key: str, items: list[Any], cap: int | None = None, render: Any = None
        ) -> tuple[int, Any, dict[str, str]]:
            status, page, headers = self._paginate(path, query, items, cap=cap, render=render)
            return status, {"total_count": len(items), key: page}, headers

        def runs_page(runs: list[WorkflowRun]) -> tuple[int, Any, dict[str, str]]:
            # "This endpoint will return up to 1,000 results for each search when using the
            # following parameters: actor, branch, check_suite_id, created, event, head_sha,
            # status." (actions/list-workflow-runs[-for-repo]); total_count stays the count.
            filtered = gh.run_search_cap is not None and any(
                query.get(name) for name in RUN_SEARCH_PARAMETERS
            )
            runs = _runs_filter(runs, query)
            return wrap(
                "workflow_runs",
                runs,
                gh.run_search_cap if filtered else None,
                lambda run: gh.run_json(repo, run),
            )

        if method == "GET" and rest == ["runs"]:
            return runs_page(repo.runs)
        if method == "GET" and len(rest) == 3 and rest[0] == "workflows" and rest[2] == "runs":
            wanted = rest[1]
            return runs_page(
                [r for r in repo.runs if wanted in (str(r.workflow_id), r.path.rsplit("/", 1)[-1])]
            )
        if len(rest) >= 2 and rest[0] == "runs" and rest[1].isdigit():
            run = next((r for r in repo.runs if r.id == int(rest[1])), None)
            if run is None:
                return self._not_found()
            if method == "GET" and len(rest) == 2:
                return 200, gh.run_json(repo, run), {}
            if method == "GET" and rest[2:] == ["artifacts"]:
                # actions/list-workflow-run-artifacts: this run's artifacts, ``name`` filter
                name = (query.get("name") or [None])[0]
                arts = [
                    a
                    for a in repo.artifacts
                    if a.workflow_run.get("id") == run.id and name in (None, a.name)
                ]
                arts = sorted(arts, key=lambda a: (a.created_at, a.id), reverse=True)
                return wrap("artifacts", [gh.artifact_json(repo, a) for a in arts])
            if method == "GET" and rest[2:] == ["jobs"]:
                every = (query.get("filter") or ["latest"])[0] == "all"
                jobs = [j for j in run.jobs if every or j.run_attempt == run.run_attempt]
                return wrap("jobs", [gh.job_json(repo, run, j) for j in jobs])
            if (
                method == "GET"
                and len(rest) == 5
                and rest[2] == "attempts"
                and rest[4] == "jobs"
                and rest[3].isdigit()
            ):
                jobs = [j for j in run.jobs if j.run_attempt == int(rest[3])]
                return wrap("jobs", [gh.job_json(repo, run, j) for j in jobs])
            if (
                method == "GET" and len(rest) == 4 and rest[2] == "attempts" and rest[3].isdigit()
            ):  # actions/get-workflow-run-attempt
                n = int(rest[3])
                if not 1 <= n <= run.run_attempt:
                    return self._not_found()
                jobs = [j for j in run.jobs if j.run_attempt == n]
                if n == run.run_attempt:
                    return 200, gh.run_json(repo, run), {}
                bad = [j.conclusion for j in jobs if j.conclusion not in ("success", "skipped")]
                then = dataclasses.replace(
                    run,
                    run_attempt=n,
                    status="completed",
                    conclusion=bad[0] if bad else "success",
                )
                return 200, gh.run_json(repo, then), {}
            if method == "GET" and rest[2:] == ["artifacts"]:  # list-workflow-run-artifacts
                arts = [a for a in repo.artifacts if a.workflow_run.get("id") == run.id]
                arts = sorted(arts, key=lambda a: (a.created_at, a.id), reverse=True)
                return wrap("artifacts", [gh.artifact_json(repo, a) for a in arts])
            if method == "POST" and rest[2:] in (
                ["rerun-failed-jobs"],
                ["rerun"],
                ["force-cancel"],
            ):
                if token in gh.read_only_tokens:
                    return self._forbidden()
                now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                if rest[2] in (
                    "rerun-failed-jobs",
                    "rerun",
                ):  # actions/re-run-workflow(-failed-jobs)
                    by = gh.token_users.get(token, "github-actions[bot]")
                    gh.rerun_failed_jobs(run, now, by, every=rest[2] == "rerun")
                    return 201, {}, {}
                if run.status == "completed":  # actions/force-cancel-workflow-run
                    return (
                        409,
                        {
                            "message": "Cannot cancel a workflow run that is completed.",
                            "documentation_url": DOCS,
                            "status": "409",
                        },
                        {},
                    )
                for job in run.jobs:
                    if job.run_attempt == run.run_attempt and job.status != "completed":
                        job.status, job.conclusion, job.completed_at = "completed", "cancelled", now
                run.status, run.conclusion, run.updated_at = "completed", "cancelled", now
                return 202, {}, {}
            if method == "POST" and rest[2:] == ["cancel"]:
                if token in gh.read_only_tokens:
                    return self._forbidden()
                if run.status == "completed":
                    return (
                        409,
                        {
                            "message": "Cannot cancel a workflow run that is completed.",
                            "documentation_url": DOCS,
                            "status": "409",
                        },
                        {},
                    )
                if run.ignores_cancel:
                    return 202, {}, {}
                now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                for job in run.jobs:
                    if job.run_attempt == run.run_attempt and job.status != "completed":
                        job.status, job.conclusion, job.completed_at = (
                            "completed",
                            "cancelled",
                            now,
                        )
                run.status, run.conclusion, run.updated_at = "completed", "cancelled", now
                return 202, {}, {}
        if method == "GET" and rest[:1] == ["artifacts"]:
            arts = repo.artifacts
            if len(rest) == 1:
                name = (query.get("name") or [None])[0]
                arts = [a for a in arts if name is None or a.name == name]
                arts = sorted(arts, key=lambda a: (a.created_at, a.id), reverse=True)
                return wrap("artifacts", [gh.artifact_json(repo, a) for a in arts])
            art = next((a for a in arts if rest[1].isdigit() and a.id == int(rest[1])), None)
            if art is None:
                return self._not_found()
            if len(rest) == 2:
                return 200, gh.artifact_json(repo, art), {}
            if rest[2:] == ["zip"]:
                if art.expired:
                    return (
                        410,
                        {
                            "message": "Artifact has expired",
                            "documentation_url": DOCS,
                            "status": "410",
                        },
                        {},
                    )
                # The zip lives on another host (blob storage), behind a signed URL that
                # needs no token: "Look for Location: in the response header to find the URL
                # for the download. The :archive_format must be zip." (actions/download-artifact)
                return 302, None, {"Location": gh.storage.signed_url(art)}
        if method == "GET" and len(rest) == 2 and rest[0] == "jobs" and rest[1].isdigit():
            try:
                found_repo, run, job = gh.find_job(int(rest[1]))
            except KeyError:
                return self._not_found()
            if found_repo is not repo:
                return self._not_found()
            return 200, gh.job_json(repo, run, job), {}
        return self._not_found()

    def _billing_usage(
        self, org_login: str, query: dict[str, list[str]], token: str
    ) -> tuple[int, Any, dict[str, str]]:
        org = self.gh.orgs.get(org_login.lower())
        if org is None:  # also a user account: the endpoint exists for organizations only
            return self._not_found()
        if org.billing_tokens is not None and token not in org.billing_tokens:
            return (
                403,
                {
                    "message": "Resource not accessible by personal access token",
                    "documentation_url": DOCS,
                    "status": "403",
                },
                {},
            )
        items = org.usage_items
        for key, width in (("year", 4), ("month", 2), ("day", 2)):
            value = (query.get(key) or [None])[0]
            if value is not None:
                pos = {"year": (0, 4), "month": (5, 7), "day": (8, 10)}[key]
                items = [i for i in items if i["date"][pos[0] : pos[1]] == value.zfill(width)]
        return 200, {"usageItems": items}, {}

    def _compare(
        self, path: str, query: dict[str, list[str]], repo: Repo, basehead: str
    ) -> tuple[int, Any, dict[str, str]]:
        """A ``commit-comparison``: the commits are what pages; "The list of changed files is
        only shown on the first page of results, and it includes up to 300 changed files for
        the entire comparison." (repos/compare-commits-with-basehead)."""
        gh = self.gh
        base_sha, _, head_sha = basehead.partition("...")
        commits = [gh.commit_json(repo, head_sha)]
        status, page, headers = self._paginate(path, query, commits)
        api = f"{gh.url}/repos/{repo.full_name}"
        html = f"https://github.com/{repo.full_name}/compare/{basehead}"
        body: dict[str, Any] = {
            "url": f"{api}/compare/{basehead}",
            "html_url": html,
            "permalink_url": html,
            "diff_url": f"{html}.diff",
            "patch_url": f"{html}.patch",
            "base_commit": gh.commit_json(repo, base_sha),
            "merge_base_commit": gh.commit_json(repo, base_sha),
            "status": "ahead",
            "ahead_by": len(commits),
            "behind_by": 0,
            "total_commits": len(commits),
            "commits": page,
        }
        if int((query.get("page") or ["1"])[0]) <= 1:
            body["files"] = [
                gh.file_json(repo, f, head_sha) for f in repo.compares[basehead][:COMPARE_FILES_MAX]
            ]
        return status, body, headers

    def _paginate(
        self,
        path: str,
        query: dict[str, list[str]],
        items: list[Any],
        *,
        cap: int | None = None,
        render: Any = None,
    ) -> tuple[int, Any, dict[str, str]]:
        """One page, and GitHub's ``Link`` header. ``per_page`` above 100 is served as 100
        ("The number of results per page (max 100)"); ``cap``: a search's result limit
        (pages past it are empty, and the last link stops at it)."""
        per_page = max(1, min(int((query.get("per_page") or ["30"])[0]), self.gh.per_page_max))
        page = max(1, int((query.get("page") or ["1"])[0]))
        reachable = items if cap is None else items[:cap]
        last = max(1, -(-len(reachable) // per_page))
        chunk = reachable[(page - 1) * per_page : page * per_page]
        if render is not None:  # only the page served is rendered (thousands of runs)
            chunk = [render(item) for item in chunk]
        links = []
        base = f"{self.gh.url}{path}"

        # Other query parameters (filters) travel in every link, as GitHub's do.
        keep = "".join(
            f"&{quote(k)}={quote(v)}"
            for k, vs in sorted(query.items())
            if k not in ("per_page", "page")
            for v in vs
        )

        def link(n: int, rel: str) -> str:
            return f'<{base}?per_page={per_page}&page={n}{keep}>; rel="{rel}"'

        if page > 1:
            links += [link(page - 1, "prev"), link(1, "first")]
        if page < last:
            links += [link(page + 1, "next"), link(last, "last")]
        return 200, chunk, ({"Link": ", ".join(links)} if links else {})


def _forbidden_body() -> dict[str, Any]:
    return {
        "message": "Resource not accessible by integration",
        "documentation_url": DOCS,
        "status": "403",
    }


def _comment_invalid(body: str) -> dict[str, Any]:
    """GitHub's 422 for an empty or too long comment body."""
    message = "body is too long (maximum is 65536 characters)" if body else "body cannot be blank"
    return {
        "message": "Validation Failed",
        "documentation_url": DOCS,
        "errors": [
            {"resource": "IssueComment", "code": "custom", "field": "body", "message": message}
        ],
        "status": "422",
    }


def _secondary_body(request_number: int) -> dict[str, Any]:
    """GitHub's secondary rate limit answer (its message and documentation link)."""
    return {
        "message": "You have exceeded a secondary rate limit. Please wait a few minutes "
        "before you try again. If you reach out to GitHub Support for help, please "
        f"include the request ID TEST:{request_number}.",
        "documentation_url": SECONDARY_RATE_LIMIT_DOCS,
    }


def _fault_body(status: int, request_number: int = 0) -> dict[str, Any]:
    if status == 403:
        return _secondary_body(request_number)
    if status == 429:
        return {"message": "Too Many Requests", "documentation_url": DOCS}
    return {"message": "Server Error"} if status >= 500 else {"message": "Error"}


def _load_contract() -> Any:
    from testkit.openapi_contract import contract

    return contract()


class BlobStorage:
    """The artifact storage GitHub's ``/zip`` redirects to: another host (127.0.0.2, still
    loopback), a signed URL, no token. A request that carries an ``Authorization`` header is
    refused as blob stores refuse a second authentication (400), so a client that forwards
    the API token across the redirect fails here as it would against GitHub."""

    HOST = "127.0.0.2"

    def __init__(self, gh: FakeGitHub) -> None:
        self.gh = gh
        self.log: list[LoggedRequest] = []
        self._server: ThreadingHTTPServer | None = None
        self._signatures: dict[str, Artifact] = {}
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        assert self._server is not None, "the storage server is not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def signed_url(self, art: Artifact) -> str:
        import secrets

        sig = secrets.token_urlsafe(16)
        with self._lock:
            self._signatures[sig] = art
        return (
            f"{self.url}/actions-results/{art.id}/{quote(art.name)}.zip"
            f"?se=2026-12-01T00%3A00%3A00Z&sp=r&sv=2021-12-02&sig={sig}"
        )

    def start(self) -> None:
        storage = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                split = urlsplit(self.path)
                query = parse_qs(split.query)
                entry = LoggedRequest(
                    "GET", split.path, query, dict(self.headers.items()), 0, time.monotonic()
                )
                with storage._lock:
                    storage.log.append(entry)
                    art = storage._signatures.get((query.get("sig") or [""])[0])
                if self.headers.get("Authorization"):
                    status, data, kind = (
                        400,
                        (
                            b"<Error><Code>InvalidAuthenticationInfo</Code>"
                            b"<Message>Only one auth mechanism allowed"
                            b"</Message></Error>"
                        ),
                        "application/xml",
                    )
                elif art is None or not split.path.startswith(f"/actions-results/{art.id}/"):
                    status, data, kind = (
                        403,
                        (b"<Error><Code>AuthenticationFailed</Code></Error>"),
                        "application/xml",
                    )
                else:
                    status, data, kind = 200, art.data, "application/zip"
                entry.status = status
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(data)

        self._server = ThreadingHTTPServer((self.HOST, 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


# -- self-hosted runners (actions/runners): gpu-cloud-runner's registrations ---------------


@dataclass
class SelfHostedRunner:
    """A repository's self-hosted runner, as the ``runner`` schema shows it."""

    id: int
    name: str
    labels: list[str]
    status: str = "offline"
    busy: bool = False
    ephemeral: bool = True

    def to_json(self) -> dict[str, Any]:
        read_only = ["self-hosted", "Linux", "X64"]
        return {
            "id": self.id,
            "runner_group_id": 1,
            "name": self.name,
            "os": "linux",
            "status": self.status,
            "busy": self.busy,
            "ephemeral": self.ephemeral,
            "labels": [
                {"id": i + 1, "name": n, "type": "read-only" if n in read_only else "custom"}
                for i, n in enumerate(read_only + self.labels)
            ],
        }


def add_runner(gh: FakeGitHub, full_name: str, name: str, **kwargs: Any) -> SelfHostedRunner:
    """A registration made outside the API (an old one, a foreign runner)."""
    runner = SelfHostedRunner(gh.next_id(), name, **kwargs)
    gh.runners.setdefault(full_name, []).append(runner)
    return runner


def _runner_invalid(message: str) -> tuple[int, Any, dict[str, str]]:
    return 422, {"message": message, "documentation_url": DOCS, "status": "422"}, {}


def runner_route(
    handler: Any,
    method: str,
    path: str,
    query: dict[str, list[str]],
    repo: Repo,
    rest: list[str],
    raw_body: bytes,
) -> tuple[int, Any, dict[str, str]]:
    """generate-jitconfig (201; 409 for a name in use; 422 for a body GitHub refuses), the
    list (``name`` filter, paginated), get and delete (204; 404 when gone; 422 while busy)."""
    import base64

    gh = handler.gh
    runners = gh.runners.setdefault(repo.full_name, [])
    if method == "POST" and rest == ["generate-jitconfig"]:
        body = json.loads(raw_body or b"{}")
        labels = body.get("labels")
        if not isinstance(body.get("name"), str) or not body["name"]:
            return _runner_invalid("Invalid request. name is required.")
        if not isinstance(body.get("runner_group_id"), int):
            return _runner_invalid("Invalid request. runner_group_id is required.")
        if not isinstance(labels, list) or not 1 <= len(labels) <= 100:
            return _runner_invalid("Invalid request. labels must hold 1 to 100 names.")
        if any(r.name == body["name"] for r in runners):
            message = f"Already exists - A runner with the name {body['name']} already exists."
            return 409, {"message": message, "documentation_url": DOCS, "status": "409"}, {}
        runner = add_runner(gh, repo.full_name, body["name"], labels=[str(n) for n in labels])
        config = json.dumps({".runner": f"runner-{runner.id}", "name": runner.name})
        encoded = base64.b64encode(config.encode()).decode()
        return 201, {"runner": runner.to_json(), "encoded_jit_config": encoded}, {}
    if method == "GET" and not rest:
        name = (query.get("name") or [""])[0]
        found = [r for r in runners if not name or r.name == name]
        status, page, headers = handler._paginate(path, query, found, render=lambda r: r.to_json())
        return status, {"total_count": len(found), "runners": page}, headers
    if len(rest) == 1 and rest[0].isdigit() and method in ("GET", "DELETE"):
        runner = next((r for r in runners if r.id == int(rest[0])), None)
        if runner is None:
            return handler._not_found()
        if method == "GET":
            return 200, runner.to_json(), {}
        if runner.busy:
            return _runner_invalid(f'Bad request - Runner "{runner.name}" is still running a job"')
        runners.remove(runner)
        return 204, None, {}
    return handler._not_found()
