"""The package cache of a plan, filled and verified: every entry trusted, streamed or
downloaded, never one this host did not verify.

* An entry this host verified and whose files did not change since (``verified``: a stamp of
  the digest and each file's inode, size and mtime) is used as it is; one that changed, or
  has no stamp (restored by ``actions/cache``), is hashed against its ``paths.json`` in
  worker processes first.
* Every other archive without credentials is streamed by rattler's client into a temporary
  entry (download, hash and extraction in one pass on its threads) and published, digest
  checked, by rename under the entry's lock (``stream_and_extract``).
* The rest (credentials, proxies, failed streams, ``stream-downloads: false``) is fetched by
  our downloader (kept-alive connections, ``Range`` resume, mirrors), verified, and
  extracted in worker processes that die with us (``_fetch_and_extract``).
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpu_ci import locks
from gpu_ci.conda import transaction, verified
from gpu_ci.conda.integrity import cache_entry_problem
from gpu_ci.conda.lockfile import CondaEntry, InstallPlan
from gpu_ci.disk import as_disk_error
from gpu_ci.downloads import (
    TOKEN,
    Download,
    Downloader,
    Fetched,
    Verdicts,
    default,
    direct,
    keeps_alive,
)
from gpu_ci.errors import GpuCiError
from gpu_ci.faults import crash_point
from gpu_ci.retry import RetryPolicy
from gpu_ci.urls import DEFAULT_PORTS, origin, secrets_in

SHA_MARKER = ".gpu-ci-archive-sha256"
MD5_SIDECAR = ".gpu-ci-md5"
"""Next to rattler's ``<name>-<version>-<build>.lock``: ``<md5> <sha256>`` of the archive we
verified against an md5-only lock entry, so that the next run can give rattler the sha256 of
a cache entry it trusts without the archive."""
Log = Callable[[str], None]


def plan_downloads(plan: InstallPlan, pkgs_dir: Path) -> list[Download]:
    return [
        Download(
            e.url,
            pkgs_dir / "archives" / e.filename,
            f"{e.name} {e.version} ({e.build})",
            e.sha256,
            e.md5,
        )
        for e in plan.conda
    ]


def entry_dir(cache: Path, entry: CondaEntry) -> Path:
    return cache / entry.dist_name


# -- worker processes ---------------------------------------------------------------------


def _die_with_parent() -> None:
    """Worker initializer: the kernel kills this worker when the job that forked it dies."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    parent = os.environ.get("GPU_CI_PARENT_PID")
    if parent and os.getppid() != int(parent):  # it died before prctl took effect
        os._exit(1)


def _noop(_: int) -> None:
    return None


def rattler_cache_sha256(cache: Path, dirname: str) -> str:
    """The archive sha256 rattler's package cache recorded for an extracted package, '' when
    none: its ``<dirname>.lock`` holds an 8-byte revision, then the 32-byte sha256 of the
    archive it extracted. (A future layout reads as '': we then fetch, never trust.)"""
    base = os.path.join(cache, dirname)
    try:
        raw = verified.read_bytes(base + ".lock", 40)
    except OSError:
        return ""
    return raw[8:40].hex() if len(raw) >= 40 and os.path.isdir(base) else ""


def trusted_sha256(entry: CondaEntry, cache: Path) -> str:
    """The archive sha256 to give rattler for a cache entry that may be used without its
    archive, '' when it may not: the lock's sha256, or for an md5-only lock the one our
    sidecar recorded for that md5; and rattler's own record, when it wrote one (it leaves its
    ``.lock`` empty for entries we extracted), must agree. Only a candidate: the entry's
    stamp must show it unchanged since it was verified (``verified.check``), or every file
    must match its ``paths.json`` (``_valid_entry``)."""
    dirname = entry.dist_name
    if not os.path.isdir(os.path.join(cache, dirname)):
        return ""  # nothing to trust: stream or download it
    sha = entry.sha256
    if not sha:
        try:
            md5, sha = (
                verified.read_bytes(os.path.join(cache, dirname + MD5_SIDECAR), 200)
                .decode()
                .split()
            )
        except (OSError, ValueError):
            return ""
        if md5 != entry.md5:
            return ""
    have = rattler_cache_sha256(cache, dirname)
    return sha if not have or have == sha else ""


