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

The cache's trust rules (when an entry is usable, how an extraction is published) are
``gpu_ci.conda.cache_trust``; the streams and how many run at once, ``gpu_ci.conda.streams``;
here, which entry takes which path, and our downloader's threads.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from gpu_ci import cpus
from gpu_ci.conda import verified
from gpu_ci.conda.cache_trust import (
    MD5_SIDECAR,
    SHA_MARKER,
    entry_dir,
    extract_entry,
    named_disk_error,
    named_disk_error_in,
    trusted_sha256,
    valid_entry,
)
from gpu_ci.conda.lockfile import InstallPlan
from gpu_ci.conda.parallel import download_all, downloaded
from gpu_ci.conda.streams import (
    WIDE,
    Streamed,
    keeps_connections,
    stream_and_extract,
    stream_url,
    streams,
)
from gpu_ci.downloads import (
    TOKEN,
    Download,
    Downloader,
    Fetched,
    default,
)
from gpu_ci.errors import GpuCiError
from gpu_ci.retry import RetryPolicy

Log = Callable[[str], None]

__all__ = [
    "MD5_SIDECAR",
    "Ahead",
    "SHA_MARKER",
    "WIDE",
    "Fetch",
    "Fetching",
    "Log",
    "download_all",
    "entry_dir",
    "fetch_and_extract",
    "keeps_connections",
    "named_disk_error",
    "named_disk_error_in",
    "plan_downloads",
    "stream_and_extract",
    "streams",
    "warm_checks",
]


def plan_downloads(plan: InstallPlan, pkgs_dir: Path) -> list[Download]:
    archives = pkgs_dir / "archives"  # once: a Path join costs ~10 us per entry
    return [
        Download(
            e.url,
            archives / e.filename,
            f"{e.name} {e.version} ({e.build})",
            e.sha256,
            e.md5,
        )
        for e in plan.conda
    ]


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


def warm_checks(plan: InstallPlan, cache: Path) -> list[tuple[str, verified.Facts | None]]:
    """Per lock entry, what its cache entry offers without its archive: the sha256 to give
    rattler ('' when the entry is not to be trusted) and its stamp's facts (None: hash the
    entry, or fetch its archive). Reads only. The stamp first: where it holds, the entry's
    directory exists (``trusted_sha256`` need not look) and the stamp gives the sha256."""
    base = os.fspath(cache) + os.sep
    checked = []
    for entry in plan.conda:
        fact = verified.check(base + entry.dist_name, entry.digest)
        checked.append((trusted_sha256(entry, cache, fact), fact))
    return checked


def _make_cache(cache: Path) -> None:
    """The package cache's directory, made where absent.

    Something else at its name (a file, a symbolic link that leads to no directory) is
    named, never removed: it is not ours to delete."""
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise GpuCiError(
            f"{cache}, where setup-conda-from-lock keeps its package cache, exists but is not "
            "a directory (a file, or a symbolic link that leads to none). Remove it, or pass "
            "another pkgs-dir.",
            title="unusable package cache",
        ) from None


