"""setup-conda-from-lock's package cache under attack: an archive that plants our own names
(marker, stamp) as links, jobs that replace an entry while another links from it."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from testkit.conda.jobs import job, our_temporaries, spawn
from testkit.conda_channel import SUBDIR, explicit_lock_of, hostile_archive

pytest.importorskip("rattler", reason="py-rattler needs Python >= 3.10")


def _archive_with_links(directory: Path, links: dict[str, str], data: bytes = b"payload\n") -> Path:
    """A real-layout .tar.bz2 conda package whose top level holds symbolic links named like
    the files we write into a cache entry (not listed in its paths.json)."""
    paths = [
        {
            "_path": "share/planted.txt",
            "path_type": "hardlink",
            "sha256": hashlib.sha256(data).hexdigest(),
            "size_in_bytes": len(data),
        }
    ]
    return hostile_archive(directory, "planted", paths, {"share/planted.txt": data}, links)


@pytest.mark.parametrize("stream", ["true", "false"])
@pytest.mark.parametrize("planted", [".gpu-ci-archive-sha256", ".gpu-ci-verified"])
def test_our_names_planted_as_links_in_an_archive_write_nothing_outside(
    channel, tmp_path, planted, stream
):
    """A lock from a pull request names an archive whose top level has a symbolic link where
    we write the entry's digest marker or stamp: we replace the link, never write through it
    (a file of the user's, outside cache and prefix, stays as it was)."""
    victim = tmp_path / "home" / ".bashrc"
    victim.parent.mkdir()
    victim.write_text("mine\n")
    archive = _archive_with_links(
        channel.root.parent / f"planted-{planted}-{stream}" / SUBDIR, {planted: str(victim)}
    )
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    lock = tmp_path / "lock.txt"
    lock.write_text(explicit_lock_of(channel, archive))
    pkgs = tmp_path / "pkgs"
    for run in range(2):  # extracted, then trusted from its stamp
        rc, out = job(lock, tmp_path / "env", pkgs, env={"INPUT_STREAM_DOWNLOADS": stream})
        assert victim.read_text() == "mine\n", (run, out)
        assert rc == 0, out
        entry = pkgs / "rattler" / "planted-1.0-0"
        assert not (entry / planted).is_symlink()
        assert (entry / ".gpu-ci-archive-sha256").read_text() == sha
        assert (tmp_path / "env" / "share" / "planted.txt").read_bytes() == b"payload\n"


def _blocked_on_a_lock(pid_of: list[int]) -> bool:
    """Whether one of these processes (or their workers) waits for a ``flock`` now."""
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return False
    waiting = {int(line.split()[5]) for line in lines if "->" in line.split()[:2]}
    for pid in waiting:
        try:
            tree = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()
        except OSError:
            continue
        if pid in pid_of or int(tree[1]) in pid_of:  # the job, or a worker it forked
            return True
    return False


def _two_builds_installed(channel, tmp_path, name):
    """Two archives with one name-version-build (main's and a pull request's), an explicit
    lock for each (the PR's in tmp_path/pr.lock), and main's installed into tmp_path/a, so
    that the shared cache entry holds main's build."""
    from gpu_ci.conda import install, lockfile

    mine, theirs = b"main's build\n", b"the PR's build\n"
    locks = []
    for tag, data in (("main", mine), ("pr", theirs)):
        archive = _archive_with_links(channel.root.parent / f"{name}-{tag}" / SUBDIR, {}, data)
        locks.append(explicit_lock_of(channel, archive))
    (tmp_path / "pr.lock").write_text(locks[1])
    pkgs, quiet = tmp_path / "pkgs", (lambda _: None)
    plan = lockfile.plan(lockfile.parse(locks[0]), locks[0], SUBDIR, ["main"])
    install.install(plan, tmp_path / "a", pkgs, dict(os.environ), log=quiet)
    return mine, theirs, plan, pkgs, quiet


def test_an_entry_replaced_by_another_job_is_not_linked_half_way(channel, tmp_path, monkeypatch):
    """Two locks name two archives with one name-version-build (a pull request's build of a
    package, and main's): each job extracts its own into the shared cache entry. A job
    that replaces the entry while another links from it must wait for that link: the
    linking job gets the files of its own lock's archive, never the other's."""
    import rattler

    from gpu_ci.conda import install

    mine, theirs, plan, pkgs, quiet = _two_builds_installed(channel, tmp_path, "race")

    real, other = rattler.install, []

    async def the_other_job_replaces_the_entry_meanwhile(*args, **kwargs):
        proc = spawn(tmp_path / "pr.lock", tmp_path / "pr-env", pkgs)
        other.append(proc)
        deadline = time.monotonic() + 60
        while (
            proc.poll() is None
            and time.monotonic() < deadline
            and not _blocked_on_a_lock([proc.pid])
        ):
            time.sleep(0.02)
        return await real(*args, **kwargs)

    monkeypatch.setattr(rattler, "install", the_other_job_replaces_the_entry_meanwhile)
    install.install(plan, tmp_path / "b", pkgs, dict(os.environ), log=quiet)
    monkeypatch.setattr(rattler, "install", real)
    out, _ = other[0].communicate(timeout=120)
    assert (tmp_path / "b" / "share" / "planted.txt").read_bytes() == mine
    assert other[0].returncode == 0, out
    assert (tmp_path / "pr-env" / "share" / "planted.txt").read_bytes() == theirs


def test_an_entry_replaced_between_its_check_and_the_link_is_fetched_again(
    channel, tmp_path, monkeypatch
):
    """The other job replaces the entry after this one trusted it and before it links: the
    link notices (the entry's digest marker is another archive's), and this job fetches,
    verifies and extracts its own archive again."""
    import rattler

    from gpu_ci.conda import install

    mine, theirs, plan, pkgs, quiet = _two_builds_installed(channel, tmp_path, "toctou")

    real, ran = rattler.PackageCache.new_layered, []

    def the_other_job_runs_first(*args, **kwargs):
        if not ran:
            ran.append(job(tmp_path / "pr.lock", tmp_path / "pr-env", pkgs))
        return real(*args, **kwargs)

    monkeypatch.setattr(rattler.PackageCache, "new_layered", the_other_job_runs_first)
    report = install.install(plan, tmp_path / "b", pkgs, dict(os.environ), log=quiet)
    assert ran[0][0] == 0, ran[0][1]
    assert (tmp_path / "pr-env" / "share" / "planted.txt").read_bytes() == theirs
    assert (tmp_path / "b" / "share" / "planted.txt").read_bytes() == mine
    assert report.cached_archives == 0  # fetched again, not trusted


def test_a_file_written_after_its_hash_and_before_the_stamp_is_not_trusted_later(
    channel, tmp_path, monkeypatch
):
    """An entry is hashed (no valid stamp), and a process writes to one of its files through
    the hard link from an older environment just after the hash read it: the stamp must
    not bless that write, or every later job would link the changed file that the hash of
    each job used to catch."""
    from gpu_ci.conda import cache_trust, install, lockfile

    text = channel.explicit_lock(["libhello", "hello", "hello-data"])
    plan = lockfile.plan(lockfile.parse(text), text, SUBDIR, ["main"])
    pkgs, quiet = tmp_path / "pkgs", (lambda _: None)
    install.install(plan, tmp_path / "a", pkgs, dict(os.environ), log=quiet)
    linked = tmp_path / "a" / "share" / "hello" / "data.txt"
    original = linked.read_bytes()
    assert linked.stat().st_nlink > 1  # the cache's file
    os.utime(linked, ns=(0, linked.stat().st_mtime_ns + 1))  # the stamp no longer matches
    real = cache_trust.cache_entry_problem

    def then_written(entry):  # runs in a worker: another process writes meanwhile
        problem = real(entry)
        if entry.name.startswith("hello-data"):
            with open(linked, "r+b") as out:
                out.write(b"X" * len(original))
        return problem

    monkeypatch.setattr(cache_trust, "cache_entry_problem", then_written)
    install.install(plan, tmp_path / "b", pkgs, dict(os.environ), log=quiet)
    monkeypatch.setattr(cache_trust, "cache_entry_problem", real)
    install.install(plan, tmp_path / "c", pkgs, dict(os.environ), log=quiet)
    assert (tmp_path / "c" / "share" / "hello" / "data.txt").read_bytes() == original


@pytest.mark.parametrize("stream", ["true", "false"])
def test_an_info_file_that_is_a_link_to_a_device_is_refused(channel, tmp_path, monkeypatch, stream):
    """``info/paths.json`` as a symbolic link to /dev/zero: reading it would fill the
    memory of the runner (and of the other jobs on its host) before any check. The entry is
    refused with a named error, within a memory limit that reading it would exceed."""
    import resource
    import subprocess

    archive = hostile_archive(
        channel.root.parent / f"zero-{stream}" / SUBDIR,
        "planted",
        None,
        links={"info/paths.json": "/dev/zero"},
    )
    lock = tmp_path / "lock.txt"
    lock.write_text(explicit_lock_of(channel, archive))
    limit = 4 << 30

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    with monkeypatch.context() as patch:  # the job, as spawn starts it, in a memory limit
        real = subprocess.Popen
        patch.setattr(subprocess, "Popen", lambda *a, **kw: real(*a, **kw, preexec_fn=limited))
        proc = spawn(
            lock, tmp_path / "env", tmp_path / "pkgs", env={"INPUT_STREAM_DOWNLOADS": stream}
        )
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 1, out
    assert "info/paths.json" in out and "internal error" not in out, out
    assert not (tmp_path / "env").exists()


def test_one_package_locked_twice_with_two_archives_is_refused(channel, tmp_path):
    """An explicit lock that names two archives of one package (they share one archive path
    and one cache entry): a specific error while reading the lock, nothing fetched."""
    lines = []
    for tag, data in (("one", b"one\n"), ("two", b"two\n")):
        archive = _archive_with_links(channel.root.parent / f"twice-{tag}" / SUBDIR, {}, data)
        sha = hashlib.sha256(archive.read_bytes()).hexdigest()
        lines.append(f"{channel.url(str(archive.relative_to(channel.root.parent)))}#sha256:{sha}")
    lock = tmp_path / "lock.txt"
    lock.write_text(f"# platform: {SUBDIR}\n@EXPLICIT\n" + "\n".join(lines) + "\n")
    before = len(channel.server.log)
    rc, out = job(lock, tmp_path / "env", tmp_path / "pkgs")
    assert rc == 1 and "planted is locked twice with different files" in out, out
    assert "internal error" not in out and len(channel.server.log) == before
    lock.write_text(f"# platform: {SUBDIR}\n@EXPLICIT\n{lines[0]}\n{lines[0]}\n")
    rc, out = job(lock, tmp_path / "env", tmp_path / "pkgs")  # the same line twice: once
    assert rc == 0, out
    assert (tmp_path / "env" / "share" / "planted.txt").read_bytes() == b"one\n"


@pytest.mark.parametrize("stream", ["true", "false"])
def test_a_listed_file_under_an_unlisted_link_out_of_the_package_is_refused(
    channel, tmp_path, stream
):
    """The archive holds ``lib`` -> the user's home (not listed in its paths.json) and lists
    ``lib/.bashrc``: linking would hard-link the user's own file into the environment (a
    write there writes the user's file; a cached or uploaded environment carries it)."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("mine\n")
    paths = [
        {
            "_path": "lib/.bashrc",
            "path_type": "hardlink",
            "size_in_bytes": 5,
            "sha256": hashlib.sha256(b"mine\n").hexdigest(),
        }
    ]
    archive = hostile_archive(
        channel.root.parent / f"unlisted-{stream}" / SUBDIR,
        "planted",
        paths,
        links={"lib": str(home)},
    )
    lock = tmp_path / "lock.txt"
    lock.write_text(explicit_lock_of(channel, archive))
    rc, out = job(
        lock, tmp_path / "envs" / "env", tmp_path / "pkgs", env={"INPUT_STREAM_DOWNLOADS": stream}
    )
    assert (home / ".bashrc").stat().st_nlink == 1, out
    assert rc == 1 and "lib/.bashrc" in out, out
    assert "points outside the prefix and the package" in out, out
    assert "internal error" not in out and not (tmp_path / "envs" / "env").exists()


@pytest.fixture(scope="module")
def big(channel):
    """A noarch .conda of 3 MB that compresses little: extraction shows steady progress."""
    from testkit.conda_channel import _assemble

    text = os.urandom(3 << 19).hex()
    return _assemble(
        channel.root.parent / "big",
        channel.root.parent / "big-work",
        "big",
        "1.0",
        "0",
        SUBDIR,
        {"share/big.txt": text},
        noarch="generic",
    )


def _big_lock(channel, big, tmp_path) -> Path:
    lock = tmp_path / "big.lock"
    lock.write_text(
        f"# platform: {SUBDIR}\n@EXPLICIT\n"
        f"{channel.url('big/noarch/' + big.filename)}#sha256:{big.sha256}\n"
    )
    return lock


def _asked(channel, big) -> int:
    """Requests for the big archive, counted when they arrive (the log has them answered)."""
    return sum(big.filename in seen["path"] for seen in channel.server.seen)


def _big_job(channel, big, tmp_path, fault: str) -> tuple[int, str, int]:
    """A job installing the big package, whose archive the server serves with ``fault``,
    with GPU_CI_HTTP_TIMEOUT=1: its exit code, log, and how many times the archive was
    asked for."""
    channel.server.faults.clear()
    channel.server.fail(f"big/noarch/{big.filename}", fault)
    before = _asked(channel, big)
    rc, out = job(
        _big_lock(channel, big, tmp_path),
        tmp_path / "env",
        tmp_path / "pkgs",
        env={"GPU_CI_HTTP_TIMEOUT": "1"},
    )
    return rc, out, _asked(channel, big) - before


@pytest.mark.slow
def test_a_long_stream_that_makes_progress_is_not_cut_and_fetched_again(channel, big, tmp_path):
    """rattler's client only has a total timeout: an archive that takes longer than
    GPU_CI_HTTP_TIMEOUT to stream (a large CUDA package, 8 at once on a modest link) was cut
    at that time and downloaded again from its first byte. A stream is given up only when
    nothing new arrives for that long."""
    rc, out, asked = _big_job(channel, big, tmp_path, "trickle:3")
    assert rc == 0, out
    assert asked == 1, out
    assert "1 archives streamed into the package cache" in out, out


@pytest.mark.slow
def test_a_stream_that_stalls_is_given_up_for_our_downloader(channel, big, tmp_path):
    rc, out, asked = _big_job(channel, big, tmp_path, "slow:4")
    assert rc == 0, out
    assert asked == 2, out  # rattler's, given up, then ours
    assert (tmp_path / "env" / "share" / "big.txt").stat().st_size == 3 << 20
    assert our_temporaries(tmp_path) == []


def test_a_lock_with_sha256_streams_into_an_empty_cache(setup, channel):
    """conda-lock's unified locks carry sha256: an entry that is not in the cache is no
    candidate to trust (nothing to hash first), so its archive is streamed like any other."""
    result = setup(channel.unified_lock(["libhello", "hello"]))
    assert result.returncode == 0, result.stdout
    assert "2 archives streamed into the package cache" in result.summary, result.summary
