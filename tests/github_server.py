"""A stateful GitHub REST server on 127.0.0.1 for tests: real HTTP, GitHub's shapes.

It answers the endpoints the actions use with the JSON shapes, status codes and headers of
GitHub's REST documentation (``X-RateLimit-*``, ``Retry-After``, ``Link`` pagination), logs
every request for assertions, and injects faults on demand: 5xx, 403 secondary rate limits
and 429 with ``Retry-After``, primary rate limit exhaustion, and slow responses.

Actions state (``WorkflowRun`` / ``Job``): runs with their jobs (labels, runner group,
attempts, steps, timestamps), moved through queued → in_progress → completed by the test
(``FakeGitHub.start_job`` / ``complete_job``) or cancelled over the API; commit statuses per
SHA; and the enhanced billing platform's usage report per organization.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
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
    """queued, waiting, in_progress or completed."""
    conclusion: str | None = None
    created_at: str = "2026-11-02T10:00:00Z"
    started_at: str | None = None
    completed_at: str | None = None
    runner_name: str | None = None
    runner_group_id: int | None = None
    runner_group_name: str | None = None
    steps: list[Step] = field(default_factory=list)
    run_attempt: int = 1


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
    jobs: list[Job] = field(default_factory=list)
    workflow_id: int = 161335


@dataclass
class Organization:
    login: str
    usage_items: list[dict[str, Any]] = field(default_factory=list)
    """Items of the billing usage report: date, product, sku, quantity, unitType,
    pricePerUnit, grossAmount, discountAmount, netAmount, organizationName, repositoryName."""
    billing_tokens: set[str] | None = None
    """Tokens that may read billing (None: any token)."""


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


#: GitHub's legacy ``permission`` field for each role (maintain→write, triage→read).
LEGACY_PERMISSION = {"admin": "admin", "maintain": "write", "write": "write",
                     "triage": "read", "read": "read", "none": "none"}


class FakeGitHub:
    """State plus an HTTP server. Use as a context manager or call start()/stop()."""

    def __init__(self, *, per_page_max: int = 100) -> None:
        self.repos: dict[str, Repo] = {}
        self.log: list[LoggedRequest] = []
        self.faults: list[Fault] = []
        self.read_only_tokens: set[str] = set()
        self.valid_tokens: set[str] | None = None
        self.rate_limit = 5000
        self.rate_remaining = 5000
        self.per_page_max = per_page_max
        self.orgs: dict[str, Organization] = {}
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

    def add_artifact(self, full_name: str, name: str, files: dict[str, bytes], *,
                     head_branch: str = "main", fork: bool = False, run_id: int | None = None,
                     created_at: str = "2026-11-02T10:00:00Z") -> Artifact:
        """An artifact as ``actions/upload-artifact`` leaves it: a zip of ``files``, made by a
        run on ``head_branch`` (of a fork when ``fork``)."""
        import io
        import zipfile

        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
            for member, data in files.items():
                archive.writestr(member, data)
        repo_id = abs(hash(full_name)) % 10**8
        art = Artifact(self.next_id(), name, buf.getvalue(), {
            "id": run_id or self.next_id(), "repository_id": repo_id,
            "head_repository_id": repo_id + 1 if fork else repo_id,
            "head_branch": head_branch, "head_sha": "c" * 40}, created_at)
        self.repos[full_name].artifacts.append(art)
        return art

    def find_job(self, job_id: int) -> tuple[Repo, WorkflowRun, Job]:
        for repo in self.repos.values():
            for run in repo.runs:
                for job in run.jobs:
                    if job.id == job_id:
                        return repo, run, job
        raise KeyError(job_id)

    def start_job(self, job_id: int, at: str, *, runner: str = "gpu-runner-1",
                  group: tuple[int, str] | None = None) -> Job:
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

    def inject(self, method: str, path_regex: str, status: int, *, times: int = 1,
               retry_after: float | None = None, body: dict[str, Any] | None = None,
               headers: dict[str, str] | None = None, delay: float = 0.0) -> None:
        """Answer the next ``times`` matching requests with ``status`` (0 = only delay)."""
        hdrs = dict(headers or {})
        if retry_after is not None:
            hdrs["Retry-After"] = str(retry_after)
        self.faults.append(Fault(method.upper(), re.compile(path_regex), status, times, hdrs,
                                 body, delay))

    def on_request(self, method: str, path_regex: str, callback: Any) -> None:
        """Call ``callback(path)`` before answering each matching request: state changes
        between two calls of a client (a runner picks a job up between list and re-read)."""
        self.hooks.append((method.upper(), re.compile(path_regex), callback))

    def requests(self, method: str | None = None, path_contains: str = "") -> list[LoggedRequest]:
        return [r for r in self.log
                if (method is None or r.method == method) and path_contains in r.path]

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
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> FakeGitHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- JSON shapes ------------------------------------------------------------------------
    def user_json(self, login: str) -> dict[str, Any]:
        return {"login": login, "id": abs(hash(login)) % 10**7, "type": "User",
                "url": f"{self.url}/users/{login}",
                "html_url": f"https://github.com/{login}", "site_admin": False}

    def repo_json(self, repo: Repo) -> dict[str, Any]:
        owner, name = repo.full_name.split("/")
        return {
            "id": abs(hash(repo.full_name)) % 10**8, "name": name,
            "full_name": repo.full_name, "private": repo.private,
            "owner": self.user_json(owner), "fork": False,
            "html_url": f"https://github.com/{repo.full_name}",
            "url": f"{self.url}/repos/{repo.full_name}",
            "default_branch": repo.default_branch,
        }

    def label_json(self, repo: Repo, name: str) -> dict[str, Any]:
        return {"id": abs(hash(name)) % 10**7, "name": name, "color": "ededed",
                "default": False, "description": None,
                "url": f"{self.url}/repos/{repo.full_name}/labels/{quote(name, safe='')}"}

    def pull_json(self, repo: Repo, pr: PullRequest) -> dict[str, Any]:
        head_repo = self.repos.get(pr.head_repo or repo.full_name) or Repo(pr.head_repo or "")
        head_repo_json = self.repo_json(head_repo)
        head_repo_json["fork"] = pr.head_repo not in (None, repo.full_name)
        owner = (pr.head_repo or repo.full_name).split("/")[0]
        return {
            "url": f"{self.url}/repos/{repo.full_name}/pulls/{pr.number}",
            "id": 1000 + pr.number, "number": pr.number, "state": pr.state,
            "locked": False, "title": f"PR {pr.number}", "draft": pr.draft,
            "merged": pr.merged, "user": self.user_json(pr.user),
            "labels": [self.label_json(repo, n) for n in pr.labels],
            "head": {"label": f"{owner}:{pr.head_ref}", "ref": pr.head_ref, "sha": pr.head_sha,
                     "user": self.user_json(owner), "repo": head_repo_json},
            "base": {"label": f"{repo.full_name.split('/')[0]}:{pr.base_ref}",
                     "ref": pr.base_ref, "sha": "b" * 40,
                     "user": self.user_json(repo.full_name.split("/")[0]),
                     "repo": self.repo_json(repo)},
            "html_url": f"https://github.com/{repo.full_name}/pull/{pr.number}",
        }

    def review_json(self, repo: Repo, pr: PullRequest, index: int,
                    review: tuple[str, str, str]) -> dict[str, Any]:
        """A pull request review as ``GET /repos/{o}/{r}/pulls/{n}/reviews`` lists it."""
        login, state, commit_id = review
        return {"id": 80 + index, "node_id": f"PRR_{index}", "user": self.user_json(login),
                "body": "", "state": state, "commit_id": commit_id,
                "html_url": f"https://github.com/{repo.full_name}/pull/{pr.number}"
                            f"#pullrequestreview-{80 + index}",
                "pull_request_url": f"{self.url}/repos/{repo.full_name}/pulls/{pr.number}",
                "author_association": "COLLABORATOR",
                "submitted_at": f"2026-01-0{1 + index % 9}T00:00:00Z"}


    def run_json(self, repo: Repo, run: WorkflowRun) -> dict[str, Any]:
        base = f"{self.url}/repos/{repo.full_name}/actions/runs/{run.id}"
        return {
            "id": run.id, "name": run.name, "node_id": f"WFR_{run.id}",
            "head_branch": run.head_branch, "head_sha": run.head_sha, "path": run.path,
            "display_title": run.name, "run_number": run.id % 1000, "event": run.event,
            "status": run.status, "conclusion": run.conclusion,
            "workflow_id": run.workflow_id, "url": base,
            "html_url": f"https://github.com/{repo.full_name}/actions/runs/{run.id}",
            "pull_requests": [{"number": n, "url": f"{self.url}/repos/{repo.full_name}/pulls/{n}"}
                              for n in run.pull_requests],
            "created_at": run.created_at, "updated_at": run.updated_at or run.created_at,
            "actor": self.user_json(run.actor),
            "triggering_actor": self.user_json(run.triggering_actor or run.actor),
            "run_attempt": run.run_attempt,
            "run_started_at": run.run_started_at or run.created_at,
            "jobs_url": f"{base}/jobs", "cancel_url": f"{base}/cancel",
            "workflow_url": f"{self.url}/repos/{repo.full_name}/actions/workflows/"
                            f"{run.workflow_id}",
            "repository": self.repo_json(repo), "head_repository": self.repo_json(repo),
        }

    def job_json(self, repo: Repo, run: WorkflowRun, job: Job) -> dict[str, Any]:
        return {
            "id": job.id, "run_id": run.id, "node_id": f"CR_{job.id}",
            "run_url": f"{self.url}/repos/{repo.full_name}/actions/runs/{run.id}",
            "run_attempt": job.run_attempt, "head_sha": run.head_sha,
            "head_branch": run.head_branch, "workflow_name": run.name,
            "url": f"{self.url}/repos/{repo.full_name}/actions/jobs/{job.id}",
            "html_url": f"https://github.com/{repo.full_name}/actions/runs/{run.id}/job/{job.id}",
            "status": job.status, "conclusion": job.conclusion,
            "created_at": job.created_at, "started_at": job.started_at or job.created_at,
            "completed_at": job.completed_at, "name": job.name,
            "steps": [{"name": s.name, "status": s.status, "conclusion": s.conclusion,
                       "number": s.number, "started_at": s.started_at,
                       "completed_at": s.completed_at} for s in job.steps],
            "check_run_url": f"{self.url}/repos/{repo.full_name}/check-runs/{job.id}",
            "labels": list(job.labels), "runner_id": None if job.runner_name is None else 1,
            "runner_name": job.runner_name, "runner_group_id": job.runner_group_id,
            "runner_group_name": job.runner_group_name,
        }

    def artifact_json(self, repo: Repo, art: Artifact) -> dict[str, Any]:
        base = f"{self.url}/repos/{repo.full_name}/actions/artifacts/{art.id}"
        return {"id": art.id, "node_id": f"MDg6QXJ0aWZhY3Q{art.id}", "name": art.name,
                "size_in_bytes": len(art.data), "url": base,
                "archive_download_url": f"{base}/zip", "expired": art.expired,
                "digest": None, "created_at": art.created_at, "updated_at": art.created_at,
                "expires_at": "2027-02-28T10:00:00Z", "workflow_run": dict(art.workflow_run)}

    def status_json(self, repo: Repo, sha: str, payload: dict[str, Any],
                    creator: str) -> dict[str, Any]:
        sid = self.next_id()
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return {
            "url": f"{self.url}/repos/{repo.full_name}/statuses/{sha}", "id": sid,
            "node_id": f"SC_{sid}", "state": payload["state"],
            "description": payload.get("description"),
            "target_url": payload.get("target_url"),
            "context": payload.get("context") or "default",
            "created_at": now, "updated_at": now, "creator": self.user_json(creator),
            "avatar_url": None,
        }


def _runs_filter(runs: list[WorkflowRun], query: dict[str, list[str]]) -> list[WorkflowRun]:
    """The ``status``, ``event``, ``head_sha`` and ``created`` filters of the list-runs API
    (``created``: ``>=YYYY-MM-DD``, ``<=…``, ``A..B``, or a date), newest first."""

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
    created = one("created")
    if created:
        day = [r.created_at[:10] for r in out]
        if created.startswith(">="):
            keep = [d >= created[2:12] for d in day]
        elif created.startswith("<="):
            keep = [d <= created[2:12] for d in day]
        elif ".." in created:
            lo, hi = created.split("..", 1)
            keep = [lo[:10] <= d <= hi[:10] for d in day]
        else:
            keep = [d == created[:10] for d in day]
        out = [r for r, k in zip(out, keep) if k]
    return sorted(out, key=lambda r: (r.created_at, r.id), reverse=True)


def _file_json(name: str) -> dict[str, Any]:
    return {"sha": "f" * 40, "filename": name, "status": "modified", "additions": 1,
            "deletions": 0, "changes": 1}


class _Handler(BaseHTTPRequestHandler):
    gh: FakeGitHub
    protocol_version = "HTTP/1.1"
    server_version = "GitHub.com"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    # -- plumbing -------------------------------------------------------------------------
    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        gh = self.gh
        data = b"" if status == 204 else (
            body if isinstance(body, bytes) else json.dumps(body).encode())
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

    def _handle(self, method: str) -> None:
        gh = self.gh
        split = urlsplit(self.path)
        query = parse_qs(split.query)
        length = int(self.headers.get("Content-Length") or 0)
        raw_body = self.rfile.read(length) if length else b""
        entry = LoggedRequest(method, split.path, query, dict(self.headers.items()), 0,
                              time.monotonic())
        with gh._lock:
            gh.log.append(entry)  # on arrival, so a request the client gave up on is seen
            gh.rate_remaining -= 1
            fault = next((f for f in gh.faults
                          if f.times > 0 and f.method in (method, "*")
                          and f.path.search(split.path)), None)
            if fault:
                fault.times -= 1
        for hook_method, hook_path, callback in list(gh.hooks):
            if hook_method in (method, "*") and hook_path.search(split.path):
                callback(split.path)
        if fault and fault.delay:
            time.sleep(fault.delay)
        if fault and fault.status:
            status, body, headers = fault.status, fault.body, dict(fault.headers)
            if body is None:
                body = _fault_body(fault.status)
        else:
            status, body, headers = self._route(method, split.path, query, raw_body)
        entry.status = status
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # client gave up
            self._send(status, body, headers)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_POST(self) -> None:
        self._handle("POST")

    def _token(self) -> str:
        auth = self.headers.get("Authorization", "")
        for prefix in ("token ", "Bearer ", "bearer "):
            if auth.startswith(prefix):
                return auth[len(prefix):]
        return ""

    # -- routes ---------------------------------------------------------------------------
    def _route(self, method: str, path: str, query: dict[str, list[str]],
               raw_body: bytes) -> tuple[int, Any, dict[str, str]]:
        gh = self.gh
        token = self._token()
        if gh.valid_tokens is not None and token not in gh.valid_tokens:
            return 401, {"message": "Bad credentials", "documentation_url": DOCS,
                         "status": "401"}, {}
        if gh.rate_remaining < 0:
            return 403, {"message": "API rate limit exceeded for installation.",
                         "documentation_url": DOCS}, {}
        if path.startswith("/api/v3/"):  # GitHub Enterprise Server's prefix
            path = path[len("/api/v3"):]
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if method == "GET" and len(parts) == 3 and parts[0] == "_blobs":  # storage, not API
            for repo_ in gh.repos.values():
                for art in repo_.artifacts:
                    if f"{art.id}.zip" == parts[2]:
                        return 200, art.data, {"Content-Type": "application/zip"}
            return self._not_found()
        if method == "GET" and len(parts) == 5 and parts[0] == "organizations" \
                and parts[2:] == ["settings", "billing", "usage"]:
            return self._billing_usage(parts[1], query, token)
        if parts == ["rate_limit"]:
            core = {"limit": gh.rate_limit, "remaining": gh.rate_remaining, "used": 0,
                    "reset": int(time.time()) + 3600}
            return 200, {"resources": {"core": core}, "rate": core}, {}
        if len(parts) < 3 or parts[0] != "repos":
            return self._not_found()
        repo = gh.repos.get(f"{parts[1]}/{parts[2]}")
        if repo is None:
            return self._not_found()
        rest = parts[3:]
        if method == "GET" and not rest:
            return 200, gh.repo_json(repo), {}
        if method == "GET" and len(rest) == 3 and rest[0] == "collaborators" \
                and rest[2] == "permission":
            login = rest[1]
            role = repo.roles.get(login, "read")
            body: dict[str, Any] = {"permission": LEGACY_PERMISSION.get(role, "read"),
                                    "user": gh.user_json(login)}
            if login not in repo.legacy_only:
                body["role_name"] = role
            return 200, body, {}
        if rest[:1] == ["pulls"] and len(rest) >= 2 and rest[1].isdigit():
            pr = repo.pulls.get(int(rest[1]))
            if pr is None:
                return self._not_found()
            if method == "GET" and len(rest) == 2:
                return 200, gh.pull_json(repo, pr), {}
            if method == "GET" and rest[2:] == ["files"]:
                return self._paginate(path, query, [_file_json(f) for f in pr.files])
            if method == "GET" and rest[2:] == ["reviews"]:
                return self._paginate(path, query, [
                    gh.review_json(repo, pr, i, r) for i, r in enumerate(pr.reviews)])
        if method == "GET" and rest[:1] == ["compare"] and len(rest) >= 2:
            basehead = "/".join(rest[1:])
            if basehead not in repo.compares:
                return self._not_found()
            files = [_file_json(f) for f in repo.compares[basehead]]
            status, page, headers = self._paginate(path, query, files)
            return status, {"status": "ahead", "ahead_by": 1, "behind_by": 0,
                            "total_commits": 1, "commits": [], "files": page}, headers
        if rest[:1] == ["issues"] and len(rest) >= 3 and rest[1].isdigit() \
                and rest[2] == "labels":
            pr = repo.pulls.get(int(rest[1]))
            if pr is None:
                return self._not_found()
            if method == "GET" and len(rest) == 3:
                return 200, [gh.label_json(repo, n) for n in pr.labels], {}
            if token in gh.read_only_tokens:
                return 403, {"message": "Resource not accessible by integration",
                             "documentation_url": DOCS, "status": "403"}, {}
            if method == "DELETE" and len(rest) == 4:
                name = rest[3]
                match = next((n for n in pr.labels if n.lower() == name.lower()), None)
                if match is None:
                    return 404, {"message": "Label does not exist", "documentation_url": DOCS,
                                 "status": "404"}, {}
                pr.labels.remove(match)
                return 200, [gh.label_json(repo, n) for n in pr.labels], {}
            if method == "POST" and len(rest) == 3:
                payload = json.loads(raw_body or b"{}")
                for name in payload.get("labels", []):
                    if name not in pr.labels:
                        pr.labels.append(name)
                return 200, [gh.label_json(repo, n) for n in pr.labels], {}
        if rest[:1] == ["actions"]:
            return self._actions(method, path, query, repo, rest[1:], token)
        if rest[:1] == ["statuses"] and len(rest) == 2 and method == "POST":
            if token in gh.read_only_tokens:
                return 403, {"message": "Resource not accessible by integration",
                             "documentation_url": DOCS, "status": "403"}, {}
            payload = json.loads(raw_body or b"{}")
            if payload.get("state") not in ("error", "failure", "pending", "success"):
                return 422, {"message": "Validation Failed", "documentation_url": DOCS,
                             "errors": [{"resource": "Status", "field": "state",
                                         "code": "custom"}], "status": "422"}, {}
            if len(str(payload.get("description") or "")) > 140:  # GitHub's documented 422
                return 422, {"message": "Validation Failed", "documentation_url": DOCS,
                             "errors": [{"resource": "Status", "field": "description",
                                         "code": "custom", "message": "description is too "
                                         "long (maximum is 140 characters)"}],
                             "status": "422"}, {}
            status = gh.status_json(repo, rest[1], payload, "github-actions[bot]")
            repo.statuses.setdefault(rest[1], []).insert(0, status)
            return 201, status, {}
        if method == "GET" and rest[:1] == ["commits"] and len(rest) == 3:
            statuses = repo.statuses.get(rest[1], [])
            if rest[2] == "statuses":
                return self._paginate(path, query, statuses)
            if rest[2] == "status":
                latest: dict[str, dict[str, Any]] = {}
                for s in statuses:  # newest first: the first per context wins
                    latest.setdefault(s["context"], s)
                states = {s["state"] for s in latest.values()}
                state = ("failure" if states & {"failure", "error"} else
                         "pending" if "pending" in states or not states else "success")
                return 200, {"state": state, "sha": rest[1],
                             "total_count": len(latest), "statuses": list(latest.values()),
                             "repository": gh.repo_json(repo)}, {}
        return self._not_found()

    def _actions(self, method: str, path: str, query: dict[str, list[str]], repo: Repo,
                 rest: list[str], token: str) -> tuple[int, Any, dict[str, str]]:
        gh = self.gh

        def wrap(key: str, items: list[Any]) -> tuple[int, Any, dict[str, str]]:
            status, page, headers = self._paginate(path, query, items)
            return status, {"total_count": len(items), key: page}, headers

        if method == "GET" and rest == ["runs"]:
            runs = _runs_filter(repo.runs, query)
            return wrap("workflow_runs", [gh.run_json(repo, r) for r in runs])
        if method == "GET" and len(rest) == 3 and rest[0] == "workflows" and rest[2] == "runs":
            wanted = rest[1]
            runs = [r for r in repo.runs
                    if wanted in (str(r.workflow_id), r.path.rsplit("/", 1)[-1])]
            return wrap("workflow_runs", [gh.run_json(repo, r) for r in
                                          _runs_filter(runs, query)])
        if len(rest) >= 2 and rest[0] == "runs" and rest[1].isdigit():
            run = next((r for r in repo.runs if r.id == int(rest[1])), None)
            if run is None:
                return self._not_found()
            if method == "GET" and len(rest) == 2:
                return 200, gh.run_json(repo, run), {}
            if method == "GET" and rest[2:] == ["jobs"]:
                every = (query.get("filter") or ["latest"])[0] == "all"
                jobs = [j for j in run.jobs if every or j.run_attempt == run.run_attempt]
                return wrap("jobs", [gh.job_json(repo, run, j) for j in jobs])
            if method == "GET" and len(rest) == 5 and rest[2] == "attempts" \
                    and rest[4] == "jobs" and rest[3].isdigit():
                jobs = [j for j in run.jobs if j.run_attempt == int(rest[3])]
                return wrap("jobs", [gh.job_json(repo, run, j) for j in jobs])
            if method == "POST" and rest[2:] == ["cancel"]:
                if token in gh.read_only_tokens:
                    return 403, {"message": "Resource not accessible by integration",
                                 "documentation_url": DOCS, "status": "403"}, {}
                if run.status == "completed":
                    return 409, {"message": "Cannot cancel a workflow run that is "
                                 "completed.", "documentation_url": DOCS, "status": "409"}, {}
                now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                for job in run.jobs:
                    if job.run_attempt == run.run_attempt and job.status != "completed":
                        job.status, job.conclusion, job.completed_at = (
                            "completed", "cancelled", now)
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
                    return 410, {"message": "Artifact has expired", "documentation_url": DOCS,
                                 "status": "410"}, {}
                return 302, {}, {"Location": f"{gh.url}/_blobs/artifacts/{art.id}.zip"}
        if method == "GET" and len(rest) == 2 and rest[0] == "jobs" and rest[1].isdigit():
            try:
                found_repo, run, job = gh.find_job(int(rest[1]))
            except KeyError:
                return self._not_found()
            if found_repo is not repo:
                return self._not_found()
            return 200, gh.job_json(repo, run, job), {}
        return self._not_found()

    def _billing_usage(self, org_login: str, query: dict[str, list[str]],
                       token: str) -> tuple[int, Any, dict[str, str]]:
        org = self.gh.orgs.get(org_login.lower())
        if org is None:  # also a user account: the endpoint exists for organizations only
            return self._not_found()
        if org.billing_tokens is not None and token not in org.billing_tokens:
            return 403, {"message": "Resource not accessible by personal access token",
                         "documentation_url": DOCS, "status": "403"}, {}
        items = org.usage_items
        for key, width in (("year", 4), ("month", 2), ("day", 2)):
            value = (query.get(key) or [None])[0]
            if value is not None:
                pos = {"year": (0, 4), "month": (5, 7), "day": (8, 10)}[key]
                items = [i for i in items
                         if i["date"][pos[0]:pos[1]] == value.zfill(width)]
        return 200, {"usageItems": items}, {}

    def _paginate(self, path: str, query: dict[str, list[str]],
                  items: list[Any]) -> tuple[int, Any, dict[str, str]]:
        per_page = min(int((query.get("per_page") or ["30"])[0]), self.gh.per_page_max)
        page = int((query.get("page") or ["1"])[0])
        last = max(1, -(-len(items) // per_page))
        chunk = items[(page - 1) * per_page: page * per_page]
        links = []
        base = f"{self.gh.url}{path}"

        # Other query parameters (filters) travel in every link, as GitHub's do.
        keep = "".join(f"&{quote(k)}={quote(v)}" for k, vs in sorted(query.items())
                       if k not in ("per_page", "page") for v in vs)

        def link(n: int, rel: str) -> str:
            return f'<{base}?per_page={per_page}&page={n}{keep}>; rel="{rel}"'

        if page > 1:
            links += [link(page - 1, "prev"), link(1, "first")]
        if page < last:
            links += [link(page + 1, "next"), link(last, "last")]
        return 200, chunk, ({"Link": ", ".join(links)} if links else {})


def _fault_body(status: int) -> dict[str, Any]:
    if status == 403:
        return {"message": "You have exceeded a secondary rate limit. Please wait a few "
                "minutes before you try again.", "documentation_url": DOCS}
    if status == 429:
        return {"message": "Too Many Requests", "documentation_url": DOCS}
    return {"message": "Server Error"} if status >= 500 else {"message": "Error"}