class Ahead:
    """``warm_checks`` in a child process while this one imports rattler.

    Why: a warm install is one core's work until rattler links, and the two longest parts
    of it before the link are ``import rattler`` (~70 ms: asyncio and rattler's modules) and
    the checks (one ``lstat`` per file of each entry: ~45 ms for 600 packages at 5-7 us per
    system call). Forked (on Linux, with a second core and before any thread exists), the
    child closes every descriptor it inherited but the pipe's (a lock this process holds, or
    the step's output, is never held by it), only reads the cache and sends its verdicts
    back, then exits; it is killed when its verdicts are not wanted (``close``), and once
    this process is gone its write fails and it exits (no ``prctl``: ctypes alone would
    cost the child 5 ms).
    Anything amiss with the child (it cannot start, dies, sends what does not decode)
    costs the checks made here instead, never a verdict.
    ``wanted``: False for an install that does not check the cache (``engine: conda``).
    A cache that does not exist yet (an ephemeral runner's first job) has nothing to check:
    no child (its fork, and the copies of the pages this process writes while it lives,
    cost a cold job CPU for nothing) and no check; an entry another job publishes meanwhile
    is found under its lock by the stream that would have fetched it
    (``streams.stream_and_extract``), or on the careful path by its extraction, once its
    archive is downloaded again (``cache_trust.extract_entry``)."""

    def __init__(self, plan: InstallPlan, cache: Path, wanted: bool = True) -> None:
        self.plan, self.cache = plan, cache
        self._pid, self._fd, self._status = 0, -1, -1
        self._empty = wanted and not os.path.isdir(cache)
        if (
            not wanted
            or self._empty
            or not plan.conda
            or not sys.platform.startswith("linux")
            or "rattler" in sys.modules  # nothing to overlap; its threads may exist
            or threading.active_count() > 1
            or cpus.usable() < 2
            # children reaped by the kernel: no status to read, and a pid to kill that
            # may be another process's by then
            or signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN
        ):
            return
        try:
            read, write = os.pipe()  # EMFILE: no child, the checks are made here
        except OSError:
            return
        try:
            pid = os.fork()
        except OSError:
            os.close(read)
            os.close(write)
            return
        if pid == 0:  # the child: reads the cache, writes nothing but the pipe
            code = 1
            try:
                # no collection here: it would run finalizers of the parent's garbage
                # (a temporary file's, say) a second time
                gc.disable()
                # none of this process's descriptors but the pipe: a lock it holds (the
                # prefix's) is free the moment it dies, and the step's output ends with it,
                # not when this child ends
                quiet = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(quiet, fd)
                os.closerange(3, write)
                os.closerange(write + 1, max(write + 1, os.sysconf("SC_OPEN_MAX")))
                import marshal  # built in: no import from disk

                verdicts = [
                    (sha, None if fact is None else tuple(fact))
                    for sha, fact in warm_checks(plan, cache)
                ]
                verified.write_all(write, marshal.dumps(verdicts))
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        self._pid, self._fd = pid, read

    def result(self) -> list[tuple[str, verified.Facts | None]]:
        """The child's verdicts, or (without one) the checks made here.

        Nothing is trusted when the cache did not exist when the job began."""
        if self._empty:
            return [("", None)] * len(self.plan.conda)
        data = self._collect()
        if data is not None:
            import marshal

            try:
                got = [
                    (sha, None if fact is None else verified.Facts(*fact))
                    for sha, fact in marshal.loads(data)
                ]
            except (ValueError, TypeError, EOFError):
                got = []
            # this plan's verdicts, or none: one per entry, each a sha256 (or '') and facts
            # of the lock's archive (the checks made here would give no others)
            entries = self.plan.conda
            if len(got) == len(entries) and all(
                isinstance(sha, str) and (fact is None or fact.digest == entry.digest)
                for (sha, fact), entry in zip(got, entries)
            ):
                return got
        return warm_checks(self.plan, self.cache)

    def _collect(self) -> bytes | None:
        """The child's whole message, once it exited with 0; None otherwise."""
        if self._fd < 0:
            return None
        chunks = []
        try:
            while chunk := os.read(self._fd, 1 << 16):
                chunks.append(chunk)
        except OSError:
            chunks = []
        self._close_pipe()
        self._reap()
        return b"".join(chunks) if chunks and self._status == 0 else None

    def _close_pipe(self) -> None:
        os.close(self._fd)
        self._fd = -1

    def _reap(self) -> None:
        if self._pid:
            with contextlib.suppress(ChildProcessError):
                _, status = os.waitpid(self._pid, 0)
                self._status = os.waitstatus_to_exitcode(status)
            self._pid = 0

    def close(self) -> None:
        """Reap the child, killed first when its verdicts were not read.

        That is a reused environment or an error: it would check the whole cache for
        nothing."""
        if self._fd >= 0:
            self._close_pipe()
            if self._pid:
                with contextlib.suppress(OSError):
                    os.kill(self._pid, signal.SIGKILL)
        self._reap()

    def __enter__(self) -> Ahead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _noop(_: int) -> None:
    return None


