"""Parallel, verified downloads (standard library only).

Each file is streamed to ``<dest>.part-<token>`` (a name no other process uses: jobs that
share a package cache download side by side) while hashing, checked against the expected
sha256 (else md5) and the announced length, and only then renamed into place: a file at
``dest`` is always complete and verified, and a second job finding it there is done. 5xx,
429 and network errors are retried as :class:`gpu_ci.retry.RetryPolicy` says, honouring
``Retry-After``; a cut connection resumes where it stopped (HTTP ``Range`` on this process's
own ``.part-<token>``, the hash then covering the whole file). A full or read-only disk is a
:class:`gpu_ci.disk.DiskError` at once, never retried, and leaves no partial file. A
``Router`` (mirrors and credentials, see ``gpu_ci.conda.channels``) decides where each URL is
really fetched from; ``Progress`` reports bytes and rate every few seconds for long downloads.
"""

from __future__ import annotations

import io
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol
from urllib.parse import urlsplit

from gpu_ci.connections import Verdicts, connection, drop, keeps_alive
from gpu_ci.disk import as_disk_error, require_space
from gpu_ci.errors import GpuCiError
from gpu_ci.faults import crash_point
from gpu_ci.retry import RetryPolicy
from gpu_ci.routing import direct, proxies, request_for, same_origin_auth
from gpu_ci.urls import mask_url

__all__ = [
    "CHUNK",
    "Download",
    "Fetched",
    "Progress",
    "RetryPolicy",
    "Route",
    "Router",
    "TOKEN",
    "Downloader",
    "default",
    "fetch",
    "file_digest",
    "part_path",
    "Verdicts",
    "keeps_alive",
    "verified",
    "direct",
    "proxies",
]

if TYPE_CHECKING:  # imported when first used: a reused environment downloads nothing
    import urllib.error
    import urllib.request
    from email.message import Message

CHUNK = 1 << 20

TOKEN = os.urandom(8).hex()
"""This process's mark in temporary names; a later run sweeps marks whose owner is gone.
16 hex digits of the system's randomness, as ``uuid4().hex[:16]`` was, without importing
``uuid`` (it imports ``platform``: ~3 ms of every run)."""


# NamedTuples, not frozen dataclasses: each class costs every run ~0.2 ms to create, not ~1.3.


class Download(NamedTuple):
    """One file to fetch to ``dest`` and verify against its digests."""

    url: str
    dest: Path
    label: str
    """What the file is, for messages (e.g. 'numpy 2.1.0 (h1234_0)')."""
    sha256: str = ""
    md5: str = ""


class Fetched(NamedTuple):
    """How a download was had: its size, whether from the cache, and the attempts it took."""

    download: Download
    size: int
    cached: bool
    attempts: int
    sha256: str = ""
    md5: str = ""
    """Both digests of the verified file, computed on the way (conda-meta records carry both);
    '' for an entry trusted without its archive."""


class _Retryable(Exception):
    def __init__(self, message: str, wait: float | None = None) -> None:
        super().__init__(message)
        self.wait = wait


def file_digest(path: Path, algorithm: str) -> str:
    import hashlib  # here, not at the top: a warm install makes no download (~5 ms)

    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_digests(path: Path) -> tuple[str, str]:
    """(sha256, md5) in one pass."""
    import hashlib

    sha, md5 = hashlib.sha256(), hashlib.md5()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            sha.update(chunk)
            md5.update(chunk)
    return sha.hexdigest(), md5.hexdigest()


def expected(item: Download) -> tuple[str, str]:
    return ("sha256", item.sha256) if item.sha256 else ("md5", item.md5)


def verified(item: Download, path: Path) -> bool:
    algorithm, want = expected(item)
    return bool(want) and file_digest(path, algorithm) == want


def part_path(dest: Path) -> Path:
    return dest.with_name(f"{dest.name}.part-{TOKEN}")


class Route(NamedTuple):
    """Where one URL is really fetched from, and how (built by ``gpu_ci.conda.channels``)."""

    url: str
    headers: Mapping[str, str] = MappingProxyType({})
    """Sent with every request for it (one shared, read-only default)."""
    mirror: str = ""
    """The mirror URL when a mirror replaced the original, for messages."""
    hint: str = ""
    """What to do when the server answers 401 or 403."""


class Router(Protocol):
    def route(self, url: str) -> Route: ...

    def authorize(self, url: str) -> tuple[str, dict[str, str]]: ...


