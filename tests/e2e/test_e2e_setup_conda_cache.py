"""cache: true under act: the first job restores (a miss) and saves the package cache, a
second job on a fresh disk restores it and downloads nothing (with ``miniforge: true``, the
one input a job whose later steps run ``conda`` sets, not even Miniforge's installer); the
same through the root action.yml (``command: setup-conda-from-lock``), which runs the same
cache steps.

act cannot fetch actions/cache from github.com here; actions/cache@<pinned commit> is mapped
to a stand-in over the same npm library (tests/e2e/actions-cache/README.md), talking to act's
own cache server.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess

import pytest

pytest.importorskip("rattler_build", reason="py-rattler-build needs Python >= 3.10")

from gpu_ci.conda.miniforge import installer_name  # noqa: E402
from gpu_ci.specs import ACTIONS, ACTIONS_CACHE_SHA  # noqa: E402
from testkit.conda.installers import FAKE  # noqa: E402
from testkit.conda_channel import ChannelServer, build_channel  # noqa: E402
from testkit.shared import ROOT  # noqa: E402

pytestmark = pytest.mark.e2e

#: The @actions/cache release actions/cache v4.2.3 is built on (v1 cache API, act's server).
NPM_PACKAGES = ["@actions/cache@4.0.3", "@actions/core@1.11.1"]


@pytest.fixture(scope="session")
def cache_standin(tmp_path_factory):
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is needed to install @actions/cache for the actions/cache stand-in")
    folder = tmp_path_factory.mktemp("actions-cache")
    shutil.copytree(ROOT / "tests" / "e2e" / "actions-cache", folder, dirs_exist_ok=True)
    proc = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--no-save", *NPM_PACKAGES],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return folder


def _installer(channel) -> tuple[str, str]:
    """A Miniforge-shaped installer served beside the channel: its URL and sha256."""
    name = installer_name(ACTIONS["setup-conda-from-lock"].input("miniforge-version").default)
    folder = channel.root.parent / "miniforge"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(FAKE)
    return channel.url(f"miniforge/{name}"), hashlib.sha256(FAKE).hexdigest()


def _run(act, workflow: str, lock, root, tmp_path, cache_standin, installer=("", "")):
    """The e2e workflow under act, with act's own cache server and actions/cache at its
    pinned commit mapped to the stand-in."""
    return act(
        ROOT / "tests" / "e2e" / "workflows" / workflow,
        "workflow_dispatch",
        {"inputs": {}},
        env={
            "E2E_LOCK": str(lock),
            "E2E_ROOT": str(root),
            "E2E_INSTALLER_URL": installer[0],
            "E2E_INSTALLER_SHA256": installer[1],
        },
        act_args=[
            "--cache-server-addr",
            "127.0.0.1",
            "--cache-server-port",
            "0",
            "--cache-server-path",
            str(tmp_path / "actcache"),
            "--local-repository",
            f"actions/cache@{ACTIONS_CACHE_SHA}={cache_standin}",
        ],
        timeout=600,
    )


@pytest.mark.parametrize(
    "workflow",
    ["setup-conda-cache.yml", "setup-conda-cache-root.yml"],
    ids=["per-action", "root-action"],
)
def test_second_job_restores_the_cache_and_downloads_nothing(
    act, tmp_path, cache_standin, workflow
):
    channel = build_channel(tmp_path / "chan", with_python=False)
    channel.server = ChannelServer(tmp_path / "chan").start()
    lock = tmp_path / "conda-linux-64.lock"
    lock.write_text(channel.explicit_lock(["libhello", "hello", "hello-data"]))
    installer = _installer(channel)
    try:
        result = _run(act, workflow, lock, tmp_path / "mf", tmp_path, cache_standin, installer)
    finally:
        channel.server.stop()
    assert result.returncode == 0, result.log
    out = result.outputs
    assert out["first_reused"] == "false" and int(out["first_pkgs"]) >= 3
    assert "Cache not found for input keys: gpu-ci-conda-v1-" in result.log  # job 1: a miss
    assert "Cache saved with key: gpu-ci-conda-v1-" in result.log  # ... then saved
    assert "Cache restored from key: gpu-ci-conda-v1-" in result.log  # job 2 restored
    assert result.log.count("Cache saved with key") == 1  # a hit (and cache-write) saves none
    assert out["second_hello"] == f"hello from {out['second_prefix']}"
    # every archive was fetched by the first job only: the second linked from the cache
    for archive in channel.archives[:3]:
        assert [s for _, s in channel.server.requests(archive.filename)] == [200], archive
    installer_gets = channel.server.requests(installer[0].rsplit("/", 1)[1])
    if workflow == "setup-conda-cache.yml":  # miniforge: true: conda on PATH in both jobs
        conda = f"{tmp_path / 'mf' / 'condabin' / 'conda'} conda 26.3.2"
        assert out["first_conda"] == conda and out["second_conda"] == conda
        assert "Cache saved with key: gpu-ci-conda-v1-Linux-X64-auto-rattler-mf" in result.log
        assert "+installer-main-" in result.log
        assert [s for _, s in installer_gets] == [200]  # job 2 installed it from the cache
    else:  # miniforge: false
        assert installer_gets == [] and "+installer" not in result.log


def test_environment_mode_restores_the_finished_environment_and_reuses_it(
    act, tmp_path, cache_standin
):
    channel = build_channel(tmp_path / "chan", with_python=False)
    channel.server = ChannelServer(tmp_path / "chan").start()
    lock = tmp_path / "conda-linux-64.lock"
    lock.write_text(channel.explicit_lock(["libhello", "hello", "hello-data"]))
    root = tmp_path / "mf"
    try:
        result = _run(act, "setup-conda-cache-env.yml", lock, root, tmp_path, cache_standin)
    finally:
        channel.server.stop()
    assert result.returncode == 0, result.log
    out = result.outputs
    assert out["first_reused"] == "false"
    # job 1: a miss on the environment's key (no restore-keys), then saved; job 2: restored
    assert "Cache not found for input keys: gpu-ci-conda-env-v1-" in result.log
    assert "Cache saved with key: gpu-ci-conda-env-v1-" in result.log
    assert "Cache restored from key: gpu-ci-conda-env-v1-" in result.log
    assert result.log.count("Cache saved with key") == 1  # the package cache is not saved
    # no step restored or looked up the package cache's key (the command's cache-key
    # output still names it: it is the package cache's key, whatever the mode)
    assert "input keys: gpu-ci-conda-v1-" not in result.log
    assert "from key: gpu-ci-conda-v1-" not in result.log
    assert out["second_reused"] == "true"
    prefix = root / "envs" / "ci"
    assert out["second_prefix"] == str(prefix)
    assert out["second_hello"] == f"hello from {prefix}"  # prefix placeholders hold
    assert out["second_pkgs"] in ("absent", "0")  # reused as it is: nothing extracted
    # job 2 fetched nothing: every archive was downloaded once, by job 1
    for archive in channel.archives[:3]:
        assert [s for _, s in channel.server.requests(archive.filename)] == [200], archive
