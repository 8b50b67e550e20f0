"""Lock file text → install plan. Pure: no downloads, no files besides the text given.

Two formats are accepted, detected from content rather than the file name:

* explicit: ``@EXPLICIT`` followed by ``<url>#<md5>`` (or ``#sha256:<hex>``) lines, with an
  optional ``# platform:`` header and ``# pip <name> @ <url>#sha256=<hex>`` lines;
* unified: conda-lock's ``conda-lock.yml`` (format version 1 or 2, with or without the
  ``version`` key; ``category`` or ``categories`` per package).

The selection is ``conda-lock install``'s: the platform's entries whose categories meet
``main`` plus the categories asked for (``main`` is always included), each package once
(conda-lock 2 writes a package once per category it belongs to). A category the lock does
not have is an error that lists those it has, not an empty environment.

An ``environment.yml`` needs a solver and is refused with instructions to lock it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlsplit

from gpu_ci.conda.lockyaml import load_yaml
from gpu_ci.conda.lockyaml import yaml_loader as yaml_loader  # lockfile.yaml_loader, as before
from gpu_ci.errors import GpuCiError
from gpu_ci.urls import mask_url

if TYPE_CHECKING:
    from gpu_ci.conda.virtual import Requirement

_sha256: Any
try:  # Python's own sha256, as ``random`` takes its sha512: ``hashlib`` would first load
    # OpenSSL's libcrypto (~5 ms of every run, for the one digest a warm install makes)
    from _sha2 import sha256 as _sha256  # type: ignore[import-not-found, no-redef, unused-ignore]
except ImportError:  # pragma: no cover - by version: _sha256 before Python 3.12
    try:
        from _sha256 import sha256 as _sha256  # type: ignore[import-not-found, no-redef, unused-ignore]
    except ImportError:  # built without its own hashes: hashlib's is the same digest
        from hashlib import sha256 as _sha256

ARCHIVE_SUFFIXES = (".conda", ".tar.bz2")


# NamedTuples, not frozen dataclasses: each class costs every run ~0.2 ms to create, not ~1.3.


class CondaEntry(NamedTuple):
    """One conda archive the lock names: its URL, file name and digests, parsed once."""

    name: str
    version: str
    build: str
    subdir: str
    url: str
    filename: str
    md5: str = ""
    sha256: str = ""
    depends: tuple[str, ...] = ()

    @property
    def digest(self) -> str:
        """What the archive is checked against: the lock's sha256, else its md5."""
        return self.sha256 or self.md5

    @property
    def dist_name(self) -> str:
        """``<name>-<version>-<build>``: its directory in a package cache."""
        return f"{self.name}-{self.version}-{self.build}"

    @property
    def build_number(self) -> int:
        match = re.search(r"_(\d+)$", self.build)
        return int(match.group(1)) if match else 0

    @property
    def channel(self) -> str:
        """The channel URL: everything before ``/<subdir>/<filename>``."""
        return self.url.rsplit("/", 2)[0]


class PipEntry(NamedTuple):
    """One pip package the lock names: its URL and sha256."""

    name: str
    version: str
    url: str
    sha256: str
    source: str = ""
    """'' for a file checked against ``sha256``; ``editable`` or ``path`` for a pixi lock's
    source entries (installed from the checkout, never resolved); ``git``, ``hg``, ``svn``
    or ``bzr`` for a repository elsewhere (refused)."""
    path: str = ""
    """The local path of an ``editable`` or ``path`` entry, absolute."""


class LockFile(NamedTuple):
    """A parsed lock file, before a platform and categories are picked."""

    kind: str
    """'explicit' or 'unified'."""
    platforms: tuple[str, ...]
    channels: tuple[str, ...]
    packages: tuple[dict[str, Any], ...]
    """Unified: the raw package entries. Explicit: parsed entries as dicts (not in repr)."""

    def __repr__(self) -> str:
        return (
            f"LockFile(kind={self.kind!r}, platforms={self.platforms!r}, "
            f"channels={self.channels!r})"
        )


