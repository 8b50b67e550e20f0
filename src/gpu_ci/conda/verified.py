"""What this host verified about a package-cache entry, and when.

A file changed in the shared cache (or written through a hard link from an environment)
must not reach a new environment, yet hashing every file of every reused entry against its
``paths.json`` costs a warm install 2.5-4x ``rattler.install``. So the job that extracts an
entry, or hashes it in full, writes a stamp into it: the archive's digest, what linking
needs to know (paths that would leave the prefix, bytes a link copies), and each file's
identity — device, inode, size and modification time in ns. A later job compares ``lstat``
results with the stamp and hashes only entries that differ.

Why this guards as much as the hash did: writing to a file changes its mtime (and usually
its size), replacing it changes its inode, and a restored ``actions/cache`` has new inodes
(so it is hashed once, then stamped). Only a deliberate ``utime`` can hide a change, and
whoever can do that to the shared cache can as well rewrite the ``paths.json`` sha256 the
hash is compared with: the stamp, like ``paths.json``, is as trustworthy as whoever can
write the cache. ``ctime`` is not used: every hard link into an environment changes it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from pathlib import Path
from typing import NamedTuple

STAMP = ".gpu-ci-verified"
VERSION = 2
"""2: ``device`` is the stamp file's own (read with it, no ``stat`` of the entry); a
version-1 stamp reads as absent, and its entry is hashed once more."""


# NamedTuples, not frozen dataclasses: each class costs every run ~0.2 ms to create, not ~1.3.


class Facts(NamedTuple):
    """What linking needs to know about one verified entry."""

    digest: str
    problem: str
    """'' or why the entry must not be linked (a path that leaves the prefix)."""
    escaping_links: tuple[str, ...]
    """Symbolic links of the entry that point out of the prefix: harmless unless another
    package lists a path under one (``integrity.link_path_problem`` checks all entries)."""
    placeholder_bytes: int
    """Bytes of files with a prefix placeholder: linking always copies these."""
    total_bytes: int
    stamp: tuple[int, ...] = ()
    """The identity (device, inode, size, mtime in ns) of the stamp these facts were read
    from or written to, () when none: while it is unchanged, the entry was not replaced
    (``unchanged_stamp``; a replacement brings its own stamp, a new file)."""
    sha256: str = ""
    """The sha256 of the archive the entry was extracted from, when the stamp recorded it:
    what rattler is given for an md5-only lock entry without reading the md5 sidecar."""


def read_bytes(path: str, limit: int = 1 << 28, dir_fd: int | None = None) -> bytes:
    """``read_file``'s bytes."""
    return read_file(path, limit, dir_fd)[0]


def read_file(
    path: str, limit: int = 1 << 28, dir_fd: int | None = None
) -> tuple[bytes, os.stat_result]:
    """A small regular file's bytes (at most ``limit``), by raw system calls.

    A warm install reads a stamp, a marker and rattler's lock per entry, and ``open()``'s buffered
    file object cost more than the reads (15 ms against 2 ms for 600 markers). Not through
    a link, and never a FIFO or a device (an archive may hold anything at a name we read
    later): OSError, as for a missing file. ``dir_fd``: ``path`` is relative to it. With the
    bytes, the file's ``fstat`` (its identity, for free)."""
    fd = os.open(
        path,
        os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0),
        dir_fd=dir_fd,
    )
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path} is not a regular file")
        chunks, left = [], min(limit, info.st_size + 1)
        while left > 0:
            chunk = os.read(fd, left)
            chunks.append(chunk)
            if len(chunk) < left:  # a regular file reads short only at its end: no
                break  # second read() to see it (2400 fewer calls in a warm 600-package run)
            left -= len(chunk)
        return b"".join(chunks), info
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """``data`` written to ``fd`` through the raw system call (no file object: a cold
    install writes a marker and a stamp per entry, see ``read_bytes``)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _escapes(rel: str) -> bool:
    """A relative path that leaves the directory it is joined to.

    It is absolute, has ``..`` above it, or no file system takes it."""
    if not rel or rel.startswith("/") or "\0" in rel:
        return True
    return os.path.normpath(rel).split("/")[0] == ".."


def listed_paths(entry: Path) -> list[dict[str, object]] | str:
    """The entry's ``paths.json`` items, or why they cannot be read.

    Old packages have ``info/files`` lines instead."""
    try:
        items = json.loads(read_bytes(os.path.join(entry, "info", "paths.json"))).get("paths") or []
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            return f"{entry.name}: info/paths.json cannot be read"
        return items
    except FileNotFoundError:
        try:
            return [
                {"_path": line}
                for line in read_bytes(os.path.join(entry, "info", "files"))
                .decode("utf-8", errors="replace")
                .splitlines()
                if line
            ]
        except OSError:
            return []
    except (OSError, ValueError, AttributeError, RecursionError):  # nested past json's depth
        return f"{entry.name}: info/paths.json cannot be read"


def _under_a_link_out(base: str, rel: str, seen: dict[str, bool]) -> str:
    """The directory above ``rel`` linking out of the entry, or ''.

    The listed file would be another file of this host (hard-linked into the environment).
    ``seen``: each directory's verdict, so that each is looked at once per entry."""
    parts = os.path.normpath(rel).split("/")
    for i in range(1, len(parts)):
        above = "/".join(parts[:i])
        out = seen.get(above)
        if out is None:
            path = os.path.join(base, above)
            out = seen[above] = os.path.islink(path) and not os.path.realpath(path).startswith(
                os.path.join(os.path.realpath(base), "")
            )
        if out:
            return above
    return ""


