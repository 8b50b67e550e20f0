"""Create a conda environment from an install plan: all or nothing, one job per prefix.

The order is what makes it safe (see ``transaction`` for the locks and the journal):

1. lock the prefix; finish or roll back what a killed run left; sweep dead writers' files;
2. if the prefix already holds this lock *and* its files match its records: ``reused``;
3. check, before any download, that the prefix's directory and the package cache are
   writable and that the prefix can be renamed (not a mount point);
4. use a cache entry without its archive when this host verified it and no file changed
   since (``verified``: a stamp of the digest and each file's inode, size and mtime; an
   entry whose files differ, or without a stamp, is hashed against its ``paths.json`` in
   worker processes first); stream every other credential-free archive through rattler's
   client into a temporary entry (download, hash and extraction in one pass on its
   threads) and publish it, digest checked, by atomic rename under the per-entry lock;
   download the rest (credentials, proxies, failed streams: kept-alive connections,
   ``Range`` resume, mirrors) with our downloader, verify, and extract in worker processes
   that die with us;
5. link with py-rattler into a staging sibling, the final path written into prefix
   placeholders, each ``conda-meta`` record built from the package's own ``index.json``;
   rattler's client refuses every request, so it links only what we verified;
6. install the pip entries into staging with its own interpreter, then rewrite the staging
   path in the scripts pip wrote; write the marker;
7. swap staging into place (two renames, journalled); drop the old environment.

Any failure, and the next run after a ``kill -9``, leaves the old environment or the new
one, complete, and none of our temporary files.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_ci.conda import transaction, verified
from gpu_ci.conda.integrity import cache_entry_problem, environment_problems
from gpu_ci.conda.lockfile import CondaEntry, InstallPlan
from gpu_ci.conda.options import MARKER, is_environment
from gpu_ci.disk import DiskError, as_disk_error, probe_writable, require_space
from gpu_ci.downloads import TOKEN, Download, Fetched, direct, fetch_all, route
from gpu_ci.errors import GpuCiError
from gpu_ci.faults import crash_point
from gpu_ci.retry import RetryPolicy
from gpu_ci.urls import mask_url, secrets_in

SHA_MARKER = ".gpu-ci-archive-sha256"
MD5_SIDECAR = ".gpu-ci-md5"
"""Next to rattler's ``<name>-<version>-<build>.lock``: ``<md5> <sha256>`` of the archive we
verified against an md5-only lock entry, so that the next run can give rattler the sha256 of
a cache entry it trusts without the archive."""
Log = Callable[[str], None]


@dataclass
class InstallReport:
    reused: bool = False
    downloaded_bytes: int = 0
    cached_archives: int = 0
    streamed_archives: int = 0
    """Fetched by rattler's client straight into the cache: their size is not reported."""
    recovered: str = ""
    """What was finished or rolled back from an interrupted earlier run ('' if nothing)."""
    phases: dict[str, float] = field(default_factory=dict)


def marker(plan: InstallPlan) -> dict[str, object]:
    return {"lock_sha256": plan.lock_sha256, "platform": plan.platform,
            "categories": list(plan.categories), "conda_records": len(plan.conda)}


