"""Install Miniforge into a writable root, from a verified, cached installer.

The installer's sha256 comes from the ``installer-sha256`` input, else from
:data:`INSTALLER_SHA256` shipped with this package (every version it knows: the default one),
and only for other versions from the release's ``<installer>.sha256`` file (first field),
with a warning: a file on the same origin as the installer proves only that the download
was not truncated, not that the origin is honest. Without any nothing is installed.

Installers are kept in the package cache (:data:`INSTALLERS`, per version), so that
``cache: true`` keeps them with the packages and a warm job downloads none. That cache is
writable by whoever restored or shares it, so a cached installer is never trusted as it
lies: its bytes are hashed while they are copied to a private file, and only that copy, if
it matches, is run; a partial, changed or odd (link, FIFO) cached file is downloaded again.
A root that already holds the version is reused. :func:`start` runs all of it on a thread
of its own, so that Miniforge's download and install overlap the environment's.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import platform as _platform
import shutil
import stat
import subprocess
import tempfile
import threading
import time
import urllib.error
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpu_ci import locks
from gpu_ci.downloads import CHUNK, Download, Downloader, RetryPolicy
from gpu_ci.errors import GpuCiError
from gpu_ci.urls import mask_url

if TYPE_CHECKING:
    from gpu_ci.conda.options import SetupOptions

RELEASES = "https://github.com/conda-forge/miniforge/releases/download"
MARKER = ".gpu-ci-miniforge"
INSTALLERS = "installers"
"""The installers' folder in the package cache: ``<pkgs-dir>/installers/<version>/<name>``,
saved and restored with it by ``cache: true``. Nothing else stays there: downloads and the
copies that run are made in a private ``.<name>.run-*`` folder beside it, locked while in
use and removed after; one a killed job left is removed by the next job."""

#: sha256 of each installer of the versions we ship a default for, from the release's
#: ``<installer>.sha256`` assets (github.com/conda-forge/miniforge/releases/tag/<version>),
#: cross-checked against independent pins of the same files. A version bump updates both.
INSTALLER_SHA256: dict[str, dict[str, str]] = {
    "26.3.2-3": {
        "Miniforge3-26.3.2-3-Linux-x86_64.sh": (
            "848194851a98903134187fbb4ab50efe87b003e0c0f808f97644b7524a62bf2c"
        ),
        "Miniforge3-26.3.2-3-Linux-aarch64.sh": (
            "2c113a69297e612b01ca0f320c22a3107a11f2ab9b573d79ac868a175945ce29"
        ),
        "Miniforge3-26.3.2-3-MacOSX-x86_64.sh": (
            "39273e4c89a0a1af4538010615d44ae8f44e1af41007e02def593d20f316b003"
        ),
        "Miniforge3-26.3.2-3-MacOSX-arm64.sh": (
            "59168f1e24d0a4ad9932021170809fca836cd240e183eeeb331d5bcfc0098168"
        ),
    },
}


@dataclass(frozen=True)
class Miniforge:
    """The job's Miniforge installation, and how it was had."""

    root: Path
    conda: Path
    version: str
    sha256: str
    installer_cached: bool
    reused: bool
    checksum_from: str = ""
    """Where the sha256 came from: 'input', 'shipped' or 'release' (the same-origin
    ``.sha256``, for versions this package ships no hash for: worth a warning)."""


def installer_name(version: str, system: str | None = None, machine: str | None = None) -> str:
    system = system or _platform.system()
    machine = machine or _platform.machine()
    os_name = {"Linux": "Linux", "Darwin": "MacOSX"}.get(system)
    if os_name is None:
        raise GpuCiError(
            f"Miniforge's shell installer is for Linux and macOS; this runner is "
            f"{system}. Set miniforge: false."
        )
    arch = {"amd64": "x86_64", "arm64": "arm64" if os_name == "MacOSX" else "aarch64"}.get(
        machine.lower(), machine
    )
    return f"Miniforge3-{version}-{os_name}-{arch}.sh"


