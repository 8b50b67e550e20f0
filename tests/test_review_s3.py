# ruff: noqa: F811 - pytest fixtures imported from test_setup_conda
"""Review of the raw cache reads (f954f97) and the distant-server probe (d58f13a): what a
planted FIFO, a concurrent job or a hostile package could still do."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.test_setup_conda import channel, locks, spawn  # noqa: F401 - fixtures
from tests.test_setup_conda_cache_files import _entry, _finish

pytest.importorskip("rattler", reason="py-rattler needs Python >= 3.10")


def test_a_fifo_at_the_md5_sidecar_does_not_stop_our_downloader(channel, locks, tmp_path):
    """With ``stream-downloads: false`` (or credentials, a proxy) the archive is fetched by
    our downloader and its sha256 recorded in the md5 sidecar after linking: the sidecar is
    compared first, and a FIFO planted there made that read wait for a writer forever."""
    pkgs = tmp_path / "pkgs"
    off = {"INPUT_STREAM_DOWNLOADS": "false"}
    code, out = _finish(spawn(locks["small"], tmp_path / "a", pkgs, env=off))
    assert code == 0, out
    entry = _entry(pkgs, "hello-data")
    sidecar = entry.with_name(entry.name + ".gpu-ci-md5")
    assert stat.S_ISREG(os.lstat(sidecar).st_mode)
    sidecar.unlink()
    os.mkfifo(sidecar)
    for archive in (pkgs / "archives").iterdir():  # fetched again, not found here
        archive.unlink()

    code, out = _finish(spawn(locks["small"], tmp_path / "b", pkgs, env=off))
    assert code == 0, out
    assert (tmp_path / "b" / "share" / "hello" / "data.txt").read_text() == "data\n"
    assert stat.S_ISREG(os.lstat(sidecar).st_mode)  # recorded again, in a file
