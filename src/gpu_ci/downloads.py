"""Parallel, verified downloads (standard library only).

Each file is streamed to ``<dest>.part`` while hashing, checked against the expected
sha256 (else md5) and the announced length, and only then renamed into place: a file at
``dest`` is always complete and verified. 5xx, 429 and network errors are retried with
exponential backoff, honouring ``Retry-After``; a short body is fetched again.
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from gpu_ci.errors import GpuCiError
from gpu_ci.urls import mask_url, strip_credentials

CHUNK = 1 << 20


@dataclass(frozen=True)
class Download:
    url: str
    dest: Path
    label: str
    """What the file is, for messages (e.g. 'numpy 2.1.0 (h1234_0)')."""
    sha256: str = ""
    md5: str = ""


@dataclass(frozen=True)
class Fetched:
    download: Download
    size: int
    cached: bool
    attempts: int


@dataclass(frozen=True)
class RetryPolicy:
    retries: int = 4
    backoff: float = 0.5
    timeout: float = 60.0
    max_wait: float = 30.0


class _Retryable(Exception):
    def __init__(self, message: str, wait: float | None = None) -> None:
        super().__init__(message)
        self.wait = wait


def file_digest(path: Path, algorithm: str) -> str:
    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def expected(item: Download) -> tuple[str, str]:
    return ("sha256", item.sha256) if item.sha256 else ("md5", item.md5)


def verified(item: Download, path: Path) -> bool:
    algorithm, want = expected(item)
    return bool(want) and file_digest(path, algorithm) == want


def _request(url: str) -> urllib.request.Request:
    parts = urlsplit(url)
    request = urllib.request.Request(strip_credentials(url),
                                     headers={"User-Agent": "gpu-ci-actions"})
    if parts.username:
        token = base64.b64encode(f"{parts.username}:{parts.password or ''}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    return request


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


class _DropCredentialsAcrossOrigins(urllib.request.HTTPRedirectHandler):
    """urllib copies every header to the redirected request, ``Authorization`` included:
    a channel that answers 302 with another host would receive the lock's credentials."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(newurl) != _origin(req.full_url):
            new.remove_header("Authorization")
        return new


_OPENER = urllib.request.build_opener(_DropCredentialsAcrossOrigins)


def _attempt(item: Download, policy: RetryPolicy) -> int:
    algorithm, want = expected(item)
    part = item.dest.with_name(item.dest.name + ".part")
    digest = hashlib.new(algorithm)
    size = 0
    try:
        with _OPENER.open(_request(item.url), timeout=policy.timeout) as response, \
                open(part, "wb") as out:
            announced = response.headers.get("Content-Length")
            for chunk in iter(lambda: response.read(CHUNK), b""):
                out.write(chunk)
                digest.update(chunk)
                size += len(chunk)
    except urllib.error.HTTPError as exc:
        part.unlink(missing_ok=True)
        if exc.code in (429,) or exc.code >= 500:
            wait = exc.headers.get("Retry-After") if exc.headers else None
            raise _Retryable(f"HTTP {exc.code}", float(wait) if wait else None) from None
        raise GpuCiError(f"downloading {item.label} failed: HTTP {exc.code} for "
                         f"{mask_url(item.url)}.") from None
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        part.unlink(missing_ok=True)
        raise _Retryable(f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}") from None
    if announced is not None and size != int(announced):
        part.unlink(missing_ok=True)
        raise _Retryable(f"truncated: {size} of {announced} bytes")
    got = digest.hexdigest()
    if got != want:
        part.unlink(missing_ok=True)
        raise GpuCiError(
            f"{algorithm} mismatch for {item.label} ({mask_url(item.url)}): the lock says "
            f"{want}, the download has {got}. The file changed on the server or the lock is "
            "wrong; nothing was installed.", title="hash mismatch")
    os.replace(part, item.dest)
    return size


def fetch(item: Download, policy: RetryPolicy) -> Fetched:
    if item.dest.exists():
        if verified(item, item.dest):
            return Fetched(item, item.dest.stat().st_size, True, 0)
        item.dest.unlink()  # a corrupted cache entry: fetch again
    item.dest.parent.mkdir(parents=True, exist_ok=True)
    last = ""
    for attempt in range(1, policy.retries + 2):
        try:
            return Fetched(item, _attempt(item, policy), False, attempt)
        except _Retryable as exc:
            last = str(exc)
            if attempt > policy.retries:
                break
            wait = exc.wait if exc.wait is not None else policy.backoff * 2 ** (attempt - 1)
            time.sleep(min(wait, policy.max_wait))
    raise GpuCiError(f"downloading {item.label} from {mask_url(item.url)} failed after "
                     f"{policy.retries + 1} attempts ({last}).")


def fetch_all(items: Sequence[Download], policy: RetryPolicy | None = None,
              workers: int = 8) -> list[Fetched]:
    """Fetch everything in parallel; the first error is raised after all have stopped."""
    policy = policy or RetryPolicy()
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        futures = [pool.submit(fetch, item, policy) for item in items]
        results: list[Fetched] = []
        error: BaseException | None = None
        for future in futures:
            try:
                results.append(future.result())
            except BaseException as exc:  # keep collecting so no thread outlives us
                error = error or exc
    if error is not None:
        raise error
    return results
