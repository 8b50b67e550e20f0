"""pixi.lock → install plan for one environment and platform.

py-rattler reads the lock (format versions 5, 6 and 7): environments, platforms, conda
records and the packages pixi builds from source. Its Python API does not expose a PyPI
entry's sha256 or editable flag, so those are read from the same YAML, keyed by location,
where the environment has PyPI packages (the safe loader costs ~40 ms for 600 packages).
The result is the :class:`~gpu_ci.conda.lockfile.InstallPlan` every lock becomes: the conda
packages go through the same verified install.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from gpu_ci.conda import lockfile, lockyaml, virtual
from gpu_ci.conda.lockfile import CondaEntry, InstallPlan, PipEntry
from gpu_ci.errors import GpuCiError
from gpu_ci.urls import mask_url

VERSIONS = (5, 6, 7)
VCS = ("git", "hg", "svn", "bzr")
"""Version-control sources of PyPI entries (pip's schemes): never fetched."""
REWRITES = "pixi 0.68 or later (`pixi lock` writes format version 7)"
"""What rewrites an older lock: pixi 0.68.0 (2026-05-07) moved the format to version 7."""


def is_pixi(path: str, text: str) -> bool:
    """A pixi lock: named ``pixi.lock``, or shaped like one."""
    return lockfile.pixi_named(path) or lockfile.detect_kind(text) == "pixi"


def require_rattler() -> Any:
    """py-rattler, or an error saying it needs Python 3.10 or later."""
    try:
        import rattler
    except ImportError:
        raise GpuCiError(
            "reading a pixi.lock needs py-rattler, which needs Python >= 3.10 (this is "
            f"Python {sys.version_info[0]}.{sys.version_info[1]}): add actions/setup-python "
            "(3.12) before this action, or use a conda-lock lock."
        ) from None
    return rattler


def _check_version(text: str, path: str) -> None:
    """Refuse a format version this action does not read, naming the fix."""
    match = re.search(r"^version:[ \t]*(\S*)", text, re.MULTILINE)
    value = match.group(1).strip("'\"") if match else ""
    if not value.isdigit():
        raise GpuCiError(f"{path}: its format version {value!r} is not a number. Re-lock it.")
    version = int(value)
    if version < VERSIONS[0]:
        raise GpuCiError(
            f"{path} is pixi.lock format version {version}, which this action does not read "
            f"(it reads {', '.join(map(str, VERSIONS))}): rewrite it with {REWRITES} and "
            "commit it.",
            title="old pixi.lock",
        )
    if version > VERSIONS[-1]:
        raise GpuCiError(
            f"{path} is pixi.lock format version {version}, newer than this action reads "
            f"({', '.join(map(str, VERSIONS))}): update gpu-ci-actions.",
            title="new pixi.lock",
        )


def _document(text: str, path: str) -> dict[str, Any]:
    """The lock's YAML, safely loaded: only a lock with PyPI packages needs it."""
    doc = lockyaml.load_yaml(text, path)
    if not isinstance(doc, dict) or not isinstance(doc.get("environments"), dict):
        raise GpuCiError(f"{path}: a pixi.lock needs an 'environments' mapping. Re-lock it.")
    return doc


def _pypi_details(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each PyPI entry of the ``packages`` list by location (v5: ``url``/``path``).

    rattler gives a ``file:`` URL's location as its path: the entry is found by both, so
    such a wheel keeps its hash (and is checked against it)."""
    found: dict[str, dict[str, Any]] = {}
    for item in doc.get("packages") or ():
        if not isinstance(item, dict):
            continue
        if "pypi" in item:
            location = str(item["pypi"])
        elif item.get("kind") == "pypi":
            location = str(item.get("url") or item.get("path") or "")
        else:
            continue
        found[location] = item
        if location.startswith("file:"):
            found.setdefault(_file_path(location), item)
        elif "://" in location:
            found.setdefault(_normal_url(location), item)
    return found


def _normal_url(url: str) -> str:
    """``url`` as rattler writes it: host in lower case, no default port, no dot segments.

    A lock written by hand may spell a URL otherwise; its entry must still be found (else
    its sha256 would read as missing)."""
    import posixpath
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return url
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    if port is not None and (scheme, port) not in (("https", 443), ("http", 80)):
        host = f"{host}:{port}"
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@{host}" if userinfo else host
    path = parts.path
    if "/." in path:
        path = posixpath.normpath(path) + ("/" if path.endswith("/") else "")
    return urlunsplit((scheme, netloc, path, parts.query, parts.fragment))


def _file_path(url: str) -> str:
    """A ``file:`` URL's local path, as rattler gives it."""
    from urllib.parse import urlsplit
    from urllib.request import url2pathname

    return url2pathname(urlsplit(url).path)


def _hex(value: bytes | None) -> str:
    return value.hex() if value else ""


def _pip_entry(pkg: Any, details: dict[str, Any], lock_dir: Path, where: str) -> PipEntry:
    """A PyPI entry: a hashed file, or a source from the checkout."""
    location = str(pkg.location)
    item = details.get(location) or details.get(_normal_url(location)) or {}
    name, version = str(pkg.name), str(item.get("version") or "")
    sha = str(item.get("sha256") or "").lower()
    vcs = re.match(r"(git|hg|svn|bzr)\+", location)
    if vcs:  # a repository elsewhere: refused by check_sources, with its reason
        return PipEntry(name, version, location, "", vcs.group(1))
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", location) and not location.startswith("file:"):
        if not sha:
            raise GpuCiError(
                f"{where}: PyPI package {name} ({mask_url(location)}) has no sha256 in the "
                "lock, so it cannot be checked; it is never installed unchecked. Re-lock it "
                "with a current pixi (it records one for every index package).",
                title="PyPI package without a hash",
            )
        return lockfile.pip_entry(name, version, location, sha, where)
    local = location[len("file://") :] if location.startswith("file://") else location
    path = os.path.normpath(lock_dir / local)
    if item.get("editable"):
        return PipEntry(name, version, location, "", "editable", path)
    if sha and Path(path).suffix == ".whl":  # a file: checked against its hash, as any
        entry = lockfile.pip_entry(name, version, Path(path).as_uri(), sha, where)
        return entry._replace(path=path)
    return PipEntry(name, version, location, sha, "path", path)


def _platform(env: Any, name: str, environment: str, path: str) -> Any:
    """The environment's lock platform of this name, or an error listing them."""
    platforms = env.platforms()
    for platform in platforms:
        if platform.name == name:
            return platform
    listed = ", ".join(
        p.name if p.name == str(p.subdir) else f"{p.name} (custom, subdir {p.subdir})"
        for p in sorted(platforms, key=lambda p: str(p.name))
    )
    raise GpuCiError(
        f"{path}: environment {environment!r} has no packages for platform {name!r}; it "
        f"locks {listed or 'none'}. Set platform to one of them (a custom platform is used "
        f"only when named), or add {name} to the workspace's platforms and re-lock.",
        title="platform not in the lock",
    )


def plan(text: str, path: str, environment: str, platform: str) -> InstallPlan:
    """One environment's packages for one platform, in the lock's order."""
    _check_version(text, path)
    rattler = require_rattler()
    try:
        lock = rattler.LockFile.from_path(path)
    except Exception as exc:  # rattler's parse errors: one exception type per cause
        raise GpuCiError(f"{path} cannot be read as a pixi.lock: {exc}. Re-lock it.") from None
    env = lock.environment(environment)
    if env is None:
        names = ", ".join(sorted(name for name, _ in lock.environments()))
        raise GpuCiError(
            f"{path} has no environment {environment!r}; it has {names or 'none'}. Set "
            "pixi-environment to one of them.",
            title="unknown pixi environment",
        )
    chosen = _platform(env, platform, environment, path)
    subdir = str(chosen.subdir)
    requirements = virtual.from_platform(chosen.virtual_packages, chosen.name)
    packages = env.packages(chosen) or ()
    # py-rattler does not expose a PyPI entry's sha256 or editable flag: the YAML does
    doc: dict[str, Any] = {}
    if any(isinstance(pkg, rattler.PypiLockedPackage) for pkg in packages):
        doc = _document(text, path)
    details = _pypi_details(doc)
    lock_dir = Path(os.path.abspath(path)).parent
    conda: list[CondaEntry] = []
    pip: list[PipEntry] = []
    left_out: list[str] = []
    for index, pkg in enumerate(packages):
        where = f"{path} environment {environment} ({chosen.name}) package {index + 1}"
        if isinstance(pkg, rattler.PypiLockedPackage):
            pip.append(_pip_entry(pkg, details, lock_dir, f"{where} ({pkg.name})"))
        elif isinstance(pkg, rattler.CondaLockedSourcePackage):
            left_out.append(f"{pkg.name} @ {pkg.location}")
        else:
            record = pkg.repo_data_record()
            name = record.name.normalized
            virtual.refuse_installed(name, f"{where} ({name})")
            requirements += virtual.from_specs(record.depends, name, True)
            requirements += virtual.from_specs(record.constrains, name, False)
            entry = lockfile.conda_entry(
                str(record.url),
                _hex(record.md5),
                _hex(record.sha256),
                record.depends,
                f"{where} ({name})",
            )
            lockfile.check_subdir(entry, subdir, where)
            if not entry.digest:
                raise GpuCiError(
                    f"{where}: {entry.filename} has no md5 or sha256; a lock without "
                    "hashes cannot be verified. Re-lock it."
                )
            conda.append(entry)
    body = (doc.get("environments") or {}).get(environment)
    indexes = (body.get("indexes") if isinstance(body, dict) else None) or ()
    return InstallPlan(
        "pixi",
        chosen.name,
        (),
        tuple(str(c) for c in env.channels()),
        tuple(conda),
        tuple(pip),
        lockfile.lock_sha256(text),
        environment=environment,
        requirements=tuple(requirements),
        left_out=tuple(left_out),
        indexes=tuple(str(i) for i in indexes),
    )


def check_sources(plan: InstallPlan, checkout: Path) -> None:
    """Refuse, before any download, PyPI sources that are not in the checkout.

    Every local entry counts, a hashed wheel too: the lock's author picks its hash, so a
    hash proves nothing about a file elsewhere on a shared runner (another job's build, a
    cache). Symbolic links are followed before the check."""
    root = checkout.resolve()
    for entry in plan.pip:
        if entry.source in VCS:
            raise GpuCiError(
                f"PyPI package {entry.name} comes from {entry.source} "
                f"({mask_url(entry.url)}): it is not in the checkout, and this action never "
                "fetches or builds a source "
                "from elsewhere. Build a wheel and lock it, or check the source out "
                "beside the lock and lock it as a path.",
                title="PyPI source not in the checkout",
            )
        if entry.path:  # an editable, a path, or a hashed file on this machine
            where = Path(entry.path).resolve()
            if where != root and root not in where.parents:
                raise GpuCiError(
                    f"PyPI package {entry.name} is locked at {entry.url}, i.e. {where}, "
                    f"outside the checkout {root}: only sources in the checkout are installed.",
                    title="PyPI source not in the checkout",
                )
            if not where.exists():
                raise GpuCiError(
                    f"PyPI package {entry.name} is locked at {entry.url}, but {where} does "
                    "not exist: check out the repository (with its submodules) first.",
                    title="PyPI source not in the checkout",
                )
