"""What the next job reads in a shared package cache — our stamp, digest marker and md5
sidecar, and each package's ``info/`` — is read as a regular file or not at all: a FIFO
planted there must not stop the job (an open() of a FIFO waits for a writer forever), and a
listed file that became a link, a FIFO or a device is not a file that matches its
``paths.json``."""

from __future__ import annotations

import os
import shutil
import stat

import pytest

from testkit.conda.jobs import finish, rattler_entry, spawn

pytest.importorskip("rattler", reason="py-rattler needs Python >= 3.10")


@pytest.mark.parametrize(
    "planted", [".gpu-ci-verified", ".gpu-ci-archive-sha256", "info/paths.json", ".gpu-ci-md5"]
)
def test_a_fifo_where_the_next_job_reads_neither_stops_it_nor_is_trusted(
    channel, locks, tmp_path, planted
):
    pkgs = tmp_path / "pkgs"
    code, out = finish(spawn(locks["small"], tmp_path / "a", pkgs))
    assert code == 0, out
    entry = rattler_entry(pkgs, "hello-data")
    # the md5 sidecar lies beside the entry (the lock has md5 digests only)
    path = entry.with_name(entry.name + planted) if planted == ".gpu-ci-md5" else entry / planted
    if planted == ".gpu-ci-md5":  # made only where the stamp does not record the sha256
        assert not os.path.lexists(path)
    else:
        assert stat.S_ISREG(os.lstat(path).st_mode)
        path.unlink()
    os.mkfifo(path)
    if planted in (".gpu-ci-archive-sha256", ".gpu-ci-md5"):  # read where the stamp does
        (entry / ".gpu-ci-verified").unlink()  # not hold

    code, out = finish(spawn(locks["small"], tmp_path / "b", pkgs))
    assert code == 0, out
    data = tmp_path / "b" / "share" / "hello" / "data.txt"
    assert data.read_text() == "data\n"
    if planted != ".gpu-ci-md5":  # the entry was checked in full and stamped (or replaced)
        assert stat.S_ISREG(os.lstat(path).st_mode)


def test_a_listed_file_that_became_a_link_in_the_cache_is_not_linked(channel, locks, tmp_path):
    """The cache's file is replaced by a symbolic link to a copy with the very same bytes
    (its sha256 still matches when read through the link): still not the regular file the
    package lists, so the entry is extracted again and the environment gets a file, not a
    link to a path of someone's choosing."""
    pkgs = tmp_path / "pkgs"
    code, out = finish(spawn(locks["small"], tmp_path / "a", pkgs))
    assert code == 0, out
    cached = rattler_entry(pkgs, "hello-data") / "share" / "hello" / "data.txt"
    elsewhere = tmp_path / "elsewhere.txt"
    shutil.copyfile(cached, elsewhere)
    cached.unlink()
    cached.symlink_to(elsewhere)

    code, out = finish(spawn(locks["small"], tmp_path / "b", pkgs))
    assert code == 0, out
    data = tmp_path / "b" / "share" / "hello" / "data.txt"
    assert stat.S_ISREG(os.lstat(data).st_mode), os.readlink(data)
    assert data.read_text() == "data\n"
    assert stat.S_ISREG(os.lstat(cached).st_mode)  # the entry holds the archive's file again
