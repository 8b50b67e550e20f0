"""Archives streamed by rattler's client straight into the package cache.

Download, hash and extraction happen in one pass on its threads, as many at once as each
origin's connections allow (``WIDE`` where they stay alive, ``streams()`` where the server
closes them), each published by ``cache_trust.publish`` only when its digest matches the lock."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from gpu_ci import cpus, locks
from gpu_ci.conda import verified
from gpu_ci.conda.cache_trust import publish
from gpu_ci.downloads import TOKEN, Download, Downloader, Verdicts, direct, keeps_alive
from gpu_ci.faults import crash_point
from gpu_ci.urls import DEFAULT_PORTS, origin, secrets_in

Log = Callable[[str], None]


# NamedTuples, not frozen dataclasses: each class costs every run ~0.2 ms to create, not ~1.3.


class Streamed(NamedTuple):
    """A streamed archive's digests and its published entry's facts."""

    sha256: str
    md5: str
    facts: verified.Facts | None


class _Refusal:
    """Whether one built client refuses requests (a count: ``refusing`` blocks may nest)."""

    def __init__(self) -> None:
        self.depth = 0

    def headers(self, host: str, path: str) -> dict[str, str] | None:
        if self.depth:
            raise RuntimeError(
                f"rattler asked for {host}{path}, which the package cache should hold"
            )
        return None


class RattlerClient:
    """The process's one rattler client: building one costs 12-32 ms (its TLS set-up), and
    a cold install needs one to stream archives and one to link. While linking
    (``refusing``) it refuses every request before anything is sent: every entry is in the
    cache, verified by us, so a request means rattler did not accept one, and it must fail
    (then everything is fetched, verified and extracted again) rather than fetch past our
    mirrors, credentials and checks. Streams never run while it refuses. When linking ends
    in an error, rattler may still hold the client (a task past the error): that client
    refuses for good, as a linking-only client did, and the next use builds another."""

    def __init__(self) -> None:
        self._client: Any = None
        self._refusal = _Refusal()

    def get(self) -> Any:
        """The ``rattler.Client``, built on first use."""
        if self._client is None:
            import rattler
            from rattler.networking import AddHeadersMiddleware

            self._refusal = _Refusal()
            self._client = rattler.Client([AddHeadersMiddleware(self._refusal.headers)])
        return self._client

    @contextlib.contextmanager
    def refusing(self) -> Iterator[Any]:
        """The client, refusing every request until the block ends.

        The refusal stays for good if the block raises."""
        client = self.get()
        refusal = self._refusal
        refusal.depth += 1
        try:
            yield client
        except BaseException:
            if self._client is client:
                self._client = None  # refusal.depth stays raised: this one never asks again
            raise
        refusal.depth -= 1


CLIENT = RattlerClient()


def stream_url(item: Download, downloader: Downloader) -> str:
    """Where rattler's client may fetch ``item`` into the cache ('' if nowhere).

    It may where there are no credentials (it would get none of ours: its redirect rules are not
    ours, and it is told hosts, not origins), no proxy (ours honours *_PROXY/NO_PROXY as
    tested), and no archive already here to verify instead."""
    if item.dest.exists():
        return ""
    to = downloader.route(item.url)
    return to.url if not to.headers and not secrets_in(to.url) and direct(to.url) else ""


WIDE = 48
"""Downloads at once from one origin whose server keeps connections alive (rattler's
order of magnitude: its client opened 40-53 connections for 150 packages): each archive
costs a round trip on its connection, so such a server is as fast as the number of
downloads in flight. Measured: a server with Nagle's algorithm on answers each
GET after the first on a connection ~44 ms late, and 6 at once took 3.4x rattler's time.
A server that closes every connection stays at ``streams()`` (``downloads.Verdicts``)."""


PROBES = 16
"""Origins asked per call, at most (each ask is a connection): a lock names its origins, and
one with hundreds must not open hundreds of connections before its first download; the
rest stay narrow."""


async def keeps_connections(url: str, timeout: float) -> bool | None:
    """Whether ``url``'s server keeps connections alive, asked with one HEAD.

    The HEAD goes on a connection of its own, in the event loop (no thread), with no header
    of ours but ``Host`` and ``User-Agent``; ``downloads.keeps_alive`` reads the answer.
    None when it cannot tell (no answer, a proxy applies: never go around it). Only what the
    answer says counts, never how long it took."""
    import asyncio

    if not direct(url):
        return None
    parts = urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    context = None
    if parts.scheme == "https":
        import ssl

        context = ssl.create_default_context()
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                parts.hostname, parts.port or DEFAULT_PORTS[parts.scheme], ssl=context
            ),
            timeout,
        )
        try:
            writer.write(
                f"HEAD {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                "User-Agent: gpu-ci-actions\r\n\r\n".encode("latin-1")
            )
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        finally:
            writer.close()
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        return None
    except (UnicodeError, ValueError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    version = {"HTTP/1.1": 11, "HTTP/1.0": 10}.get(lines[0].split(" ", 1)[0], 0)
    connection = ",".join(
        line.partition(":")[2] for line in lines[1:] if line.lower().startswith("connection:")
    )
    return keeps_alive(version, connection)


def streams() -> int:
    """How many archives to stream at once: 6 on a 2-core runner, up to 16 on bigger ones
    (more streams hide network latency). Measured on 2 cores against a server that closes
    every connection and listens with a backlog of 5 (Python's http.server; some proxies):
    8 streams overflowed it (1 s SYN retransmits: 1.0-1.1 s for 150 packages), 4 or 6 took
    0.23-0.27 s; on a kept-alive server 4, 8 and 16 were within noise (0.70-0.88 s, 600)."""
    return max(6, min(16, 2 * cpus.usable()))


def stream_and_extract(
    jobs: Sequence[tuple[int, str, Path, str, str]],
    timeout: float,
    concurrency: int = 0,
    log: Log = print,
    interval: float = 5.0,
    verdicts: Verdicts | None = None,
) -> dict[int, Streamed]:
    """Archives fetched and extracted by rattler in one stream each, then published.

    rattler downloads and extracts each archive in one stream (no archive written, the
    hash computed on the way) into a temporary entry, on its own threads; we check the
    digest and publish it under the entry's lock. ``jobs``: (index, url, entry, sha256,
    md5) with the lock's digests. Only what succeeded is returned: every other job takes
    the careful path (our downloader: Range resume, named errors, credentials), so a
    failure here costs time, never correctness. Every ``interval`` s the log says how many
    archives are done (rattler's client reports no bytes)."""
    import asyncio

    client = CLIENT.get()  # no total timeout: _unless_stalled gives up a stalled stream
    done: dict[int, Streamed] = {}

    async def progress(started: float) -> None:
        while True:
            await asyncio.sleep(interval)
            log(
                f"downloading: {len(done)} of {len(jobs)} archives streamed into the package "
                f"cache in {time.monotonic() - started:.0f} s"
            )

    async def main() -> None:
        gates = _Gates(
            concurrency or streams(),
            WIDE if not concurrency else 0,
            timeout,
            Verdicts() if verdicts is None else verdicts,
        )
        reporter = asyncio.ensure_future(progress(time.monotonic()))
        try:
            await asyncio.gather(*(_stream_one(client, gates, job, done) for job in jobs))
        finally:
            reporter.cancel()
            for probe in gates.probes:
                probe.cancel()

    asyncio.run(main())
    return done


async def _stream_one(
    client: Any,
    gates: _Gates,
    job: tuple[int, str, Path, str, str],
    done: dict[int, Streamed],
) -> None:
    """One archive streamed into ``target`` and published; nothing on any failure."""
    import asyncio

    from rattler.package_streaming import download_and_extract

    index, url, target, sha256, md5 = job
    async with gates.of(url), gates.total:  # the origin's, then all together
        # held by another job: the careful path waits for it instead
        try:
            fd = locks.try_exclusive(target.with_name(f".{target.name}.gpu-ci.lock"))
        except OSError:  # out of descriptors (many streams), a full disk: it names it
            return
        if fd is None:
            return
        # Not extract_entry's name: a stream given up (_unless_stalled) never writes there.
        tmp = target.with_name(f".{target.name}.stream.tmp-{TOKEN}")
        digest = sha256 or md5
        try:
            facts = verified.check(target, digest)
            if facts is not None:  # another job put it there meanwhile
                done[index] = Streamed(sha256, md5, facts)
                return
            task = asyncio.ensure_future(
                download_and_extract(client, url, tmp, bytes.fromhex(sha256) if sha256 else None)
            )
            await asyncio.sleep(0)
            crash_point("download")
            got_sha, got_md5 = (
                value.hex() for value in await _unless_stalled(task, tmp, gates.timeout)
            )
            if got_sha != sha256 if sha256 else got_md5 != md5:
                raise ValueError("digest mismatch")  # the careful path names it
            facts = publish(tmp, target, digest, TOKEN, got_sha)
            done[index] = Streamed(got_sha, got_md5, facts)
        except Exception:
            shutil.rmtree(tmp, ignore_errors=True)
        finally:
            os.close(fd)


class _Gates:
    """Streams at once, per origin and in all: ``narrow`` until an origin's server is known
    to keep connections alive (``verdicts``, else one ``keeps_connections``
    probe in the event loop), then ``wide`` for it and in all; an origin that closes them,
    or cannot tell, stays ``narrow``. A lock names its origins: many must not multiply the
    streams. Made in the event loop (Python 3.9 binds a semaphore to the loop it is made
    in). ``parallel.Permits`` is the same rule for our downloader's threads."""

    def __init__(self, narrow: int, wide: int, timeout: float, verdicts: Verdicts) -> None:
        import asyncio

        self.narrow, self.wide, self.timeout, self.verdicts = narrow, wide, timeout, verdicts
        self.total = asyncio.Semaphore(narrow)
        self._origins: dict[tuple[str, str, int], asyncio.Semaphore] = {}
        self._widened = False
        self.probes: list[Any] = []
        """The probes running, cancelled when the streams are over."""

    def of(self, url: str) -> Any:
        import asyncio

        key = origin(url)
        gate = self._origins.get(key)
        if gate is None:
            gate = self._origins[key] = asyncio.Semaphore(self.narrow)
            if self.narrow < self.wide:
                known = self.verdicts.of(url)
                if known:
                    self._widen(gate)
                elif known is None and len(self.probes) < PROBES:  # nothing known of it yet
                    self.probes.append(asyncio.ensure_future(self._probe(url, gate)))
        return gate

    async def _probe(self, url: str, gate: Any) -> None:
        keeps = await keeps_connections(url, min(self.timeout, 10.0))
        if keeps is not None:
            self.verdicts.note(url, keeps)
        if keeps:
            self._widen(gate)

    def _widen(self, gate: Any) -> None:
        extra = self.wide - self.narrow
        for _ in range(extra):
            gate.release()
        if not self._widened:
            self._widened = True
            for _ in range(extra):
                self.total.release()


async def _unless_stalled(task: Any, tmp: Path, timeout: float) -> Any:
    """The stream's result, or TimeoutError once its download stalls.

    It stalls when nothing new reached ``tmp`` for ``timeout`` seconds (twice in a
    row). rattler's client has only a total timeout, which cut every
    archive that takes longer (a large one, or many at once on a modest link), to be
    fetched again from its first byte. Cancelled, rattler drops the connection."""
    import asyncio

    seen = -1
    while True:
        done, _ = await asyncio.wait({task}, timeout=max(1.0, timeout))
        if done:
            return task.result()
        now = _tree_bytes(tmp)
        if now == seen:
            task.cancel()
            raise TimeoutError(f"no progress in {timeout} s")
        seen = now


def _tree_bytes(root: Path) -> int:
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total
