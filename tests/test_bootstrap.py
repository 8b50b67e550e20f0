"""The composite actions' bootstrap: one hash-pinned venv, reused, never the vendor conda."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from gpu_ci import __version__
from gpu_ci.specs import GROUPS
from tests.conftest import ROOT, tree_digest

BOOTSTRAP = ROOT / "scripts" / "bootstrap.sh"


def run_bootstrap(tool_cache: Path, tmp_path: Path, action: str = "all", **env: str):
    github_env = tmp_path / "github_env"
    github_env.write_text("")
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("GPU_CI_", "RUNNER_", "GITHUB_", "pythonLocation"))}
    full.update({"RUNNER_TOOL_CACHE": str(tool_cache), "GITHUB_ENV": str(github_env)})
    full.update(env)
    proc = subprocess.run(["/bin/bash", str(BOOTSTRAP), action], env=full, capture_output=True,
                          text=True, timeout=600)
    exported = dict(line.split("=", 1) for line in github_env.read_text().splitlines())
    return proc, exported


@pytest.fixture(scope="session")
def bootstrapped(tool_cache: Path, tmp_path_factory) -> dict[str, str]:
    proc, exported = run_bootstrap(tool_cache, tmp_path_factory.mktemp("boot"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return exported


def test_bootstrap_installs_the_checkout_version_from_the_lock(bootstrapped, tool_cache):
    python = bootstrapped["GPU_CI_PYTHON"]
    assert python.startswith(str(tool_cache / "gpu-ci-actions" / __version__))
    assert bootstrapped["GPU_CI_ROOT"] == str(ROOT)
    out = subprocess.run([python, "-m", "gpu_ci", "--version"], capture_output=True,
                         text=True, check=True, env={"PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == f"gpu-ci {__version__}"
    where = subprocess.run([python, "-c", "import gpu_ci; print(gpu_ci.__file__)"],
                           capture_output=True, text=True, check=True,
                           env={"PATH": "/usr/bin:/bin"})
    assert where.stdout.strip() == str(ROOT / "src" / "gpu_ci" / "__init__.py")
    # exactly the pinned versions from the lock
    listing = ("import importlib.metadata as m\n"
               "for d in m.distributions(): print(d.metadata['Name'] + '==' + d.version)")
    frozen = subprocess.run([python, "-c", listing], capture_output=True,
                            text=True, check=True).stdout.lower()
    lock_text = "".join((ROOT / "requirements" / f"{g}.txt").read_text()
                        for g in GROUPS)
    pins = {(canonicalize_name(m[0]), m[1]) for m in re.findall(
        r"^([A-Za-z0-9_.-]+)==([^\s;]+)", lock_text, re.MULTILINE)}
    installed = {(canonicalize_name(n), v) for n, v in
                 (line.split("==") for line in frozen.splitlines())}
    installed -= {i for i in installed if i[0] in ("pip", "setuptools", "gpu-ci-actions")}
    assert ("pygithub", "2.10.0") in installed or ("pygithub", "2.9.1") in installed
    assert installed <= pins, installed - pins


def test_actions_install_only_their_groups_incrementally(tmp_path):
    cache = tmp_path / "cache"
    proc, exported = run_bootstrap(cache, tmp_path, "verify-cuda-env")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "installed base, nvml" in proc.stdout
    python = exported["GPU_CI_PYTHON"]
    probe = "import importlib.util as u; print([m for m in ('pynvml', 'github', 'rattler', " \
            "'cryptography') if u.find_spec(m)])"
    have = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True)
    assert have.stdout.strip() == "['pynvml']"
    # the gate, later in the same job, adds only the GitHub group to the same venv
    proc, again = run_bootstrap(cache, tmp_path, "gpu-gate", **exported)
    assert proc.returncode == 0 and "installed github" in proc.stdout
    assert again["GPU_CI_PYTHON"] == python
    have = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True)
    assert have.stdout.strip() == "['pynvml', 'github']"  # never cryptography
    # and a third action whose groups are all there skips the work in bash
    proc, _ = run_bootstrap(cache, tmp_path, "remove-label", **exported)
    assert "bootstrapped earlier in this job" in proc.stdout


def test_cache_dir_override_wins_over_the_tool_cache(bootstrapped, tool_cache, tmp_path):
    proc, exported = run_bootstrap(tmp_path / "elsewhere", tmp_path,
                                   GPU_CI_CACHE_DIR=str(tool_cache))
    assert proc.returncode == 0 and ": reused: " in proc.stdout
    assert exported["GPU_CI_PYTHON"] == bootstrapped["GPU_CI_PYTHON"]


def test_second_bootstrap_reuses_the_venv(bootstrapped, tool_cache, tmp_path):
    proc, exported = run_bootstrap(tool_cache, tmp_path)
    assert proc.returncode == 0
    assert ": reused: " in proc.stdout
    assert exported["GPU_CI_PYTHON"] == bootstrapped["GPU_CI_PYTHON"]


def test_later_action_in_the_same_job_skips_the_bootstrap(bootstrapped, tool_cache, tmp_path):
    proc, exported = run_bootstrap(tool_cache, tmp_path, **bootstrapped)
    assert proc.returncode == 0
    assert "bootstrapped earlier in this job" in proc.stdout
    assert exported == {}


def test_read_only_vendor_conda_first_on_path_is_skipped(bootstrapped, tool_cache, tmp_path):
    vendor = tmp_path / "vendor-conda"
    venv.create(vendor, with_pip=False, symlinks=True)
    (vendor / "conda-meta").mkdir()
    (vendor / "conda-meta" / "history").write_text("# vendor\n")
    subprocess.run(["chmod", "-R", "a-w", str(vendor)], check=True)
    before = tree_digest(vendor)
    path = f"{vendor / 'bin'}:{Path(sys.executable).parent}:/usr/bin:/bin"
    proc, exported = run_bootstrap(tool_cache, tmp_path, PATH=path, CONDA=str(vendor))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not exported["GPU_CI_PYTHON"].startswith(str(vendor))
    assert tree_digest(vendor) == before
    subprocess.run(["chmod", "-R", "u+w", str(vendor)], check=True)


def test_no_usable_python_names_setup_python(tmp_path, tool_cache):
    empty = tmp_path / "bin"
    empty.mkdir()
    for tool in ("dirname",):
        os.symlink(f"/usr/bin/{tool}", empty / tool)
    proc, _ = run_bootstrap(tool_cache, tmp_path, PATH=str(empty),
                            GPU_CI_BOOTSTRAP_FALLBACKS="")
    assert proc.returncode == 1
    assert "::error title=gpu-ci bootstrap::No Python >= 3.9" in proc.stdout
    assert "actions/setup-python" in proc.stdout
