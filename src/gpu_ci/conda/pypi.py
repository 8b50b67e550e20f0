"""A plan's PyPI packages into a staged environment, exactly as locked.

Files are installed by URL, checked against the lock's sha256, with no dependencies and no
index: nothing is resolved. A pixi lock's editable and path entries (sources in the
checkout, checked by the caller) follow. uv installs them where it is on ``PATH``, else the
environment's own pip. Each installer dies with us (a ``kill -9`` leaves no pip behind).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from gpu_ci.conda.fetch import named_disk_error_in
from gpu_ci.conda.lockfile import InstallPlan
from gpu_ci.errors import GpuCiError
from gpu_ci.faults import crash_point
from gpu_ci.urls import mask_url


def child_dies_with_us() -> None:
    """A child's death signal: SIGKILL when its parent dies (Linux)."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)


def install(
    plan: InstallPlan, staging: Path, target: Path, env: Mapping[str, str], work: Path
) -> str:
    """pip entries into the staged environment, pointing at the target.

    Files are installed as locked: by URL, checked against their sha256, no dependencies,
    no index. Editable and path entries (a pixi lock's sources in the checkout) follow,
    built against the environment itself (no build isolation: nothing is resolved). uv
    installs them where it is on ``PATH``, else the environment's pip. ``--no-compile``:
    byte code compiled now would record the staging path; Python compiles it on first
    import instead. Console scripts get a shebang with the staging interpreter, which is
    rewritten to the final one. Returns the installer used.
    """
    python = staging / "bin" / "python"
    if not python.exists():
        raise GpuCiError(
            f"the lock has {len(plan.pip)} pip entries but the environment has no "
            "python to install them with: add python (and pip) to the lock."
        )
    uv = shutil.which("uv", path=env.get("PATH", ""))
    pip_env = {
        **env,
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INPUT": "1",
        "UV_NO_CONFIG": "1",
        "UV_PYTHON_DOWNLOADS": "never",
    }
    if uv:
        base = [uv, "pip", "install", "--python", str(python), "--no-cache", "--no-deps"]
    else:
        base = [str(python), "-m", "pip", "install", "--no-cache-dir", "--no-compile", "--no-deps"]
    base.append("--no-index")
    hashed = [p for p in plan.pip if not p.source]
    sources = [p for p in plan.pip if p.source in ("editable", "path")]
    bin_dir = staging / "bin"
    before = set(os.listdir(bin_dir))
    if hashed:
        requirements = work / "pip-requirements.txt"
        requirements.write_text(
            "".join(f"{p.name} @ {p.url} --hash=sha256:{p.sha256}\n" for p in hashed)
        )
        _run_installer([*base, "--require-hashes", "-r", str(requirements)], pip_env, staging)
    if sources:
        args = [*base, "--no-build-isolation"]
        for p in sources:
            args += ["-e", p.path] if p.source == "editable" else [p.path]
        _run_installer(args, pip_env, staging)
    old, new = str(staging).encode(), str(target).encode()
    for name in sorted(set(os.listdir(bin_dir)) - before):
        script = bin_dir / name
        if script.is_file() and not script.is_symlink():
            data = script.read_bytes()
            if old in data[:4096]:
                script.write_bytes(data.replace(old, new))
    return "uv" if uv else "pip"


def _run_installer(args: list[str], env: Mapping[str, str], staging: Path) -> None:
    """One pip or uv run, dying with us. Its failure quotes its output."""
    proc = subprocess.Popen(
        args,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=child_dies_with_us,
    )
    crash_point("pip")
    out, err = proc.communicate()
    if proc.returncode != 0:
        tail = mask_url((err or out).strip()[-2000:])
        named = named_disk_error_in(tail, staging, "installing the lock's pip entries")
        raise named or GpuCiError(
            f"installing the lock's pip entries failed (exit {proc.returncode}): {tail}"
        )
