"""The package cache's trust rules: when an entry may be used without its archive, how an
extraction is published into it, and what marks it as this host's.

An entry is used only when it was extracted from the archive the lock names (a digest
marker in it, and rattler's own ``.lock`` record agreeing), and its files are as verified:
its stamp shows them unchanged since (``verified``), or each matches its ``paths.json``.
An extraction is published by rename under the entry's lock, after ``info/`` is checked for
links and devices, stamped with the archive's digest and the files' identities. The streams
(``gpu_ci.conda.streams``) and our downloader's path (``gpu_ci.conda.fetch``) both publish
through ``publish``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path

from gpu_ci.conda import transaction, verified
from gpu_ci.conda.integrity import cache_entry_problem
from gpu_ci.conda.lockfile import CondaEntry
from gpu_ci.disk import as_disk_error
from gpu_ci.errors import GpuCiError
from gpu_ci.faults import crash_point

SHA_MARKER = ".gpu-ci-archive-sha256"
MD5_SIDECAR = ".gpu-ci-md5"
"""Next to rattler's ``<name>-<version>-<build>.lock``: ``<md5> <sha256>`` of the archive we
verified against an md5-only lock entry, so that the next run can give rattler the sha256 of
a cache entry it trusts without the archive."""


def entry_dir(cache: Path, entry: CondaEntry) -> Path:
    return cache / entry.dist_name


def rattler_cache_sha256(cache: Path, dirname: str, is_dir: bool = False) -> str:
    """The archive sha256 rattler's cache recorded for an entry ('' if none).

    Its ``<dirname>.lock`` holds an 8-byte revision, then the 32-byte sha256 of the
    archive it extracted. (A future layout reads as '': we then fetch, never trust.)
    ``is_dir``: the caller has just seen the entry's directory (one ``stat`` less each)."""
    base = os.path.join(cache, dirname)
    try:
        # rattler leaves the lock of an entry we extracted empty: one stat says so, not four
        # system calls to read it (600 entries: ~15 ms)
        if os.lstat(base + ".lock").st_size < 40:  # not through a planted link
            return ""
        raw = verified.read_bytes(base + ".lock", 40)
    except OSError:
        return ""
    return raw[8:40].hex() if len(raw) >= 40 and (is_dir or os.path.isdir(base)) else ""


def trusted_sha256(entry: CondaEntry, cache: Path, facts: verified.Facts | None = None) -> str:
    """The archive sha256 under which rattler may use an entry as is.

    '' when it may not. Else the lock's sha256, or for an md5-only lock the one the
    entry's stamp recorded with that md5 (or, for an entry stamped without it, our sidecar
    beside it); and rattler's own record, when it wrote one (it leaves its
    ``.lock`` empty for entries we extracted), must agree. Only a candidate: the entry's
    stamp must show it unchanged since it was verified (``verified.check``), or every file
    must match its ``paths.json`` (``valid_entry``). ``facts``: what the entry's stamp,
    just read, says (its directory exists; the archive's sha256 when it recorded one):
    one ``stat``, and for an md5-only lock entry four system calls, less each."""
    dirname = entry.dist_name
    if facts is None and not os.path.isdir(os.path.join(cache, dirname)):
        return ""  # nothing to trust: stream or download it
    sha = entry.sha256 or (facts.sha256 if facts is not None else "")
    if not sha and facts is None:  # a stamp that no longer holds (a restored cache) still
        # says which archive the entry was extracted from: it is hashed before any use
        sha = verified.recorded_sha256(os.path.join(cache, dirname), entry.digest)
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
    have = rattler_cache_sha256(cache, dirname, is_dir=True)
    return sha if not have or have == sha else ""


def valid_entry(dest: str, digest: str, token: str, sha256: str = "") -> verified.Facts | None:
    """In a worker process: the entry's facts when it was extracted from an archive with ``digest``
    and every file matches its ``paths.json`` (then stamped, so that the next job need not
    hash it), None otherwise. Under the per-entry lock, so never half-replaced. ``sha256``:
    the archive's, trusted for it (``trusted_sha256``), recorded in the new stamp."""
    target = Path(dest)
    lock = target.with_name(f".{target.name}.gpu-ci.lock")
    with transaction.exclusive(lock, f"the cache entry {target.name}", lambda _: None):
        return _entry_facts(target, digest, token, sha256)