class InstallPlan(NamedTuple):
    """What one job installs: the platform's entries of the selected categories, once each."""

    kind: str
    platform: str
    categories: tuple[str, ...]
    channels: tuple[str, ...]
    conda: tuple[CondaEntry, ...]
    pip: tuple[PipEntry, ...]
    lock_sha256: str
    environment: str = ""
    """A pixi lock's environment ('' for conda-lock's locks)."""
    requirements: tuple[Requirement, ...] = ()
    """The ``__cuda``/``__glibc`` needs the machine must meet (pixi locks)."""
    left_out: tuple[str, ...] = ()
    """Conda packages the lock builds from source: never built, named in a notice."""
    indexes: tuple[str, ...] = ()
    """The PyPI indexes a pixi lock's environment was resolved against."""

    @property
    def count(self) -> int:  # type: ignore[override]  # tuple.count is never used on a plan
        return len(self.conda) + len(self.pip)


def lock_sha256(text: str) -> str:
    return sha256_of(text.encode("utf-8"))


def sha256_of(data: bytes) -> str:
    """The sha256 of ``data`` as hex, without loading OpenSSL."""
    return str(_sha256(data).hexdigest())


def split_archive_name(filename: str) -> tuple[str, str, str]:
    for suffix in ARCHIVE_SUFFIXES:
        if filename.endswith(suffix):
            stem = filename[: -len(suffix)]
            parts = stem.rsplit("-", 2)
            if len(parts) == 3 and parts[0] and parts[1] and parts[2]:
                return parts[0], parts[1], parts[2]
    raise ValueError(filename)


_PIP_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
"""A distribution name (PEP 508): it is written into pip's requirements file, where a newline
or a leading ``-`` would be a line or an option of the lock author's choosing (``-r
/etc/passwd`` puts a local file in the public log)."""


_NOT_IN_URL = re.compile(r"[\s\x00-\x1f\x7f]")
"""Whitespace (``str.isspace``: ``\\s`` of a str pattern is the same set), C0 controls and
DEL: searched in C, once per lock entry (a Python loop over each character cost more than
the rest of parsing a 600-package lock)."""

_PLAIN_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#\[\]]*(/[^?#]*)?(?:[?#].*)?", re.S)
"""``scheme://host/path[?query][#fragment]`` without brackets in the host: for these (ASCII)
URLs, group 1 is what ``urlsplit(url).path`` returns; anything else goes to ``urlsplit``."""


def _url_path(url: str) -> str:
    """``urlsplit(url).path``, without ``urlsplit``'s cost for the plain URLs locks hold."""
    match = _PLAIN_URL.fullmatch(url) if url.isascii() else None
    return (match.group(1) or "") if match else urlsplit(url).path


def _plain_port(netloc: str) -> bool:
    """Whether this netloc's port is a number in range, without ``urlsplit``.

    For an ASCII, bracket-free netloc: the port is what follows the first ``:`` after the
    last ``@``. ``urlsplit`` costs too much per entry (a lock served from ``host:port``
    has one in every URL). False: ask ``urlsplit``."""
    if not netloc.isascii() or any(c in netloc for c in "?#[]"):
        return False
    port = netloc.rpartition("@")[2].partition(":")[2]
    return port.isdigit() and len(port) <= 5 and int(port) <= 65535


def _check_url(url: str, where: str) -> str:
    """A URL from the lock is one token: whitespace or a control character in it would end
    a requirement line (and start an option such as ``--trusted-host``) or break the
    download."""
    if _NOT_IN_URL.search(url):
        raise GpuCiError(
            f"{where}: the URL {mask_url(url)!r} contains whitespace or a control "
            "character; a lock's URLs are single tokens. Re-lock it."
        )
    netloc = url.partition("://")[2].split("/", 1)[0]
    host = netloc.rpartition("@")[2].rpartition("]")[2]
    if ":" in host and not _plain_port(netloc):
        # a port: one that is not a number in range fails the download, untold
        try:
            _ = urlsplit(url).port
        except ValueError as exc:
            raise GpuCiError(
                f"{where}: {mask_url(url)} is not a valid URL ({exc}). Re-lock it."
            ) from None
    return url


def pip_entry(name: str, version: str, url: str, sha256: str, where: str) -> PipEntry:
    if not _PIP_NAME.fullmatch(name):
        raise GpuCiError(
            f"{where}: pip package name {name!r} is not a distribution name "
            "(letters, digits, '.', '_', '-'; PEP 508). Re-lock it."
        )
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise GpuCiError(
            f"{where}: the sha256 of pip package {name} is not 64 hex digits "
            f"({sha256[:80]!r}). Re-lock it."
        )
    return PipEntry(name, version, _check_url(url, where), sha256)


