"""Install Miniforge into a writable root, from a verified, cached installer.

The installer's sha256 comes from the ``installer-sha256`` input or the release's
``<installer>.sha256`` file (first field); without one nothing is installed. Installers are
cached per version and architecture; a root that already holds the version is reused.
"""

from __future__ import annotations

import platform as _platform
import subprocess
import urllib.error
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpu_ci.downloads import Download, RetryPolicy, fetch, read_small, route
from gpu_ci.errors import GpuCiError
from gpu_ci.urls import mask_url

RELEASES = "https://github.com/conda-forge/miniforge/releases/download"
MARKER = ".gpu-ci-miniforge"


@dataclass(frozen=True)
class Miniforge:
    root: Path
    conda: Path
    version: str
    sha256: str
    installer_cached: bool
    reused: bool


def installer_name(version: str, system: str | None = None, machine: str | None = None) -> str:
    system = system or _platform.system()
    machine = machine or _platform.machine()
    os_name = {"Linux": "Linux", "Darwin": "MacOSX"}.get(system)
    if os_name is None:
        raise GpuCiError(f"Miniforge's shell installer is for Linux and macOS; this runner is "
                         f"{system}. Set miniforge: false.")
    arch = {"amd64": "x86_64", "arm64": "arm64" if os_name == "MacOSX" else "aarch64"}.get(
        machine.lower(), machine)
    return f"Miniforge3-{version}-{os_name}-{arch}.sh"


def _checksum_from_release(url: str, policy: RetryPolicy) -> str:
    try:
        text = read_small(url + ".sha256", policy.timeout).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise GpuCiError(f"HTTP {exc.code} for {mask_url(url)}.sha256: "
                             f"{route(url).hint}.", title="unverified installer") from None
        raise GpuCiError(f"no checksum for the Miniforge installer: {mask_url(url)}.sha256 could "
                         f"not be read (HTTP {exc.code}). Set installer-sha256; nothing was "
                         "installed.", title="unverified installer") from None
    except (urllib.error.URLError, OSError) as exc:
        raise GpuCiError(f"no checksum for the Miniforge installer: {mask_url(url)}.sha256 could "
                         f"not be read ({getattr(exc, 'reason', exc)}). Set installer-sha256; "
                         "nothing was installed.", title="unverified installer") from None
    fields = text.split()
    if not fields or len(fields[0]) != 64:
        raise GpuCiError(f"{mask_url(url)}.sha256 holds no sha256 ({text[:80]!r}). Set "
                         "installer-sha256; nothing was installed.", title="unverified installer")
    return str(fields[0]).lower()


def ensure(version: str, root: Path, cache_dir: Path, env: Mapping[str, str], *,
           url: str = "", sha256: str = "", policy: RetryPolicy | None = None) -> Miniforge:
    policy = policy or RetryPolicy()
    conda = root / "bin" / "conda"
    marker = root / MARKER
    if conda.exists() and marker.exists() and marker.read_text().split()[0:1] == [version]:
        recorded = marker.read_text().split()
        return Miniforge(root, conda, version, recorded[1] if len(recorded) > 1 else "",
                         True, True)
    name = installer_name(version)
    url = url or f"{RELEASES}/{version}/{name}"
    want = sha256.strip().lower() or _checksum_from_release(url, policy)
    got = fetch(Download(url, cache_dir / version / name, f"Miniforge {version} ({name})",
                         sha256=want), policy)
    proc = subprocess.run(["bash", str(got.download.dest), "-b", "-u", "-p", str(root)],
                          env=dict(env), capture_output=True, text=True)
    if proc.returncode != 0 or not conda.exists():
        tail = (proc.stderr or proc.stdout).strip()[-1500:]
        raise GpuCiError(f"the Miniforge installer failed (exit {proc.returncode}): {tail}")
    marker.write_text(f"{version} {want}\n")
    return Miniforge(root, conda, version, want, got.cached, False)


def write_condarc(path: Path, pkgs_dir: Path, envs_dir: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "# Written by gpu-ci setup-conda-from-lock: this conda never reads the vendor's config.\n"
        "channels: [conda-forge]\n"
        f"pkgs_dirs: [{pkgs_dir}]\n"
        f"envs_dirs: [{envs_dir}]\n"
        "auto_update_conda: false\n"
        "always_yes: true\n"
        "notify_outdated_conda: false\n")