# NamedTuples, not frozen dataclasses: each class costs every run ~0.2 ms to create, not ~1.3.


class Fetch(NamedTuple):
    """Per lock entry, in the lock's order: how its archive was had, the archive's sha256,
    and the facts of its verified cache entry (None: ask its ``paths.json``)."""

    fetched: list[Fetched]
    shas: list[str]
    facts: list[verified.Facts | None]


class Fetching(NamedTuple):
    """How archives are fetched: retries, streaming, and whose downloader.

    ``downloader``: the run's (mirrors, credentials, progress), else an unrouted one,
    ``downloads.default()``; ``stream``: archives without credentials are streamed by
    rattler's client."""

    policy: RetryPolicy | None = None
    stream: bool = True
    downloader: Downloader | None = None


def fetch_and_extract(
    plan: InstallPlan,
    pkgs_dir: Path,
    cache: Path,
    how: Fetching | None,
    trust: bool = True,
    log: Log = print,
    ahead: Ahead | None = None,
) -> Fetch:
    """Every entry of the plan verified in the cache: trusted, streamed or downloaded.

    ``how``: retries, streaming, downloader (None: the defaults); ``ahead``: the warm
    checks, begun earlier.

    Streamed archives (``stream_and_extract``) are extracted into a temporary name while
    their hash is computed, and published only when it matches; our downloader's archives
    are verified before a worker extracts them (``_fetch_and_extract``). A cache entry that
    passes ``trusted_sha256`` is used without its archive (neither fetched nor hashed) when
    its stamp shows no file changed since a job on this host verified it
    (``verified.check``, in this process: no worker starts for a warm cache); one whose
    files changed, or that has no stamp (restored by ``actions/cache``), is
    hashed against its ``paths.json`` in the workers first (``valid_entry``)."""
    items = plan_downloads(plan, pkgs_dir)
    if not items:
        return Fetch([], [], [])
    _make_cache(cache)
    how = how or Fetching()
    run = _Run(plan, items, cache, how.policy or RetryPolicy(), how.downloader or default())
    results: dict[int, Fetched] = {}
    facts: dict[int, verified.Facts | None] = {}
    checked = (ahead.result() if ahead else warm_checks(plan, cache)) if trust else []
    shas = [sha for sha, _ in checked] or [""] * len(items)
    slow = []
    for i, (sha, fact) in enumerate(checked):
        if not sha:
            continue
        if fact is None:
            slow.append(i)
        else:
            facts[i] = fact
            results[i] = Fetched(items[i], 0, True, 0, sha, plan.conda[i].md5)
    todo = [i for i in range(len(items)) if i not in results and i not in slow]
    streaming = how.stream and trust
    urls = {i: stream_url(items[i], run.downloader) for i in todo} if streaming else {}
    streamed = [i for i in todo if urls.get(i)]
    careful = [i for i in todo if not urls.get(i)]
    if slow or careful:  # before any of rattler's threads exist: the workers are forked
        had = _fetch_and_extract(run, shas, slow, careful, not trust)
        results.update(had.results)
        facts.update(had.facts)
        for i in had.changed:
            shas[i] = ""
    if streamed:
        landed = _streamed(run, streamed, urls, log)
        for i, got in landed.items():
            results[i] = Fetched(items[i], 0, False, 1, got.sha256, got.md5)
            facts[i] = got.facts
        left = [i for i in streamed if i not in results]
        if left:  # rattler's threads exist now: spawned workers
            had = _fetch_and_extract(run, shas, [], left, False, fork=False)
            results.update(had.results)
            facts.update(had.facts)
    fetched = [results[i] for i in range(len(items))]
    return Fetch(
        fetched,
        [sha or got.sha256 for sha, got in zip(shas, fetched)],
        [facts.get(i) for i in range(len(items))],
    )