def conda_entry(
    url: str, md5: str = "", sha256: str = "", depends: Iterable[str] = (), where: str = ""
) -> CondaEntry:
    try:
        path = _url_path(_check_url(url, where))
    except ValueError as exc:  # urlsplit's refusals ('Invalid IPv6 URL', ...)
        raise GpuCiError(
            f"{where}: {mask_url(url)} is not a valid URL ({exc}). Re-lock it."
        ) from None
    segments = path.rstrip("/").split("/")
    filename = segments[-1]
    try:
        name, version, build = split_archive_name(filename)
    except ValueError:
        raise GpuCiError(
            f"{where}: {mask_url(url)} does not name a conda archive "
            "(<name>-<version>-<build>.conda or .tar.bz2)."
        ) from None
    subdir = segments[-2] if len(segments) >= 2 else ""
    return CondaEntry(
        name, version, build, subdir, url, filename, md5.lower(), sha256.lower(), tuple(depends)
    )


def pixi_named(path: str) -> bool:
    """A lock named ``pixi.lock`` is one, whatever it holds."""
    return path.replace("\\", "/").rsplit("/", 1)[-1].endswith("pixi.lock")


def detect_kind(text: str) -> str:
    lines = [line.strip() for line in text.splitlines()]
    if "@EXPLICIT" in lines:
        return "explicit"
    if re.search(r"^package:\s*$", text, re.MULTILINE) and re.search(
        r"^metadata:\s*$", text, re.MULTILINE
    ):
        return "unified"
    if re.search(r"^environments:\s*$", text, re.MULTILINE) and re.search(
        r"^version:\s*\S", text, re.MULTILINE
    ):
        return "pixi"
    if re.search(r"^dependencies:\s*$", text, re.MULTILINE):
        return "environment"
    return "unknown"


ENVIRONMENT_REFUSAL = (
    "{path} is an environment.yml: creating it needs a solver, which this action never "
    "runs. Lock it once and commit the lock: `conda-lock lock -f {path} -p linux-64` "
    "writes conda-lock.yml (or add `--kind explicit` for one @EXPLICIT file per platform); "
    "then pass that file as lock-file."
)


def parse(text: str, path: str = "lock-file", loader: Any = None) -> LockFile:
    """``loader``: the YAML loader for a unified lock (default: ``yaml_loader()``)."""
    kind = detect_kind(text)
    if kind == "explicit":
        return _parse_explicit(text, path)
    if kind == "unified":
        return _parse_unified(text, path, loader)
    if kind == "pixi":  # read by gpu_ci.conda.pixi, which needs the environment too
        return LockFile("pixi", (), (), ())
    if kind == "environment":
        raise GpuCiError(ENVIRONMENT_REFUSAL.format(path=path), title="not a lock file")
    raise GpuCiError(
        f"{path} is neither an explicit lock (no @EXPLICIT line) nor a unified "
        "conda-lock.yml (no metadata: and package: sections).",
        title="not a lock file",
    )


_MD5 = re.compile(r"[0-9a-fA-F]{32}")
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
_PIP_LINE = re.compile(
    r"^#\s*pip\s+(?P<name>[A-Za-z0-9._-]+)\s*@\s*(?P<url>\S+?)"
    r"#sha256=(?P<sha>[0-9a-fA-F]{64})\s*$"
)


def _parse_explicit(text: str, path: str) -> LockFile:
    platform = ""
    entries: list[dict[str, Any]] = []
    started = False
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        where = f"{path} line {number}"
        if not line:
            continue
        if line.startswith("#"):
            match = re.match(r"#\s*platform:\s*(\S+)", line)
            if match:
                platform = match.group(1)
            pip = _PIP_LINE.match(line)
            if pip:
                entries.append(
                    {
                        "manager": "pip",
                        "name": pip.group("name"),
                        "url": pip.group("url"),
                        "sha256": pip.group("sha").lower(),
                    }
                )
            elif re.match(r"#\s*pip\b", line):
                raise GpuCiError(
                    f"{where}: pip line without '<name> @ <url>#sha256=<hex>': {mask_url(line)}"
                )
            continue
        if line == "@EXPLICIT":
            started = True
            continue
        if not started:
            raise GpuCiError(f"{where}: package line before @EXPLICIT: {mask_url(line)}")
        url, _, fragment = line.partition("#")
        md5 = sha256 = ""
        if fragment.startswith("sha256:"):
            sha256 = fragment[len("sha256:") :]
        elif _MD5.fullmatch(fragment):
            md5 = fragment
        elif _SHA256.fullmatch(fragment):
            sha256 = fragment
        entry = conda_entry(url, md5, sha256, where=where)
        entries.append({"manager": "conda", "entry": entry})
    platforms = (platform,) if platform else ()
    channels = tuple(dict.fromkeys(e["entry"].channel for e in entries if e["manager"] == "conda"))
    return LockFile("explicit", platforms, channels, tuple(entries))


