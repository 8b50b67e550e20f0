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


MD5_SIDECAR = ".gpu-ci-md5"
"""Next to rattler's ``<name>-<version>-<build>.lock``: ``<md5> <sha256>`` of the archive we
verified against an md5-only lock entry, so that the next run can trust the cache entry."""


def _dirname(entry: CondaEntry) -> str:
    return f"{entry.name}-{entry.version}-{entry.build}"


def rattler_cache_sha256(cache: Path, dirname: str) -> str:
    """The archive sha256 rattler's package cache recorded for an extracted package, '' when
    none: its ``<dirname>.lock`` holds an 8-byte revision, then the 32-byte sha256 of the
    archive it extracted. (A future layout reads as '': we then fetch, never trust.)"""
    try:
        raw = (cache / f"{dirname}.lock").read_bytes()
    except OSError:
        return ""
    return raw[8:40].hex() if len(raw) >= 40 and (cache / dirname).is_dir() else ""


def trusted_sha256(entry: CondaEntry, cache: Path) -> str:
    """sha256 of the lock's archive when rattler's cache already holds its extraction, else
    ''. Such an entry is neither fetched nor hashed again: the warm case used to spend most
    of its time re-hashing archives. rattler checks the same sha256 before linking it."""
    dirname = _dirname(entry)
    have = rattler_cache_sha256(cache, dirname)
    if not have:
        return ""
    if entry.sha256:
        return have if have == entry.sha256 else ""
    try:
        md5, sha256 = (cache / f"{dirname}{MD5_SIDECAR}").read_text().split()
    except (OSError, ValueError):
        return ""
    return have if (md5, sha256) == (entry.md5, have) else ""


def fetch_missing(plan: InstallPlan, pkgs_dir: Path, cache: Path, policy: RetryPolicy | None,
                  trust: bool = True) -> tuple[list[Fetched], list[str]]:
    """Download and verify (on threads, kept-alive connections) every archive whose
    extraction the cache lacks (every archive when ``trust`` is off); returns each entry's
    Fetched and archive sha256."""
    from gpu_ci.downloads import file_digest

    items = _downloads(plan, pkgs_dir)
    shas = [trusted_sha256(entry, cache) if trust else "" for entry in plan.conda]
    todo = [item for item, sha in zip(items, shas) if not sha]
    # Two threads per core, at most 8: measured on 2 cores, 4 threads fetch as fast as 8
    # over kept-alive connections (150 packages: 0.13 s and 0.11 s), but from a server that
    # closes every connection 8 threads took 1.05 s against 0.24 s (they overflow a small
    # listen backlog, and each refused connection waits a second for its retry).
    got = iter(fetch_all(todo, policy, workers=min(8, 2 * (os.cpu_count() or 2))))
    fetched = [Fetched(item, 0, True, 0) if sha else next(got) for item, sha in zip(items, shas)]
    for i, entry in enumerate(plan.conda):
        if not shas[i]:  # rattler checks its cache by sha256: give it one for md5-only locks
            shas[i] = entry.sha256 or fetched[i].sha256 or file_digest(
                fetched[i].download.dest, "sha256")
    return fetched, shas


def _records(entries: list[CondaEntry], fetched: list[Fetched], shas: list[str]) -> list[Any]:
    import rattler

    records = []
    for entry, got, sha in zip(entries, fetched, shas):
        record = rattler.PackageRecord(
            entry.name, entry.version, rattler.BuildString(entry.build), entry.build_number,
            entry.subdir or "noarch", depends=list(entry.depends), sha256=bytes.fromhex(sha),
            md5=bytes.fromhex(entry.md5) if entry.md5 else None, size=got.size or None)
        # Our verified archive, which rattler extracts into its cache (checking the sha256
        # again) unless its cache holds it already. For a trusted entry the archive may be
        # absent: rattler then fails rather than fetch anything past our mirrors and checks.
        records.append(rattler.RepoDataRecord(record, entry.filename,
                                              got.download.dest.absolute().as_uri(),
                                              mask_url(entry.channel)))
    return records


def _restore_urls(staging: Path, entries: list[CondaEntry], records: list[Any]) -> None:
    """conda-meta names where a package came from, not our local archive: a plain string
    replacement of the JSON-encoded URL, on threads (re-encoding every file with indent took
    0.3 s at 150 packages; one thread 0.12 s at 600)."""
    from concurrent.futures import ThreadPoolExecutor

    def restore(pair: tuple[CondaEntry, Any]) -> None:
        entry, record = pair
        path = staging / "conda-meta" / f"{_dirname(entry)}.json"
        text = path.read_text()
        new = text.replace(json.dumps(str(record.url)), json.dumps(mask_url(entry.url)), 1)
        if new == text:  # written some other way: decode and encode the file
            data = json.loads(text)
            data["url"] = mask_url(entry.url)
            new = json.dumps(data, indent=2)
        path.write_text(new)

    with ThreadPoolExecutor(min(8, 2 * (os.cpu_count() or 2))) as pool:
        list(pool.map(restore, zip(entries, records)))


def link_with_rattler(plan: InstallPlan, fetched: list[Fetched], shas: list[str],
                      staging: Path, target: Path, cache: Path,
                      phases: dict[str, float] | None = None) -> None:
    """rattler extracts what its cache lacks (from our verified archives, on its own
    threads: measured faster than our process pool) and links everything."""
    import asyncio

    import rattler

    entries = list(plan.conda)
    records = _records(entries, fetched, shas)
    package_cache = rattler.PackageCache.new_layered(
        [str(cache)], validation_mode=rattler.ValidationMode.fast())
    started = time.monotonic()
    try:
        asyncio.run(rattler.install(
            records, target_prefix=str(staging), alternative_target_prefix=str(target),
            package_cache=package_cache, show_progress=False, execute_link_scripts=False))
    except Exception as exc:
        raise GpuCiError(f"extracting or linking the environment failed: {exc}") from None
    if phases is not None:
        phases["extract+link: rattler.install"] = time.monotonic() - started
    started = time.monotonic()
    _restore_urls(staging, entries, records)
    if phases is not None:
        phases["extract+link: conda-meta URLs"] = time.monotonic() - started
    for entry, sha in zip(entries, shas):
        if entry.sha256:
            continue
        sidecar = cache / f"{_dirname(entry)}{MD5_SIDECAR}"
        line = f"{entry.md5} {sha}\n"
        try:
            if sidecar.read_text() == line:
                continue
        except OSError:
            pass
        part = sidecar.with_name(f"{sidecar.name}.{os.getpid()}")
        part.write_text(line)
        os.replace(part, sidecar)


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
            fetched, shas = fetch_missing(plan, pkgs_dir, cache, policy)
            report.phases["download+verify"] = time.monotonic() - started
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
            try:
                link_with_rattler(plan, fetched, shas, staging, target, cache, report.phases)
            except GpuCiError:
                if all(not f.cached for f in fetched):
                    raise
                # A trusted cache entry was not usable after all (e.g. files removed from
                # it): fetch and verify every archive, and let rattler extract them again.
                shutil.rmtree(staging, ignore_errors=True)
                fetched, shas = fetch_missing(plan, pkgs_dir, cache, policy, trust=False)
                link_with_rattler(plan, fetched, shas, staging, target, cache)
            report.phases["extract+link"] = time.monotonic() - started
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
