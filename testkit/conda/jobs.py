"""Jobs of setup-conda-from-lock as a runner starts them, and their checks.

Shared by the tests of tests/conda/ (their fixtures are in tests/conda/conftest.py): a job in
its own process (:func:`spawn`, :func:`job`, :func:`finish`), the processes and temporary
files it may leave, and the checks of a complete environment and a valid package cache."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from testkit.shared import ROOT

__all__ = [
    "ROOT",
    "SMALL",
    "FAKE_INSTALLER",
    "FAKE_MF",
    "PROXY_VARIABLES",
    "spawn",
    "job",
    "finish",
    "rattler_entry",
    "processes_tagged",
    "survivors",
    "our_temporaries",
    "assert_environment",
    "assert_cache_valid",
    "assert_whole",
    "uv_alone",
    "wheel_checkout",
]

FAKE_INSTALLER = """#!/bin/bash
# Installer-shaped stand-in for Miniforge3-*.sh: same flags, lays down bin/conda.
set -e
prefix=""
while getopts "bup:" opt; do
  case $opt in b) ;; u) ;; p) prefix="$OPTARG" ;; *) exit 2 ;; esac
done
[ -n "$prefix" ] || exit 2
mkdir -p "$prefix/bin" "$prefix/condabin"
printf '#!/bin/sh\\necho "conda 26.3.2"\\n' > "$prefix/bin/conda"
chmod +x "$prefix/bin/conda"
echo "installed into $prefix"
"""


#: A version the package ships no installer hash for: the fake installer below is checked
#: against its same-origin .sha256 (the shipped hashes would, rightly, refuse it).
FAKE_MF = "0.0.1-0"


def miniforge_args(url: str) -> tuple[str, ...]:
    """setup-conda-from-lock's arguments for the fake Miniforge installer at ``url``."""
    return ("--miniforge", "true", "--installer-url", url, "--miniforge-version", FAKE_MF)


#: The proxy variables a job may inherit; the proxy tests set only the ones they choose.
PROXY_VARIABLES = ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"]

SMALL = ["libhello", "hello", "hello-data"]


def spawn(
    lock: Path, prefix: Path, pkgs: Path, *, env=None, tag: str = "", toolcache: Path | None = None
) -> subprocess.Popen:
    """One job, as a runner starts it: its own process, our CLI, no activation."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("INPUT_", "GITHUB_"))}
    full.update(
        {
            "PYTHONPATH": str(ROOT / "src"),
            "GPU_CI_HTTP_BACKOFF": "0.01",
            "GPU_CI_HTTP_RETRIES": "2",
            "GPU_CI_TEST_JOB": tag or uuid.uuid4().hex,
            "RUNNER_TOOL_CACHE": str(toolcache or pkgs.parent / "toolcache"),
        }
    )
    full.update(env or {})
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpu_ci",
            "setup-conda-from-lock",
            "--lock-file",
            str(lock),
            "--miniforge",
            "false",
            "--activate",
            "false",
            "--prefix",
            str(prefix),
            "--pkgs-dir",
            str(pkgs),
        ],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=str(ROOT),
    )


def job(lock: Path, prefix: Path, pkgs: Path, **kw) -> tuple[int, str]:
    proc = spawn(lock, prefix, pkgs, **kw)
    out, _ = proc.communicate(timeout=120)
    return proc.returncode, out


def processes_tagged(tag: str) -> list[int]:
    """Live processes whose environment carries GPU_CI_TEST_JOB=<tag> (workers included)."""
    found = []
    needle = f"GPU_CI_TEST_JOB={tag}".encode()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes()
                state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
            except OSError:
                continue
            if needle in environ.split(b"\0") and state != "Z":
                found.append(int(pid))
    return found


def survivors(tag: str) -> list[int]:
    """Tagged processes that outlive the job: alive and without a pending SIGKILL. The
    parent-death signal is sent while the parent exits, so by the time the parent is reaped
    a worker or pip either is gone or has SIGKILL pending (it may not have run yet to die)."""
    doomed = 1 << (signal.SIGKILL - 1)
    out = []
    for pid in processes_tagged(tag):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue  # gone meanwhile
        pending = 0
        for line in status.splitlines():
            if line.startswith(("SigPnd:", "ShdPnd:")):
                pending |= int(line.split()[1], 16)
        if not pending & doomed:
            out.append(pid)
    return out


def our_temporaries(*folders: Path) -> list[Path]:
    """Every temporary name this action uses, anywhere under the given folders."""
    patterns = (
        ".*.gpu-ci-new-*",
        ".*.gpu-ci-old-*",
        ".*.gpu-ci-work-*",
        "*.part-*",
        ".*.tmp-*",
        ".*.gpu-ci-journal.json*",
        "*.part",
    )
    return sorted(
        {
            p
            for folder in folders
            if folder.exists()
            for pattern in patterns
            for p in folder.rglob(pattern)
        }
    )


def assert_environment(prefix: Path, names: list[str]) -> None:
    """Complete: every package's record, every recorded file with its size, and ours."""
    from gpu_ci.conda.integrity import environment_problems

    records = sorted(
        p.name.rsplit("-", 2)[0]
        for p in (prefix / "conda-meta").glob("*.json")
        if p.name != "gpu-ci-lock.json"
    )
    assert records == sorted(names)
    assert environment_problems(prefix, len(names)) == []
    assert (prefix / "conda-meta" / "gpu-ci-lock.json").exists()


def assert_cache_valid(pkgs: Path, channel) -> None:
    for archive in channel.archives:
        path = pkgs / "archives" / archive.filename
        if path.exists():
            assert hashlib.md5(path.read_bytes()).hexdigest() == archive.md5
            entry = pkgs / "rattler" / f"{archive.name}-{archive.version}-{archive.build}"
            assert (entry / ".gpu-ci-archive-sha256").read_text() == archive.md5


def assert_whole(prefix: Path, names: list[str], pkgs: Path, channel, scratch: Path) -> None:
    """A complete environment, none of our temporaries, a valid package cache."""
    assert_environment(prefix, names)
    assert our_temporaries(scratch) == []
    assert_cache_valid(pkgs, channel)


def finish(proc: subprocess.Popen, timeout: float = 90) -> tuple[int, str]:
    """(exit status, output) of a spawned job.

    A job that hangs (a FIFO read) fails the test."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()  # its workers die with it (prctl)
        out, _ = proc.communicate()
        pytest.fail(f"the job did not finish in {timeout} s (waiting on a FIFO?):\n{out}")
    return proc.returncode, out


def rattler_entry(pkgs: Path, name: str) -> Path:
    """The extracted cache entry of package ``name`` in the package cache ``pkgs``."""
    return next(
        e for e in (pkgs / "rattler").iterdir() if e.is_dir() and e.name.startswith(name + "-")
    )


def uv_alone(tmp_path: Path) -> Path:
    """A folder with only a link to uv; skips without uv."""
    import shutil

    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    if not Path(uv).exists():
        pytest.skip("uv is not installed")
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "uv").symlink_to(uv)
    return bare


def wheel_checkout(channel, tmp_path: Path, packages: list[str]) -> Path:
    """A checkout whose pixi.lock installs ``packages`` and the channel's hashed wheel."""
    channel.server.faults.clear()
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    sha = hashlib.sha256(channel.wheel.read_bytes()).hexdigest()
    entry = {"pypi": channel.url("wheels/" + channel.wheel.name), "name": "gpuci-demo"}
    (checkout / "pixi.lock").write_text(
        channel.pixi_lock({"default": packages}, pypi=[{**entry, "version": "1.0", "sha256": sha}])
    )
    return checkout