def _parse_unified(text: str, path: str, loader: Any = None) -> LockFile:
    doc = load_yaml(text, path, loader)
    if not isinstance(doc, dict) or not isinstance(doc.get("package"), list):
        raise GpuCiError(f"{path}: a unified lock needs a 'package' list.")
    version = doc.get("version", 1)
    if str(version).strip() not in ("1", "2") or isinstance(version, bool):
        raise GpuCiError(
            f"{path}: conda-lock format version {version!r} is not supported "
            "(versions 1 and 2 are); re-lock it with conda-lock >= 1."
        )
    meta = doc.get("metadata") or {}
    if not isinstance(meta, dict):
        raise GpuCiError(
            f"{path}: its metadata is not a mapping (platforms:, channels:). Re-lock it."
        )
    if not isinstance(meta.get("platforms") or [], list):
        raise GpuCiError(f"{path}: its metadata's platforms are not a list. Re-lock it.")
    for index, pkg in enumerate(doc["package"]):
        if not isinstance(pkg, dict):
            raise GpuCiError(
                f"{path} package {index + 1} is not a mapping (name:, url:, hash:, ...). "
                "Re-lock it."
            )
    platforms = tuple(str(p) for p in meta.get("platforms") or ())
    channels = tuple(
        str(c.get("url") if isinstance(c, dict) else c) for c in meta.get("channels") or ()
    )
    return LockFile("unified", platforms, channels, tuple(doc["package"]))


def _categories_of(pkg: dict[str, Any]) -> set[str]:
    if isinstance(pkg.get("categories"), list):
        return {str(c) for c in pkg["categories"]}
    return {str(pkg.get("category") or "main")}


def lock_categories(lock: LockFile) -> tuple[str, ...]:
    """Every category the lock's packages belong to, ``main`` first."""
    if lock.kind == "explicit":
        return ("main",)
    found = {c for pkg in lock.packages for c in _categories_of(pkg)}
    return ("main", *sorted(found - {"main"}))


def selected_categories(
    lock: LockFile, categories: Sequence[str], path: str = "lock-file"
) -> tuple[str, ...]:
    """``main`` plus those asked for, as ``conda-lock install`` does; unknown ones refused."""
    have = lock_categories(lock)
    unknown = [c for c in categories if c not in have]
    if unknown:
        hint = (
            "an explicit lock has no categories: leave 'categories' empty"
            if lock.kind == "explicit"
            else f"it has {', '.join(have)}"
        )
        raise GpuCiError(
            f"{path} has no categor{'ies' if len(unknown) > 1 else 'y'} "
            f"{', '.join(repr(c) for c in unknown)}; {hint}.",
            title="unknown category",
        )
    return tuple(dict.fromkeys(("main", *categories)))


def check_subdir(entry: CondaEntry, platform: str, where: str) -> None:
    if entry.subdir not in (platform, "noarch"):
        raise GpuCiError(
            f"{where}: {entry.filename} comes from {entry.subdir or 'no'} subdir "
            f"({mask_url(entry.url)}), which is neither {platform} nor noarch: "
            "the lock is for another platform. Use the lock for this platform.",
            title="wrong platform",
        )


def _require_platform(lock: LockFile, platform: str, path: str) -> None:
    """Refuse a lock made for other platforms than ``platform``."""
    if lock.kind == "explicit" and lock.platforms and platform not in lock.platforms:
        raise GpuCiError(
            f"{path} is an explicit lock for {lock.platforms[0]}, but the "
            f"platform is {platform}: use the lock for {platform}, or set "
            f"platform: {lock.platforms[0]} if that is really meant."
        )
    if lock.kind != "explicit" and platform not in lock.platforms:
        raise GpuCiError(
            f"{path} has no packages for {platform}; it locks "
            f"{', '.join(lock.platforms) or 'no platform'}. Add the platform "
            f"when locking (conda-lock -p {platform}) or set 'platform'."
        )


