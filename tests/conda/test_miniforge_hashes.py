"""Miniforge installers of the versions we ship are checked against hashes shipped with the
package, never against a ``.sha256`` that the (possibly hostile) mirror serves beside them."""

from __future__ import annotations

import hashlib

import pytest

from gpu_ci.conda import miniforge
from gpu_ci.downloads import RetryPolicy
from gpu_ci.errors import GpuCiError
from gpu_ci.specs import ACTIONS
from testkit.conda.installers import FAKE, Mirror


def test_the_default_version_ships_a_hash_for_every_installer():
    default = ACTIONS["setup-conda-from-lock"].input("miniforge-version").default
    shipped = miniforge.INSTALLER_SHA256[default]
    for system, machine in (
        ("Linux", "x86_64"),
        ("Linux", "aarch64"),
        ("Darwin", "x86_64"),
        ("Darwin", "arm64"),
    ):
        name = miniforge.installer_name(default, system, machine)
        assert len(shipped[name]) == 64 and int(shipped[name], 16) >= 0
    assert len(set(shipped.values())) == len(shipped)


@pytest.fixture
def mirror(tmp_path):
    """A mirror that serves a fake installer and a matching .sha256 beside it."""
    default = ACTIONS["setup-conda-from-lock"].input("miniforge-version").default
    name = miniforge.installer_name(default)
    (tmp_path / name).write_bytes(FAKE)
    (tmp_path / (name + ".sha256")).write_text(f"{hashlib.sha256(FAKE).hexdigest()}  {name}\n")
    server = Mirror(tmp_path)
    yield default, server.url(name), server.seen
    server.stop()


def test_a_mirror_cannot_vouch_for_its_own_installer(mirror, tmp_path):
    version, url, seen = mirror
    root = tmp_path / "root"
    with pytest.raises(GpuCiError, match=f"sha256 mismatch for Miniforge {version}"):
        miniforge.ensure(
            version, root, tmp_path / "installers", {}, url=url, policy=RetryPolicy(attempts=1)
        )
    assert not root.exists()
    assert not any(path.endswith(".sha256") for path in seen)  # never asked


def test_an_explicit_hash_still_wins(mirror, tmp_path):
    version, url, _ = mirror
    mf = miniforge.ensure(
        version,
        tmp_path / "root",
        tmp_path / "installers",
        {},
        url=url,
        sha256=hashlib.sha256(FAKE).hexdigest(),
        policy=RetryPolicy(attempts=1),
    )
    assert mf.checksum_from == "input"
