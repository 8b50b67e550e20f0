"""setup-conda-from-lock against a lock file from a pull request: names and paths that try to
leave the prefix, the cache or the requirements file they belong in."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import yaml

from testkit.conda.jobs import job
from testkit.conda_channel import SUBDIR, explicit_lock_of, hostile_archive

EVIL_NAME = "evil"


def planted_lock(channel, tmp_path: Path, rel: str) -> Path:
    """A lock of one package whose paths.json hard-links ``rel`` to its share/x.txt."""
    data = b"planted\n"
    entry = {
        "_path": rel,
        "path_type": "hardlink",
        "sha256": hashlib.sha256(data).hexdigest(),
        "size_in_bytes": len(data),
    }
    archive = hostile_archive(
        channel.root.parent / "evil-channel" / SUBDIR, EVIL_NAME, [entry], {"share/x.txt": data}
    )
    lock = tmp_path / "lock.txt"
    lock.write_text(explicit_lock_of(channel, archive, "md5"))
    return lock


def test_paths_json_cannot_link_outside_the_prefix(channel, tmp_path):
    # The file the link would take sits where ../ from the cache entry points.
    lock = planted_lock(channel, tmp_path, "../escaped.txt")
    data = b"planted\n"
    pkgs = tmp_path / "pkgs"
    (pkgs / "rattler").mkdir(parents=True)
    (pkgs / "rattler" / "escaped.txt").write_bytes(data)  # <cache>/<entry>/../escaped.txt
    home = tmp_path / "home"
    home.mkdir()
    rc, out = job(lock, home / "env", pkgs)
    assert not (home / "escaped.txt").exists(), out
    assert not any(p.name == "escaped.txt" for p in home.rglob("*") if "env" not in p.parts)
    assert rc == 1 and "internal error" not in out and "escaped.txt" in out, out


@pytest.mark.parametrize(
    "name",
    [
        "gpuci-demo\n--index-url http://127.0.0.1:9/evil\nx",
        "gpuci-demo @ http://127.0.0.1:9/x.whl\n-r /etc/passwd\n#",
        "../../gpuci-demo",
    ],
)
def test_pip_names_cannot_inject_requirement_lines(setup, channel, name):
    result, before = _with_pip_entry(setup, channel, "name", name)
    assert result.returncode == 1, result.stdout
    assert "is not a distribution name" in result.stdout, result.stdout
    assert "root:" not in result.stdout
    assert len(channel.server.log) == before  # refused while reading the lock


def _with_pip_entry(setup, channel, field: str, value: str):
    """A job on a lock whose pip entry's ``field`` is ``value``; the channel's log before."""
    doc = yaml.safe_load(channel.unified_lock(pip=True))
    pip = [p for p in doc["package"] if p["manager"] == "pip"][0]
    pip[field] = value
    before = len(channel.server.log)
    return setup(yaml.safe_dump(doc)), before


@pytest.mark.parametrize(
    "url",
    [
        "{base}/wheels/gpuci_demo-1.0-py3-none-any.whl\n-r /etc/passwd",
        "{base}/wheels/gpuci_demo-1.0-py3-none-any.whl --trusted-host evil",
    ],
)
def test_pip_urls_cannot_inject_requirement_options(setup, channel, url):
    url = url.format(base=channel.url("").rstrip("/"))
    result, before = _with_pip_entry(setup, channel, "url", url)
    assert result.returncode == 1, result.stdout
    assert "whitespace or a control character" in result.stdout, result.stdout
    assert len(channel.server.log) == before


def test_pip_hashes_cannot_inject_requirement_options(setup, channel):
    doc = yaml.safe_load(channel.unified_lock(pip=True))
    pip = [p for p in doc["package"] if p["manager"] == "pip"][0]
    pip["hash"]["sha256"] += "\n-r /etc/passwd"
    result = setup(yaml.safe_dump(doc))
    assert result.returncode == 1, result.stdout
    assert "64 hex digits" in result.stdout and "root:" not in result.stdout


def test_conda_urls_with_control_characters_are_refused(setup, channel):
    doc = yaml.safe_load(channel.unified_lock())
    doc["package"][0]["url"] = doc["package"][0]["url"].replace("/channel/", "/chan\x00nel/")
    result = setup(yaml.safe_dump(doc))
    assert result.returncode == 1, result.stdout
    assert "whitespace or a control character" in result.stdout, result.stdout


@pytest.mark.parametrize("rel", ["/abs-escaped.txt", "share/../../escaped.txt"])
def test_paths_json_absolute_or_dotdot_is_refused(channel, tmp_path, rel):
    lock = planted_lock(channel, tmp_path, rel)
    rc, out = job(lock, tmp_path / "home" / "env", tmp_path / "pkgs")
    assert rc == 1 and "outside the prefix" in out, out
    assert not Path("/abs-escaped.txt").exists()
    assert [p.name for p in tmp_path.rglob("*escaped*")] == []


def test_a_file_under_a_symlink_out_of_the_prefix_is_refused(channel, tmp_path):
    # "lib" -> the user's home, then "lib/.bashrc": linking would write through the link.
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("mine\n")
    data = b"echo pwned\n"
    paths = [
        {"_path": "lib", "path_type": "softlink", "sha256": "0" * 64, "size_in_bytes": 0},
        {
            "_path": "lib/.bashrc",
            "path_type": "hardlink",
            "sha256": hashlib.sha256(data).hexdigest(),
            "size_in_bytes": len(data),
        },
    ]
    archive = hostile_archive(
        channel.root.parent / "evil-channel" / SUBDIR, EVIL_NAME, paths, links={"lib": str(home)}
    )
    lock = tmp_path / "lock.txt"
    lock.write_text(explicit_lock_of(channel, archive, "md5"))
    rc, out = job(lock, tmp_path / "envs" / "env", tmp_path / "pkgs")
    assert (home / ".bashrc").read_text() == "mine\n", out
    assert rc == 1 and "points outside the prefix" in out, out


# -- kill -9, then a different lock; a prefix that is a link ---------------------------------

from testkit.cli import tree_digest  # noqa: E402
from testkit.conda.jobs import SMALL, assert_environment, our_temporaries  # noqa: E402


@pytest.mark.parametrize("phase", ["download", "extract", "link", "pip", "swap"])
def test_kill_9_then_a_third_lock_installs_cleanly(channel, locks, tmp_path, phase):
    # A has an environment; B is killed in `phase`; C (neither A nor B) comes next.
    prefix, pkgs = tmp_path / "env", tmp_path / "pkgs"
    assert job(locks["old"], prefix, pkgs)[0] == 0
    rc, out = job(locks["pip"], prefix, pkgs, env={"GPU_CI_TEST_KILL_AT": phase})
    assert rc == -9, out
    rc, out = job(locks["small"], prefix, pkgs)
    assert rc == 0, out
    assert_environment(prefix, SMALL)
    assert not (prefix / "bin" / "python").exists()  # nothing of B in C's environment
    assert our_temporaries(tmp_path) == []
    for archive in channel.archives:  # B's archives may stay; what is there is whole
        path = pkgs / "archives" / archive.filename
        if path.exists():
            assert hashlib.md5(path.read_bytes()).hexdigest() == archive.md5
        entry = pkgs / "rattler" / f"{archive.name}-{archive.version}-{archive.build}"
        if entry.exists():
            assert (entry / ".gpu-ci-archive-sha256").read_text() == archive.md5


@pytest.mark.parametrize("target", ["user-dir", "empty-dir", "environment"])
def test_a_prefix_that_is_a_symlink_is_refused_and_both_kept(channel, locks, tmp_path, target):
    real = tmp_path / "real"
    if target == "environment":
        assert job(locks["old"], real, tmp_path / "pkgs")[0] == 0
    else:
        real.mkdir()
        if target == "user-dir":
            (real / "thesis.tex").write_text("keep me\n")
    before = tree_digest(real)
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    for prefix in (link, Path(f"{link}/"), Path(f"{link}/.")):
        rc, out = job(locks["small"], prefix, tmp_path / "pkgs")
        assert rc == 1 and "is not a directory" in out, out
        assert link.is_symlink() and tree_digest(real) == before


def test_a_download_larger_than_the_free_space_is_refused_before_writing(channel, tmp_path, tmpfs):
    """The README: 'A download that announces its size is checked against the free space
    first' (without the check the same run fails later, as 'no space left' mid-write)."""
    small = tmpfs("small")
    blob = os.urandom(400_000)  # incompressible: the archive is about this big
    archive = hostile_archive(
        channel.root.parent / "big-channel" / SUBDIR,
        EVIL_NAME,
        [
            {
                "_path": "share/blob",
                "path_type": "hardlink",
                "size_in_bytes": len(blob),
                "sha256": hashlib.sha256(blob).hexdigest(),
            }
        ],
        {"share/blob": blob},
    )
    lock = tmp_path / "lock.txt"
    lock.write_text(explicit_lock_of(channel, archive, "md5"))
    with open(small / "filler", "wb") as out:  # leave 200 kB: less than the archive
        out.write(b"\0" * (1024 * 1024 - 200 * 1024))
    rc, out = job(lock, tmp_path / "env", small / "pkgs")
    assert rc == 1, out
    assert f"downloading {EVIL_NAME} 1.0 (0) needs" in out and "is free" in out, out
    assert list((small / "pkgs" / "archives").glob("*")) == []