def _explicit_entries(
    lock: LockFile, platform: str, path: str
) -> tuple[list[CondaEntry], list[PipEntry]]:
    """An explicit lock's entries for ``platform``: each conda name once, pip ones as listed."""
    conda: list[CondaEntry] = []
    pip: list[PipEntry] = []
    first: dict[str, CondaEntry] = {}  # each name's first entry: one look-up, not a scan
    for item in lock.packages:
        if item["manager"] != "conda":
            where = f"{path} pip entry {item['name']!r}"
            pip.append(pip_entry(item["name"], "", item["url"], item["sha256"], where))
            continue
        check_subdir(item["entry"], platform, path)
        twin = first.get(item["entry"].name)
        if twin is not None and twin != item["entry"]:
            raise GpuCiError(
                f"{path}: {twin.name} is locked twice with different "
                f"files ({mask_url(twin.url)} and "
                f"{mask_url(item['entry'].url)}). Re-lock it."
            )
        if twin is None:
            first[item["entry"].name] = item["entry"]
            conda.append(item["entry"])
    return conda, pip


def _unified_url(pkg: dict[str, Any], where: str) -> str:
    """A unified lock package's url, once its hash and dependencies are mappings."""
    if not isinstance(pkg.get("hash") or {}, dict):
        raise GpuCiError(f"{where}: its hash is not a mapping (md5:, sha256:). Re-lock it.")
    if not isinstance(pkg.get("dependencies") or {}, dict):
        raise GpuCiError(f"{where}: its dependencies are not a mapping (name: spec). Re-lock it.")
    url = str(pkg.get("url") or "")
    if not url:
        raise GpuCiError(f"{where} has no url.")
    return url


def _unified_entries(
    lock: LockFile, platform: str, cats: Sequence[str], path: str
) -> tuple[list[CondaEntry], list[PipEntry]]:
    """A unified lock's entries of ``platform`` and ``cats``, each package once."""
    conda: list[CondaEntry] = []
    pip: list[PipEntry] = []
    seen: dict[tuple[str, str], str] = {}
    for index, pkg in enumerate(lock.packages):
        if pkg.get("platform") != platform or not (_categories_of(pkg) & set(cats)):
            continue
        name = str(pkg.get("name") or "")
        if name.startswith("__"):
            continue  # virtual packages describe the system; nothing to install
        where = f"{path} package {index + 1} ({name})"
        url = _unified_url(pkg, where)
        manager = str(pkg.get("manager") or "conda")
        key = (manager, name)
        if key in seen:  # the same package listed once per category
            if seen[key] != url:
                raise GpuCiError(
                    f"{where}: {name} is locked twice for {platform} with "
                    f"different files ({mask_url(seen[key])} and "
                    f"{mask_url(url)}). Re-lock it."
                )
            continue
        seen[key] = url
        hashes = pkg.get("hash") or {}
        if manager == "pip":
            sha = str(hashes.get("sha256") or "")
            if not sha:
                raise GpuCiError(f"{where}: pip entries need a sha256 hash.")
            pip.append(pip_entry(name, str(pkg.get("version") or ""), url, sha.lower(), where))
            continue
        depends = [f"{dep} {spec}".strip() for dep, spec in (pkg.get("dependencies") or {}).items()]
        md5, sha256 = str(hashes.get("md5") or ""), str(hashes.get("sha256") or "")
        entry = conda_entry(url, md5, sha256, depends, where)
        check_subdir(entry, platform, where)
        conda.append(entry)
    return conda, pip


def plan(
    lock: LockFile, text: str, platform: str, categories: Sequence[str], path: str = "lock-file"
) -> InstallPlan:
    """The platform's entries of the categories, in the lock's order, once each."""
    cats = selected_categories(lock, categories, path)
    _require_platform(lock, platform, path)
    if lock.kind == "explicit":
        conda, pip = _explicit_entries(lock, platform, path)
    else:
        conda, pip = _unified_entries(lock, platform, cats, path)
    for entry in conda:
        if not (entry.md5 or entry.sha256):
            raise GpuCiError(
                f"{path}: {entry.filename} has no md5 or sha256; a lock without "
                "hashes cannot be verified. Re-lock it."
            )
    return InstallPlan(
        lock.kind, platform, cats, lock.channels, tuple(conda), tuple(pip), lock_sha256(text)
    )


def render_explicit(plan_: InstallPlan) -> str:
    """An @EXPLICIT file of the plan's conda entries (for ``engine: conda``)."""
    lines = [f"# platform: {plan_.platform}", "@EXPLICIT"]
    for e in plan_.conda:
        lines.append(f"{e.url}#{e.md5}" if e.md5 else f"{e.url}#sha256:{e.sha256}")
    return "\n".join(lines) + "\n"
