"""Create or reuse the virtual environment that runs gpu-ci (standard library only).

Key: package version + Python version + sha256 of the hash-pinned lock. It lives under
``$RUNNER_TOOL_CACHE`` (``$RUNNER_TEMP`` as a fallback), so later actions in the job and
later jobs on a persistent self-hosted runner reuse it. Dependencies come only from
``requirements/runtime.txt`` with ``--require-hashes``; the package itself is *not*
installed from an index: a ``.pth`` file points at this checkout's ``src/``, so ``@v1``,
``@v1.2.3`` and ``@<sha>`` each run exactly the code they name.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements" / "runtime.txt"
MARKER = ".gpu-ci-complete"


def package_version() -> str:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'^version\s*=\s*"([^"]+)"', text, re.MULTILINE)
    if not match:
        raise SystemExit("::error title=gpu-ci bootstrap::no version in pyproject.toml")
    return match.group(1)


def cache_base() -> Path:
    # GPU_CI_CACHE_DIR: an explicit home for the venv (e.g. a persistent disk on a
    # self-hosted runner); otherwise the tool cache, then the job's temp directory.
    for name in ("GPU_CI_CACHE_DIR", "RUNNER_TOOL_CACHE", "RUNNER_TEMP"):
        value = os.environ.get(name)
        if value:
            return Path(value)
    return Path.home() / ".cache"


def venv_dir() -> Path:
    lock_hash = hashlib.sha256(LOCK.read_bytes()).hexdigest()[:12]
    py = f"py{sys.version_info[0]}{sys.version_info[1]}"
    return cache_base() / "gpu-ci-actions" / package_version() / f"{py}-{lock_hash}"


def venv_python(venv: Path) -> Path:
    if os.name == "nt":
        return venv / "Scripts" / "python.exe"
    return venv / "bin" / "python"


def site_packages(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    )
    return Path(out.stdout.strip())


def run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout + proc.stderr)
        raise SystemExit(
            f"::error title=gpu-ci bootstrap::'{' '.join(cmd[:4])} ...' failed with exit code "
            f"{proc.returncode} (output above)."
        )


def create(venv: Path) -> None:
    if venv.exists():  # an earlier attempt died half-way: start again
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    run([sys.executable, "-m", "venv", str(venv)])
    python = str(venv_python(venv))
    env_pip = [python, "-m", "pip", "--disable-pip-version-check", "--no-input", "-q"]
    run(env_pip + ["install", "--require-hashes", "--no-deps", "--only-binary", ":all:",
                   "-r", str(LOCK)])


def link_source(python: Path) -> None:
    """Point the venv at this checkout's ``src/`` (rewritten atomically on every bootstrap)."""
    pth = site_packages(python) / "gpu_ci_checkout.pth"
    tmp = pth.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(str(ROOT / "src") + "\n", encoding="utf-8")
    os.replace(tmp, pth)


def export(name: str, value: str) -> None:
    path = os.environ.get("GITHUB_ENV")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(f"{name}={value}\n")
    else:
        print(f"{name}={value}")


def main() -> int:
    start = time.monotonic()
    venv = venv_dir()
    python = venv_python(venv)
    lock_path = venv.parent / (venv.name + ".lock")
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock_handle:
        try:  # serialise concurrent bootstraps on one machine
            import fcntl

            fcntl.flock(lock_handle, fcntl.LOCK_EX)
        except ImportError:  # Windows: best effort
            pass
        created = not (venv / MARKER).exists()
        if created:
            create(venv)
            (venv / MARKER).write_text(package_version() + "\n", encoding="utf-8")
        link_source(python)
    export("GPU_CI_PYTHON", str(python))
    export("GPU_CI_ROOT", str(ROOT))
    verb = "created" if created else "reused"
    print(f"gpu-ci {package_version()}: {verb} {venv} in {time.monotonic() - start:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