def _entry_facts(target: Path, digest: str, token: str, sha256: str) -> verified.Facts | None:
    """The facts of a usable entry: from its stamp when no file changed since it was
    verified, else after hashing every file (and stamping it again); None when unusable."""
    facts = verified.check(target, digest)
    if facts is None:
        before = verified.identities(target)  # a write while hashing is not stamped
        if _entry_ok(target, digest):
            facts = verified.write(target, digest, token, before=before or [], sha256=sha256)
    return facts


def _entry_ok(target: Path, digest: str) -> bool:
    """Whether the entry is whole: extracted from ``digest``, files as recorded.

    Every file is as ``paths.json`` records it, and the ``index.json`` its conda-meta
    record is built from is there."""
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
    """A disk error a subprocess or rattler reported as text, named.

    The text reads '[Errno 28]' or 'os error 28'; it is named as ours would be."""
    match = re.search(r"(?:os error |\[Errno )(\d+)", text)
    if match:
        return as_disk_error(OSError(int(match.group(1)), text), path, what)
    return None


def extract_entry(
    archive: str, dest: str, digest: str, token: str, again: bool = False, sha256: str = ""
) -> verified.Facts | None:
    """Extract one verified archive into the cache, atomically; its facts.

    None only when the entry cannot be surveyed: then it is hashed again next time.

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
        facts = None if again else _entry_facts(target, digest, token, sha256)
        if facts is not None:
            return facts
        tmp = target.with_name(f".{target.name}.tmp-{token}")
        try:
            extract(Path(archive), tmp)
            facts = publish(tmp, target, digest, token, sha256, parent=True)
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            named = named_disk_error(exc, tmp, f"extracting {Path(archive).name}")
            if named is not None:
                raise named from None
            raise
    return facts


def publish(
    tmp: Path, target: Path, digest: str, token: str, sha256: str, parent: bool = False
) -> verified.Facts | None:
    """Put a complete extraction in place, under the entry's lock: stamped with the
    archive's digest and the files' identities, then renamed over whatever was there."""
    info = _refuse_odd_info(tmp, target.name)
    _write_marker(tmp, digest)
    facts = verified.write(tmp, digest, token, target.name, info=info, sha256=sha256)
    crash_point("extract", parent=parent)
    if os.path.lexists(target):  # not while another job links from it (link_with_rattler)
        # The old entry goes aside in one rename, never removed in place: a job killed while
        # removing it would leave, at the entry's name, half a directory still holding its
        # stamp and marker, which a job that checked it before would take as unreplaced
        # and link. Aside, it is a temporary of ours (``..``: no package's name starts with
        # a dot, so never another entry's ``tmp``), swept once this job is gone.
        old = target.with_name(f"..{target.name}.tmp-{token}")
        with transaction.exclusive(
            target.parent / transaction.ENTRIES_LOCK, "the package cache", lambda _: None
        ):
            os.replace(target, old)
            os.replace(tmp, target)
        if old.is_dir() and not old.is_symlink():  # what fails to go is swept later
            shutil.rmtree(old, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                old.unlink()
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
    try:
        verified.write_all(fd, digest.encode())
    finally:
        os.close(fd)


def _forget_other_archive(target: Path, sha256: str) -> None:
    """rattler's ``<entry>.lock`` names the archive rattler last put there: when that is
    another archive than the one just extracted, rattler would not use the entry (it would
    fetch the package itself, which ``streams.CLIENT.refusing`` refuses). Emptied, as
    rattler leaves it for an entry it did not extract."""
    have = rattler_cache_sha256(target.parent, target.name)
    if have and have != sha256:
        os.truncate(target.with_name(f"{target.name}.lock"), 0)
