"""Parallel, verified downloads (standard library only).

Each file is streamed to ``<dest>.part-<token>`` (a name no other process uses: jobs that
share a package cache download side by side) while hashing, checked against the expected
sha256 (else md5) and the announced length, and only then renamed into place: a file at
``dest`` is always complete and verified, and a second job finding it there is done. 5xx,
429 and network errors are retried as :class:`gpu_ci.retry.RetryPolicy` says, honouring
``Retry-After``; a short body is fetched again. A full or read-only disk is a
:class:`gpu_ci.disk.DiskError` at once, never retried, and leaves no partial file.
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpu_ci.disk import as_disk_error, require_space
from gpu_ci.errors import GpuCiError
from gpu_ci.faults import crash_point
from gpu_ci.retry import RetryPolicy
from gpu_ci.urls import mask_url, strip_credentials

__all__ = ["CHUNK", "Download", "Fetched", "RetryPolicy", "TOKEN", "fetch", "fetch_all",
           "file_digest", "part_path", "verified"]

CHUNK = 1 << 20

TOKEN = uuid.uuid4().hex[:16]
"""This process's mark in temporary names; a later run sweeps marks whose owner is gone."""


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
    sha256: str = ""
    md5: str = ""
    """Both digests of the verified file (conda-meta records carry both)."""


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


def file_digests(path: Path) -> tuple[str, str]:
    """(sha256, md5) in one pass."""
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


def _attempt(item: Download, policy: RetryPolicy) -> tuple[int, str, str]:
    algorithm, want = expected(item)
    part = part_path(item.dest)
    sha, md5 = hashlib.sha256(), hashlib.md5()
    try:
        with _OPENER.open(_request(item.url), timeout=policy.timeout) as response:
            announced = response.headers.get("Content-Length")
            if announced is not None and announced.isdigit():
                require_space(item.dest.parent, int(announced), f"downloading {item.label}")
            size = _stream(response, part, item, sha, md5)
    except urllib.error.HTTPError as exc:
        part.unlink(missing_ok=True)
        if exc.code in (429,) or exc.code >= 500:
            wait = exc.headers.get("Retry-After") if exc.headers else None
            raise _Retryable(f"HTTP {exc.code}", _seconds(wait)) from None
        raise GpuCiError(f"downloading {item.label} failed: HTTP {exc.code} for "
                         f"{mask_url(item.url)}.") from None
    except GpuCiError:
        part.unlink(missing_ok=True)
        raise
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        part.unlink(missing_ok=True)
        raise _Retryable(f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}") from None
    if announced is not None and announced.isdigit() and size != int(announced):
        part.unlink(missing_ok=True)
        raise _Retryable(f"truncated: {size} of {announced} bytes")
    got = sha.hexdigest() if algorithm == "sha256" else md5.hexdigest()
    if got != want:
        part.unlink(missing_ok=True)
        raise GpuCiError(
            f"{algorithm} mismatch for {item.label} ({mask_url(item.url)}): the lock says "
            f"{want}, the download has {got}. The file changed on the server or the lock is "
            "wrong; nothing was installed.", title="hash mismatch")
    try:
        os.replace(part, item.dest)
    except OSError as exc:
        part.unlink(missing_ok=True)
        raise _disk(exc, item.dest, item) from None
    return size, sha.hexdigest(), md5.hexdigest()


def _stream(response: object, part: Path, item: Download, sha: Any, md5: Any) -> int:
    """Copy the body to ``part``; a failure to write is the disk's, not the network's."""
    size = 0
    read = response.read  # type: ignore[attr-defined]
    try:
        with open(part, "wb") as out:
            for chunk in iter(lambda: read(CHUNK), b""):
                out.write(chunk)
                sha.update(chunk)
                md5.update(chunk)
                size += len(chunk)
                crash_point("download")
    except OSError as exc:
        named = as_disk_error(exc, part, f"downloading {item.label}")
        if named is None:
            raise
        part.unlink(missing_ok=True)
        raise named from None
    return size


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


def fetch(item: Download, policy: RetryPolicy) -> Fetched:
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
            size, sha, md5 = _attempt(item, policy)
            return Fetched(item, size, False, attempt, sha, md5)
        except _Retryable as exc:
            last = str(exc)
            if attempt >= policy.attempts:
                break
            time.sleep(policy.wait(attempt, exc.wait))
    raise GpuCiError(f"downloading {item.label} from {mask_url(item.url)} failed after "
                     f"{policy.attempts} attempts ({last}).")


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