def marker_matches(prefix: Path, plan: InstallPlan) -> bool:
    try:
        data = json.loads((prefix / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return bool(data == marker(plan))


def _downloads(plan: InstallPlan, pkgs_dir: Path) -> list[Download]:
    return [Download(e.url, pkgs_dir / "archives" / e.filename,
                     f"{e.name} {e.version} ({e.build})", e.sha256, e.md5)
            for e in plan.conda]


def _entry_dir(cache: Path, entry: CondaEntry) -> Path:
    return cache / f"{entry.name}-{entry.version}-{entry.build}"


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
        with open(base + ".lock", "rb") as handle:
            raw = handle.read(40)
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
    dirname = f"{entry.name}-{entry.version}-{entry.build}"
    if not os.path.isdir(os.path.join(cache, dirname)):
        return ""  # nothing to trust: stream or download it
    sha = entry.sha256
    if not sha:
        try:
            with open(os.path.join(cache, dirname + MD5_SIDECAR)) as handle:
                md5, sha = handle.read().split()
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
        return (target / SHA_MARKER).read_text() == digest and \
            (target / "info" / "index.json").is_file() and not cache_entry_problem(target)
    except OSError:
        return False


def _named_from_message(exc: BaseException, path: Path, what: str) -> GpuCiError | None:
    """rattler reports I/O errors as text ('... (os error 28)'): name the disk ones."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return as_disk_error(exc, path, what)
    return _named_from_text(str(exc), path, what)


def _named_from_text(text: str, path: Path, what: str) -> GpuCiError | None:
    """A disk error reported by a subprocess or rattler as text ('[Errno 28]', 'os error
    28'), named as ours would be."""
    match = re.search(r"(?:os error |\[Errno )(\d+)", text)
    if match:
        return as_disk_error(OSError(int(match.group(1)), text), path, what)
    return None


def _extract(archive: str, dest: str, digest: str, token: str, again: bool = False,
             sha256: str = "") -> verified.Facts | None:
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
            named = _named_from_message(exc, tmp, f"extracting {Path(archive).name}")
            if named is not None:
                raise named from None
            raise
    return facts


@dataclass(frozen=True)
class Streamed:
    sha256: str
    md5: str
    facts: verified.Facts | None


def stream_url(item: Download) -> str:
    """Where rattler's client may fetch ``item`` straight into the cache ('' when it may
    not): no credentials (it would get none of ours: its redirect rules are not ours, and it
    is told hosts, not origins), no proxy (ours honours *_PROXY/NO_PROXY as tested), and no
    archive already here to verify instead."""
    if item.dest.exists():
        return ""
    to = route(item.url)
    return to.url if not to.headers and not secrets_in(to.url) and direct(to.url) else ""


def _try_lock(target: Path) -> int | None:
    """The entry's lock, held (an fd), or None when another job holds it: that entry then
    takes the careful path, which waits for the lock."""
    if sys.platform == "win32":
        return None
    import fcntl

    fd = os.open(target.with_name(f".{target.name}.gpu-ci.lock"), os.O_RDWR | os.O_CREAT,
                 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def streams() -> int:
    """How many archives to stream at once: 6 on a 2-core runner, up to 16 on bigger ones
    (more streams hide network latency). Measured on 2 cores against a server that closes
    every connection and listens with a backlog of 5 (Python's http.server; some proxies):
    8 streams overflowed it (1 s SYN retransmits: 1.0-1.1 s for 150 packages), 4 or 6 took
    0.23-0.27 s; on a kept-alive server 4, 8 and 16 were within noise (0.70-0.88 s, 600)."""
    return max(6, min(16, 2 * (os.cpu_count() or 2)))


def stream_and_extract(jobs: Sequence[tuple[int, str, Path, str, str]], timeout: float,
                       concurrency: int = 0, log: Log = print,
                       interval: float = 5.0) -> dict[int, Streamed]:
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

    async def one(gate: asyncio.Semaphore, index: int, url: str, target: Path, sha256: str,
                  md5: str) -> None:
        async with gate:
            fd = _try_lock(target)
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
                task = asyncio.ensure_future(download_and_extract(
                    client, url, tmp, bytes.fromhex(sha256) if sha256 else None))
                await asyncio.sleep(0)
                crash_point("download")
                got_sha, got_md5 = (value.hex() for value in
                                    await _unless_stalled(task, tmp, timeout))
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
            log(f"downloading: {len(done)} of {len(jobs)} archives streamed into the package "
                f"cache in {time.monotonic() - started:.0f} s")

    async def main() -> None:
        gate = asyncio.Semaphore(concurrency or streams())
        reporter = asyncio.ensure_future(progress(time.monotonic()))
        try:
            await asyncio.gather(*(one(gate, *job) for job in jobs))
        finally:
            reporter.cancel()

    asyncio.run(main())
    return done


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


def _publish(tmp: Path, target: Path, digest: str, token: str, sha256: str,
             parent: bool = False) -> verified.Facts | None:
    """Put a complete extraction in place, under the entry's lock: stamped with the
    archive's digest and the files' identities, then renamed over whatever was there."""
    _refuse_odd_info(tmp, target.name)
    _write_marker(tmp, digest)
    facts = verified.write(tmp, digest, token, target.name)
    crash_point("extract", parent=parent)
    if os.path.lexists(target):  # not while another job links from it (link_with_rattler)
        with transaction.exclusive(target.parent / transaction.ENTRIES_LOCK,
                                   "the package cache", lambda _: None):
            shutil.rmtree(target)
            os.replace(tmp, target)
    else:
        os.replace(tmp, target)
    _forget_other_archive(target, sha256)
    return facts


def _refuse_odd_info(entry: Path, name: str) -> None:
    """``info/`` holds what we and rattler read in place of the archive: a link or a device
    there (``info/paths.json`` -> /dev/zero) would be read instead of the package's own
    file, before any check (and /dev/zero until the host's memory is gone)."""
    import stat

    odd = ""
    try:
        if not stat.S_ISDIR(os.lstat(os.path.join(entry, "info")).st_mode):
            odd = "info"
        else:
            with os.scandir(os.path.join(entry, "info")) as it:
                odd = next((f"info/{e.name}" for e in it if not e.is_file(follow_symlinks=False)
                            and not e.is_dir(follow_symlinks=False)), "")
    except FileNotFoundError:
        return  # no info/ at all: the entry is refused later (no index.json)
    if odd:
        raise GpuCiError(f"{name}: {odd} is a symbolic link or a device, not a file; a conda "
                         "package never has one there: the lock names a package that is "
                         "broken or hostile.", title="unsafe package")


def _write_marker(entry: Path, digest: str) -> None:
    """The digest marker, in a new file: the archive may hold a symbolic link (or anything)
    at that name, and writing through a link would write outside the cache."""
    path = os.path.join(entry, SHA_MARKER)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                 0o644)
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


def fetch_and_extract(plan: InstallPlan, pkgs_dir: Path, cache: Path,
                      policy: RetryPolicy | None, trust: bool = True, stream: bool = True,
                      log: Log = print) -> Fetch:
    """Every entry of the plan verified in the cache: trusted, streamed or downloaded.

    Streamed archives (``stream_and_extract``) are extracted into a temporary name while
    their hash is computed, and published only when it matches; our downloader's archives
    are verified before a worker extracts them (``_fetch_and_extract``). A cache entry that
    passes ``trusted_sha256`` is used without its archive (neither fetched nor hashed) when
    its stamp shows no file changed since a job on this host verified it
    (``verified.check``, in this process: no worker starts for a warm cache); one whose
    files changed, or that has no stamp (restored by ``actions/cache``), is
    hashed against its ``paths.json`` in the workers first (``_valid_entry``)."""
    items = _downloads(plan, pkgs_dir)
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
            fact = verified.check(os.path.join(cache, f"{entry.name}-{entry.version}-"
                                               f"{entry.build}"), entry.sha256 or entry.md5)
            if fact is None:
                slow.append(i)
            else:
                facts[i] = fact
                results[i] = Fetched(items[i], 0, True, 0, sha, entry.md5)
    todo = [i for i in range(len(items)) if i not in results and i not in slow]
    urls = {i: stream_url(items[i]) for i in todo} if stream and trust else {}
    streamed = [i for i in todo if urls.get(i)]
    careful = [i for i in todo if not urls.get(i)]
    policy = policy or RetryPolicy()
    if slow or careful:  # before any of rattler's threads exist: the workers are forked
        _fetch_and_extract(plan, items, cache, policy, shas, slow, careful, results, facts,
                           again=not trust)
    if streamed:
        jobs = []
        for i in streamed:
            entry = plan.conda[i]
            jobs.append((i, urls[i], _entry_dir(cache, entry), entry.sha256, entry.md5))
        for i, got in stream_and_extract(jobs, policy.timeout, log=log).items():
            results[i] = Fetched(items[i], 0, False, 1, got.sha256, got.md5)
            facts[i] = got.facts
        left = [i for i in streamed if i not in results]
        if left:  # rattler's threads exist now: spawned workers
            _fetch_and_extract(plan, items, cache, policy, shas, [], left, results, facts,
                               again=False, fork=False)
    fetched = [results[i] for i in range(len(items))]
    return Fetch(fetched, [sha or got.sha256 for sha, got in zip(shas, fetched)],
                 [facts.get(i) for i in range(len(items))])


def _fetch_and_extract(plan: InstallPlan, items: list[Download], cache: Path,
                       policy: RetryPolicy, shas: list[str], slow: list[int],
                       careful: list[int], results: dict[int, Fetched],
                       facts: dict[int, verified.Facts | None], again: bool,
                       fork: bool = True) -> None:
    """The careful path: hash the ``slow`` entries in worker processes, then download with
    our downloader, verify, and extract in the workers what is not usable: the ``careful``
    items and the slow entries that failed."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed

    from gpu_ci.downloads import fetch

    workers = max(1, min(os.cpu_count() or 2, len(slow) + len(careful)))
    # fork is cheap and safe on Linux when no thread exists yet (``fork``); macOS and
    # Windows use spawn, as Python does by default there.
    context = multiprocessing.get_context("fork" if fork and sys.platform.startswith("linux")
                                          else "spawn")
    os.environ["GPU_CI_PARENT_PID"] = str(os.getpid())
    with ProcessPoolExecutor(workers, mp_context=context,
                             initializer=_die_with_parent) as procs:
        # Start every worker now, before any download thread exists: forking a process
        # that has threads can deadlock the child.
        list(procs.map(_noop, range(workers)))
        valid = procs.map(_valid_entry, [str(_entry_dir(cache, plan.conda[i])) for i in slow],
                          [plan.conda[i].sha256 or plan.conda[i].md5 for i in slow],
                          [TOKEN] * len(slow))
        changed = set()  # hashed just now and found to differ: no need to hash them again
        for i, fact in zip(slow, list(valid)):
            if fact is not None:
                facts[i] = fact
                results[i] = Fetched(items[i], 0, True, 0, shas[i], plan.conda[i].md5)
            else:
                shas[i] = ""
                changed.add(i)
        todo = careful + sorted(changed)
        extractions = []
        error: BaseException | None = None
        # Two download threads per core, at most 8: more threads than that on a small
        # runner convoy on the GIL with the extraction feeders (measured on 2 cores: 8
        # threads 0.47-1.43 s for 150 packages, 4 threads a steady 0.44 s).
        with ThreadPoolExecutor(max(1, min(8, 2 * (os.cpu_count() or 2), len(todo)))) as threads:
            futures = {threads.submit(fetch, items[i], policy): i for i in todo}
            for future in as_completed(futures):
                try:
                    got = future.result()
                except BaseException as exc:  # stop extracting; report the first error
                    error = error or exc
                    continue
                if error is not None:
                    continue
                index = futures[future]
                results[index] = got
                entry = plan.conda[index]
                digest = entry.sha256 or entry.md5
                extractions.append((index, entry, procs.submit(
                    _extract, str(got.download.dest), str(_entry_dir(cache, entry)), digest,
                    TOKEN, again or index in changed, got.sha256)))
        for index, entry, job in extractions:
            try:
                facts[index] = job.result()
            except GpuCiError as exc:
                error = error or exc
            except Exception as exc:
                error = error or GpuCiError(
                    f"extracting {entry.filename} failed although its hash matched the lock "
                    f"({type(exc).__name__}: {exc}).")
    if error is not None:
        raise error


# -- linking ------------------------------------------------------------------------------


def _records(entries: Sequence[CondaEntry], fetched: Sequence[Fetched], shas: Sequence[str],
             cache: Path) -> list[Any]:
    """Repodata records from each package's own ``info/index.json`` (not from the lock:
    an explicit lock has no dependencies, and a build string does not give the build
    number), with the archive's size and both digests, as a channel's repodata has them (an
    entry trusted without its archive has no size, and an md5 only when the lock has one).
    URL and channel are the lock's, credentials masked: rattler writes them into conda-meta
    as they are (it never downloads them, see ``_no_downloads``)."""
    import rattler

    records = []
    base = os.fspath(cache)
    for entry, got, sha in zip(entries, fetched, shas):
        index = Path(os.path.join(base, f"{entry.name}-{entry.version}-{entry.build}", "info",
                             "index.json"))
        record = rattler.PackageRecord.from_index_json(
            index, size=got.size or None, sha256=sha or None, md5=got.md5 or entry.md5 or None)
        if str(record.subdir) not in ("", entry.subdir) and entry.subdir:
            raise GpuCiError(f"{entry.filename} says it is for {record.subdir} in its "
                             f"index.json, but the lock has it under {entry.subdir}.")
        records.append(rattler.RepoDataRecord(record, entry.filename, mask_url(entry.url),
                                              mask_url(entry.channel.rstrip("/") + "/")))
    return records


def _no_downloads(host: str, path: str) -> dict[str, str] | None:
    """rattler's client for linking: every entry is in the cache, verified by us, so a request
    means rattler did not accept one: fail (then everything is fetched, verified and
    extracted again) rather than let it fetch past our mirrors, credentials and checks."""
    raise RuntimeError(f"rattler asked for {host}{path}, which the package cache should hold")


def _copied_bytes(entries: Sequence[CondaEntry], cache: Path, target_dir: Path,
                  facts: Sequence[verified.Facts | None]) -> int:
    """What linking writes as new data: files with a prefix placeholder (always copied),
    and every file when the cache is on another device (no hard links across devices)."""
    try:
        same_device = os.stat(cache).st_dev == os.stat(target_dir).st_dev
    except OSError:
        same_device = False
    total = 0
    for entry, fact in zip(entries, facts):
        if fact is not None:
            total += fact.placeholder_bytes if same_device else fact.total_bytes
            continue
        items = verified.listed_paths(_entry_dir(cache, entry))
        for item in items if not isinstance(items, str) else ():
            size = item.get("size_in_bytes")
            if (not same_device or item.get("prefix_placeholder")) and isinstance(size, int):
                total += size
    return total


def _silently_full(staging: Path) -> DiskError | None:
    """rattler 0.28 does not report a conda-meta record it could not write on a full disk:
    the record is left empty, and it fails later reading it back ('EOF while parsing').
    Named as the disk error it is when the device has (almost) nothing free."""
    import errno

    try:
        empty = any(p.stat().st_size == 0 for p in (staging / "conda-meta").glob("*.json"))
        full = shutil.disk_usage(staging).free < (1 << 20)
    except OSError:
        return None
    if not (empty and full):
        return None
    return as_disk_error(OSError(errno.ENOSPC, "No space left on device"), staging,
                         "linking the environment")


def _not_replaced(entries: Sequence[CondaEntry], cache: Path) -> None:
    """Under the cache's shared lock: every entry still holds the archive this job verified
    (another job with another archive of the same name, version and build may have replaced
    it since; none can while the lock is held)."""
    for entry in entries:
        try:
            with open(_entry_dir(cache, entry) / SHA_MARKER) as handle:
                same = handle.read() == (entry.sha256 or entry.md5)
        except OSError:
            same = False
        if not same:
            raise GpuCiError(f"the package cache entry of {entry.filename} was replaced by "
                             "another job (with another archive of that name, version and "
                             "build) after this job verified it; run the job again.")


def link_with_rattler(plan: InstallPlan, fetched: list[Fetched], shas: list[str],
                      staging: Path, target: Path, cache: Path,
                      facts: Sequence[verified.Facts | None] = ()) -> None:
    import asyncio

    import rattler
    from rattler.networking import AddHeadersMiddleware

    from gpu_ci.conda.integrity import link_path_problem

    entries = list(plan.conda)
    facts = list(facts) or [None] * len(entries)
    dirs = [_entry_dir(cache, e) for e in entries]
    escape = link_path_problem(dirs, {d: f for d, f in zip(dirs, facts) if f is not None})
    if escape:
        raise GpuCiError(f"refusing to link: {escape}. A conda package never needs that; the "
                         "lock names a package that is broken or hostile.",
                         title="package path outside the prefix")
    require_space(target.parent, _copied_bytes(entries, cache, target.parent, facts),
                  f"linking {len(entries)} packages into {target}")
    # Every entry is either extracted just now from a verified archive or was checked
    # against its stamp or its paths.json (sizes and sha256) by _extract or _valid_entry:
    # rattler need not validate it again.
    package_cache = rattler.PackageCache.new_layered(
        [str(cache)], validation_mode=rattler.ValidationMode.skip())
    records = _records(entries, fetched, shas, cache)
    with transaction.shared(cache / transaction.ENTRIES_LOCK):
        _not_replaced(entries, cache)
        try:
            asyncio.run(rattler.install(
                records, target_prefix=str(staging),
                alternative_target_prefix=str(target), package_cache=package_cache,
                client=rattler.Client([AddHeadersMiddleware(_no_downloads)]),
                show_progress=False, execute_link_scripts=False))
        except GpuCiError:
            raise
        except Exception as exc:
            named = _named_from_message(exc, staging, "linking the environment") or \
                _silently_full(staging)
            if named is not None:
                raise named from None
            raise GpuCiError(f"linking the environment failed: {exc}") from None
    for entry, sha, got in zip(entries, shas, fetched):
        if entry.sha256 or not sha or got.cached:  # a cached one's sidecar gave its sha256
            continue
        sidecar = cache / f"{_entry_dir(cache, entry).name}{MD5_SIDECAR}"
        line = f"{entry.md5} {sha}\n"
        with contextlib.suppress(OSError):
            if sidecar.read_text() == line:
                continue
        part = sidecar.with_name(f".{sidecar.name}.tmp-{TOKEN}")  # swept if we die
        try:
            part.write_text(line)
            os.replace(part, sidecar)
        except OSError as exc:
            part.unlink(missing_ok=True)
            raise as_disk_error(exc, cache, "recording the archive sha256") or exc from None


def link_with_conda(conda: Path, plan: InstallPlan, staging: Path, env: Mapping[str, str],
                    explicit_file: Path) -> None:
    proc = subprocess.run([str(conda), "create", "--yes", "--quiet", "--offline",
                           "--prefix", str(staging), "--file", str(explicit_file)],
                          env=dict(env), capture_output=True, text=True,
                          preexec_fn=_child_dies_with_us)
    if proc.returncode != 0:
        tail = mask_url((proc.stderr or proc.stdout).strip()[-2000:])
        named = _named_from_text(tail, staging, "conda create")
        raise named or GpuCiError(f"conda create failed (exit {proc.returncode}): {tail}")


# -- pip ----------------------------------------------------------------------------------


def _child_dies_with_us() -> None:
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)


def _pip(plan: InstallPlan, staging: Path, target: Path, env: Mapping[str, str],
         work: Path) -> None:
    """pip entries into the staged environment, then make what pip wrote point at target.

    ``--no-compile``: byte code compiled now would record the staging path in every code
    object; Python compiles it on first import instead. Console scripts get a shebang with
    the staging interpreter, which is rewritten to the final one.
    """
    python = staging / "bin" / "python"
    if not python.exists():
        raise GpuCiError(f"the lock has {len(plan.pip)} pip entries but the environment has no "
                         "python to install them with: add python (and pip) to the lock.")
    requirements = work / "pip-requirements.txt"
    requirements.write_text("".join(f"{p.name} @ {p.url} --hash=sha256:{p.sha256}\n"
                                    for p in plan.pip))
    pip_env = {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
               "PIP_NO_INPUT": "1"}
    bin_dir = staging / "bin"
    before = set(os.listdir(bin_dir))
    proc = subprocess.Popen([str(python), "-m", "pip", "install", "--no-deps", "--no-index",
                             "--require-hashes", "--no-cache-dir", "--no-compile", "-r",
                             str(requirements)],
                            env=pip_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=_child_dies_with_us)
    crash_point("pip")
    out, err = proc.communicate()
    if proc.returncode != 0:
        tail = mask_url((err or out).strip()[-2000:])
        named = _named_from_text(tail, staging, "installing the lock's pip entries")
        raise named or GpuCiError(f"installing the lock's pip entries failed (exit "
                                  f"{proc.returncode}): {tail}")
    old, new = str(staging).encode(), str(target).encode()
    for name in sorted(set(os.listdir(bin_dir)) - before):
        script = bin_dir / name
        if script.is_file() and not script.is_symlink():
            data = script.read_bytes()
            if old in data[:4096]:
                script.write_bytes(data.replace(old, new))


# -- the whole transaction ----------------------------------------------------------------


def require_rattler() -> None:
    try:
        import rattler  # noqa: F401
    except ImportError:
        raise GpuCiError("engine: rattler needs py-rattler, which needs Python >= 3.10 for "
                         "gpu-ci itself: add actions/setup-python (3.12) before this action, or "
                         "use engine: conda.") from None


def preflight(paths: transaction.Paths, pkgs_dir: Path) -> None:
    """Fail before any download when the result could not be put in place."""
    target = paths.target
    probe_writable(target.parent, f"creating the environment {target}")
    probe_writable(pkgs_dir, f"the package cache {pkgs_dir}")
    if target.exists() and os.path.ismount(target):
        raise GpuCiError(f"prefix {target} is a mount point: it cannot be replaced by a "
                         "rename. Pass a directory inside it as prefix, e.g. "
                         f"{target / 'env'}.", title="unsafe prefix")
    # The swap is a rename: prove that this directory allows one.
    # Not a ``gpu-ci-work-*`` name: this runs before the prefix lock too (check_writable),
    # and the lock holder sweeps work directories as an interrupted run's leftovers.
    probe = paths.probe
    renamed = probe.with_name(probe.name + "-renamed")
    try:
        probe.mkdir()
        os.rename(probe, renamed)
        renamed.rmdir()
    except OSError as exc:
        for left in (probe, renamed):
            with contextlib.suppress(OSError):
                left.rmdir()
        named = as_disk_error(exc, target.parent, f"renaming in {target.parent}")
        raise (named or GpuCiError(f"cannot rename directories in {target.parent} "
                                   f"({exc.strerror}); choose another prefix.")) from None


def check_writable(target: Path, pkgs_dir: Path) -> None:
    """``preflight`` for callers that do not hold the prefix lock (it only makes probes)."""
    preflight(transaction.Paths(target), pkgs_dir)


def refuse_foreign(target: Path) -> None:
    """The last line of "never delete what we did not create", under the prefix lock."""
    if target.is_dir() and not target.is_symlink() and not is_environment(target) and \
            any(target.iterdir()):
        raise GpuCiError(f"prefix {target} exists, is not empty and is not a conda environment "
                         "(no conda-meta with history or package records); it is left "
                         "untouched. Pass a new or empty directory as prefix.",
                         title="unsafe prefix")


def install(plan: InstallPlan, target: Path, pkgs_dir: Path, env: Mapping[str, str], *,
            engine: str = "rattler", conda: Path | None = None,
            policy: RetryPolicy | None = None, log: Log = print,
            stream: bool = True) -> InstallReport:
    try:
        return _install(plan, target, pkgs_dir, env, engine, conda, policy, log, stream)
    except OSError as exc:  # anywhere, the lock file and the journal included
        named = as_disk_error(exc, target.parent, f"installing {target}")
        if named is not None:
            raise named from None
        raise


def _install(plan: InstallPlan, target: Path, pkgs_dir: Path, env: Mapping[str, str],
             engine: str, conda: Path | None, policy: RetryPolicy | None,
             log: Log, stream: bool = True) -> InstallReport:
    report = InstallReport()
    paths = transaction.Paths(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with transaction.exclusive(paths.lock, f"the lock on {target}", log):
        report.recovered = transaction.recover(paths, log)
        transaction.sweep_cache(pkgs_dir, pkgs_dir / "rattler")
        if marker_matches(target, plan):
            problems = environment_problems(target, len(plan.conda))
            if not problems:
                report.reused = True
                return report
            log(f"setup-conda-from-lock: {target} holds this lock, but "
                f"{'; '.join(problems)}: installing it again.")
        refuse_foreign(target)
        if engine == "rattler":
            require_rattler()
        if engine == "conda" and conda is None:
            raise GpuCiError("engine: conda needs miniforge: true (a writable conda).")
        try:
            preflight(paths, pkgs_dir)
            with transaction.registered(pkgs_dir):
                transaction.begin(paths)
                _build_and_swap(plan, paths, pkgs_dir, env, engine, conda, policy, report,
                                stream, log)
        except BaseException:
            with contextlib.suppress(Exception):
                transaction.recover(paths, lambda _: None)
            raise
    return report


def _count(report: InstallReport, fetched: Sequence[Fetched]) -> None:
    report.downloaded_bytes = sum(f.size for f in fetched if not f.cached)
    report.cached_archives = sum(1 for f in fetched if f.cached)
    report.streamed_archives = sum(1 for f in fetched if not f.cached and not f.size)


def _build_and_swap(plan: InstallPlan, paths: transaction.Paths, pkgs_dir: Path,
                    env: Mapping[str, str], engine: str, conda: Path | None,
                    policy: RetryPolicy | None, report: InstallReport, stream: bool = True,
                    log: Log = print) -> None:
    staging, target, work = paths.staging, paths.target, paths.work
    work.mkdir(exist_ok=True)
    started = time.monotonic()
    cache = pkgs_dir / "rattler"
    if engine == "conda":
        fetched = fetch_all(_downloads(plan, pkgs_dir), policy)
        report.phases["download+verify"] = time.monotonic() - started
    else:
        got = fetch_and_extract(plan, pkgs_dir, cache, policy, stream=stream, log=log)
        fetched = got.fetched
        report.phases["download+verify+extract"] = time.monotonic() - started
    _count(report, fetched)
    started = time.monotonic()
    if engine == "conda":
        assert conda is not None
        from gpu_ci.conda.lockfile import render_explicit

        explicit = work / "explicit.txt"
        explicit.write_text(render_explicit(plan))
        link_with_conda(conda, plan, staging, {**env, "CONDA_PKGS_DIRS": str(pkgs_dir)},
                        explicit)
    else:
        try:
            link_with_rattler(plan, fetched, got.shas, staging, target, cache, got.facts)
        except DiskError:
            raise
        except GpuCiError:
            if all(not f.cached for f in fetched):
                raise
            # A trusted entry was not usable after all: fetch and verify every archive,
            # extract each again, and link once more.
            shutil.rmtree(staging, ignore_errors=True)
            got = fetch_and_extract(plan, pkgs_dir, cache, policy, trust=False)
            fetched = got.fetched
            link_with_rattler(plan, fetched, got.shas, staging, target, cache, got.facts)
            _count(report, fetched)
    report.phases["link"] = time.monotonic() - started
    crash_point("link")
    if plan.pip:
        started = time.monotonic()
        _pip(plan, staging, target, env, work)
        report.phases["pip"] = time.monotonic() - started
    (staging / "conda-meta").mkdir(exist_ok=True)
    (staging / MARKER).write_text(json.dumps(marker(plan)))
    transaction.swap(paths, lambda: crash_point("swap"))
    transaction.finish(paths)
    shutil.rmtree(work, ignore_errors=True)


__all__ = ["DiskError", "InstallReport", "check_writable", "install", "marker",
           "marker_matches"]
