"""Miniforge's installer in the package cache: used from there without a download, but only
as a private copy whose bytes hashed to the pinned sha256; a partial, tampered, linked or
FIFO cached file never runs (it is downloaded again), and a download killed half-way leaves
nothing under the installer's name, and nothing at all once the next job has run."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_ci.conda import miniforge
from gpu_ci.downloads import RetryPolicy
from testkit.conda.installers import FAKE, Mirror, evil
from testkit.shared import ROOT

VERSION = "0.0.1-0"
SHA = hashlib.sha256(FAKE).hexdigest()
NAME = miniforge.installer_name(VERSION)


@pytest.fixture
def served(tmp_path):
    folder = tmp_path / "mirror"
    folder.mkdir()
    (folder / NAME).write_bytes(FAKE)
    server = Mirror(folder)
    yield server
    server.stop()


def _ensure(served: Mirror, root: Path, cache: Path) -> miniforge.Miniforge:
    return miniforge.ensure(
        VERSION, root, cache, {}, url=served.url(NAME), sha256=SHA, policy=RetryPolicy(attempts=1)
    )


def test_a_cached_installer_is_used_without_a_download_as_a_verified_copy(served, tmp_path):
    pkgs = tmp_path / "pkgs"
    cache = pkgs / miniforge.INSTALLERS
    first = _ensure(served, tmp_path / "a", cache)
    assert not first.installer_cached and served.gets(NAME) == 1
    kept = cache / VERSION / NAME
    assert kept.read_bytes() == FAKE
    assert os.listdir(kept.parent) == [NAME]  # all that cache: true saves of it
    second = _ensure(served, tmp_path / "b", cache)  # a fresh root, as on a restored cache
    assert second.installer_cached and served.gets(NAME) == 1
    ran_from = Path((tmp_path / "b" / ".ran-from").read_text().strip())
    assert ran_from != kept and not ran_from.exists()  # a private copy, removed after
    assert os.listdir(kept.parent) == [NAME]


@pytest.mark.parametrize("planted", ["partial", "tampered", "fifo", "link", "directory"])
def test_a_cached_installer_that_does_not_match_never_runs(served, tmp_path, planted):
    cache = tmp_path / "pkgs" / miniforge.INSTALLERS
    kept = cache / VERSION / NAME
    kept.parent.mkdir(parents=True)
    ran = tmp_path / "evil-ran"
    if planted == "partial":  # a cut copy, as a cache saved by a tool that is not atomic
        kept.write_bytes(FAKE[: len(FAKE) // 2])
    elif planted == "tampered":
        kept.write_bytes(evil(ran))
    elif planted == "fifo":  # reading it would block the job for ever
        os.mkfifo(kept)
    elif planted == "link":  # even to the right bytes: the cache must not point elsewhere
        (tmp_path / "elsewhere").write_bytes(FAKE)
        kept.symlink_to(tmp_path / "elsewhere")
    else:
        (kept / "x").mkdir(parents=True)
    mf = _ensure(served, tmp_path / "root", cache)
    assert not ran.exists()
    assert not mf.installer_cached and served.gets(NAME) == 1  # downloaded again
    assert not kept.is_symlink() and kept.read_bytes() == FAKE
    assert (tmp_path / "root" / "bin" / "conda").exists()


def test_a_cached_installer_changed_after_its_check_does_not_run(served, tmp_path, monkeypatch):
    """Another writer of the cache swaps the file right after it was checked: what runs is
    the copy that was hashed, never the file in the cache."""
    cache = tmp_path / "cache"
    _ensure(served, tmp_path / "first", cache)
    ran = tmp_path / "evil-ran"
    kept = cache / VERSION / NAME
    real = miniforge._copy_verified

    def swapped(src, dest, want):
        matched = real(src, dest, want)
        kept.write_bytes(evil(ran))  # in place, after the hash
        return matched

    monkeypatch.setattr(miniforge, "_copy_verified", swapped)
    mf = _ensure(served, tmp_path / "root", cache)
    assert mf.installer_cached and served.gets(NAME) == 1
    assert not ran.exists()
    monkeypatch.undo()  # the next job finds the changed file, refuses it, downloads again
    again = _ensure(served, tmp_path / "third", cache)
    assert not ran.exists() and not again.installer_cached and served.gets(NAME) == 2


def test_a_download_killed_half_way_leaves_nothing_a_later_job_uses(served, tmp_path):
    cache = tmp_path / "pkgs" / miniforge.INSTALLERS
    code = (
        "import sys; from pathlib import Path; from gpu_ci.conda import miniforge; "
        "from gpu_ci.downloads import RetryPolicy; "
        "miniforge.ensure(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), {}, "
        "url=sys.argv[4], sha256=sys.argv[5], policy=RetryPolicy(attempts=1))"
    )
    env = {**os.environ, "GPU_CI_TEST_KILL_AT": "download", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, "-c", code, VERSION, str(tmp_path / "root"), str(cache)]
        + [served.url(NAME), SHA],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == -9, proc.stderr  # killed in the download, as kill -9 would
    (left,) = os.listdir(cache / VERSION)  # the dead job's private folder, nothing else
    assert left.startswith(f".{NAME}.run-")
    assert any(".part-" in n for n in os.listdir(cache / VERSION / left))  # its partial file
    assert not (tmp_path / "root").exists()
    mf = _ensure(served, tmp_path / "root", cache)
    assert not mf.installer_cached and served.gets(NAME) == 2
    assert os.listdir(cache / VERSION) == [NAME]  # swept: its lock died with it
    assert (cache / VERSION / NAME).read_bytes() == FAKE
    assert (tmp_path / "root" / ".gpu-ci-miniforge").read_text().split() == [VERSION, SHA]