class _Run(NamedTuple):
    """One fetch's plan, its downloads, the cache, and how to download."""

    plan: InstallPlan
    items: list[Download]
    cache: Path
    policy: RetryPolicy
    downloader: Downloader


def _streamed(
    run: _Run, streamed: list[int], urls: dict[int, str], log: Log
) -> dict[int, Streamed]:
    """The ``streamed`` entries fetched by rattler's client: those that landed."""
    jobs = []
    for i in streamed:
        entry = run.plan.conda[i]
        jobs.append((i, urls[i], entry_dir(run.cache, entry), entry.sha256, entry.md5))
    return stream_and_extract(jobs, run.policy.timeout, log=log, verdicts=run.downloader.verdicts)


def _fetch_and_extract(
    run: _Run, shas: list[str], slow: list[int], careful: list[int], again: bool, fork: bool = True
) -> _Had:
    """The careful path: hash the ``slow`` entries in worker processes, then download with
    our downloader, verify, and extract in the workers what is not usable: the ``careful``
    items and the slow entries that failed (``shas``: the trusted sha256 of each slow one)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    had = _Had({}, {}, set())
    workers = max(1, min(cpus.usable(), len(slow) + len(careful)))
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
        _hash_slow(procs, run, shas, slow, had)
        error = _download_and_extract(procs, run, careful + sorted(had.changed), again, had)
    if error is not None:
        raise error
    return had


def _hash_slow(procs: Any, run: _Run, shas: list[str], slow: list[int], had: _Had) -> None:
    """The ``slow`` entries hashed in the workers: usable ones into ``had``, others changed."""
    valid = procs.map(
        valid_entry,
        [str(entry_dir(run.cache, run.plan.conda[i])) for i in slow],
        [run.plan.conda[i].digest for i in slow],
        [TOKEN] * len(slow),
        [shas[i] for i in slow],
    )
    for i, fact in zip(slow, list(valid)):
        if fact is not None:
            had.facts[i] = fact
            had.results[i] = Fetched(run.items[i], 0, True, 0, shas[i], run.plan.conda[i].md5)
        else:  # hashed just now and found to differ: no need to hash them again
            had.changed.add(i)


def _download_and_extract(
    procs: Any, run: _Run, todo: list[int], again: bool, had: _Had
) -> BaseException | None:
    """``todo`` downloaded here, extracted in the workers; the first error."""
    extractions = []
    error: BaseException | None = None
    for index, got in downloaded(run.items, todo, run.policy, downloader=run.downloader):
        if isinstance(got, BaseException):  # stop extracting; report the first error
            error = error or got
            continue
        if error is not None:
            continue
        had.results[index] = got
        entry = run.plan.conda[index]
        job = procs.submit(
            extract_entry,
            str(got.download.dest),
            str(entry_dir(run.cache, entry)),
            entry.digest,
            TOKEN,
            again or index in had.changed,
            got.sha256,
        )
        extractions.append((index, entry, job))
    for index, entry, job in extractions:
        try:
            had.facts[index] = job.result()
        except GpuCiError as exc:
            error = error or exc
        except Exception as exc:
            error = error or GpuCiError(
                f"extracting {entry.filename} failed although its hash matched the lock "
                f"({type(exc).__name__}: {exc})."
            )
    return error


class _Had(NamedTuple):
    """What the careful path had: per index, how each archive was had and its entry's
    facts; ``changed``: trusted entries found to differ when hashed (their sha256 is no
    longer to be trusted)."""

    results: dict[int, Fetched]
    facts: dict[int, verified.Facts | None]
    changed: set[int]
