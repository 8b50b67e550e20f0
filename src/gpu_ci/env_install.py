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

from gpu_ci.downloads import Download, Fetched, RetryPolicy, fetch_all
from gpu_ci.errors import GpuCiError
from gpu_ci.lockfile import CondaEntry, InstallPlan, mask_url

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
    return data == marker(plan)


def marker(plan: InstallPlan) -> dict[str, object]:
    return {"lock_sha256": plan.lock_sha256, "platform": plan.platform,
            "categories": list(plan.categories)}


def _downloads(plan: InstallPlan, pkgs_dir: Path) -> list[Download]:
    return [Download(e.url, pkgs_dir / "archives" / e.filename,
                     f"{e.name} {e.version} ({e.build})", e.sha256, e.md5)
            for e in plan.conda]


def _records(entries: list[CondaEntry], fetched: list[Fetched]):
    import rattler

    records = []
    for entry, got in zip(entries, fetched):
        record = rattler.PackageRecord(
            entry.name, entry.version, rattler.BuildString(entry.build), entry.build_number,
            entry.subdir or "noarch", depends=list(entry.depends),
            sha256=bytes.fromhex(entry.sha256) if entry.sha256 else None,
            md5=bytes.fromhex(entry.md5) if entry.md5 else None, size=got.size)
        records.append(rattler.RepoDataRecord(record, entry.filename,
                                              got.download.dest.resolve().as_uri(),
                                              entry.channel))
    return records


def _restore_urls(staging: Path, entries: list[CondaEntry]) -> None:
    """conda-meta should name where a package came from, not our local cache file."""
    by_file = {e.filename: e for e in entries}
    for path in (staging / "conda-meta").glob("*.json"):
        data = json.loads(path.read_text())
        entry = by_file.get(str(data.get("fn") or ""))
        if entry is None:
            continue
        data["url"] = mask_url(entry.url)
        data["channel"] = mask_url(entry.channel)
        path.write_text(json.dumps(data, indent=2))


def link_with_rattler(plan: InstallPlan, fetched: list[Fetched], staging: Path,
                      target: Path, cache: Path) -> None:
    import asyncio

    try:
        import rattler
    except ImportError:
        raise GpuCiError("engine: rattler needs py-rattler, which needs Python >= 3.10 for "
                         "gpu-ci itself: add actions/setup-python (3.12) before this action, or "
                         "use engine: conda.") from None

    entries = list(plan.conda)
    try:
        asyncio.run(rattler.install(
            _records(entries, fetched), target_prefix=str(staging),
            alternative_target_prefix=str(target), cache_dir=str(cache),
            show_progress=False, execute_link_scripts=False))
    except Exception as exc:
        raise GpuCiError(f"linking the environment failed: {exc}") from None
    _restore_urls(staging, entries)


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


def install(plan: InstallPlan, target: Path, pkgs_dir: Path, env: Mapping[str, str], *,
            engine: str = "rattler", conda: Path | None = None,
            policy: RetryPolicy | None = None) -> InstallReport:
    report = InstallReport()
    if marker_matches(target, plan):
        report.reused = True
        return report
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
        fetched = fetch_all(_downloads(plan, pkgs_dir), policy)
        report.phases["download+verify"] = time.monotonic() - started
        report.downloaded_bytes = sum(f.size for f in fetched if not f.cached)
        report.cached_archives = sum(1 for f in fetched if f.cached)
        started = time.monotonic()
        if engine == "conda":
            if conda is None:
                raise GpuCiError("engine: conda needs miniforge: true (a writable conda).")
            from gpu_ci.lockfile import render_explicit

            explicit = work / "explicit.txt"
            explicit.write_text(render_explicit(plan))
            link_with_conda(conda, plan, staging, {**env, "CONDA_PKGS_DIRS": str(pkgs_dir)},
                            explicit)
        else:
            link_with_rattler(plan, fetched, staging, target, pkgs_dir / "rattler")
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