@pytest.mark.slow  # 5 trials of 3 real installs at once
def test_jobs_with_different_locks_on_one_prefix_at_once(channel, locks, tmp_path):
    # Three jobs, three locks, one prefix and one cache, started together (5 trials): each
    # succeeds in turn, and the prefix ends as exactly one of the locks' environments.
    from testkit.conda.jobs import spawn

    wanted = {"old": ["libhello"], "small": SMALL, "pip": ["libhello", "hello", "python"]}
    for trial in range(5):
        base = tmp_path / f"t{trial}"
        prefix, pkgs = base / "env", base / "pkgs"
        procs = {key: spawn(locks[key], prefix, pkgs) for key in wanted}
        outs = {key: p.communicate(timeout=180)[0] for key, p in procs.items()}
        assert all(p.returncode == 0 for p in procs.values()), outs
        names = sorted(
            p.name.rsplit("-", 2)[0]
            for p in (prefix / "conda-meta").glob("*.json")
            if p.name != "gpu-ci-lock.json"
        )
        matches = [key for key, want in wanted.items() if sorted(want) == names]
        assert len(matches) == 1, names
        assert_environment(prefix, wanted[matches[0]])
        assert our_temporaries(base) == []


def test_a_live_rename_probe_is_never_swept_as_a_leftover(tmp_path):
    # check_writable probes before the prefix lock; the lock holder's recovery must not take
    # that probe for an interrupted run's work directory (a concurrent job then failed with
    # "cannot rename directories ... (No such file or directory)").
    import os
    import time as _time

    from gpu_ci.conda import transaction

    paths = transaction.Paths(tmp_path / "env")
    paths.probe.mkdir()
    transaction.recover(paths, lambda _m: None)
    assert paths.probe.is_dir() and paths.probe not in paths.leftovers()
    old = _time.time() - 7200  # an hour-old empty probe is a killed run's: swept
    os.utime(paths.probe, (old, old))
    transaction.recover(paths, lambda _m: None)
    assert not paths.probe.exists()


@pytest.mark.parametrize("name", ["env[1]", "env*", "e?v"])
def test_a_prefix_named_like_a_pattern_finds_its_own_leftovers_and_no_others(tmp_path, name):
    """The leftovers beside a prefix are found by the names we give them, not by a glob
    built from the prefix's name: ``env[1]`` as a pattern matched ``env1``'s leftovers
    (another prefix's staging, removed as ours) and never its own."""
    from gpu_ci.conda import transaction

    paths = transaction.Paths(tmp_path / name)
    mine = tmp_path / f".{name}.gpu-ci-new-deadbeef"
    other = tmp_path / ".env1.gpu-ci-new-deadbeef"
    for folder in (mine, other):
        (folder / "conda-meta").mkdir(parents=True)
    assert paths.leftovers() == [mine]
    transaction.recover(paths, lambda _m: None)
    assert not mine.exists() and other.is_dir()