class Progress:
    """Bytes and rate of all downloads, reported at most every ``interval`` s."""

    def __init__(
        self,
        report: Callable[[str], None],
        interval: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._report, self._interval, self._clock = report, interval, clock
        self._lock = threading.Lock()
        self._start = self._last = -1.0
        self._total = self._since = 0

    def add(self, count: int) -> None:
        with self._lock:
            now = self._clock()
            if self._start < 0:  # the clock starts with the first bytes, not at set-up
                self._start = self._last = now
            self._total += count
            self._since += count
            if now - self._last < self._interval:
                return
            rate = self._since / max(now - self._last, 1e-9)
            self._last, self._since = now, 0
            total, elapsed = self._total, now - self._start
        self._report(
            f"downloading: {total / 1e6:.1f} MB in {elapsed:.0f} s ({rate / 1e6:.1f} MB/s now)"
        )


def _unrouted(url: str) -> Route:
    """Where ``url`` goes without a router: to itself, with a hint for a 401/403."""
    host = urlsplit(url).netloc.rpartition("@")[2]
    return Route(
        url, hint=f"{host} asks for credentials: add a line for it to 'channel-credentials'"
    )


_REDIRECTS = (301, 302, 303, 307, 308)


class _Response:
    """What ``_attempt`` reads: a kept-alive response, or urllib's (redirects, proxies)."""

    def __init__(
        self, status: int, headers: Message, body: object, done: Callable[[], None]
    ) -> None:
        self.status, self.headers, self._body, self._done = status, headers, body, done

    def read(self, size: int) -> bytes:
        return bytes(self._body.read(size))  # type: ignore[attr-defined]

    def __enter__(self) -> _Response:
        return self

    def __exit__(self, *exc: object) -> None:
        self._done()


def _hash_file(path: Path, sha: Any, md5: Any) -> None:
    """``path``'s bytes fed to both hashes (a resumed download's first part)."""
    with open(path, "rb") as old:
        for chunk in iter(lambda: old.read(CHUNK), b""):
            sha.update(chunk)
            md5.update(chunk)


def _http_failure(
    exc: urllib.error.HTTPError, item: Download, to: Route, part: Path, offset: int
) -> Exception:
    """What an HTTP error answer means: retry (the ``.part`` kept or not), or give up."""
    if exc.code == 416 and offset:
        part.unlink(missing_ok=True)
        return _Retryable("HTTP 416 for a resumed download: starting over")
    if exc.code in (429,) or exc.code >= 500:  # keep the .part: resumed next time
        wait = exc.headers.get("Retry-After") if exc.headers else None
        return _Retryable(f"HTTP {exc.code}", _seconds(wait))
    part.unlink(missing_ok=True)
    hint = f" {to.hint}." if exc.code in (401, 403) and to.hint else ""
    return GpuCiError(
        f"downloading {item.label} failed: HTTP {exc.code} for {_where(item, to)}.{hint}"
    )


def _mismatch(item: Download, to: Route, algorithm: str, want: str, got: str) -> GpuCiError:
    """The error of a fresh download whose digest is not the lock's."""
    return GpuCiError(
        f"{algorithm} mismatch for {item.label} ({_where(item, to)}): the lock says "
        f"{want}, the download has {got}. The file changed on the server"
        f"{', or the mirror serves another file for this URL' if to.mirror else ''}, or "
        "the lock is wrong; nothing was installed.",
        title="hash mismatch",
    )


def _where(item: Download, to: Route) -> str:
    """The URL to name in a message: the mirror's when a mirror served it."""
    if to.mirror:
        return f"mirror {mask_url(to.mirror)} (channel-mirrors, for {mask_url(item.url)})"
    return mask_url(item.url)


def _seconds(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:  # an HTTP date: fall back to our own backoff
        return None


def _disk(exc: OSError, path: Path, item: Download) -> BaseException:
    if path.name.endswith(TOKEN):
        path.unlink(missing_ok=True)
    named = as_disk_error(exc, path, f"downloading {item.label}")
    return named if named is not None else exc


class Downloader:
    """The download layer of one run: one object, as in pip.

    It holds where each URL really goes and with which credentials (``router``, e.g.
    ``gpu_ci.conda.channels.Network``; none: every URL to itself), the progress reporter,
    the retry ``policy``, and what each origin's connections do (``verdicts``). Every
    download of a run goes through one, so that a redirect's credentials follow one rule
    (``redirected``) and a route is decided once per URL."""

    def __init__(
        self,
        router: Router | None = None,
        progress: Progress | None = None,
        policy: RetryPolicy | None = None,
    ) -> None:
        self.router, self.progress = router, progress
        self.policy = policy or RetryPolicy()
        self.verdicts = Verdicts()
        self._routes: dict[str, Route] = {}
        self._opener: urllib.request.OpenerDirector | None = None

    def route(self, url: str) -> Route:
        """Where ``url`` is fetched from, decided once.

        A lock asks it of each archive at least twice: whether to stream it, and where its
        download goes."""
        to = self._routes.get(url)
        if to is None:
            to = self._routes[url] = (
                self.router.route(url) if self.router is not None else _unrouted(url)
            )
        return to

    def redirected(
        self, old_url: str, new_url: str, unredirected: Mapping[str, str]
    ) -> tuple[str, dict[str, str]]:
        """The one rule for a redirect's credentials, on either path.

        On our kept-alive connections and on urllib's: the request's ``Authorization`` only
        within its origin (``_same_origin_auth``), and the new URL's own credentials from
        the router, never this request's."""
        extra = same_origin_auth(old_url, new_url, unredirected)
        if self.router is not None:
            new_url, routed = self.router.authorize(new_url)
            extra.update(routed)
        return new_url, extra

    def opener(self) -> urllib.request.OpenerDirector:
        """urllib's opener for proxies and redirects, made on first use.

        It takes what may not go over a kept-alive connection (proxies) and redirects, with
        ``redirected`` as its redirect rule."""
        if self._opener is None:
            import urllib.request

            owner = self

            class _Redirects(urllib.request.HTTPRedirectHandler):
                def redirectrequest_for(self, req, fp, code, msg, headers, newurl):
                    new = super().redirectrequest_for(req, fp, code, msg, headers, newurl)
                    if new is not None:
                        url, extra = owner.redirected(
                            req.full_url, new.full_url, req.unredirected_hdrs
                        )
                        new.full_url = url
                        for key, value in extra.items():
                            new.add_unredirected_header(key, value)
                    return new

            self._opener = urllib.request.build_opener(
                _Redirects, urllib.request.ProxyHandler(proxies())
            )
        return self._opener

    def _open(self, request: urllib.request.Request, timeout: float) -> _Response:
        """Send ``request``, reusing this thread's connection to its origin when it can: one TCP
        (and TLS) handshake per origin and thread instead of per file. A connection the server
        closed meanwhile is replaced once at once; a redirect is followed by urllib (with the
        one credential rule, ``redirected``). 4xx/5xx raise ``HTTPError`` as urllib."""
        import http.client
        import urllib.error

        url = request.full_url
        if not direct(url):
            response = self.opener().open(request, timeout=timeout)
            return _Response(response.status, response.headers, response, response.close)
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        headers = {**request.headers, **request.unredirected_hdrs, "Host": parts.netloc}
        for fresh in (False, True):
            conn = connection(url, timeout, fresh)
            try:
                conn.request("GET", path, headers=headers)
                response = conn.getresponse()
                self.verdicts.note(url, not response.will_close and response.version == 11)
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                drop(url)
                if fresh:
                    raise
            except BaseException:
                drop(url)
                raise

        def done() -> None:
            if response.will_close or not response.isclosed():
                drop(url)  # not read to the end, or the server closes: never reuse it

        if response.status in _REDIRECTS and response.headers.get("Location"):
            from urllib.parse import urljoin

            response.read()
            done()
            new_url, extra = self.redirected(
                url, urljoin(url, str(response.headers["Location"])), request.unredirected_hdrs
            )
            followed = self.opener().open(request_for(new_url, extra), timeout=timeout)
            return _Response(followed.status, followed.headers, followed, followed.close)
        if response.status >= 400:
            body = response.read()
            done()
            raise urllib.error.HTTPError(
                url, response.status, response.reason, response.headers, io.BytesIO(body)
            )
        return _Response(response.status, response.headers, response, done)

    def read_small(self, url: str, timeout: float, limit: int = 4096) -> bytes:
        """The first ``limit`` bytes at ``url``, through the router (e.g. a checksum file)."""
        to = self.route(url)
        with self.opener().open(request_for(to.url, to.headers), timeout=timeout) as response:
            return bytes(response.read(limit))

    def _attempt(self, item: Download, policy: RetryPolicy) -> tuple[int, str, str]:
        """One request. A ``.part-<token>`` left by this process's cut connection is resumed with
        ``Range``; the hash then covers the old bytes and the new ones. A server that ignores
        ``Range`` (200) or a resumed file that fails the hash starts over from byte 0. The part
        carries this process's token, so jobs sharing a cache never write one file together."""
        import http.client
        import urllib.error

        algorithm, want = expected(item)
        part = part_path(item.dest)
        to = self.route(item.url)
        offset = part.stat().st_size if part.exists() else 0
        request = request_for(to.url, to.headers)
        if offset:
            request.add_header("Range", f"bytes={offset}-")
        import hashlib

        sha, md5 = hashlib.sha256(), hashlib.md5()
        size = 0
        announced: int | None = None
        try:
            with self._open(request, policy.timeout) as response:
                length = response.headers.get("Content-Length")
                resumed = (
                    bool(offset)
                    and response.status == 206
                    and str(response.headers.get("Content-Range", "")).startswith(
                        f"bytes {offset}-"
                    )
                )
                if resumed:
                    _hash_file(part, sha, md5)
                    size = offset
                if length is not None and str(length).isdigit():
                    require_space(item.dest.parent, int(length), f"downloading {item.label}")
                    announced = size + int(length)
                size = self._stream(response, part, item, sha, md5, size, resumed)
        except urllib.error.HTTPError as exc:
            raise _http_failure(exc, item, to, part, offset) from None
        except GpuCiError:
            part.unlink(missing_ok=True)
            raise
        except (urllib.error.URLError, OSError, TimeoutError, http.client.HTTPException) as exc:
            # keep the .part: the next attempt (this process, same token) resumes from it
            raise _Retryable(f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}") from None
        except ValueError as exc:  # e.g. 'Location: http://[::1/x' (urlsplit): the server's doing
            part.unlink(missing_ok=True)
            raise GpuCiError(
                f"downloading {item.label} failed: {_where(item, to)} answered with "
                f"an unusable redirect or header ({exc})."
            ) from None
        if announced is not None and size != announced:
            if size > announced:
                part.unlink(missing_ok=True)
            raise _Retryable(f"truncated: {size} of {announced} bytes (resuming)")
        got = sha.hexdigest() if algorithm == "sha256" else md5.hexdigest()
        if got != want:
            part.unlink(missing_ok=True)
            if offset:
                raise _Retryable("the resumed file fails the hash check: starting over")
            raise _mismatch(item, to, algorithm, want, got)
        try:
            os.replace(part, item.dest)
        except OSError as exc:
            part.unlink(missing_ok=True)
            raise _disk(exc, item.dest, item) from None
        return size, sha.hexdigest(), md5.hexdigest()

    def _stream(
        self,
        response: object,
        part: Path,
        item: Download,
        sha: Any,
        md5: Any,
        size: int,
        append: bool,
    ) -> int:
        """Copy the body to ``part``, appending to a resumed one.

        A failure to write is the disk's, not the network's."""
        read = response.read  # type: ignore[attr-defined]
        try:
            with open(part, "ab" if append else "wb") as out:
                for chunk in iter(lambda: read(CHUNK), b""):
                    out.write(chunk)
                    sha.update(chunk)
                    md5.update(chunk)
                    size += len(chunk)
                    if self.progress is not None:
                        self.progress.add(len(chunk))
                    crash_point("download")
        except OSError as exc:
            named = as_disk_error(exc, part, f"downloading {item.label}")
            if named is None:
                raise
            part.unlink(missing_ok=True)
            raise named from None
        return size

    def fetch(self, item: Download, policy: RetryPolicy | None = None) -> Fetched:
        """``item`` verified at its ``dest``: there already, or downloaded (``policy``, else
        this downloader's); what each response says of its connection goes to ``verdicts``."""
        policy = policy or self.policy
        if item.dest.exists():
            sha, md5 = file_digests(item.dest)
            algorithm, want = expected(item)
            if want and want == (sha if algorithm == "sha256" else md5):
                return Fetched(item, item.dest.stat().st_size, True, 0, sha, md5)
            item.dest.unlink(missing_ok=True)  # a corrupted cache entry: fetch again
        try:
            item.dest.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _disk(exc, item.dest.parent, item) from None
        last = ""
        for attempt in range(1, policy.attempts + 1):
            try:
                size, sha, md5 = self._attempt(item, policy)
                return Fetched(item, size, False, attempt, sha, md5)
            except _Retryable as exc:
                last = str(exc)
                if attempt >= policy.attempts:
                    break
                time.sleep(policy.wait(attempt, exc.wait))
        part_path(item.dest).unlink(missing_ok=True)  # nothing of ours is left behind
        raise GpuCiError(
            f"downloading {item.label} from {_where(item, self.route(item.url))} failed "
            f"after {policy.attempts} attempts ({last})."
        )


def default() -> Downloader:
    """A ``Downloader`` without a router, for callers handed none.

    Every URL is fetched from itself. No module state, so one run's routes and credentials
    never reach another's."""
    return Downloader()


def fetch(item: Download, policy: RetryPolicy | None = None) -> Fetched:
    """``item`` fetched by an unrouted ``Downloader`` (see :func:`default`)."""
    return default().fetch(item, policy)