def _valid_entry(dest: str, digest: str, token: str) -> verified.Facts | None:
    """In a worker: the entry's facts when it was extracted from an archive with ``digest``
    and every file matches its ``paths.json`` (then stamped, so that the next job need not
    hash it), None otherwise. Under the per-entry lock, so never half-replaced."""
    target = Path(dest)
    lock = target.with_name(f".{target.name}.gpu-ci.lock")
    with transaction.exclusive(lock, f"the cache entry {target.name}", lambda _: None):
        return _entry_facts(target, digest, token)


def _entry_facts(target: Path, digest: str, token: str) -> verified.Facts | None:
    """The facts of a usable entry: from its stamp when no file changed since it was
    verified, else after hashing every file (and stamping it again); None when unusable."""
    facts = verified.check(target, digest)
    if facts is None:
        before = verified.identities(target)  # a write while hashing is not stamped
        if _entry_ok(target, digest):
            facts = verified.write(target, digest, token, before=before or [])
    return facts


def _entry_ok(target: Path, digest: str) -> bool:
    """Extracted from the archive with ``digest``, every file as ``paths.json`` records it,
    and the ``index.json`` its conda-meta record is built from is there."""
    try:
        return (
            verified.read_bytes(os.path.join(target, SHA_MARKER), 200) == digest.encode()
            and (target / "info" / "index.json").is_file()
            and not cache_entry_problem(target)
        )
    except OSError:
        return False


