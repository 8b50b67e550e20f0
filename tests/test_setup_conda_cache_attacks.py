"""setup-conda-from-lock's package cache under attack: an archive that plants our own names
(marker, stamp) as links, jobs that replace an entry while another links from it."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from tests.conda_channel import SUBDIR
from tests.test_setup_conda import channel, job  # noqa: F401 - fixtures

pytest.importorskip("rattler", reason="py-rattler needs Python >= 3.10")


def _archive_with_links(directory: Path, links: dict[str, str]) -> Path:
    """A real-layout .tar.bz2 conda package whose top level holds symbolic links named like
    the files we write into a cache entry (not listed in its paths.json)."""
    data = b"payload\n"
    index = {"name": "planted", "version": "1.0", "build": "0", "build_number": 0,
             "subdir": SUBDIR, "depends": [], "license": "MIT"}
    paths = [{"_path": "share/planted.txt", "path_type": "hardlink",
              "sha256": hashlib.sha256(data).hexdigest(), "size_in_bytes": len(data)}]
    out = directory / "planted-1.0-0.tar.bz2"
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:bz2") as tar:
        for name, blob in (("info/index.json", json.dumps(index).encode()),
                           ("info/paths.json", json.dumps({"paths": paths,
                                                           "paths_version": 1}).encode()),
                           ("share/planted.txt", data)):
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
        for name, target in links.items():
            link = tarfile.TarInfo(name)
            link.type = tarfile.SYMTYPE
            link.linkname = target
            tar.addfile(link)
    return out


@pytest.mark.parametrize("stream", ["true", "false"])
@pytest.mark.parametrize("planted", [".gpu-ci-archive-sha256", ".gpu-ci-verified"])
def test_our_names_planted_as_links_in_an_archive_write_nothing_outside(
        channel, tmp_path, planted, stream):  # noqa: F811
    """A lock from a pull request names an archive whose top level has a symbolic link where
    we write the entry's digest marker or stamp: we replace the link, never write through it
    (a file of the user's, outside cache and prefix, stays as it was)."""
    victim = tmp_path / "home" / ".bashrc"
    victim.parent.mkdir()
    victim.write_text("mine\n")
    archive = _archive_with_links(channel.root.parent / f"planted-{planted}-{stream}" / SUBDIR,
                                  {planted: str(victim)})
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    lock = tmp_path / "lock.txt"
    rel = archive.relative_to(channel.root.parent)
    lock.write_text(f"# platform: {SUBDIR}\n@EXPLICIT\n{channel.url(str(rel))}#sha256:{sha}\n")
    pkgs = tmp_path / "pkgs"
    for run in range(2):  # extracted, then trusted from its stamp
        rc, out = job(lock, tmp_path / "env", pkgs, env={"INPUT_STREAM_DOWNLOADS": stream})
        assert victim.read_text() == "mine\n", (run, out)
        assert rc == 0, out
        entry = pkgs / "rattler" / "planted-1.0-0"
        assert not (entry / planted).is_symlink()
        assert (entry / ".gpu-ci-archive-sha256").read_text() == sha
        assert (tmp_path / "env" / "share" / "planted.txt").read_bytes() == b"payload\n"
