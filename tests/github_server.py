"""A stateful GitHub REST server on 127.0.0.1 for tests: real HTTP, GitHub's shapes.

It answers the endpoints the actions use with the JSON shapes, status codes and headers of
GitHub's REST documentation (``X-RateLimit-*``, ``Retry-After``, ``Link`` pagination), logs
every request for assertions, and injects faults on demand: 5xx, 403 secondary rate limits
and 429 with ``Retry-After``, primary rate limit exhaustion, and slow responses.
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
    workflow_runs: list[dict[str, Any]] = field(default_factory=list)


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

    def inject(self, method: str, path_regex: str, status: int, *, times: int = 1,
               retry_after: float | None = None, body: dict[str, Any] | None = None,
               headers: dict[str, str] | None = None, delay: float = 0.0) -> None:
        """Answer the next ``times`` matching requests with ``status`` (0 = only delay)."""
        hdrs = dict(headers or {})
        if retry_after is not None:
            hdrs["Retry-After"] = str(retry_after)
        self.faults.append(Fault(method.upper(), re.compile(path_regex), status, times, hdrs,
                                 body, delay))

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
        data = b"" if status == 204 else json.dumps(body).encode()
        self.send_response(status)
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
        if method == "GET" and rest == ["actions", "runs"]:
            return 200, {"total_count": len(repo.workflow_runs),
                         "workflow_runs": repo.workflow_runs}, {}
        return self._not_found()

    def _paginate(self, path: str, query: dict[str, list[str]],
                  items: list[Any]) -> tuple[int, Any, dict[str, str]]:
        per_page = min(int((query.get("per_page") or ["30"])[0]), self.gh.per_page_max)
        page = int((query.get("page") or ["1"])[0])
        last = max(1, -(-len(items) // per_page))
        chunk = items[(page - 1) * per_page: page * per_page]
        links = []
        base = f"{self.gh.url}{path}"

        def link(n: int, rel: str) -> str:
            return f'<{base}?per_page={per_page}&page={n}>; rel="{rel}"'

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
