"""A package cache that does not exist when the job begins (``fetch.Ahead``: no child, no
check): what another job publishes meanwhile, and odd things at the cache's name, are met
as the checks made at that moment would have met them, never trusted more. Each case runs
in a fresh interpreter, as a job does."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from testkit.conda_channel import SUBDIR
from testkit.shared import ROOT

pytest.importorskip("rattler", reason="py-rattler needs Python >= 3.10")

SCRIPT = """
import os, shutil, sys
from pathlib import Path
from gpu_ci.conda import fetch, lockfile

lock, pkgs, case = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
text = open(lock).read()
plan = lockfile.plan(lockfile.parse(text), text, "{subdir}", ["main"])
cache = pkgs / "rattler"
aside = pkgs / "aside"
os.rename(cache, aside)
quiet = lambda _: None

if case.startswith("published"):  # another job creates the cache and publishes meanwhile
    with fetch.Ahead(plan, cache) as ahead:
        os.rename(aside, cache)
        inodes = [os.lstat(cache / e.dist_name).st_ino for e in plan.conda]
        how = fetch.Fetching(stream=case == "published-stream")
        got = fetch.fetch_and_extract(plan, pkgs, cache, how, log=quiet, ahead=ahead)
    kept = [os.lstat(cache / e.dist_name).st_ino for e in plan.conda] == inodes
    print("kept" if kept else "replaced", "facts" if all(got.facts) else "no-facts")
    sys.exit(0)

if case == "symlink-dir":
    os.symlink(aside, cache)
elif case == "file":
    cache.write_text("x")
elif case == "dangling":
    os.symlink(pkgs / "nowhere", cache)
elif case == "loop":
    os.symlink(cache, cache)
elif case == "eacces":  # an LSM that denies getattr of the cache itself, not its entries
    os.rename(aside, cache)
    real = os.stat

    def stat(path, *a, **k):
        if os.fspath(path) == os.fspath(cache):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real(path, *a, **k)

    os.stat = stat
with fetch.Ahead(plan, cache) as ahead:
    got, here = ahead.result(), fetch.warm_checks(plan, cache)
    # never trusted more than the checks made at this moment would trust
    print("no-more" if all(g in (("", None), h) for g, h in zip(got, here)) else "more")
from gpu_ci.conda import install
from gpu_ci.errors import GpuCiError

try:
    install.install(plan, pkgs.parent / "env", pkgs, dict(os.environ), log=quiet)
    print("installed")
except GpuCiError as exc:
    print("named:", type(exc).__name__, str(exc).splitlines()[0][:300])
except BaseException as exc:
    print("raw:", type(exc).__name__, str(exc)[:100])
"""


def _run(warm, tmp_path, case: str) -> str:
    plan, pkgs = warm
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            SCRIPT.format(subdir=SUBDIR),
            str(tmp_path / "lock.txt"),
            str(pkgs),
            case,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_an_entry_published_meanwhile_is_found_by_the_stream_not_fetched(
    warm,
    tmp_path,
    channel,
):
    before = len(channel.server.requests(".conda")) + len(channel.server.requests(".tar.bz2"))
    assert _run(warm, tmp_path, "published-stream") == "kept facts"
    after = len(channel.server.requests(".conda")) + len(channel.server.requests(".tar.bz2"))
    assert after == before  # nothing downloaded


def test_an_entry_published_meanwhile_is_kept_by_the_careful_path(warm, tmp_path):
    """Fetched again (our downloader does not look first), but the entry is not replaced."""
    assert _run(warm, tmp_path, "published-careful") == "kept facts"


# What the install then does: a link to a directory is used as the directory; a file, a
# dangling link or a link loop is named (it was a bare FileExistsError from ``Path.mkdir``,
# which the CLI called an internal error) and left where it is; a cache that cannot be
# looked at is a named disk error.
ODD = {
    "symlink-dir": "installed",
    "file": "named: GpuCiError",
    "dangling": "named: GpuCiError",
    "loop": "named: GpuCiError",
    "eacces": "named: DiskError",
}


@pytest.mark.parametrize("case", sorted(ODD))
def test_odd_things_at_the_caches_name(warm, tmp_path, case):
    first, last = _run(warm, tmp_path, case).splitlines()
    assert first == "no-more"
    assert last.startswith(ODD[case]), last
    if ODD[case] == "named: GpuCiError":
        assert "is not a directory" in last, last
        cache = warm[1] / "rattler"
        assert os.path.lexists(cache)  # not ours to delete


@pytest.mark.parametrize("phase", ["download", "extract", "link"])
def test_kill_9_of_a_first_job_then_the_next_run_installs_cleanly(channel, locks, tmp_path, phase):
    """The first job on an absent cache (no child, nothing checked) killed in each phase of
    its streams: no process left, and the next job installs from what it left."""
    import signal
    import uuid

    from testkit.conda.jobs import assert_whole, job, survivors

    prefix, pkgs = tmp_path / "env", tmp_path / "pkgs"
    tag = uuid.uuid4().hex
    rc, out = job(locks["small"], prefix, pkgs, tag=tag, env={"GPU_CI_TEST_KILL_AT": phase})
    assert rc == -signal.SIGKILL, out
    assert survivors(tag) == []
    rc, out = job(locks["small"], prefix, pkgs)
    assert rc == 0, out
    assert_whole(prefix, ["libhello", "hello", "hello-data"], pkgs, channel, tmp_path)
