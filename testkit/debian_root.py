"""The cached minimal Debian root, without Python, and how jobs enter it.

``tests/test_bootstrap_container.py`` and ``benchmarks/cold_start.py`` share it. The root
(``debootstrap --variant=minbase``, Debian's own tool and mirror) is built once and kept under
``${XDG_CACHE_HOME:-~/.cache}/gpu-ci-tests``: built aside, renamed into place, one builder at
a time. A job runs in an overlay of it (a copy where overlayfs is missing), in a private
mount namespace (:data:`ENTER`), so the cached root is never written."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

SUITE = "bookworm"
MULTIARCH = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    path = Path(base) / "gpu-ci-tests"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """One builder at a time per cached thing.

    CI runs on one machine may overlap."""
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def debian_mirror() -> str:
    """The Debian mirror this machine's apt uses (GPU_CI_TEST_DEBIAN_MIRROR overrides)."""
    if os.environ.get("GPU_CI_TEST_DEBIAN_MIRROR"):
        return os.environ["GPU_CI_TEST_DEBIAN_MIRROR"]
    texts = []
    for path in [Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*")]:
        if path.suffix in ("", ".list", ".sources") and path.is_file():
            texts.append(path.read_text(errors="replace"))
    for text in texts:
        for match in re.finditer(r"(?m)^(?:URIs:|deb)\s+(?:\[[^]]*\]\s+)?(\S+/debian)/?\s", text):
            return match.group(1)
    return "http://deb.debian.org/debian"


def debian_root() -> Path:
    """The cached minimal Debian root: no Python in it (checked)."""
    final = cache_dir() / f"debian-{SUITE}-minbase"
    if (final / "etc" / "debian_version").is_file():
        return final
    with locked(cache_dir() / f"debian-{SUITE}-minbase.lock"):
        if (final / "etc" / "debian_version").is_file():
            return final
        for stale in cache_dir().glob(f".debian-{SUITE}-*"):  # a killed build's, lock held
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".debian-{SUITE}-", dir=cache_dir()))
        try:
            proc = subprocess.run(
                ["debootstrap", "--variant=minbase", SUITE, str(tmp), debian_mirror()],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                pytest.fail(f"debootstrap failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
            os.chmod(tmp, 0o755)
            os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


#: Copied into the job's checkout: what the actions run (no tests, no .venv, no .git).
CHECKOUT = ("scripts", "src", "requirements", "pyproject.toml")

#: Runs on the host, as root: an overlay of the cached root in a private mount namespace,
#: the driver files the NVIDIA container toolkit injects, then the job inside it (chroot).
ENTER = r"""
set -euo pipefail
lower="$1" work="$2" lib="$3"
mount -t tmpfs tmpfs "$work/ovl"
mkdir "$work/ovl/upper" "$work/ovl/work"
if ! mount -t overlay overlay -o "lowerdir=$lower,upperdir=$work/ovl/upper,workdir=$work/ovl/work" \
     "$work/root" 2>/dev/null; then
  cp -a "$lower/." "$work/root/"   # no overlayfs: a private copy
fi
r="$work/root"
mount --rbind /dev "$r/dev"
mount -t proc proc "$r/proc"
cp /etc/resolv.conf "$r/etc/resolv.conf"
: > "$r/.dockerenv"   # what Docker writes into every container
[ ! -f "$work/ca.crt" ] || cp "$work/ca.crt" "$r/etc/gpu-ci-tests-ca.crt"
mkdir -p "$r/opt/gpu-ci" "$r/job"
mount --bind "$work/checkout" "$r/opt/gpu-ci"
mount --bind "$work/job" "$r/job"
# What `--gpus all` with NVIDIA_DRIVER_CAPABILITIES=compute,utility mounts: NVML (utility)
# and libcuda (compute), then the toolkit's ldconfig hook.
cp "$work/nvml/libnvidia-ml.so.1" "$work/nvml/libcuda.so.1" "$r/usr/lib/$lib/"
cp "$work/nvml.cfg" "$r/etc/fake-nvml.cfg"
chroot "$r" /sbin/ldconfig
exec chroot "$r" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root LANG=C.UTF-8 /bin/bash /job/job.sh
"""


def pip_config_into(work: Path) -> None:
    """This machine's way to PyPI, for pip inside the root: the CA bundle pip trusts here (a
    proxy's CA) and an index URL set in the environment (paths on this machine do not
    exist in the root and are left out)."""
    cert = (
        os.environ.get("PIP_CERT")
        or subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", "global.cert"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    if cert and Path(cert).is_file():
        shutil.copy(cert, work / "ca.crt")
    lines = [
        f"{name}={os.environ[name]}"
        for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")
        if os.environ.get(name, "").startswith(("http://", "https://"))
    ]
    (work / "job" / "pip.env").write_text("".join(line + "\n" for line in lines))
