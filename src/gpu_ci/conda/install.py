"""Create a conda environment from an install plan: all or nothing, one job per prefix.

The order is what makes it safe (see ``transaction`` for the locks and the journal):

1. lock the prefix; finish or roll back what a killed run left; sweep dead writers' files;
2. if the prefix already holds this lock *and* its files match its records: ``reused``;
3. check, before any download, that the prefix's directory and the package cache are
   writable and that the prefix can be renamed (not a mount point);
4. fill the package cache with every package of the plan, each verified by this host
   (``fetch``: trusted by its stamp, hashed, streamed by rattler's client, or downloaded by
   ours), entries appearing by atomic rename under their lock only;
5. link with py-rattler into a staging sibling, the final path written into prefix
   placeholders, each ``conda-meta`` record built from the package's own ``index.json``;
   rattler's client refuses every request, so it links only what we verified;
6. install the PyPI entries into staging (``pypi``), then rewrite the staging path in the
   scripts they wrote; write the marker;
7. swap staging into place (two renames, journalled); drop the old environment.

Any failure, and the next run after a ``kill -9``, leaves the old environment or the new
one, complete, and none of our temporary files.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from gpu_ci.conda import pypi, transaction, verified
from gpu_ci.conda.fetch import (
    MD5_SIDECAR,
    SHA_MARKER,
    Ahead,
    Fetching,
    Log,
    download_all,
    entry_dir,
    fetch_and_extract,
    named_disk_error,
    named_disk_error_in,
    plan_downloads,
)
from gpu_ci.conda.integrity import environment_problems
from gpu_ci.conda.lockfile import CondaEntry, InstallPlan
from gpu_ci.conda.options import MARKER, is_environment
from gpu_ci.disk import DiskError, as_disk_error, probe_writable, require_space
from gpu_ci.downloads import TOKEN, Fetched
from gpu_ci.errors import GpuCiError
from gpu_ci.faults import crash_point
from gpu_ci.retry import RetryPolicy
from gpu_ci.urls import mask_url


class InstallReport:
    """What an install did, for the outputs and the job summary.

    A plain class, not a dataclass: creating a dataclass costs ~1 ms of every run's
    start-up on Python 3.11."""

    __slots__ = (
        "reused",
        "downloaded_bytes",
        "cached_archives",
        "streamed_archives",
        "recovered",
        "phases",
        "pip_installer",
    )

    def __init__(
        self,
        reused: bool = False,
        downloaded_bytes: int = 0,
        cached_archives: int = 0,
        streamed_archives: int = 0,
        recovered: str = "",
        phases: dict[str, float] | None = None,
    ) -> None:
        self.reused = reused
        self.downloaded_bytes = downloaded_bytes
        self.cached_archives = cached_archives
        self.streamed_archives = streamed_archives
        """Fetched by rattler's client straight into the cache: their size is not reported."""
        self.recovered = recovered
        """What was finished or rolled back from an interrupted earlier run ('' if nothing)."""
        self.phases: dict[str, float] = {} if phases is None else phases
        self.pip_installer = ""
        """What installed the PyPI packages: ``uv``, ``pip``, or '' (none)."""

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"InstallReport({fields})"


def marker(plan: InstallPlan) -> dict[str, object]:
    """What the marker records: the lock, and what was picked from it."""
    found: dict[str, object] = {
        "lock_sha256": plan.lock_sha256,
        "platform": plan.platform,
        "categories": list(plan.categories),
        "conda_records": len(plan.conda),
    }
    if plan.environment:
        found["pixi_environment"] = plan.environment
    return found