def survey(
    entry: Path,
    items: list[dict[str, object]],
    name: str = "",
    files: list[list[object]] | None = None,
) -> Facts | None:
    """The link facts of one entry (its digest left empty); ``name``: the entry's name in
    messages, when it is still being extracted under a temporary one. ``files``: filled
    with each listed file's identity; None is returned when one is missing."""
    base = os.fspath(entry)
    prefix = base + os.sep  # not os.path.join: ~5000 calls for 600 small packages
    escaping: list[str] = []
    placeholder = total = 0
    parents: dict[str, bool] = {}
    checked: dict[str, str] = {}  # a plain directory part -> its verdict, once per entry
    for item in items:
        rel = str(item.get("_path") or "")
        # plain: normpath would not change it, so it cannot escape and its directory part
        # is what _under_a_link_out checks
        plain = (
            bool(rel)
            and ".." not in rel
            and "/./" not in rel
            and "//" not in rel
            and rel[0] not in "/."
            and rel[-1] not in "/."
            and "\0" not in rel
        )
        if not plain and _escapes(rel):
            return Facts(
                "", f"{name or entry.name} lists {rel!r}, which is outside the prefix", (), 0, 0
            )
        folder = rel.rpartition("/")[0]
        if plain and folder in checked:
            above = checked[folder]
        else:
            above = _under_a_link_out(base, rel, parents)
            if plain:
                checked[folder] = above
        if above:
            return Facts(
                "",
                f"{name or entry.name} lists {rel!r} under the symbolic link "
                f"{above!r}, which points outside the prefix and the package",
                (),
                0,
                0,
            )
        size = item.get("size_in_bytes")
        size = size if isinstance(size, int) else 0
        total += size
        if item.get("prefix_placeholder"):
            placeholder += size
        path = prefix + rel
        try:
            info = os.lstat(path)
        except OSError:
            if files is not None:
                return None
            continue
        if files is not None:
            files.append([rel, info.st_ino, info.st_size, info.st_mtime_ns])
        if item.get("path_type") == "softlink" or stat.S_ISLNK(info.st_mode):
            try:
                target = os.readlink(path)
            except OSError:
                continue
            if target.startswith("/") or _escapes(os.path.join(os.path.dirname(rel), target)):
                escaping.append(os.path.normpath(rel))
    return Facts("", "", tuple(escaping), placeholder, total)


def identities(entry: Path) -> list[list[object]] | None:
    """Each stamped file's identity now (None when unreadable): taken before an entry is
    hashed, so that ``write`` stamps it only if no file changed while it was hashed."""
    items = listed_paths(entry)
    files: list[list[object]] = []
    if isinstance(items, str) or survey(entry, items, "", files) is None:
        return None
    try:
        files.extend(list(f) for f in scan_info(entry).files)
    except OSError:
        return None
    return files


class Info(NamedTuple):
    """One look at a new entry's ``info/``: the first thing there that is neither a file nor
    a directory ('info' itself when it is not a directory; '' when all is well, None when
    there is no ``info/``), and each regular file's identity, for the stamp."""

    odd: str | None
    files: tuple[tuple[str, int, int, int], ...]


def scan_info(entry: Path | str) -> Info:
    """``info/`` looked at once, without following a link, before it is read.

    It holds what we and rattler read in place of the archive (``paths.json``,
    ``index.json``)."""
    path = os.path.join(entry, "info")
    try:
        fd = os.open(
            path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
        )
    except FileNotFoundError:
        return Info(None, ())
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a link, or not a directory
            return Info("info", ())
        raise  # EACCES, EMFILE, EIO: not the package's doing, and not to be named so
    odd, files = "", []
    try:
        with os.scandir(fd) as it:
            for e in it:
                if e.is_file(follow_symlinks=False):
                    st = e.stat(follow_symlinks=False)
                    files.append((f"info/{e.name}", st.st_ino, st.st_size, st.st_mtime_ns))
                elif not odd and not e.is_dir(follow_symlinks=False):
                    odd = f"info/{e.name}"
    finally:
        os.close(fd)
    return Info(odd, tuple(files))


