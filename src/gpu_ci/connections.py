"""Kept-alive HTTP connections per thread and origin, and what servers say.

Our downloader reuses a connection while its server keeps it alive; ``Verdicts`` records
per origin whether it does, and how many downloads run at once follows it."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from gpu_ci.urls import origin

if TYPE_CHECKING:  # imported when first used: a reused environment downloads nothing
    import http.client

__all__ = ["Verdicts", "connection", "drop", "keeps_alive", "new_connection"]

_LOCAL = threading.local()


def connection(url: str, timeout: float, fresh: bool) -> http.client.HTTPConnection:
    """This thread's kept-alive connection to ``url``'s origin (one per origin)."""

    parts = urlsplit(url)
    key = (parts.scheme, parts.hostname, parts.port)
    pool: dict[object, http.client.HTTPConnection] = _LOCAL.__dict__.setdefault("pool", {})
    conn = pool.get(key)
    if conn is not None and fresh:
        conn.close()
        conn = None
    if conn is None:
        conn = pool[key] = new_connection(url, timeout)
    return conn


def new_connection(url: str, timeout: float) -> http.client.HTTPConnection:
    """A new connection to ``url``'s origin (TLS for https)."""
    import http.client

    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme == "https":
        import ssl

        return http.client.HTTPSConnection(
            host, parts.port, timeout=timeout, context=ssl.create_default_context()
        )
    return http.client.HTTPConnection(host, parts.port, timeout=timeout)


class Verdicts:
    """Per origin, whether its server keeps connections alive, as its responses say: an
    HTTP/1.1 answer without ``Connection: close`` (whatever the status: a 401 says as much)
    is True, an HTTP/1.0 one or one that closes is False. How many downloads may run at once
    follows it (``gpu_ci.conda.fetch``): each archive costs a round trip on a kept-alive
    connection, so many at once pay; a server that closes every connection takes a new one
    per archive, and many at once overflow a small listen backlog (1 s SYN retransmits).
    No timing decides it: a server with Nagle's algorithm on answers a HEAD at once and each
    GET 40 ms late, and a loaded host delays either."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str, int], bool] = {}

    def note(self, url: str, keeps: bool) -> None:
        with self._lock:
            # one answer that closes is enough to stay narrow: a server may close some
            self._seen[origin(url)] = keeps and self._seen.get(origin(url), True)

    def of(self, url: str) -> bool | None:
        """True (keeps them), False (closes them), None (nothing heard from it yet)."""
        return self._seen.get(origin(url))


def keeps_alive(version: int, connection: str) -> bool:
    """What one response says of its connection: HTTP/1.1 (``version`` 11) and no ``close``
    among its ``Connection`` header's tokens."""
    return version == 11 and "close" not in {t.strip().lower() for t in connection.split(",")}


def drop(url: str) -> None:
    """This thread's connection to ``url``'s origin closed and forgotten."""
    parts = urlsplit(url)
    pool = _LOCAL.__dict__.get("pool", {})
    conn = pool.pop((parts.scheme, parts.hostname, parts.port), None)
    if conn is not None:
        conn.close()
