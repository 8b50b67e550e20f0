"""The one GitHub seam: PyGithub, configured for CI (GHES base URL, timeouts, retries that
honour GitHub), behind a small REST client that raises its own :class:`ApiError`.

Retries use PyGithub's :class:`github.GithubRetry` (urllib3 underneath), which waits for
``Retry-After`` and recognises secondary rate limits in 403 responses; we add 429 and the
5xx family. Knobs are environment variables so that tests and impatient users can shorten
waits without new action inputs.

Nothing else in the package imports PyGithub: wings and commands see :class:`Rest` (what a
REST client offers), :class:`ApiError` (what a failed call was, and GitHub's answer) and
:func:`connect` (the only way to a client, for every token).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urljoin, urlsplit

from gpu_ci.errors import GpuCiError
from gpu_ci.github.event import api_url
from gpu_ci.retry import RetryPolicy, UsageError
from gpu_ci.urls import origin


class ApiError(Exception):
    """A REST call that failed: what was asked and GitHub's answer, or no answer at all.

    ``status`` is the HTTP status GitHub answered with (``None`` when no answer came after
    retries: then ``kind`` and ``reason`` say what went wrong on the way); ``message`` and
    ``documentation_url`` are GitHub's own fields of the error body. Raised by
    :class:`RestClient` instead of PyGithub's or requests' exceptions, so that no module
    above the client needs to know them.
    """

    def __init__(
        self,
        request: str,
        status: int | None,
        message: str = "",
        documentation_url: str = "",
        *,
        kind: str = "",
        reason: str = "",
    ) -> None:
        self.request = request
        self.status = status
        self.message = message
        self.documentation_url = documentation_url
        self.kind = kind
        self.reason = reason
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.status is None:
            return f"{self.request}: no answer ({self.kind}: {self.reason})"
        return f"{self.request}: HTTP {self.status}{': ' + self.message if self.message else ''}"

    @classmethod
    def of_answer(cls, request: str, status: int, data: object) -> ApiError:
        """The error for a failed API call.

        From an error answer's status and JSON body (GitHub's ``message`` and
        ``documentation_url``, when the body has them)."""
        body = data if isinstance(data, dict) else {}
        return cls(
            request,
            status,
            str(body.get("message") or ""),
            str(body.get("documentation_url") or ""),
        )

    @classmethod
    def of_failure(cls, request: str, exc: BaseException) -> ApiError:
        """From an exception raised on the way (PyGithub, requests, urllib3), after retries."""
        from github import GithubException

        if isinstance(exc, GithubException):
            return cls.of_answer(request, exc.status, exc.data)
        inner = getattr(exc, "reason", None)
        return cls(
            request, None, kind=type(exc).__name__, reason=str(inner if inner is not None else exc)
        )


def unanswered(what: str, kind: str, reason: str) -> str:
    """The wording for a call that got no answer.

    The one wording of an API call that got no answer after retries."""
    return f"GitHub API did not answer {what} after retries ({kind}: {reason})."


class Rest(Protocol):
    """The REST calls the wings make.

    What the wings need of a REST client (:class:`RestClient`, or a test's fake)."""

    calls: int
    rate_remaining: int | None

    def get(self, path: str) -> dict[str, Any]: ...

    def get_pages(self, path: str, *, key: str | None = None, limit: int = 3000) -> list[Any]: ...

    def post(self, path: str, body: dict[str, Any] | None = None) -> object: ...

    def delete(self, path: str) -> object: ...

    def download(self, path: str, limit: int) -> bytes: ...


@dataclass(frozen=True)
class ClientSettings:
    api_url: str
    timeout: float = 15.0
    retries: int = 4
    backoff: float = 1.0
    """Exponential backoff factor in seconds (urllib3: factor * 2 ** (n - 1))."""
    max_wait: float = 120.0
    """Longest single wait on Retry-After/secondary limits before giving up."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> ClientSettings:
        """The API client's side of the one retry policy (``gpu_ci.retry``): the same
        ``GPU_CI_HTTP_*`` variables and validation as downloads, with the API's own defaults
        (a shorter timeout, a longer wait allowed for rate limits)."""
        policy = RetryPolicy.from_environ(environ, API_DEFAULTS)
        return cls(
            api_url=api_url(environ),
            timeout=policy.timeout,
            retries=policy.retries,
            backoff=policy.backoff,
            max_wait=policy.max_wait,
        )


#: The API client's defaults: 4 retries, 1 s backoff (GitHub asks for ≥ 1 s after secondary
#: limits), up to 120 s on a Retry-After or rate limit, 15 s without an answer.
API_DEFAULTS = RetryPolicy(attempts=5, backoff=1.0, max_wait=120.0, timeout=15.0)


class RetryAfterTooLong(Exception):
    """GitHub asked for a longer wait (``Retry-After``) than the retry policy allows."""


def _capped(base: Any, max_wait: float) -> Any:
    """``base`` (a urllib3 ``Retry`` class) with ``Retry-After`` held to ``max_wait``: urllib3
    sleeps whatever the header says (a secondary rate limit asks for 60 s), so a wait past
    the policy fails the call at once, naming both, instead of sleeping it in a job."""

    class PolicyRetry(base):  # type: ignore[misc]  # a class made at run time
        def sleep_for_retry(self, response: Any) -> bool:
            wait = self.get_retry_after(response)
            if wait is not None and wait > max_wait:
                raise RetryAfterTooLong(
                    f"GitHub asked to wait {wait:g} s (Retry-After), longer than the retry "
                    f"policy's longest wait of {max_wait:g} s (GPU_CI_HTTP_MAX_WAIT)"
                )
            return bool(super().sleep_for_retry(response))

    return PolicyRetry


#: What is retried: secondary rate limits (403 with Retry-After), 429 and the 5xx family.
RETRY_STATUSES = (403, 429, 500, 502, 503, 504)


def _retry(settings: ClientSettings) -> Any:  # a github.GithubRetry
    """The retry policy for API calls.

    PyGithub's retry (which tells a secondary rate limit's 403 from a refusal), capped."""
    from github import GithubRetry

    return _capped(GithubRetry, settings.max_wait)(
        total=settings.retries,
        backoff_factor=settings.backoff,
        status_forcelist=list(RETRY_STATUSES),
        secondary_rate_wait=min(60.0, settings.max_wait),
        max_rate_limit_wait=settings.max_wait,
        respect_retry_after_header=True,
    )


def _download_retry(settings: ClientSettings) -> Any:  # a urllib3 Retry
    """The retry policy for downloads.

    The same policy for a download (the artifact zip and its storage redirect), where no
    403 is a rate limit: 429 and the 5xx family, connection errors and timeouts."""
    from urllib3.util.retry import Retry

    return _capped(Retry, settings.max_wait)(
        total=settings.retries,
        backoff_factor=settings.backoff,
        status_forcelist=[s for s in RETRY_STATUSES if s != 403],
        allowed_methods=["GET"],
        respect_retry_after_header=True,
        raise_on_status=False,
    )


def _make_github(token: str, settings: ClientSettings) -> Any:  # a github.Github
    """A PyGithub client; imported lazily so that GPU-side commands never load PyGithub."""
    import github
    from github import Auth

    retry = _retry(settings)
    return github.Github(
        auth=Auth.Token(token) if token else None,
        base_url=settings.api_url,
        timeout=max(1, round(settings.timeout)),  # PyGithub insists on an int
        retry=retry,
        # We make a handful of calls per run; PyGithub's default pacing only adds latency.
        seconds_between_requests=None,
        seconds_between_writes=None,
        user_agent="gpu-ci-actions",
    )


def resolve_token(value: str, environ: Mapping[str, str] | None = None) -> str:
    """The token from the input, else ``GITHUB_TOKEN``; surrounding whitespace stripped.

    A token that still holds whitespace is refused: requests would put it verbatim into an
    ``Authorization`` header and quote the whole header (token included) in its error.
    """
    environ = os.environ if environ is None else environ
    token = (value or environ.get("GITHUB_TOKEN", "")).strip()
    if any(ch.isspace() for ch in token):
        raise UsageError(
            "the GitHub token contains whitespace inside it (a pasted secret "
            "with a line break?): store the token alone in the secret.",
            title="unusable token",
        )
    return token


def connect(
    token_input: str, environ: Mapping[str, str], mask: Callable[[str], None], needs: str = ""
) -> RestClient:
    """The REST client every command uses: token looked up, masked, then the client built.

    ``mask`` hides a secret from the log and from everything the command writes; it sees
    the token (and, when the token is refused, each whitespace-separated part of it) before
    any message could quote it (parts shorter than 8 characters are no token and would
    only garble the log). ``needs`` names the permission the command needs, for the error.
    """
    raw = token_input or environ.get("GITHUB_TOKEN", "")
    mask(raw.strip())
    for part in raw.split():
        if len(part) >= 8 and part != raw.strip():
            mask(part)
    token = resolve_token(token_input, environ)
    if not token:
        scope = f" with {needs}" if needs else ""
        raise GpuCiError(
            f"no GitHub token: pass 'github-token'{scope} (the default is "
            "${{ github.token }}) or set GITHUB_TOKEN for the CLI."
        )
    return RestClient(token, ClientSettings.from_environ(environ))


def call_api(what: str, fn: Callable[[], Any]) -> Any:
    """Run one API call; its failure becomes one clear error.

    ``fn()``, with an :class:`ApiError` (or an answer ``fn`` could not use) turned into one
    error that says what could not be read; our own errors pass through."""
    try:
        return fn()
    except GpuCiError:
        raise
    except Exception as exc:  # ApiError; a malformed answer reads as no usable answer
        raise describe_api_failure(exc, what) from None


def describe_api_failure(exc: BaseException, what: str) -> GpuCiError:
    """A failed call (an :class:`ApiError`) as a user-facing error about ``what``."""
    if isinstance(exc, ApiError) and exc.status is not None:
        hint = ""
        if exc.status in (401, 403):
            hint = " Check that the token is valid and that the job grants the permission needed."
        message = f": {exc.message}" if exc.message else ""
        return GpuCiError(
            f"GitHub API refused {what}: HTTP {exc.status}{message}.{hint}",
            title="GitHub API error",
        )
    if isinstance(exc, ApiError):
        kind, reason = exc.kind, exc.reason
    else:
        inner = getattr(exc, "reason", None)
        kind, reason = type(exc).__name__, str(inner if inner is not None else exc)
    return GpuCiError(unanswered(what, kind, reason), title="GitHub API unavailable")


class RestClient:
    """Plain-JSON REST calls through PyGithub's requester (auth, base URL, retries).

    The functional core decides on dictionaries shaped like GitHub's documented responses;
    this class is the only place that talks HTTP.
    """

    def __init__(self, token: str, settings: ClientSettings) -> None:
        self.settings = settings
        self._github = _make_github(token, settings)
        self._token = token
        self.calls = 0
        self.rate_remaining: int | None = None
        """``X-RateLimit-Remaining`` of the last answer (None until one came)."""

    def _request(
        self, method: str, url: str, body: dict[str, Any] | None = None
    ) -> tuple[dict[str, str], object]:
        self.calls += 1
        try:
            raw, data = self._github.requester.requestJsonAndCheck(method, url, input=body)
        except Exception as exc:  # PyGithub / requests / urllib3, after retries
            raise ApiError.of_failure(f"{method} {url}", exc) from None
        headers = dict(raw)
        remaining = headers.get("x-ratelimit-remaining") or headers.get("X-RateLimit-Remaining")
        if remaining is not None and str(remaining).isdigit():
            self.rate_remaining = int(remaining)
        return headers, data

    def get(self, path: str) -> dict[str, Any]:
        _headers, data = self._request("GET", path)
        if not isinstance(data, dict):
            raise GpuCiError(f"GitHub API answered GET {path} with unexpected JSON.")
        return data

    def get_pages(self, path: str, *, key: str | None = None, limit: int = 3000) -> list[Any]:
        """Every item of a paginated list (following ``Link: rel="next"``)."""
        items: list[Any] = []
        sep = "&" if "?" in path else "?"
        url: str | None = f"{path}{sep}per_page=100"
        while url and len(items) < limit:
            headers, data = self._request("GET", url)
            page = data.get(key, []) if key and isinstance(data, dict) else data
            if not isinstance(page, list):
                raise GpuCiError(f"GitHub API answered GET {path} with unexpected JSON.")
            items.extend(page)
            url = _next_link(headers.get("link") or headers.get("Link") or "")
            if url is not None:
                url = self._same_origin(url, path)
        return items

    def _same_origin(self, url: str, path: str) -> str:
        """A next-page URL, refused unless it is on the API's own origin.

        The token goes with every request; PyGithub's own host check is an ``assert``, gone
        under ``python -O``. So the check is ours, and it also compares scheme and port.
        """
        base = urlsplit(self.settings.api_url)
        target = urlsplit(urljoin(self.settings.api_url + "/", url))
        if origin(target.geturl()) != origin(base.geturl()):
            raise GpuCiError(
                f"GitHub API answered GET {path} with a next-page link to another origin "
                f"({target.scheme}://{target.hostname}, not {base.scheme}://{base.hostname}); "
                "refusing to send the token there.",
                title="GitHub API error",
            )
        return target.geturl()

    def delete(self, path: str) -> object:
        _headers, data = self._request("DELETE", path)
        return data

    def post(self, path: str, body: dict[str, Any] | None = None) -> object:
        _headers, data = self._request("POST", path, body)
        return data

    def patch(self, path: str, body: dict[str, Any]) -> object:
        _headers, data = self._request("PATCH", path, body)
        return data

    def download(self, path: str, limit: int) -> bytes:
        """The bytes behind a download endpoint (e.g. an artifact's zip), following its
        redirect to storage; at most ``limit`` bytes. One REST call (the redirect target is
        storage, not the API, and gets no token: requests drops it on another host), retried
        by the API's retry policy like every other call."""
        import requests

        self.calls += 1
        url = self.settings.api_url + path
        headers = {
            "Authorization": f"token {self._token}",
            "User-Agent": "gpu-ci-actions",
            "Accept": "application/vnd.github+json",
        }
        session = requests.Session()
        session.mount(
            "http://", requests.adapters.HTTPAdapter(max_retries=_download_retry(self.settings))
        )
        session.mount(
            "https://", requests.adapters.HTTPAdapter(max_retries=_download_retry(self.settings))
        )
        try:
            with (
                session,
                session.get(
                    url, headers=headers, timeout=self.settings.timeout, stream=True
                ) as resp,
            ):
                if resp.status_code >= 400:
                    try:
                        data = resp.json()
                    except ValueError:
                        data = {"message": resp.text[:200]}
                    raise ApiError.of_answer(f"GET {path}", resp.status_code, data)
                chunks, size = [], 0
                for chunk in resp.iter_content(65536):
                    size += len(chunk)
                    if size > limit:
                        raise GpuCiError(f"GET {path} is larger than {limit} bytes.")
                    chunks.append(chunk)
                return b"".join(chunks)
        except (requests.RequestException, RetryAfterTooLong) as exc:
            raise ApiError.of_failure(f"GET {path}", exc) from None


def _next_link(header: str) -> str | None:
    for part in header.split(","):
        section = part.split(";")
        if len(section) < 2:
            continue
        if any(s.strip() == 'rel="next"' for s in section[1:]):
            return section[0].strip().strip("<>")
    return None