def marker_matches(prefix: Path, plan: InstallPlan) -> bool:
    try:
        data = json.loads((prefix / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return bool(data == marker(plan))


# -- linking ------------------------------------------------------------------------------


def _records(
    entries: Sequence[CondaEntry], fetched: Sequence[Fetched], shas: Sequence[str], cache: Path
) -> list[Any]:
    """Repodata records from each package's own ``info/index.json`` (not from the lock:
    an explicit lock has no dependencies, and a build string does not give the build
    number), with the archive's size and both digests, as a channel's repodata has them (an
    entry trusted without its archive has no size, and an md5 only when the lock has one).
    URL and channel are the lock's, credentials masked: rattler writes them into conda-meta
    as they are (it never downloads them, see ``streams.CLIENT.refusing``)."""
    import rattler

    records = []
    base = os.fspath(cache) + os.sep  # a str path, not a Path: ~5 ms for 600 packages
    channels: dict[str, str] = {}  # a lock names few channels: each masked once
    for entry, got, sha in zip(entries, fetched, shas):
        index = f"{base}{entry.dist_name}/info/index.json"
        record = rattler.PackageRecord.from_index_json(
            index,  # type: ignore[arg-type]  # a str is as good (rattler's own example)
            size=got.size or None,
            sha256=sha or None,
            md5=got.md5 or entry.md5 or None,
        )
        if str(record.subdir) not in ("", entry.subdir) and entry.subdir:
            raise GpuCiError(
                f"{entry.filename} says it is for {record.subdir} in its "
                f"index.json, but the lock has it under {entry.subdir}."
            )
        channel = entry.channel
        masked = channels.get(channel)
        if masked is None:
            masked = channels[channel] = mask_url(channel.rstrip("/") + "/")
        records.append(rattler.RepoDataRecord(record, entry.filename, mask_url(entry.url), masked))
    return records


def _copied_bytes(
    entries: Sequence[CondaEntry],
    cache: Path,
    target_dir: Path,
    facts: Sequence[verified.Facts | None],
) -> int:
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
        items = verified.listed_paths(entry_dir(cache, entry))
        for item in items if not isinstance(items, str) else ():
            size = item.get("size_in_bytes")
            if (not same_device or item.get("prefix_placeholder")) and isinstance(size, int):
                total += size
    return total


def _silently_full(staging: Path) -> DiskError | None:
    """A full disk named, where rattler 0.28 reports an empty record.

    rattler 0.28 does not report a conda-meta record it could not write on a full disk:
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
    return as_disk_error(
        OSError(errno.ENOSPC, "No space left on device"), staging, "linking the environment"
    )


def _not_replaced(
    entries: Sequence[CondaEntry], cache: Path, facts: Sequence[verified.Facts | None]
) -> None:
    """Under the cache's shared lock: every entry still holds the archive this job verified
    (another job with another archive of the same name, version and build may have replaced
    it since; none can while the lock is held). Its stamp unchanged says so in one system
    call; else its digest marker is read (four)."""
    base = os.fspath(cache) + os.sep
    for i, entry in enumerate(entries):  # not zip: an entry past the facts is still checked
        path = base + entry.dist_name
        if i < len(facts) and verified.unchanged_stamp(path, facts[i]):
            continue
        try:
            same = verified.read_bytes(os.path.join(path, SHA_MARKER), 200) == entry.digest.encode()
        except OSError:
            same = False
        if not same:
            raise GpuCiError(
                f"the package cache entry of {entry.filename} was replaced by "
                "another job (with another archive of that name, version and "
                "build) after this job verified it; run the job again."
            )


def link_with_rattler(
    plan: InstallPlan,
    fetched: list[Fetched],
    shas: list[str],
    staging: Path,
    target: Path,
    cache: Path,
    facts: Sequence[verified.Facts | None] = (),
) -> None:
    import asyncio

    import rattler

    from gpu_ci.conda.integrity import link_path_problem
    from gpu_ci.conda.streams import CLIENT

    entries = list(plan.conda)
    facts = list(facts) or [None] * len(entries)
    escape = link_path_problem(cache, [e.dist_name for e in entries], facts)
    if escape:
        raise GpuCiError(
            f"refusing to link: {escape}. A conda package never needs that; the "
            "lock names a package that is broken or hostile.",
            title="package path outside the prefix",
        )
    require_space(
        target.parent,
        _copied_bytes(entries, cache, target.parent, facts),
        f"linking {len(entries)} packages into {target}",
    )
    # Every entry is either extracted just now from a verified archive or was checked
    # against its stamp or its paths.json (sizes and sha256) by extract_entry or valid_entry:
    # rattler need not validate it again.
    package_cache = rattler.PackageCache.new_layered(
        [str(cache)], validation_mode=rattler.ValidationMode.skip()
    )
    records = _records(entries, fetched, shas, cache)
    with transaction.shared(cache / transaction.ENTRIES_LOCK):
        _not_replaced(entries, cache, facts)
        try:
            with CLIENT.refusing() as client:  # rattler's client, refusing every request
                asyncio.run(
                    rattler.install(
                        records,
                        target_prefix=str(staging),
                        alternative_target_prefix=str(target),
                        package_cache=package_cache,
                        client=client,
                        show_progress=False,
                        execute_link_scripts=False,
                    )
                )
        except GpuCiError:
            raise
        except Exception as exc:
            named = named_disk_error(exc, staging, "linking the environment") or _silently_full(
                staging
            )
            if named is not None:
                raise named from None
            raise GpuCiError(f"linking the environment failed: {exc}") from None
    for entry, sha, got, fact in zip(entries, shas, fetched, facts):
        if entry.sha256 or not sha or got.cached:  # a cached one's sidecar gave its sha256
            continue
        _record_sha256(cache, entry, sha, fact)


def _record_sha256(cache: Path, entry: CondaEntry, sha: str, fact: verified.Facts | None) -> None:
    """An md5-locked archive's sha256, in a sidecar beside its entry."""
    sidecar = cache / f"{entry.dist_name}{MD5_SIDECAR}"
    # its stamp records the sha256 (a sidecar write per package cost a cold 600-package
    # install ~60 ms): one left from before is made to agree, none is made
    if fact is not None and fact.sha256 == sha and not os.path.lexists(sidecar):
        return
    line = f"{entry.md5} {sha}\n"
    with contextlib.suppress(OSError):  # raw: a FIFO planted there must not stop us
        if verified.read_bytes(os.fspath(sidecar), 200) == line.encode():
            return
    part = sidecar.with_name(f".{sidecar.name}.tmp-{TOKEN}")  # swept if we die
    try:
        part.write_text(line)
        os.replace(part, sidecar)
    except OSError as exc:
        part.unlink(missing_ok=True)
        named = as_disk_error(exc, cache, "recording the archive sha256")
        if named is not None:
            raise named from None
        # something else at its name (a directory): the next job fetches the archive


def link_with_conda(
    conda: Path, plan: InstallPlan, staging: Path, env: Mapping[str, str], explicit_file: Path
) -> None:
    proc = subprocess.run(
        [
            str(conda),
            "create",
            "--yes",
            "--quiet",
            "--offline",
            "--prefix",
            str(staging),
            "--file",
            str(explicit_file),
        ],
        env=dict(env),
        capture_output=True,
        text=True,
        preexec_fn=pypi.child_dies_with_us,
    )
    if proc.returncode != 0:
        tail = mask_url((proc.stderr or proc.stdout).strip()[-2000:])
        named = named_disk_error_in(tail, staging, "conda create")
        raise named or GpuCiError(f"conda create failed (exit {proc.returncode}): {tail}")


# -- the whole transaction ----------------------------------------------------------------


def require_rattler() -> None:
    """py-rattler and asyncio imported, outside the cyclic collector's sight.

    asyncio runs rattler's installer (rattler imports it only then). Imported as
    ``gpu_ci.__main__`` imports us, their ~130 ms of modules, classes and functions live as long
    as the process, so the cyclic collector does not traverse them while they are created, nor
    in each later collection (the records of a 600-package install trigger several): ~5-10 ms of
    a warm run."""
    import gc

    enabled = gc.isenabled()
    gc.disable()
    try:
        import asyncio  # noqa: F401

        import rattler  # noqa: F401
    except ImportError:
        raise GpuCiError(
            "engine: rattler needs py-rattler, which needs Python >= 3.10 for "
            "gpu-ci itself: add actions/setup-python (3.12) before this action, or "
            "use engine: conda."
        ) from None
    finally:
        if enabled:
            gc.freeze()
            gc.enable()


def preflight(paths: transaction.Paths, pkgs_dir: Path) -> None:
    """Fail before any download when the result cannot be put in place."""
    target = paths.target
    probe_writable(target.parent, f"creating the environment {target}")
    probe_writable(pkgs_dir, f"the package cache {pkgs_dir}")
    if target.exists() and os.path.ismount(target):
        raise GpuCiError(
            f"prefix {target} is a mount point: it cannot be replaced by a "
            "rename. Pass a directory inside it as prefix, e.g. "
            f"{target / 'env'}.",
            title="unsafe prefix",
        )
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
        raise (
            named
            or GpuCiError(
                f"cannot rename directories in {target.parent} "
                f"({exc.strerror}); choose another prefix."
            )
        ) from None


def check_writable(target: Path, pkgs_dir: Path) -> None:
    """``preflight`` for callers without the prefix lock. It only makes probes."""
    preflight(transaction.Paths(target), pkgs_dir)


def refuse_foreign(target: Path) -> None:
    """The last check of "never delete what we did not create".

    It runs under the prefix lock."""
    if (
        target.is_dir()
        and not target.is_symlink()
        and not is_environment(target)
        and any(target.iterdir())
    ):
        raise GpuCiError(
            f"prefix {target} exists, is not empty and is not a conda environment "
            "(no conda-meta with history or package records); it is left "
            "untouched. Pass a new or empty directory as prefix.",
            title="unsafe prefix",
        )


class Method(NamedTuple):
    """How an environment is built: the linker, and how archives are fetched.

    ``engine: conda`` links with ``conda`` (Miniforge's); rattler with py-rattler."""

    engine: str = "rattler"
    conda: Path | None = None
    fetching: Fetching = Fetching()


class _Job(NamedTuple):
    """One install: the plan, where it goes, its environment and method."""

    plan: InstallPlan
    paths: transaction.Paths
    pkgs_dir: Path
    env: Mapping[str, str]
    method: Method
    log: Log

    @property
    def cache(self) -> Path:
        return self.pkgs_dir / "rattler"


def install(
    plan: InstallPlan,
    target: Path,
    pkgs_dir: Path,
    env: Mapping[str, str],
    *,
    method: Method | None = None,
    log: Log = print,
) -> InstallReport:
    """``plan`` installed at ``target``, or reused when it is there and whole.

    Every download goes through ``method.fetching.downloader`` (the run's: mirrors,
    credentials, progress; else ``downloads.default()``)."""
    try:
        return _install(
            _Job(plan, transaction.Paths(target), pkgs_dir, env, method or Method(), log)
        )
    except OSError as exc:  # anywhere, the lock file and the journal included
        named = as_disk_error(exc, target.parent, f"installing {target}")
        if named is not None:
            raise named from None
        raise


def _install(job: _Job) -> InstallReport:
    report = InstallReport()
    plan, paths, log, engine = job.plan, job.paths, job.log, job.method.engine
    target = paths.target
    target.parent.mkdir(parents=True, exist_ok=True)
    with transaction.exclusive(paths.lock, f"the lock on {target}", log):
        report.recovered = transaction.recover(paths, log)
        transaction.sweep_cache(job.pkgs_dir, job.cache)
        if marker_matches(target, plan):
            problems = environment_problems(target, len(plan.conda))
            if not problems:
                report.reused = True
                return report
            log(
                f"setup-conda-from-lock: {target} holds this lock, but "
                f"{'; '.join(problems)}: installing it again."
            )
        refuse_foreign(target)
        if engine == "conda" and job.method.conda is None:
            raise GpuCiError("engine: conda needs miniforge: true (a writable conda).")
        # the cache's warm checks on another core while rattler is imported here
        with Ahead(plan, job.cache, engine == "rattler") as ahead:
            if engine == "rattler":
                require_rattler()
            try:
                preflight(paths, job.pkgs_dir)
                with transaction.registered(job.pkgs_dir):
                    transaction.begin(paths)
                    _build_and_swap(job, report, ahead)
            except BaseException:
                with contextlib.suppress(Exception):
                    transaction.recover(paths, lambda _: None)
                raise
    return report


def _count(report: InstallReport, fetched: Sequence[Fetched]) -> None:
    report.downloaded_bytes = sum(f.size for f in fetched if not f.cached)
    report.cached_archives = sum(1 for f in fetched if f.cached)
    report.streamed_archives = sum(1 for f in fetched if not f.cached and not f.size)


def _build_and_swap(job: _Job, report: InstallReport, ahead: Ahead | None) -> None:
    plan, paths = job.plan, job.paths
    staging, work = paths.staging, paths.work
    work.mkdir(exist_ok=True)
    if job.method.engine == "conda":
        _build_with_conda(job, report)
    else:
        _build_with_rattler(job, report, ahead)
    crash_point("link")
    if plan.pip:
        started = time.monotonic()
        report.pip_installer = pypi.install(plan, staging, paths.target, job.env, work)
        report.phases["pip"] = time.monotonic() - started
    (staging / "conda-meta").mkdir(exist_ok=True)
    (staging / MARKER).write_text(json.dumps(marker(plan)))
    transaction.swap(paths, lambda: crash_point("swap"))
    transaction.finish(paths)
    shutil.rmtree(work, ignore_errors=True)


def _build_with_conda(job: _Job, report: InstallReport) -> None:
    """Staging linked by Miniforge's conda from archives our downloader verified."""
    from gpu_ci.conda.lockfile import render_explicit

    plan, how, conda = job.plan, job.method.fetching, job.method.conda
    assert conda is not None
    started = time.monotonic()
    items = plan_downloads(plan, job.pkgs_dir)
    fetched = download_all(items, how.policy or RetryPolicy(), how.downloader)
    report.phases["download+verify"] = time.monotonic() - started
    _count(report, fetched)
    started = time.monotonic()
    explicit = job.paths.work / "explicit.txt"
    explicit.write_text(render_explicit(plan))
    env = {**job.env, "CONDA_PKGS_DIRS": str(job.pkgs_dir)}
    link_with_conda(conda, plan, job.paths.staging, env, explicit)
    report.phases["link"] = time.monotonic() - started


def _build_with_rattler(job: _Job, report: InstallReport, ahead: Ahead | None) -> None:
    """Staging linked by py-rattler from the verified cache.

    Where a trusted entry was not usable after all, every archive is fetched again."""
    plan, cache, staging, target = job.plan, job.cache, job.paths.staging, job.paths.target
    how = job.method.fetching
    started = time.monotonic()
    got = fetch_and_extract(plan, job.pkgs_dir, cache, how, log=job.log, ahead=ahead)
    report.phases["download+verify+extract"] = time.monotonic() - started
    _count(report, got.fetched)
    started = time.monotonic()
    try:
        link_with_rattler(plan, got.fetched, got.shas, staging, target, cache, got.facts)
    except DiskError:
        raise
    except GpuCiError:
        if all(not f.cached for f in got.fetched):
            raise
        # A trusted entry was not usable after all: fetch and verify every archive,
        # extract each again, and link once more.
        shutil.rmtree(staging, ignore_errors=True)
        got = fetch_and_extract(plan, job.pkgs_dir, cache, how, trust=False)
        link_with_rattler(plan, got.fetched, got.shas, staging, target, cache, got.facts)
        _count(report, got.fetched)
    report.phases["link"] = time.monotonic() - started


__all__ = [
    "DiskError",
    "InstallReport",
    "Method",
    "check_writable",
    "install",
    "marker",
    "marker_matches",
]
