"""Install Miniforge into a writable root, from a verified, cached installer.

The installer's sha256 comes from the ``installer-sha256`` input, else from
:data:`INSTALLER_SHA256` shipped with this package (every version it knows: the default one),
and only for other versions from the release's ``<installer>.sha256`` file (first field),
with a warning: a file on the same origin as the installer proves only that the download
was not truncated, not that the origin is honest. Without any nothing is installed.
Installers are cached per version and architecture; a root that already holds the version
is reused.
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


def _checksum_from_release(url: str, policy: RetryPolicy) -> str:
    try:
        text = read_small(url + ".sha256", policy.timeout).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise GpuCiError(
                f"HTTP {exc.code} for {mask_url(url)}.sha256: {route(url).hint}.",
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


def ensure(
    version: str,
    root: Path,
    cache_dir: Path,
    env: Mapping[str, str],
    *,
    url: str = "",
    sha256: str = "",
    policy: RetryPolicy | None = None,
) -> Miniforge:
    policy = policy or RetryPolicy()
    conda = root / "bin" / "conda"
    marker = root / MARKER
    if conda.exists() and marker.exists() and marker.read_text().split()[0:1] == [version]:
        recorded = marker.read_text().split()
        return Miniforge(root, conda, version, recorded[1] if len(recorded) > 1 else "", True, True)
    name = installer_name(version)
    url = url or f"{RELEASES}/{version}/{name}"
    want, source = sha256.strip().lower(), "input"
    if not want and name in INSTALLER_SHA256.get(version, {}):
        want, source = INSTALLER_SHA256[version][name], "shipped"
    if not want:
        want, source = _checksum_from_release(url, policy), "release"
    got = fetch(
        Download(url, cache_dir / version / name, f"Miniforge {version} ({name})", sha256=want),
        policy,
    )
    proc = subprocess.run(
        ["bash", str(got.download.dest), "-b", "-u", "-p", str(root)],
        env=dict(env),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0 or not conda.exists():
        tail = (proc.stderr or proc.stdout).strip()[-1500:]
        raise GpuCiError(f"the Miniforge installer failed (exit {proc.returncode}): {tail}")
    marker.write_text(f"{version} {want}\n")
    return Miniforge(root, conda, version, want, got.cached, False, source)


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