def named_disk_error(exc: BaseException, path: Path, what: str) -> GpuCiError | None:
    """rattler reports I/O errors as text ('... (os error 28)'): name the disk ones."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return as_disk_error(exc, path, what)
    return named_disk_error_in(str(exc), path, what)


def named_disk_error_in(text: str, path: Path, what: str) -> GpuCiError | None:
    """A disk error reported by a subprocess or rattler as text ('[Errno 28]', 'os error
    28'), named as ours would be."""
    match = re.search(r"(?:os error |\[Errno )(\d+)", text)
    if match:
        return as_disk_error(OSError(int(match.group(1)), text), path, what)
    return None


def _extract(
    archive: str, dest: str, digest: str, token: str, again: bool = False, sha256: str = ""
) -> verified.Facts | None:
    """Extract one verified archive into the cache, atomically; its facts (None only when the
    entry cannot be surveyed: then it is hashed again next time).

    Runs in a worker process: rattler's extractor holds the GIL, so threads would not
    extract in parallel. Jobs sharing the cache take a per-entry lock, so one extracts and
    the others find the entry present and valid. The entry appears under its final name
    only when complete, stamped with the archive's digest, so an entry from another archive
    is never reused. ``again``: extract even a valid entry (rattler refused to use it).
    """
    from rattler.package_streaming import extract

    target = Path(dest)
    lock = target.with_name(f".{target.name}.gpu-ci.lock")
    with transaction.exclusive(lock, f"the cache entry {target.name}", lambda _: None):
        facts = None if again else _entry_facts(target, digest, token)
        if facts is not None:
            return facts
        tmp = target.with_name(f".{target.name}.tmp-{token}")
        try:
            extract(Path(archive), tmp)
            facts = _publish(tmp, target, digest, token, sha256, parent=True)
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            named = named_disk_error(exc, tmp, f"extracting {Path(archive).name}")
            if named is not None:
                raise named from None
            raise
    return facts


@dataclass(frozen=True)
class Streamed:
    sha256: str
    md5: str
    facts: verified.Facts | None


def stream_url(item: Download, downloader: Downloader) -> str:
    """Where rattler's client may fetch ``item`` straight into the cache ('' when it may
    not): no credentials (it would get none of ours: its redirect rules are not ours, and it
    is told hosts, not origins), no proxy (ours honours *_PROXY/NO_PROXY as tested), and no
    archive already here to verify instead."""
    if item.dest.exists():
        return ""
    to = downloader.route(item.url)
    return to.url if not to.headers and not secrets_in(to.url) and direct(to.url) else ""


WIDE = 48
"""Downloads at once from one origin whose server keeps connections alive (rattler's
order of magnitude: its client opened 40-53 connections for 150 packages): each archive
costs a round trip on its connection, so such a server is as fast as the number of
downloads in flight. Measured (issue 29): a server with Nagle's algorithm on answers each
GET after the first on a connection ~44 ms late, and 6 at once took 3.4x rattler's time.
A server that closes every connection stays at ``streams()`` (``downloads.Verdicts``)."""


async def keeps_connections(url: str, timeout: float) -> bool | None:
    """One HEAD to ``url``'s server on a connection of its own, in the event loop (no
    thread), with no header of ours but ``Host`` and ``User-Agent``: whether it keeps
    connections alive (``downloads.keeps_alive``); None when it cannot tell (no answer, a
    proxy applies: never go around it). Only what the answer says counts, never how long
    it took."""
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
    return max(6, min(16, 2 * (os.cpu_count() or 2)))


def stream_and_extract(
    jobs: Sequence[tuple[int, str, Path, str, str]],
    timeout: float,
    concurrency: int = 0,
    log: Log = print,
    interval: float = 5.0,
    verdicts: Verdicts | None = None,
) -> dict[int, Streamed]:
    """rattler downloads and extracts each archive in one stream (no archive written, the
    hash computed on the way) into a temporary entry, on its own threads; we check the
    digest and publish it under the entry's lock. ``jobs``: (index, url, entry, sha256,
    md5) with the lock's digests. Only what succeeded is returned: every other job takes
    the careful path (our downloader: Range resume, named errors, credentials), so a
    failure here costs time, never correctness. Every ``interval`` s the log says how many
    archives are done (rattler's client reports no bytes)."""
    import asyncio

    import rattler
    from rattler.package_streaming import download_and_extract

    client = rattler.Client()  # no total timeout: _unless_stalled gives up a stalled stream
    done: dict[int, Streamed] = {}

    async def one(gates: _Gates, index: int, url: str, target: Path, sha256: str, md5: str) -> None:
        async with gates.of(url), gates.total:  # the origin's, then all together
            # held by another job: the careful path waits for it instead
            try:
                fd = locks.try_exclusive(target.with_name(f".{target.name}.gpu-ci.lock"))
            except OSError:  # out of descriptors (many streams), a full disk: it names it
                return
            if fd is None:
                return
            # Not _extract's name: a stream given up (_unless_stalled) never writes there.
            tmp = target.with_name(f".{target.name}.stream.tmp-{TOKEN}")
            digest = sha256 or md5
            try:
                facts = verified.check(target, digest)
                if facts is not None:  # another job put it there meanwhile
                    done[index] = Streamed(sha256, md5, facts)
                    return
                task = asyncio.ensure_future(
                    download_and_extract(
                        client, url, tmp, bytes.fromhex(sha256) if sha256 else None
                    )
                )
                await asyncio.sleep(0)
                crash_point("download")
                got_sha, got_md5 = (
                    value.hex() for value in await _unless_stalled(task, tmp, timeout)
                )
                if got_sha != sha256 if sha256 else got_md5 != md5:
                    raise ValueError("digest mismatch")  # the careful path names it
                facts = _publish(tmp, target, digest, TOKEN, got_sha)
                done[index] = Streamed(got_sha, got_md5, facts)
            except Exception:
                shutil.rmtree(tmp, ignore_errors=True)
            finally:
                os.close(fd)

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
            await asyncio.gather(*(one(gates, *job) for job in jobs))
        finally:
            reporter.cancel()
            for probe in gates.probes:
                probe.cancel()

    asyncio.run(main())
    return done


class _Gates:
    """Streams at once, per origin and in all: ``narrow`` until an origin's server is known
    to keep connections alive (``verdicts``, else one ``keeps_connections``
    probe in the event loop), then ``wide`` for it and in all; an origin that closes them,
    or cannot tell, stays ``narrow``. A lock names its origins: many must not multiply the
    streams. Made in the event loop (Python 3.9 binds a semaphore to the loop it is made
    in). ``_Permits`` is the same rule for our downloader's threads."""

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
                elif known is None:  # only where nothing of it is known yet
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
    """The stream's result, or TimeoutError once nothing new reached ``tmp`` for ``timeout``
    seconds (twice in a row). rattler's client has only a total timeout, which cut every
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


@dataclass(frozen=True)
class Fetch:
    """Per lock entry, in the lock's order: how its archive was had, the archive's sha256,
    and the facts of its verified cache entry (None: ask its ``paths.json``)."""

    fetched: list[Fetched]
    shas: list[str]
    facts: list[verified.Facts | None]


def _publish(
    tmp: Path, target: Path, digest: str, token: str, sha256: str, parent: bool = False
) -> verified.Facts | None:
    """Put a complete extraction in place, under the entry's lock: stamped with the
    archive's digest and the files' identities, then renamed over whatever was there."""
    info = _refuse_odd_info(tmp, target.name)
    _write_marker(tmp, digest)
    facts = verified.write(tmp, digest, token, target.name, info=info)
    crash_point("extract", parent=parent)
    if os.path.lexists(target):  # not while another job links from it (link_with_rattler)
        with transaction.exclusive(
            target.parent / transaction.ENTRIES_LOCK, "the package cache", lambda _: None
        ):
            shutil.rmtree(target)
            os.replace(tmp, target)
    else:
        os.replace(tmp, target)
    _forget_other_archive(target, sha256)
    return facts


def _refuse_odd_info(entry: Path, name: str) -> verified.Info:
    """``info/`` holds what we and rattler read in place of the archive: a link or a device
    there (``info/paths.json`` -> /dev/zero) would be read instead of the package's own
    file, before any check (and /dev/zero until the host's memory is gone). No ``info/`` at
    all passes here: the entry is refused later (no index.json)."""
    info = verified.scan_info(entry)
    if info.odd:
        raise GpuCiError(
            f"{name}: {info.odd} is a symbolic link or a device, not a file; a "
            "conda package never has one there: the lock names a package that "
            "is broken or hostile.",
            title="unsafe package",
        )
    return info


def _write_marker(entry: Path, digest: str) -> None:
    """The digest marker, in a new file: the archive may hold a symbolic link (or anything)
    at that name, and writing through a link would write outside the cache."""
    path = os.path.join(entry, SHA_MARKER)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except FileExistsError:  # the archive has something there (a link, a directory)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
        fd = os.open(path, flags, 0o644)
    with os.fdopen(fd, "w") as out:
        out.write(digest)


def _forget_other_archive(target: Path, sha256: str) -> None:
    """rattler's ``<entry>.lock`` names the archive rattler last put there: when that is
    another archive than the one just extracted, rattler would not use the entry (it would
    fetch the package itself, which ``_no_downloads`` refuses). Emptied, as rattler leaves it
    for an entry it did not extract."""
    have = rattler_cache_sha256(target.parent, target.name)
    if have and have != sha256:
        os.truncate(target.with_name(f"{target.name}.lock"), 0)


def fetch_and_extract(
    plan: InstallPlan,
    pkgs_dir: Path,
    cache: Path,
    policy: RetryPolicy | None,
    trust: bool = True,
    stream: bool = True,
    log: Log = print,
    downloader: Downloader | None = None,
) -> Fetch:
    """Every entry of the plan verified in the cache: trusted, streamed or downloaded
    (``downloader``: the run's, else ``downloads.default()``).

    Streamed archives (``stream_and_extract``) are extracted into a temporary name while
    their hash is computed, and published only when it matches; our downloader's archives
    are verified before a worker extracts them (``_fetch_and_extract``). A cache entry that
    passes ``trusted_sha256`` is used without its archive (neither fetched nor hashed) when
    its stamp shows no file changed since a job on this host verified it
    (``verified.check``, in this process: no worker starts for a warm cache); one whose
    files changed, or that has no stamp (restored by ``actions/cache``), is
    hashed against its ``paths.json`` in the workers first (``_valid_entry``)."""
    items = plan_downloads(plan, pkgs_dir)
    if not items:
        return Fetch([], [], [])
    cache.mkdir(parents=True, exist_ok=True)
    results: dict[int, Fetched] = {}
    facts: dict[int, verified.Facts | None] = {}
    shas = [trusted_sha256(entry, cache) if trust else "" for entry in plan.conda]
    slow = []
    for i, sha in enumerate(shas):
        if sha:
            entry = plan.conda[i]
            fact = verified.check(os.path.join(cache, entry.dist_name), entry.digest)
            if fact is None:
                slow.append(i)
            else:
                facts[i] = fact
                results[i] = Fetched(items[i], 0, True, 0, sha, entry.md5)
    todo = [i for i in range(len(items)) if i not in results and i not in slow]
    downloader = downloader or default()
    urls = {i: stream_url(items[i], downloader) for i in todo} if stream and trust else {}
    streamed = [i for i in todo if urls.get(i)]
    careful = [i for i in todo if not urls.get(i)]
    policy = policy or RetryPolicy()
    if slow or careful:  # before any of rattler's threads exist: the workers are forked
        had = _fetch_and_extract(
            plan, items, cache, policy, shas, slow, careful, not trust, downloader
        )
        results.update(had.results)
        facts.update(had.facts)
        for i in had.changed:
            shas[i] = ""
    if streamed:
        jobs = []
        for i in streamed:
            entry = plan.conda[i]
            jobs.append((i, urls[i], entry_dir(cache, entry), entry.sha256, entry.md5))
        landed = stream_and_extract(jobs, policy.timeout, log=log, verdicts=downloader.verdicts)
        for i, got in landed.items():
            results[i] = Fetched(items[i], 0, False, 1, got.sha256, got.md5)
            facts[i] = got.facts
        left = [i for i in streamed if i not in results]
        if left:  # rattler's threads exist now: spawned workers
            had = _fetch_and_extract(
                plan, items, cache, policy, shas, [], left, False, downloader, fork=False
            )
            results.update(had.results)
            facts.update(had.facts)
    fetched = [results[i] for i in range(len(items))]
    return Fetch(
        fetched,
        [sha or got.sha256 for sha, got in zip(shas, fetched)],
        [facts.get(i) for i in range(len(items))],
    )


class _Permits:
    """Our downloader's downloads per origin: ``narrow`` at once until one of its responses
    shows that its server keeps connections alive (``verdicts``, asked of the
    routed URL, where the connection goes), then ``wide``; no probe: the downloads' own
    answers tell. An origin that closes connections stays ``narrow``."""

    def __init__(self, narrow: int, wide: int, downloader: Downloader) -> None:
        self.narrow, self.wide, self.downloader = narrow, wide, downloader
        self.verdicts = downloader.verdicts
        self._lock = threading.Lock()
        self._origins: dict[tuple[str, str, int], threading.Semaphore] = {}
        self._wide: set[tuple[str, str, int]] = set()
        self.widened = False
        """An origin keeps connections alive: ``wide`` downloads in all from now on."""
        self.stopped = False
        """A download failed: one still waiting for its origin's permit never starts."""

    def _of(self, url: str) -> threading.Semaphore:
        key = origin(url)
        with self._lock:
            permits = self._origins.get(key)
            if permits is None:
                permits = self._origins[key] = threading.Semaphore(self.narrow)
        self._widen_if_kept(url)
        return permits

    def _widen_if_kept(self, url: str) -> None:
        if self.narrow >= self.wide or not self.verdicts.of(url):
            return
        key = origin(url)
        with self._lock:
            if key in self._wide:
                return
            self._wide.add(key)
            self._origins[key].release(self.wide - self.narrow)
            self.widened = True

    def run(self, item: Download, policy: RetryPolicy) -> Fetched:
        url = self.downloader.route(item.url).url
        with self._of(url):
            if self.stopped:
                from concurrent.futures import CancelledError

                raise CancelledError(f"{item.label}: not started, an earlier download failed")
            got = self.downloader.fetch(item, policy)
        self._widen_if_kept(url)
        return got


def _downloaded(
    items: list[Download],
    todo: list[int],
    policy: RetryPolicy,
    narrow: int = 0,
    downloader: Downloader | None = None,
) -> Iterator[tuple[int, Fetched | BaseException]]:
    """Each of ``todo`` fetched by our downloader, as it completes (or its error).

    Two threads per core, at most 8: more on a small runner convoy on the GIL with the
    extraction feeders (measured on 2 cores: 8 threads 0.47-1.43 s for 150 packages, 4 a
    steady 0.44 s). ``WIDE`` in all once a response shows an origin keeps connections alive
    (``_Permits``): against a server that answers each GET late (Nagle's algorithm, a CDN
    in another region) threads wait, they do not convoy. Threads are added only then, each
    with its own kept-alive connection; a server that closes every connection never sees
    more than ``narrow`` at once. After an error no other download starts. ``narrow``: that
    default, or fewer."""
    from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

    narrow = narrow or max(1, min(8, 2 * (os.cpu_count() or 2), len(todo)))
    wide = max(narrow, min(WIDE, len(todo)))
    permits = _Permits(narrow, wide, Downloader() if downloader is None else downloader)
    queue = collections.deque(todo)
    pools: list[ThreadPoolExecutor] = []
    load: list[int] = []
    pending: dict[Future[Fetched], tuple[int, int]] = {}
    failed = False
    with contextlib.ExitStack() as stack:

        def pool_with_room() -> int | None:
            sizes = [narrow] + ([permits.wide - narrow] if permits.widened else [])
            for k, size in enumerate(sizes):
                if k == len(pools):
                    pools.append(stack.enter_context(ThreadPoolExecutor(size)))
                    load.append(0)
                if load[k] < size:
                    return k
            return None

        while queue or pending:
            while queue and not failed and (k := pool_with_room()) is not None:
                index = queue.popleft()
                pending[pools[k].submit(permits.run, items[index], policy)] = (index, k)
                load[k] += 1
            if not pending:
                break
            # a timeout, to start more downloads soon after an origin proves kept alive
            done, _ = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
            for future in done:
                index, k = pending.pop(future)
                load[k] -= 1
                try:
                    got: Fetched | BaseException = future.result()
                except BaseException as exc:  # the caller reports it
                    failed = permits.stopped = True
                    got = exc
                # outside the try: a consumer that stops (GeneratorExit here) closes the pools
                yield index, got


def download_all(
    items: list[Download], policy: RetryPolicy, downloader: Downloader | None = None
) -> list[Fetched]:
    """Every archive downloaded and verified by our downloader (``engine: conda``, which
    extracts them itself), in ``items``' order; the first error once none is running."""
    results: dict[int, Fetched] = {}
    error: BaseException | None = None
    everything = list(range(len(items)))
    for index, got in _downloaded(items, everything, policy, downloader=downloader or default()):
        if isinstance(got, BaseException):
            error = error or got
        else:
            results[index] = got
    if error is not None:
        raise error
    return [results[i] for i in range(len(items))]


def _fetch_and_extract(
    plan: InstallPlan,
    items: list[Download],
    cache: Path,
    policy: RetryPolicy,
    shas: list[str],
    slow: list[int],
    careful: list[int],
    again: bool,
    downloader: Downloader,
    fork: bool = True,
) -> _Had:
    """The careful path: hash the ``slow`` entries in worker processes, then download with
    our downloader, verify, and extract in the workers what is not usable: the ``careful``
    items and the slow entries that failed (``shas``: the trusted sha256 of each slow one)."""
    results: dict[int, Fetched] = {}
    facts: dict[int, verified.Facts | None] = {}
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    workers = max(1, min(os.cpu_count() or 2, len(slow) + len(careful)))
    # fork is cheap and safe on Linux when no thread exists yet (``fork``); macOS and
    # Windows use spawn, as Python does by default there.
    context = multiprocessing.get_context(
        "fork" if fork and sys.platform.startswith("linux") else "spawn"
    )
    os.environ["GPU_CI_PARENT_PID"] = str(os.getpid())
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_die_with_parent) as procs:
        # Start every worker now, before any download thread exists: forking a process
        # that has threads can deadlock the child.
        list(procs.map(_noop, range(workers)))
        valid = procs.map(
            _valid_entry,
            [str(entry_dir(cache, plan.conda[i])) for i in slow],
            [plan.conda[i].digest for i in slow],
            [TOKEN] * len(slow),
        )
        changed = set()  # hashed just now and found to differ: no need to hash them again
        for i, fact in zip(slow, list(valid)):
            if fact is not None:
                facts[i] = fact
                results[i] = Fetched(items[i], 0, True, 0, shas[i], plan.conda[i].md5)
            else:
                changed.add(i)
        todo = careful + sorted(changed)
        extractions = []
        error: BaseException | None = None
        for index, got in _downloaded(items, todo, policy, downloader=downloader):
            if isinstance(got, BaseException):  # stop extracting; report the first error
                error = error or got
                continue
            if error is not None:
                continue
            results[index] = got
            entry = plan.conda[index]
            extractions.append(
                (
                    index,
                    entry,
                    procs.submit(
                        _extract,
                        str(got.download.dest),
                        str(entry_dir(cache, entry)),
                        entry.digest,
                        TOKEN,
                        again or index in changed,
                        got.sha256,
                    ),
                )
            )
        for index, entry, job in extractions:
            try:
                facts[index] = job.result()
            except GpuCiError as exc:
                error = error or exc
            except Exception as exc:
                error = error or GpuCiError(
                    f"extracting {entry.filename} failed although its hash matched the lock "
                    f"({type(exc).__name__}: {exc})."
                )
    if error is not None:
        raise error
    return _Had(results, facts, changed)


@dataclass(frozen=True)
class _Had:
    """What the careful path had: per index, how each archive was had and its entry's
    facts; ``changed``: trusted entries found to differ when hashed (their sha256 is no
    longer to be trusted)."""

    results: dict[int, Fetched]
    facts: dict[int, verified.Facts | None]
    changed: set[int]
