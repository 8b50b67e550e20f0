"""setup-conda-from-lock against a lock file from a pull request: names and paths that try to
leave the prefix, the cache or the requirements file they belong in."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
import yaml

from tests.conda_channel import SUBDIR
from tests.test_setup_conda import channel, job, setup  # noqa: F401 - fixtures

EVIL_NAME = "evil"


def crafted_archive(directory: Path, paths: list[dict], members: dict[str, bytes]) -> Path:
    """A .tar.bz2 conda package in the real layout, with whatever paths.json the attacker
    wants (conda's own format: info/index.json, info/paths.json, the files)."""
    index = {"name": EVIL_NAME, "version": "1.0", "build": "0", "build_number": 0,
             "subdir": SUBDIR, "depends": [], "license": "MIT"}
    files = {"info/index.json": json.dumps(index).encode(),
             "info/paths.json": json.dumps({"paths": paths, "paths_version": 1}).encode(),
             **members}
    out = directory / f"{EVIL_NAME}-1.0-0.tar.bz2"
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:bz2") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


def test_paths_json_cannot_link_outside_the_prefix(channel, tmp_path):  # noqa: F811
    data = b"planted\n"
    entry = {"_path": "../escaped.txt", "path_type": "hardlink",
             "sha256": hashlib.sha256(data).hexdigest(), "size_in_bytes": len(data)}
    # The file the link would take sits where ../ from the cache entry points.
    archive = crafted_archive(channel.root.parent / "evil-channel" / SUBDIR, [entry],
                              {"share/x.txt": data})
    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    lock = tmp_path / "lock.txt"
    lock.write_text(f"# platform: {SUBDIR}\n@EXPLICIT\n"
                    f"{channel.url(f'evil-channel/{SUBDIR}/{archive.name}')}#{md5}\n")
    pkgs = tmp_path / "pkgs"
    (pkgs / "rattler").mkdir(parents=True)
    (pkgs / "rattler" / "escaped.txt").write_bytes(data)  # <cache>/<entry>/../escaped.txt
    home = tmp_path / "home"
    home.mkdir()
    rc, out = job(lock, home / "env", pkgs)
    assert not (home / "escaped.txt").exists(), out
    assert not any(p.name == "escaped.txt" for p in home.rglob("*") if "env" not in p.parts)
    assert rc == 1 and "internal error" not in out and "escaped.txt" in out, out


@pytest.mark.parametrize("name", [
    "gpuci-demo\n--index-url http://127.0.0.1:9/evil\nx",
    "gpuci-demo @ http://127.0.0.1:9/x.whl\n-r /etc/passwd\n#",
    "../../gpuci-demo",
])
def test_pip_names_cannot_inject_requirement_lines(setup, channel, name):  # noqa: F811
    doc = yaml.safe_load(channel.unified_lock(pip=True))
    pip = [p for p in doc["package"] if p["manager"] == "pip"][0]
    pip["name"] = name
    before = len(channel.server.log)
    result = setup(yaml.safe_dump(doc))
    assert result.returncode == 1, result.stdout
    assert "is not a distribution name" in result.stdout, result.stdout
    assert "root:" not in result.stdout
    assert len(channel.server.log) == before  # refused while reading the lock


@pytest.mark.parametrize("url", [
    "{base}/wheels/gpuci_demo-1.0-py3-none-any.whl\n-r /etc/passwd",
    "{base}/wheels/gpuci_demo-1.0-py3-none-any.whl --trusted-host evil",
])
def test_pip_urls_cannot_inject_requirement_options(setup, channel, url):  # noqa: F811
    doc = yaml.safe_load(channel.unified_lock(pip=True))
    pip = [p for p in doc["package"] if p["manager"] == "pip"][0]
    pip["url"] = url.format(base=channel.url("").rstrip("/"))
    before = len(channel.server.log)
    result = setup(yaml.safe_dump(doc))
    assert result.returncode == 1, result.stdout
    assert "whitespace or a control character" in result.stdout, result.stdout
    assert len(channel.server.log) == before


def test_pip_hashes_cannot_inject_requirement_options(setup, channel):  # noqa: F811
    doc = yaml.safe_load(channel.unified_lock(pip=True))
    pip = [p for p in doc["package"] if p["manager"] == "pip"][0]
    pip["hash"]["sha256"] += "\n-r /etc/passwd"
    result = setup(yaml.safe_dump(doc))
    assert result.returncode == 1, result.stdout
    assert "64 hex digits" in result.stdout and "root:" not in result.stdout


def test_conda_urls_with_control_characters_are_refused(setup, channel):  # noqa: F811
    doc = yaml.safe_load(channel.unified_lock())
    doc["package"][0]["url"] = doc["package"][0]["url"].replace("/channel/", "/chan\x00nel/")
    result = setup(yaml.safe_dump(doc))
    assert result.returncode == 1, result.stdout
    assert "whitespace or a control character" in result.stdout, result.stdout


@pytest.mark.parametrize("rel", ["/abs-escaped.txt", "share/../../escaped.txt"])
def test_paths_json_absolute_or_dotdot_is_refused(channel, tmp_path, rel):  # noqa: F811
    data = b"planted\n"
    entry = {"_path": rel, "path_type": "hardlink",
             "sha256": hashlib.sha256(data).hexdigest(), "size_in_bytes": len(data)}
    archive = crafted_archive(channel.root.parent / "evil-channel" / SUBDIR, [entry],
                              {"share/x.txt": data})
    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    lock = tmp_path / "lock.txt"
    lock.write_text(f"# platform: {SUBDIR}\n@EXPLICIT\n"
                    f"{channel.url(f'evil-channel/{SUBDIR}/{archive.name}')}#{md5}\n")
    rc, out = job(lock, tmp_path / "home" / "env", tmp_path / "pkgs")
    assert rc == 1 and "outside the prefix" in out, out
    assert not Path("/abs-escaped.txt").exists()
    assert [p.name for p in tmp_path.rglob("*escaped*")] == []


def test_a_file_under_a_symlink_out_of_the_prefix_is_refused(channel, tmp_path):  # noqa: F811
    # "lib" -> the user's home, then "lib/.bashrc": linking would write through the link.
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("mine\n")
    data = b"echo pwned\n"
    archive = channel.root.parent / "evil-channel" / SUBDIR / f"{EVIL_NAME}-1.0-0.tar.bz2"
    archive.parent.mkdir(parents=True, exist_ok=True)
    index = {"name": EVIL_NAME, "version": "1.0", "build": "0", "build_number": 0,
             "subdir": SUBDIR, "depends": [], "license": "MIT"}
    paths = [{"_path": "lib", "path_type": "softlink", "sha256": "0" * 64, "size_in_bytes": 0},
             {"_path": "lib/.bashrc", "path_type": "hardlink",
              "sha256": hashlib.sha256(data).hexdigest(), "size_in_bytes": len(data)}]
    with tarfile.open(archive, "w:bz2") as tar:
        for name, blob in (("info/index.json", json.dumps(index).encode()),
                           ("info/paths.json", json.dumps({"paths": paths,
                                                           "paths_version": 1}).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
        link = tarfile.TarInfo("lib")
        link.type = tarfile.SYMTYPE
        link.linkname = str(home)
        tar.addfile(link)
    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    lock = tmp_path / "lock.txt"
    lock.write_text(f"# platform: {SUBDIR}\n@EXPLICIT\n"
                    f"{channel.url(f'evil-channel/{SUBDIR}/{archive.name}')}#{md5}\n")
    rc, out = job(lock, tmp_path / "envs" / "env", tmp_path / "pkgs")
    assert (home / ".bashrc").read_text() == "mine\n", out
    assert rc == 1 and "points outside the prefix" in out, out
