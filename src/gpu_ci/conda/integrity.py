"""Is an environment still what its ``conda-meta`` says? Is a cache entry its archive?

``reused: true`` is a promise that the prefix holds the lock's packages, so it is given only
after every file each ``conda-meta/<pkg>.json`` lists is found with its recorded size: a
deleted or truncated file, or a missing record, means the environment is installed again.
Sizes only (one ``lstat`` per file, measured in ``benchmarks/``): hashing every file of a
multi-gigabyte CUDA environment on each reuse would cost more than reinstalling it.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from gpu_ci.conda.verified import Facts, listed_paths, read_bytes, survey

MARKER_NAME = "gpu-ci-lock.json"


def environment_problems(
    prefix: Path, expected_records: int | None = None, limit: int = 5
) -> list[str]:
    """Up to ``limit`` differences between the prefix and its conda-meta records."""
    problems: list[str] = []
    meta = prefix / "conda-meta"
    try:
        # names, not Path objects (what Path.suffix calls a .json record; not our marker)
        records = [
            name
            for name in os.listdir(meta)
            if name.endswith(".json") and name != ".json" and name != MARKER_NAME
        ]
    except OSError:
        return [f"{meta} cannot be read"]
    if expected_records is not None and len(records) != expected_records:
        problems.append(
            f"conda-meta has {len(records)} package records, the lock {expected_records}"
        )
    # Everything relative to open directories: no Path objects, no walk of the prefix's own
    # components for each of tens of thousands of files (3x faster, see benchmarks/).
    lstat, is_regular = os.lstat, stat.S_ISREG
    fd = os.open(prefix, os.O_RDONLY)
    try:
        meta_fd = os.open("conda-meta", os.O_RDONLY, dir_fd=fd)
    except OSError:
        os.close(fd)
        return [f"{meta} cannot be read"]
    try:
        for name in records:
            if len(problems) >= limit:
                return problems
            try:
                data = json.loads(read_bytes(name, dir_fd=meta_fd))
                for entry in (data.get("paths_data") or {}).get("paths") or ():
                    rel = entry.get("_path") or ""
                    try:
                        info = lstat(rel, dir_fd=fd)
                    except OSError:
                        problems.append(f"{rel} (of {name[:-5]}) is missing")
                    else:
                        size = entry.get("size_in_bytes")
                        if info.st_size == size or size is None or not is_regular(info.st_mode):
                            continue
                        problems.append(
                            f"{rel} (of {name[:-5]}) has {info.st_size} bytes, its record {size}"
                        )
                    if len(problems) >= limit:
                        return problems
            except (OSError, ValueError, AttributeError, TypeError):  # not a record's shape
                problems.append(f"{meta / name} cannot be read")
    finally:
        os.close(meta_fd)
        os.close(fd)
    return problems


def cache_entry_problem(entry: Path) -> str:
    """The first file that differs from ``info/paths.json``, '' if none.

    Size and sha256 are compared. Run on entries extracted by an earlier job before
    they are linked again: a file changed in the shared cache (or through a hard link from
    an environment) must not reach a new environment."""
    import hashlib

    try:
        paths = json.loads(read_bytes(os.path.join(entry, "info", "paths.json"))).get("paths") or ()
    except FileNotFoundError:
        return "" if (entry / "info" / "index.json").is_file() else "info/ is missing"
    except (OSError, ValueError, AttributeError, RecursionError):  # nested past json's depth
        return "info/paths.json cannot be read"
    for item in paths:
        rel = str(item.get("_path") or "")
        path = entry / rel
        try:
            info = os.lstat(path)
        except OSError:
            return f"{rel} is missing"
        kind = item.get("path_type") or "hardlink"
        if kind == "softlink" or (kind == "directory" and stat.S_ISDIR(info.st_mode)):
            continue
        if not stat.S_ISREG(info.st_mode):  # a link, a FIFO, a device where a file was
            return f"{rel} is not a regular file, as paths.json says it is"
        size = item.get("size_in_bytes")
        if size is not None and info.st_size != size:
            return f"{rel} has {info.st_size} bytes, paths.json says {size}"
        want = item.get("sha256")
        if want:
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
            if digest.hexdigest() != want:
                return f"{rel} does not match its sha256 in paths.json"
    return ""


def link_path_problem(cache: Path, names: Sequence[str], known: Sequence[Facts | None] = ()) -> str:
    """The first linked path that would leave the prefix, '' if none.

    A package's ``paths.json`` (or ``info/files``) is the archive author's text, and the
    linker joins each path to the prefix as it is: ``../x`` or ``/x`` would write outside
    it, and so would a file under a symbolic link of the package that points out of the
    prefix. A lock from a pull request can name any archive, so this is checked before
    anything is linked (verified hashes say the archive is the one locked, not that it is
    harmless). ``names``: the entries' directories in the package cache ``cache``;
    ``known``: per entry, the facts a verified stamp recorded for it (see ``verified``) or
    None, so that its ``paths.json`` is read again only when some entry has a symbolic link
    out of the prefix (and no path is made for it: 600 cost a warm install ~3 ms)."""
    facts: list[Facts] = []
    for i, name in enumerate(names):
        fact = known[i] if i < len(known) else None
        if fact is None:
            entry = cache / name
            items = listed_paths(entry)
            if isinstance(items, str):
                return items
            fact = survey(entry, items)
        assert fact is not None  # only None when asked for identities
        if fact.problem:
            return fact.problem
        facts.append(fact)
    escaping_links = {rel for fact in facts for rel in fact.escaping_links}
    if not escaping_links:
        return ""
    for name in names:
        entry = cache / name
        items = listed_paths(entry)
        for item in items if not isinstance(items, str) else ():
            rel = str(item.get("_path") or "")
            parts = os.path.normpath(rel).split("/")
            for i in range(1, len(parts)):
                above = "/".join(parts[:i])
                if above in escaping_links:
                    return (
                        f"{entry.name} lists {rel!r} under the symbolic link {above!r}, "
                        "which points outside the prefix"
                    )
    return ""
