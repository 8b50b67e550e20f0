"""setup-conda-from-lock's pipeline: a lock's plan, then a prefix isolated from any vendor
conda, with a Miniforge of its own when asked.

The command reads the inputs, masks secrets, writes outputs, the environment and the summary;
the steps between, and their order, are here. Each step is its own function because the
command speaks between them: secrets are masked as soon as they are known (before anything
is printed), a dry run stops after the plan, and a Miniforge checked only against the
release's own checksum is a warning before the install's log starts. Nothing that a dry run
does not need is imported until the install.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from gpu_ci import urls
from gpu_ci.conda import lockfile
from gpu_ci.conda.options import SetupOptions, refuse_prefix
from gpu_ci.errors import GpuCiError

if TYPE_CHECKING:
    from gpu_ci.conda import cachekey
    from gpu_ci.conda.isolation import VendorConda


def read_lock(path: str) -> str:
    """The lock's text: UTF-8, a leading byte order mark dropped.

    As conda-lock writes it; the BOM is dropped as YAML does (an editor's BOM made the first
    line unrecognised), and newlines are as Python reads them. Any other byte is an error
    naming its line, not a traceback."""
    return _read(path)[0]


def _read(path: str) -> tuple[str, bytes]:
    """The lock's text (as :func:`read_lock` says) and its bytes, read once."""
    try:
        data = Path(path).read_bytes()
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        data = exc.object if isinstance(exc.object, bytes) else b""
        line = data.count(b"\n", 0, exc.start) + 1
        raise GpuCiError(
            f"lock-file {path} is not UTF-8 text: byte 0x{data[exc.start : exc.start + 1].hex()} "
            f"on line {line} ({exc.reason}). conda-lock writes UTF-8: re-lock it, or save it "
            "as UTF-8."
        ) from None
    except FileNotFoundError:
        raise GpuCiError(
            f"lock-file {path} does not exist (relative paths are read from {os.getcwd()})."
        ) from None
    except OSError as exc:
        raise GpuCiError(f"lock-file {path} cannot be read ({exc.strerror}).") from None
    if "\r" in text:  # universal newlines, as read_text() reads them
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text, data


# NamedTuples, not frozen dataclasses: each class costs every run ~0.2 ms to create, not ~1.3.


class Locked(NamedTuple):
    """The lock file as read, and the plan picked from it."""

    lock: lockfile.LockFile
    plan: lockfile.InstallPlan
    file_sha256: str = ""
    """Of the file's bytes, as the cache step hashes them (``plan.lock_sha256`` is of the
    text: a BOM and CRLF line ends dropped)."""


def load(opts: SetupOptions, mask: Callable[[str], None]) -> Locked:
    """Read, parse and plan ``opts.lock_file``, masking its secrets.

    ``mask`` gets every secret in a channel or package URL as soon as it is read (an
    error about the plan may quote a URL)."""
    path = opts.lock_file
    text, data = _read(path)
    file_sha256 = lockfile.sha256_of(data)
    lock = None if lockfile.pixi_named(path) else lockfile.parse(text, path)
    if lock is None or lock.kind == "pixi":
        from gpu_ci.conda import pixi

        plan = pixi.plan(text, path, opts.pixi_environment, opts.platform)
        lock = lockfile.LockFile("pixi", (plan.platform,), plan.channels, ())
        _mask_plan(plan, mask)
        return Locked(lock, plan, file_sha256)
    for channel in lock.channels:
        for secret in urls.secrets_in(channel):
            mask(secret)
    plan = lockfile.plan(lock, text, opts.platform, opts.categories, path)
    _mask_plan(plan, mask)
    return Locked(lock, plan, file_sha256)


def _mask_plan(plan: lockfile.InstallPlan, mask: Callable[[str], None]) -> None:
    """Mask every secret in the plan's channels, indexes and URLs."""
    for url in [
        *plan.channels,
        *plan.indexes,
        *(e.url for e in plan.conda),
        *(e.url for e in plan.pip),
    ]:
        for secret in urls.secrets_in(url):
            mask(secret)


def cache_key(locked: Locked, inputs: cachekey.Inputs, environ: Mapping[str, str]) -> str:
    """The package cache's key, as the action's cache step computes it."""
    from gpu_ci.conda import cachekey

    pixi = locked.plan.environment
    return cachekey.packages_key(cachekey.KeyInputs.of(inputs, environ, locked.file_sha256, pixi))


class Isolation(NamedTuple):
    """The vendor conda found, and the environment every child gets."""

    vendor: VendorConda
    env: dict[str, str]


def isolate(opts: SetupOptions, environ: Mapping[str, str]) -> Isolation:
    """Refuse what is not ours, hide the vendor conda, check the target.

    A prefix or root that is not ours to write is refused; the vendor conda is found and
    hidden from the children; before anything is downloaded (Miniforge included), the
    result is checked to be one that can be put in place."""
    from gpu_ci.conda import install as env_install
    from gpu_ci.conda import isolation as conda_isolation

    root, prefix, pkgs_dir = opts.root, opts.prefix, opts.pkgs_dir
    refuse_prefix(prefix, root, environ)
    vendor = conda_isolation.detect(environ)
    if vendor.root and Path(vendor.root).resolve() in (root.resolve(), *root.resolve().parents):
        raise GpuCiError(
            f"root {root} is inside the vendor conda at {vendor.root}; choose a "
            "root elsewhere (the vendor conda is never written)."
        )
    env = conda_isolation.isolated_env(environ, vendor, opts.condarc, pkgs_dir, opts.envs_dir)
    env_install.check_writable(prefix, pkgs_dir)
    return Isolation(vendor, env)
