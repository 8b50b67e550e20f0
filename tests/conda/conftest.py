"""Fixtures of the conda wing's tests: the local conda channel served over HTTP, the action
run through the CLI against it, the lock files of the job tests, and a Miniforge installer."""

from __future__ import annotations

import hashlib
import os

import pytest

from testkit.cli import parse_output_file
from testkit.conda.jobs import FAKE_INSTALLER, FAKE_MF, SMALL


@pytest.fixture(scope="session")
def channel(tmp_path_factory):
    pytest.importorskip("rattler", reason="py-rattler needs Python >= 3.10")
    pytest.importorskip("rattler_build", reason="py-rattler-build needs Python >= 3.10")
    from testkit.conda_channel import ChannelServer, build_channel

    root = tmp_path_factory.mktemp("channel")
    built = build_channel(root)
    built.server = ChannelServer(root).start()
    yield built
    built.server.stop()


@pytest.fixture
def warm(channel, tmp_path):
    """A plan of three packages installed once (``tmp_path / "a"``, package cache ``pkgs``):
    its cache holds a stamped entry for each; the lock is ``tmp_path / "lock.txt"``."""
    from gpu_ci.conda import install, lockfile
    from testkit.conda_channel import SUBDIR

    text = channel.explicit_lock(["libhello", "hello", "hello-data"])
    plan = lockfile.plan(lockfile.parse(text), text, SUBDIR, ["main"])
    pkgs = tmp_path / "pkgs"
    install.install(plan, tmp_path / "a", pkgs, dict(os.environ), log=lambda _: None)
    (tmp_path / "lock.txt").write_text(text)
    return plan, pkgs


@pytest.fixture
def setup(run_cli, tmp_path, channel):
    """Run setup-conda-from-lock with a lock text; returns the result with handy paths."""
    channel.server.faults.clear()
    cache = tmp_path / "toolcache"

    def run(lock_text: str, *args: str, env=None, name="lock.txt"):
        lock = tmp_path / name
        lock.write_text(lock_text)
        for f in ("github_env", "github_path"):
            (tmp_path / f).touch()
        full = {
            "RUNNER_TOOL_CACHE": str(cache),
            "GITHUB_ENV": str(tmp_path / "github_env"),
            "GITHUB_PATH": str(tmp_path / "github_path"),
            "GPU_CI_HTTP_BACKOFF": "0.01",
            "GPU_CI_HTTP_RETRIES": "2",
        }
        full.update(env or {})
        result = run_cli(
            ["setup-conda-from-lock", "--lock-file", str(lock), "--miniforge", "false", *args], full
        )
        result.github_env = parse_output_file((tmp_path / "github_env").read_text())
        result.github_path = (tmp_path / "github_path").read_text().split()
        return result

    run.default_prefix = cache / "miniforge3" / "26.3.2-3" / "envs" / "ci"
    return run


@pytest.fixture
def installer(channel):
    from gpu_ci.conda.miniforge import installer_name

    name = installer_name(FAKE_MF)
    folder = channel.root.parent / "miniforge" / FAKE_MF
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / name
    script.write_text(FAKE_INSTALLER)
    sha = hashlib.sha256(script.read_bytes()).hexdigest()
    (folder / (name + ".sha256")).write_text(f"{sha}  {name}\n")
    return channel.url(f"miniforge/{FAKE_MF}/{name}"), sha


@pytest.fixture
def locks(tmp_path, channel):
    channel.server.faults.clear()
    out = {}
    for key, names, pip in (
        ("old", ["libhello"], False),
        ("small", SMALL, False),
        ("pip", ["libhello", "hello", "python"], True),
    ):
        path = tmp_path / f"{key}.lock"
        path.write_text(channel.explicit_lock(names, pip=pip))
        out[key] = path
    return out