def write(
    entry: Path,
    digest: str,
    token: str,
    name: str = "",
    before: list[list[object]] | None = None,
    info: Info | None = None,
    sha256: str = "",
) -> Facts | None:
    """Survey ``entry``, already verified against ``digest``, and stamp it.

    None when a file it lists is missing. A stamp that cannot be written costs the next job a
    hash, no more. ``before``: the ``identities`` taken before the entry was hashed; a file that
    differs now was written after the hash read it, and is not stamped (the next job hashes it).
    ``info``: the ``scan_info`` of a new entry nobody else writes to (saves a second look).
    ``sha256``: the archive's, when known (it was just extracted), recorded with the rest."""
    items = listed_paths(entry)
    if isinstance(items, str):
        return Facts(digest, items.replace(entry.name, name or entry.name, 1), (), 0, 0)
    files: list[list[object]] = []
    facts = survey(entry, items, name, files)
    if facts is None or facts.problem:
        return None if facts is None else Facts(digest, facts.problem, (), 0, 0)
    facts = Facts(
        digest, "", facts.escaping_links, facts.placeholder_bytes, facts.total_bytes, (), sha256
    )
    base = os.fspath(entry)
    try:
        files.extend(list(f) for f in (info or scan_info(base)).files)
        if before is not None and files != before:
            return facts
        # Beside the entry, not in it: a writer killed here leaves a name the next job's
        # sweep of the cache removes (``transaction.sweep_cache``).
        part = os.path.join(os.path.dirname(base), f".{entry.name}{STAMP}.tmp-{token}")
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            data = {
                "version": VERSION,
                "digest": digest,
                "device": os.fstat(fd).st_dev,  # renamed into the entry: its device too
                "escaping_links": list(facts.escaping_links),
                "placeholder_bytes": facts.placeholder_bytes,
                "total_bytes": facts.total_bytes,
                "files": files,
            }
            if sha256:
                data["sha256"] = sha256
            write_all(fd, json.dumps(data, separators=(",", ":")).encode())
        finally:
            os.close(fd)
        os.replace(part, os.path.join(base, STAMP))
        # after the rename, which sets its ctime; under the entry's lock (or in a directory
        # only this job sees yet): no other stamp can be there instead
        written = os.lstat(os.path.join(base, STAMP))
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(os.path.dirname(base), f".{entry.name}{STAMP}.tmp-{token}"))
        return facts  # verified all the same; only the next job hashes again
    return facts._replace(stamp=identity(written))


def identity(info: os.stat_result) -> tuple[int, int, int, int, int]:
    """What a rewrite or a replacement of the stamp changes. Its ``ctime`` too (unlike a
    package file's, see above: a stamp is never hard-linked): on a file system with
    1-second times, a replacement restamped within the second, at a reused inode and of
    the same size, differs in it."""
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def unchanged_stamp(entry: str, facts: Facts | None) -> bool:
    """The entry's stamp is still the one ``facts`` came with (one ``lstat``): the entry was
    not replaced since (``cache_trust.publish`` renames a new directory, its stamp a new
    file, over the old one). False when unknown: ask its digest marker instead."""
    if facts is None or not facts.stamp:
        return False
    try:
        return identity(os.lstat(os.path.join(entry, STAMP))) == facts.stamp
    except OSError:
        return False


def recorded_sha256(entry: str, digest: str) -> str:
    """The archive sha256 the entry's stamp recorded with ``digest``, or ''.

    Whether or not its files are as stamped (a restored cache's are not, until hashed):
    which archive the entry came from is all it says."""
    try:
        data = json.loads(read_bytes(os.path.join(entry, STAMP)))
        if data.get("version") == VERSION and data.get("digest") == digest:
            sha = data.get("sha256")
            if isinstance(sha, str) and len(sha) == 64 and not sha.strip("0123456789abcdef"):
                return sha
    except (OSError, ValueError, RecursionError, AttributeError):
        pass
    return ""


def check(entry: Path | str, digest: str) -> Facts | None:
    """The entry's facts when its stamp still holds, else None.

    It holds when the stamp names ``digest`` and every stamped file still has the identity
    it had when verified. None: hash it, or extract it again."""
    base = os.fspath(entry)
    try:
        raw, stamp = read_file(os.path.join(base, STAMP))
        data = json.loads(raw)
        if (
            data.get("version") != VERSION
            or data.get("digest") != digest
            or stamp.st_dev != data.get("device")
        ):
            return None
        lstat, prefix = os.lstat, base + os.sep
        for rel, ino, size, mtime in data["files"]:
            info = lstat(prefix + rel)
            if info.st_ino != ino or info.st_size != size or info.st_mtime_ns != mtime:
                return None
        return Facts(
            digest,
            "",
            tuple(data["escaping_links"]),
            int(data["placeholder_bytes"]),
            int(data["total_bytes"]),
            identity(stamp),
            str(data.get("sha256") or ""),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None  # RecursionError: a planted stamp nested past json's depth
