"""Create a conda environment from an install plan, atomically.

The conda packages are linked by py-rattler into a staging sibling of the target prefix,
with the *target* path written into their prefix placeholders; the staging directory then
replaces the target by rename. Pip entries are installed into the result with its own
interpreter (``--no-deps``, exact URLs, hashes required). Any failure restores the target
exactly as it was. A marker records which lock the prefix holds, so that the same lock a
second time is a no-op (``reused``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_ci.conda.lockfile import CondaEntry, InstallPlan
from gpu_ci.downloads import Download, Fetched, RetryPolicy, fetch_all
from gpu_ci.errors import GpuCiError
from gpu_ci.urls import mask_url

MARKER = "conda-meta/gpu-ci-lock.json"


@dataclass
class InstallReport:
    reused: bool = False
    downloaded_bytes: int = 0
    cached_archives: int = 0
    phases: dict[str, float] = field(default_factory=dict)


def marker_matches(prefix: Path, plan: InstallPlan) -> bool:
    try:
        data = json.loads((prefix / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return bool(data == marker(plan))


def marker(plan: InstallPlan) -> dict[str, object]:
    return {"lock_sha256": plan.lock_sha256, "platform": plan.platform,
            "categories": list(plan.categories)}


def _downloads(plan: InstallPlan, pkgs_dir: Path) -> list[Download]:
    return [Download(e.url, pkgs_dir / "archives" / e.filename,
                     f"{e.name} {e.version} ({e.build})", e.sha256, e.md5)
            for e in plan.conda]


SHA_MARKER = ".gpu-ci-archive-sha256"


def _noop(_: int) -> None:
    return None


def _extract(archive: str, dest: str, digest: str) -> None:
    """Extract one verified archive into rattler's cache layout, atomically.

    Runs in a worker process: rattler's extractor holds the GIL, so threads would not
    extract in parallel. The directory appears under its final name only when complete, and
    records the archive's digest, so a cache entry from another archive is never reused.
    """
    from rattler.package_streaming import extract

    target = Path(dest)
    marker = target / SHA_MARKER
    if marker.exists() and marker.read_text() == digest:
        return
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    extract(Path(archive), tmp)
    (tmp / SHA_MARKER).write_text(digest)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)


def _trusted(plan: InstallPlan, cache: Path) -> set[int]:
    """Entries whose extracted cache directory is complete and came from an archive with the
    lock's digest: ``_extract`` writes the digest last and renames the directory into place,
    so its presence proves both. Their archives are neither fetched nor hashed again (the
    warm case spent most of its time re-hashing archives), and need not be kept at all."""
    out = set()
    for i, entry in enumerate(plan.conda):
        digest = entry.sha256 or entry.md5
        marker = cache / f"{entry.name}-{entry.version}-{entry.build}" / SHA_MARKER
        try:
            if digest and marker.read_text() == digest:
                out.add(i)
        except OSError:
            pass
    return out


def fetch_and_extract(plan: InstallPlan, pkgs_dir: Path, cache: Path,
                      policy: RetryPolicy | None) -> list[Fetched]:
    """Download and verify on threads; extract each verified archive at once, in worker
    processes, while the others are still downloading. Nothing is extracted unverified."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed

    from gpu_ci.downloads import fetch

    items = _downloads(plan, pkgs_dir)
    if not items:
        return []
    cache.mkdir(parents=True, exist_ok=True)
    trusted = _trusted(plan, cache)
    if len(trusted) == len(items):  # all extracted already: no pool, no download, no hash
        return [Fetched(item, 0, True, 0) for item in items]
    workers = max(1, min(os.cpu_count() or 2, len(items)))
    # fork is cheap and safe on Linux (workers start before any thread exists); macOS and
    # Windows use spawn, as Python does by default there.
    context = multiprocessing.get_context("fork" if sys.platform.startswith("linux")
                                          else "spawn")
    policy = policy or RetryPolicy()
    with ProcessPoolExecutor(workers, mp_context=context) as procs:
        # Start every worker now, before any download thread exists: forking a process
        # that has threads can deadlock the child.
        list(procs.map(_noop, range(workers)))
        results: dict[int, Fetched] = {}
        extractions = []
        error: BaseException | None = None
        # Two download threads per core, at most 8: more threads than that on a small
        # runner convoy on the GIL with the extraction feeders (measured on 2 cores: 8
        # threads 0.47-1.43 s for 150 packages, 4 threads a steady 0.44 s).
        with ThreadPoolExecutor(min(8, 2 * (os.cpu_count() or 2), len(items))) as threads:
            futures = {threads.submit(fetch, item, policy): i for i, item in enumerate(items)
                       if i not in trusted}
            results.update({i: Fetched(items[i], 0, True, 0) for i in trusted})
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
                extractions.append((entry, procs.submit(
                    _extract, str(got.download.dest),
                    str(cache / f"{entry.name}-{entry.version}-{entry.build}"), digest)))
        for entry, job in extractions:
            try:
                job.result()
            except Exception as exc:
                error = error or GpuCiError(
                    f"extracting {entry.filename} failed although its hash matched the lock "
                    f"({type(exc).__name__}: {exc}).")
    if error is not None:
        raise error
    return [results[i] for i in range(len(items))]