def _checksum_from_release(url: str, policy: RetryPolicy, downloader: Downloader) -> str:
    try:
        text = downloader.read_small(url + ".sha256", policy.timeout).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise GpuCiError(
                f"HTTP {exc.code} for {mask_url(url)}.sha256: {downloader.route(url).hint}.",
                title="unverified installer",
            ) from None
        raise GpuCiError(
            f"no checksum for the Miniforge installer: {mask_url(url)}.sha256 could "
            f"not be read (HTTP {exc.code}). Set installer-sha256; nothing was "
            "installed.",
            title="unverified installer",
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        raise GpuCiError(
            f"no checksum for the Miniforge installer: {mask_url(url)}.sha256 could "
            f"not be read ({getattr(exc, 'reason', exc)}). Set installer-sha256; "
            "nothing was installed.",
            title="unverified installer",
        ) from None
    fields = text.split()
    if not fields or len(fields[0]) != 64:
        raise GpuCiError(
            f"{mask_url(url)}.sha256 holds no sha256 ({text[:80]!r}). Set "
            "installer-sha256; nothing was installed.",
            title="unverified installer",
        )
    return str(fields[0]).lower()


def _expected(
    version: str, name: str, url: str, sha256: str, policy: RetryPolicy, downloader: Downloader
) -> tuple[str, str]:
    """(sha256, where it came from): the input, else the shipped pin, else the release's."""
    if sha256.strip():
        return sha256.strip().lower(), "input"
    if name in INSTALLER_SHA256.get(version, {}):
        return INSTALLER_SHA256[version][name], "shipped"
    return _checksum_from_release(url, policy, downloader), "release"


def _copy_verified(src: Path, dest: Path, want: str) -> bool:
    """Copy ``src`` to ``dest`` while hashing it. True if it matches ``want``.

    ``src`` is opened without following a link and without blocking (a FIFO planted in the
    cache never stalls the job) and must be a regular file; otherwise it does not match."""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return False
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as handle, open(dest, "wb") as out:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            out.write(chunk)
            digest.update(chunk)
    return digest.hexdigest() == want


def _discard(path: Path) -> None:
    """Remove what lies at ``path`` in the cache, whatever it is."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _sweep(folder: Path, name: str) -> None:
    """Remove the private folders of jobs that died.

    Their lock, a plain file, is free. A folder without its lock yet is being made, and is
    left alone."""
    try:
        entries = [e for e in os.scandir(folder) if e.name.startswith(f".{name}.run-")]
    except OSError:
        return
    for entry in entries:
        lock = Path(entry.path) / "lock"
        with contextlib.suppress(OSError):
            if (
                entry.is_dir(follow_symlinks=False)
                and stat.S_ISREG(os.lstat(lock).st_mode)
                and not locks.held(lock)
            ):
                shutil.rmtree(entry.path, ignore_errors=True)


def _publish(verified: Path, work: Path, dest: Path) -> None:
    """Put a copy of the verified installer in the cache, atomically.

    A copy, so that the file that runs shares no inode with the cache."""
    staged = work / "publish"
    try:
        shutil.copyfile(verified, staged)
        os.replace(staged, dest)
    except OSError:  # the cache is a convenience: this job runs its own verified copy
        staged.unlink(missing_ok=True)


@contextlib.contextmanager
def verified_installer(
    item: Download, policy: RetryPolicy, downloader: Downloader | None = None
) -> Iterator[tuple[Path, bool]]:
    """A private, verified copy of the installer, and whether it was cached.

    Its bytes hashed to ``item.sha256``; it came from the cache at ``item.dest`` or not. It
    is removed afterwards.

    A cached file is copied while it is hashed, and used only if the copy matches: one cut
    short, changed, or not a regular file (a link, a FIFO) is downloaded again, and a cached
    file changed after its check never runs, since what runs is the copy. A download goes
    into the private folder (its partial file too) and is then published to the cache.
    """
    folder = item.dest.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _sweep(folder, item.dest.name)
        work = Path(tempfile.mkdtemp(prefix=f".{item.dest.name}.run-", dir=folder))
    except OSError as exc:
        raise GpuCiError(
            f"cannot write the Miniforge installer's cache {folder} ({exc.strerror})."
        ) from None
    held = locks.try_exclusive(work / "lock")
    try:
        copy = work / item.dest.name
        try:
            cached = os.path.lexists(item.dest) and _copy_verified(item.dest, copy, item.sha256)
            if not cached:
                copy.unlink(missing_ok=True)
                _discard(item.dest)
        except OSError as exc:
            raise GpuCiError(
                f"{item.label}: the cached installer in {folder} could not be checked or "
                f"removed ({exc.strerror}); nothing was installed."
            ) from None
        if not cached:
            got = Download(item.url, copy, item.label, sha256=item.sha256)
            (downloader or Downloader(policy=policy)).fetch(got, policy)
            _publish(copy, work, item.dest)
        yield copy, cached
    finally:
        if held is not None:
            os.close(held)
        shutil.rmtree(work, ignore_errors=True)


def _installed(root: Path, version: str) -> Miniforge | None:
    conda, marker = root / "bin" / "conda", root / MARKER
    if conda.exists() and marker.exists() and marker.read_text().split()[0:1] == [version]:
        recorded = marker.read_text().split()
        return Miniforge(root, conda, version, recorded[1] if len(recorded) > 1 else "", True, True)
    return None


@dataclass(frozen=True)
class Installer:
    """The installer a job runs: where from, its cache path and pinned sha256, and where
    that sha256 came from."""

    version: str
    download: Download
    source: str


def installer(
    version: str,
    cache_dir: Path,
    *,
    url: str = "",
    sha256: str = "",
    policy: RetryPolicy,
    downloader: Downloader | None = None,
) -> Installer:
    """The installer of ``version``, its sha256 known (else :class:`GpuCiError`): decided
    before anything is installed, so that no checksum means no install at all."""
    name = installer_name(version)
    url = url or f"{RELEASES}/{version}/{name}"
    downloader = downloader or Downloader(policy=policy)
    want, source = _expected(version, name, url, sha256, policy, downloader)
    item = Download(url, cache_dir / version / name, f"Miniforge {version} ({name})", sha256=want)
    return Installer(version, item, source)


def install(
    found: Installer,
    root: Path,
    env: Mapping[str, str],
    policy: RetryPolicy,
    downloader: Downloader | None = None,
) -> Miniforge:
    """Run the verified installer into ``root``; a marker records version and sha256."""
    with verified_installer(found.download, policy, downloader) as (script, cached):
        proc = subprocess.run(
            ["bash", str(script), "-b", "-u", "-p", str(root)],
            env=dict(env),
            capture_output=True,
            text=True,
        )
    conda = root / "bin" / "conda"
    if proc.returncode != 0 or not conda.exists():
        tail = (proc.stderr or proc.stdout).strip()[-1500:]
        raise GpuCiError(f"the Miniforge installer failed (exit {proc.returncode}): {tail}")
    want = found.download.sha256
    (root / MARKER).write_text(f"{found.version} {want}\n")
    return Miniforge(root, conda, found.version, want, cached, False, found.source)


def ensure(
    version: str,
    root: Path,
    cache_dir: Path,
    env: Mapping[str, str],
    *,
    url: str = "",
    sha256: str = "",
    policy: RetryPolicy | None = None,
    downloader: Downloader | None = None,
) -> Miniforge:
    """Miniforge ``version`` in ``root``: reused when there, else installed from the
    installer in ``cache_dir`` (downloaded once, verified each time it is used), through
    ``downloader`` (the run's: mirrors, credentials, progress)."""
    policy = policy or RetryPolicy()
    reused = _installed(root, version)
    if reused is not None:
        return reused
    found = installer(
        version, cache_dir, url=url, sha256=sha256, policy=policy, downloader=downloader
    )
    return install(found, root, env, policy, downloader)


class Pending:
    """Miniforge being installed on a thread of its own.

    :meth:`result` waits for it and raises what the install raised. A daemon thread: a job that
    fails meanwhile exits."""

    def __init__(self, target: Callable[[], Miniforge]) -> None:
        self.started = time.monotonic()
        self._result: Miniforge | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(target,), name="gpu-ci-miniforge", daemon=True
        )
        self._thread.start()

    def _run(self, target: Callable[[], Miniforge]) -> None:
        try:
            self._result = target()
        except BaseException as exc:  # handed to the waiting thread
            self._error = exc

    def result(self) -> Miniforge:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


def start(
    opts: SetupOptions, env: Mapping[str, str], downloader: Downloader | None = None
) -> Pending:
    """Start installing Miniforge into ``opts.root``, its ``.condarc`` first.

    The installer is kept in the package cache; the caller waits on the result when it
    needs it.
    A reused root and the installer's checksum are settled here, before the thread: no
    checksum fails the job before the environment is made."""
    write_condarc(opts.condarc, opts.pkgs_dir, opts.envs_dir)
    reused = _installed(opts.root, opts.miniforge_version)
    if reused is not None:
        return Pending(lambda: reused)
    found = installer(
        opts.miniforge_version,
        opts.pkgs_dir / INSTALLERS,
        url=opts.installer_url,
        sha256=opts.installer_sha256,
        policy=opts.retry,
        downloader=downloader,
    )
    return Pending(functools.partial(install, found, opts.root, env, opts.retry, downloader))


def write_condarc(path: Path, pkgs_dir: Path, envs_dir: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "# Written by gpu-ci setup-conda-from-lock: this conda never reads the vendor's config.\n"
        "channels: [conda-forge]\n"
        f"pkgs_dirs: [{pkgs_dir}]\n"
        f"envs_dirs: [{envs_dir}]\n"
        "auto_update_conda: false\n"
        "always_yes: true\n"
        "notify_outdated_conda: false\n"
    )
