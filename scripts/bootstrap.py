"""Create or reuse the virtual environment that runs gpu-ci (standard library only).

Usage: ``bootstrap.py <action>``. Each action installs only the dependency groups it needs
(``requirements/<group>.txt``, hash-pinned): the GPU-side actions never install the GitHub
client, and the gate never installs NVML or conda code. Groups are added incrementally to
one shared environment, keyed by package version + Python version + the hash of all group
locks, under ``$GPU_CI_CACHE_DIR``, ``$RUNNER_TOOL_CACHE`` or ``$RUNNER_TEMP``; later actions
in the job and later jobs on a persistent self-hosted runner reuse it.

The package itself is *not* installed from an index: a ``.pth`` file points at this
checkout's ``src/``, so ``@v1``, ``@v1.2.3`` and ``@<sha>`` each run exactly the code they
name. ``uv`` installs when it is on PATH (trying its cache offline first); pip otherwise.
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
LOCKS = ROOT / "requirements"
COMPLETE = ".gpu-ci-complete"

# The action -> groups table lives in the specs (standard library only, so importable
# before any dependency is installed), loaded from this checkout's own src/.
sys.path.insert(0, str(ROOT / "src"))
from gpu_ci.specs import GROUPS as ALL  # noqa: E402
from gpu_ci.specs import groups_for  # noqa: E402


def fail(message: str) -> SystemExit:
    return SystemExit(f"::error title=gpu-ci bootstrap::{message}")


def package_version() -> str:
    text = (ROOT / "src" / "gpu_ci" / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__\s*=\s*"([^"]+)"', text, re.MULTILINE)
    if not match:
        raise fail("no __version__ in src/gpu_ci/__init__.py")
    return match.group(1)


def cache_base() -> Path:
    # GPU_CI_CACHE_DIR: an explicit home for the venv (e.g. a persistent disk on a
    # self-hosted runner); otherwise the tool cache, then the job's temp directory.
    for name in ("GPU_CI_CACHE_DIR", "RUNNER_TOOL_CACHE", "RUNNER_TEMP"):
        value = os.environ.get(name)
        if value:
            return Path(value)
    return Path.home() / ".cache"


def locks_hash() -> str:
    digest = hashlib.sha256()
    for group in ALL:
        digest.update((LOCKS / f"{group}.txt").read_bytes())
    return digest.hexdigest()[:12]


def venv_dir() -> Path:
    py = f"py{sys.version_info[0]}{sys.version_info[1]}"
    return cache_base() / "gpu-ci-actions" / package_version() / f"{py}-{locks_hash()}"


def venv_python(venv: Path) -> Path:
    if os.name == "nt":
        return venv / "Scripts" / "python.exe"
    return venv / "bin" / "python"


def run(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def check(proc: subprocess.CompletedProcess, what: str) -> None:
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout + proc.stderr)
        raise fail(f"{what} failed with exit code {proc.returncode} (output above).")


def host_pip_supports_python_flag() -> bool:
    proc = run([sys.executable, "-m", "pip", "--version"])
    match = re.search(r"pip (\d+)\.(\d+)", proc.stdout)
    return bool(match) and (int(match.group(1)), int(match.group(2))) >= (22, 3)


class Installer:
    """uv when on PATH, else pip: the same hash-pinned files either way."""

    def __init__(self) -> None:
        self.uv = shutil.which("uv")
        self.host_pip = not self.uv and host_pip_supports_python_flag()
        self.name = "uv" if self.uv else "pip"

    def create(self, venv: Path) -> None:
        if venv.exists():  # an earlier attempt died half-way: start again
            shutil.rmtree(venv)
        venv.parent.mkdir(parents=True, exist_ok=True)
        if self.uv:
            check(run([self.uv, "venv", "--quiet", "--python", sys.executable, str(venv)]),
                  "uv venv")
        elif self.host_pip:  # no pip inside: the host's pip installs into it (faster)
            check(run([sys.executable, "-m", "venv", "--without-pip", str(venv)]), "venv")
        else:
            check(run([sys.executable, "-m", "venv", str(venv)]), "python -m venv")

    def install(self, venv: Path, lock: Path) -> None:
        python = str(venv_python(venv))
        if self.uv:
            # --compile-bytecode: like pip, so that no later run pays for compiling (and
            # runners with PYTHONDONTWRITEBYTECODE would pay on every run).
            base = [self.uv, "pip", "install", "--quiet", "--python", python,
                    "--require-hashes", "--no-deps", "--only-binary", ":all:",
                    "--compile-bytecode", "-r", str(lock)]
            if run(base + ["--offline"]).returncode == 0:  # everything cached: no network
                return
            check(run(base), f"uv pip install -r {lock.name}")
            return
        pip = ([sys.executable, "-m", "pip", "--python", python] if self.host_pip
               else [python, "-m", "pip"])
        check(run(pip + ["--disable-pip-version-check", "--no-input", "-q", "install",
                         "--require-hashes", "--no-deps", "--only-binary", ":all:",
                         "-r", str(lock)]), f"pip install -r {lock.name}")


def site_packages(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


def link_source(python: Path) -> None:
    """Point the venv at this checkout's ``src/`` (rewritten atomically on every bootstrap),
    and compile it once, so that no run recompiles it (PYTHONDONTWRITEBYTECODE or not)."""
    pth = site_packages(python) / "gpu_ci_checkout.pth"
    tmp = pth.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(str(ROOT / "src") + "\n", encoding="utf-8")
    os.replace(tmp, pth)
    if not list((ROOT / "src" / "gpu_ci").glob("__pycache__/cli.*.pyc")):
        run([str(python), "-m", "compileall", "-q", str(ROOT / "src" / "gpu_ci")])


def export(name: str, value: str) -> None:
    path = os.environ.get("GITHUB_ENV")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(f"{name}={value}\n")
    else:
        print(f"{name}={value}")


def main(argv: list[str]) -> int:
    start = time.monotonic()
    groups = groups_for(argv[0] if argv else "")
    venv = venv_dir()
    python = venv_python(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    added: list[str] = []
    installer = None
    with open(venv.parent / (venv.name + ".lock"), "w") as lock_handle:
        try:  # serialise concurrent bootstraps on one machine
            import fcntl

            fcntl.flock(lock_handle, fcntl.LOCK_EX)
        except ImportError:  # Windows: best effort
            pass
        if not (venv / COMPLETE).exists():
            installer = Installer()
            installer.create(venv)
            (venv / COMPLETE).write_text(package_version() + "\n", encoding="utf-8")
        for group in groups:
            marker = venv / f".gpu-ci-group-{group}"
            if marker.exists():
                continue
            installer = installer or Installer()
            installer.install(venv, LOCKS / f"{group}.txt")
            marker.write_text("")
            added.append(group)
        link_source(python)
    export("GPU_CI_PYTHON", str(python))
    export("GPU_CI_ROOT", str(ROOT))
    how = f"installed {', '.join(added)} with {installer.name}" if added else "reused"
    print(f"gpu-ci {package_version()}: {how}: {venv} ({time.monotonic() - start:.1f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