def _records(entries: list[CondaEntry], fetched: list[Fetched]) -> list[Any]:
    import rattler

    records = []
    for entry, got in zip(entries, fetched):
        record = rattler.PackageRecord(
            entry.name, entry.version, rattler.BuildString(entry.build), entry.build_number,
            entry.subdir or "noarch", depends=list(entry.depends),
            sha256=bytes.fromhex(entry.sha256) if entry.sha256 else None,
            md5=bytes.fromhex(entry.md5) if entry.md5 else None, size=got.size or None)
        # The lock's URL, masked: rattler writes it into conda-meta as is, and never fetches
        # it (every package is in the cache already, extracted by fetch_and_extract).
        records.append(rattler.RepoDataRecord(record, entry.filename, mask_url(entry.url),
                                              mask_url(entry.channel)))
    return records


def link_with_rattler(plan: InstallPlan, fetched: list[Fetched], staging: Path,
                      target: Path, cache: Path) -> None:
    import asyncio

    import rattler

    entries = list(plan.conda)
    # The cache already holds every package, extracted by fetch_and_extract; rattler checks
    # the files are there ("fast") and links them.
    package_cache = rattler.PackageCache.new_layered(
        [str(cache)], validation_mode=rattler.ValidationMode.fast())
    try:
        asyncio.run(rattler.install(
            _records(entries, fetched), target_prefix=str(staging),
            alternative_target_prefix=str(target), package_cache=package_cache,
            show_progress=False, execute_link_scripts=False))
    except Exception as exc:
        raise GpuCiError(f"linking the environment failed: {exc}") from None


def link_with_conda(conda: Path, plan: InstallPlan, staging: Path, env: Mapping[str, str],
                    explicit_file: Path) -> None:
    proc = subprocess.run([str(conda), "create", "--yes", "--quiet", "--offline",
                           "--prefix", str(staging), "--file", str(explicit_file)],
                          env=dict(env), capture_output=True, text=True)
    if proc.returncode != 0:
        tail = mask_url((proc.stderr or proc.stdout).strip()[-2000:])
        raise GpuCiError(f"conda create failed (exit {proc.returncode}): {tail}")


def _pip(plan: InstallPlan, prefix: Path, env: Mapping[str, str], work: Path) -> None:
    python = prefix / "bin" / "python"
    if not python.exists():
        raise GpuCiError(f"the lock has {len(plan.pip)} pip entries but the environment has no "
                         "python to install them with: add python (and pip) to the lock.")
    requirements = work / "pip-requirements.txt"
    requirements.write_text("".join(f"{p.name} @ {p.url} --hash=sha256:{p.sha256}\n"
                                    for p in plan.pip))
    pip_env = {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
               "PIP_NO_INPUT": "1"}
    proc = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index",
                           "--require-hashes", "--no-cache-dir", "-r", str(requirements)],
                          env=pip_env, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = mask_url((proc.stderr or proc.stdout).strip()[-2000:])
        raise GpuCiError(f"installing the lock's pip entries failed (exit {proc.returncode}): "
                         f"{tail}")


def require_rattler() -> None:
    try:
        import rattler  # noqa: F401
    except ImportError:
        raise GpuCiError("engine: rattler needs py-rattler, which needs Python >= 3.10 for "
                         "gpu-ci itself: add actions/setup-python (3.12) before this action, or "
                         "use engine: conda.") from None


def install(plan: InstallPlan, target: Path, pkgs_dir: Path, env: Mapping[str, str], *,
            engine: str = "rattler", conda: Path | None = None,
            policy: RetryPolicy | None = None) -> InstallReport:
    report = InstallReport()
    if marker_matches(target, plan):
        report.reused = True
        return report
    if engine == "rattler":
        require_rattler()
    target.parent.mkdir(parents=True, exist_ok=True)
    pkgs_dir.mkdir(parents=True, exist_ok=True)
    stamp = f"{os.getpid()}-{time.monotonic_ns()}"
    staging = target.with_name(f".{target.name}.gpu-ci-new-{stamp}")
    backup = target.with_name(f".{target.name}.gpu-ci-old-{stamp}")
    work = pkgs_dir / f".work-{stamp}"
    work.mkdir()
    moved_old = placed = False
    try:
        started = time.monotonic()
        cache = pkgs_dir / "rattler"
        if engine == "conda":
            fetched = fetch_all(_downloads(plan, pkgs_dir), policy)
            report.phases["download+verify"] = time.monotonic() - started
        else:
            fetched = fetch_and_extract(plan, pkgs_dir, cache, policy)
            report.phases["download+verify+extract"] = time.monotonic() - started
        report.downloaded_bytes = sum(f.size for f in fetched if not f.cached)
        report.cached_archives = sum(1 for f in fetched if f.cached)
        started = time.monotonic()
        if engine == "conda":
            if conda is None:
                raise GpuCiError("engine: conda needs miniforge: true (a writable conda).")
            from gpu_ci.conda.lockfile import render_explicit

            explicit = work / "explicit.txt"
            explicit.write_text(render_explicit(plan))
            link_with_conda(conda, plan, staging, {**env, "CONDA_PKGS_DIRS": str(pkgs_dir)},
                            explicit)
            report.phases["link"] = time.monotonic() - started
        else:
            link_with_rattler(plan, fetched, staging, target, cache)
            report.phases["link"] = time.monotonic() - started
        if target.exists():
            os.rename(target, backup)
            moved_old = True
        os.rename(staging, target)
        placed = True
        if plan.pip:
            started = time.monotonic()
            _pip(plan, target, env, work)
            report.phases["pip"] = time.monotonic() - started
        (target / MARKER).write_text(json.dumps(marker(plan)))
    except BaseException:
        if placed:  # the new environment is incomplete: take it away again
            shutil.rmtree(target, ignore_errors=True)
        if moved_old:  # and put the old one back exactly as it was
            os.rename(backup, target)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
        if backup.exists() and target.exists() and marker_matches(target, plan):
            shutil.rmtree(backup, ignore_errors=True)
    return report
