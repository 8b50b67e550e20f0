"""What a warm install costs per cache entry, counted in system calls rather than timed
(a system call costs 5-7 us on a small VM runner, and a warm install of 600 packages makes
thousands): the stamp read once (open, fstat, read, close), one ``lstat`` per stamped file,
one ``lstat`` of rattler's lock, and one ``lstat`` of the stamp under the cache's shared lock
to see the entry was not replaced. And what the shortcuts must not change: a stamp rewritten
by another job (same archive) does not fail the link, a replaced entry still does.

The checks run in a child process while the job imports rattler (``fetch.Ahead``): each test
of it runs in a fresh interpreter, as a job does (once rattler is imported, or a thread
exists, nothing is forked), and shows whose verdicts it got."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from testkit.conda_channel import SUBDIR
from testkit.shared import ROOT

pytest.importorskip("rattler", reason="py-rattler needs Python >= 3.10")


def _counting(monkeypatch, calls: Counter) -> None:
    for name in ("open", "stat", "lstat", "fstat", "read", "close"):
        real = getattr(os, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(os, name, counted)


def _stamped_files(cache, plan) -> int:
    return sum(
        len(json.loads((cache / e.dist_name / ".gpu-ci-verified").read_bytes())["files"])
        for e in plan.conda
    )


def test_a_warm_entry_costs_its_stamp_its_files_and_one_lstat_of_rattlers_lock(warm, monkeypatch):
    from gpu_ci.conda import fetch

    plan, pkgs = warm
    cache = pkgs / "rattler"
    files = _stamped_files(cache, plan)
    calls: Counter = Counter()
    _counting(monkeypatch, calls)
    got = fetch.fetch_and_extract(plan, pkgs, cache, None)
    monkeypatch.undo()
    assert all(f.cached for f in got.fetched) and all(got.facts)
    entries = len(plan.conda)
    # per entry: the stamp (open, fstat, read, close), the files and rattler's lock
    # (lstat); the cache's directory looked at once (Path.mkdir's exist_ok)
    assert calls == Counter(
        open=entries, fstat=entries, read=entries, close=entries, stat=1, lstat=files + entries
    ), calls


def test_the_link_sees_each_entry_unreplaced_in_one_lstat(warm, monkeypatch):
    from gpu_ci.conda import fetch, install

    plan, pkgs = warm
    cache = pkgs / "rattler"
    got = fetch.fetch_and_extract(plan, pkgs, cache, None)
    calls: Counter = Counter()
    _counting(monkeypatch, calls)
    install._not_replaced(plan.conda, cache, got.facts)
    monkeypatch.undo()
    assert calls == Counter(lstat=len(plan.conda)), calls


def test_a_stamp_rewritten_by_another_job_is_read_past_not_taken_for_a_replacement(warm):
    """Another job hashed the entry again and rewrote its stamp (a new file) between this
    job's check and its link: the entry still holds this job's archive (its digest marker
    says so), so the link goes on."""
    from gpu_ci.conda import fetch, install, verified

    plan, pkgs = warm
    cache = pkgs / "rattler"
    got = fetch.fetch_and_extract(plan, pkgs, cache, None)
    entry = plan.conda[0]
    again = verified.write(cache / entry.dist_name, entry.digest, "other-job")
    assert again is not None and again.stamp != got.facts[0].stamp
    assert not verified.unchanged_stamp(os.path.join(cache, entry.dist_name), got.facts[0])
    install._not_replaced(plan.conda, cache, got.facts)  # no error


def test_an_entry_replaced_after_its_check_is_refused_at_the_link(warm):
    from gpu_ci.conda import fetch, install
    from gpu_ci.errors import GpuCiError

    plan, pkgs = warm
    cache = pkgs / "rattler"
    got = fetch.fetch_and_extract(plan, pkgs, cache, None)
    entry = plan.conda[1]
    target = cache / entry.dist_name
    # as cache_trust.publish replaces an entry: another directory renamed over it, its
    # own stamp and marker (another archive's digest)
    other = target.with_name(f".{target.name}.tmp-other")
    os.rename(target, other)
    os.mkdir(target)
    (target / ".gpu-ci-archive-sha256").write_text("0" * 64)
    (target / ".gpu-ci-verified").write_bytes((other / ".gpu-ci-verified").read_bytes())
    with pytest.raises(GpuCiError, match="replaced by another job"):
        install._not_replaced(plan.conda, cache, got.facts)


AHEAD = """
import os, signal, sys, time
from pathlib import Path
from gpu_ci.conda import fetch, lockfile

lock, pkgs, child = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
text = open(lock).read()
plan = lockfile.plan(lockfile.parse(text), text, "{subdir}", ["main"])
cache = pkgs / "rattler"
real, parent = fetch.warm_checks, os.getpid()
here = real(plan, cache)


def as_the_child_does(plan, cache):
    if os.getpid() == parent:
        print("checked-here")
        return real(plan, cache)
    if child == "dies":
        os._exit(3)
    if child == "garbles":
        return [("x", (1, 2))] * len(plan.conda)
    if child == "extra":  # one verdict more than the plan has entries
        return real(plan, cache) * 2
    if child == "foreign":  # facts of another archive than the lock's
        return [(s, f and f._replace(digest="0" * 64)) for s, f in real(plan, cache)]
    if child == "collects":  # enough new containers for several automatic collections
        junk = [[] for _ in range(50000)]
        del junk
    if child == "hangs":
        open(sys.argv[4] + ".ready", "w").close()  # past the closing of its descriptors
        time.sleep(600)
    return real(plan, cache)


fetch.warm_checks = as_the_child_does
if child == "orphaned":
    import fcntl

    held = os.open(sys.argv[4], os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)
    child = "hangs"
    ahead = fetch.Ahead(plan, cache)
    print(ahead._pid, flush=True)
    while not os.path.exists(sys.argv[4] + ".ready"):  # not killed before the child closed
        time.sleep(0.01)  # its descriptors: the test is of what it keeps, not of a race
    os.kill(os.getpid(), signal.SIGKILL)
if child == "absent":  # the cache does not exist yet: a first job on this runner
    import shutil

    shutil.rmtree(cache)
    with fetch.Ahead(plan, cache) as ahead:
        print("forked" if ahead._pid else "not-forked")
        print("nothing-trusted" if ahead.result() == [("", None)] * len(plan.conda) else "trusted")
    sys.exit(0)
if child == "sigchld":
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    print("forked" if fetch.Ahead(plan, cache)._pid else "not-forked")
    sys.exit(0)
if child == "collects":  # the parent's garbage, with a finalizer, not yet collected
    import gc

    class Finalized:
        def __del__(self):
            with open(sys.argv[4] + ".finalized", "a") as out:
                out.write(f"{{os.getpid()}}\\n")

    gc.collect()
    cycle = Finalized()
    cycle.me = cycle
    del cycle
with fetch.Ahead(plan, cache) as ahead:
    pid = ahead._pid
    assert pid, "not forked"
    if child == "hangs":
        start = time.monotonic()
        ahead.close()
        print("closed-in", round(time.monotonic() - start, 1))
    else:
        print("same" if ahead.result() == here else "differs")
try:
    os.kill(pid, 0)
    print("child-left")
except ProcessLookupError:
    print("child-gone")
if child == "collects":
    done = sys.argv[4] + ".finalized"
    pids = open(done).read().split() if os.path.exists(done) else []
    print("finalized-by-child" if str(pid) in pids else "not-by-child")
"""


def _fresh(code: str, *args: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter, as a job runs (nothing of this test process loaded)."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )


def _ahead(warm, tmp_path, child: str, code: int = 0) -> list[str]:
    plan, pkgs = warm
    proc = _fresh(
        AHEAD.format(subdir=SUBDIR),
        str(tmp_path / "lock.txt"),
        str(pkgs),
        child,
        str(tmp_path / "prefix.lock"),
    )
    assert proc.returncode == code, proc.stderr
    return proc.stdout.split()


def test_the_warm_checks_are_made_by_a_child_while_the_job_goes_on(warm, tmp_path):
    assert _ahead(warm, tmp_path, "checks") == ["same", "child-gone"]


@pytest.mark.parametrize("child", ["dies", "garbles", "extra", "foreign"])
def test_a_child_that_dies_or_sends_nonsense_costs_the_checks_made_here(warm, tmp_path, child):
    """Verdicts that decode but cannot be this plan's (another count of entries, facts of
    another archive) are nonsense too: never trusted more than the checks made here."""
    assert _ahead(warm, tmp_path, child) == ["checked-here", "same", "child-gone"]


def test_a_child_whose_verdicts_are_not_wanted_is_killed_not_waited_for(warm, tmp_path):
    """A reused environment (or an error) needs no verdicts: the child, still checking a
    large cache, is killed and reaped at once."""
    out = _ahead(warm, tmp_path, "hangs")
    assert out[0] == "closed-in" and float(out[1]) < 30 and out[2] == "child-gone", out


def test_a_job_killed_while_its_child_checks_leaves_no_lock_held(warm, tmp_path):
    """``kill -9`` of the job while its child is still checking: the child kept none of the
    job's descriptors, so the prefix lock the job held is free at once (the next job on that
    prefix does not wait for the child's checks of a large cache), and the job's output
    ends with the job (here: ``subprocess.run`` reads it to its end)."""
    import fcntl
    import signal

    (pid,) = _ahead(warm, tmp_path, "orphaned", code=-signal.SIGKILL)
    try:
        fd = os.open(tmp_path / "prefix.lock", os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError if still held
        os.close(fd)
    finally:
        os.kill(int(pid), signal.SIGKILL)


def test_a_warm_install_imports_nothing_for_what_it_does_not_do():
    """What a warm install's modules import at their top, less what it never uses: OpenSSL's
    libcrypto (``hashlib``) for the one digest it makes, the lock's sha256 (~5 ms); ``uuid``
    and ``platform`` for a random token and the machine's name (~3-5 ms); ``base64`` for
    credentials it has none of. Each is imported where it is needed."""
    code = (
        "import sys\n"
        "import gpu_ci.cli, gpu_ci.commands.setup_conda_from_lock, gpu_ci.downloads\n"
        "import gpu_ci.conda.install, gpu_ci.conda.channels, gpu_ci.conda.isolation, rattler\n"
        "from gpu_ci.conda import lockfile, options\n"
        "digest, subdir = lockfile.lock_sha256('@EXPLICIT\\n'), options.runner_subdir()\n"
        "loaded = {'hashlib', '_hashlib', 'uuid', 'platform', 'base64'} & set(sys.modules)\n"
        "import hashlib, platform\n"
        "print(sorted(loaded), digest == hashlib.sha256(b'@EXPLICIT\\n').hexdigest(),\n"
        "      subdir.split('-')[0] == {'Linux': 'linux', 'Darwin': 'osx'}[platform.system()])\n"
    )
    proc = _fresh(code)
    assert proc.stdout.split() == ["[]", "True", "True"], proc.stdout + proc.stderr


class _Killed(BaseException):
    """``kill -9`` of a job, where it stood (nothing of it runs after)."""


def test_a_replacement_killed_half_way_never_leaves_a_half_entry_that_passes_the_link(
    warm, monkeypatch
):
    """Job B replaces an entry (``cache_trust.publish``, another archive of that name) and is
    killed while the old entry is being removed: job A, which checked the old entry before,
    must not find a half-removed directory still holding its stamp (and marker), take it for
    unreplaced and link it. The old entry goes aside in one rename first; what is left of
    it is a temporary of a dead job, which the next sweep removes."""
    import shutil

    from gpu_ci.conda import cache_trust, fetch, install, transaction
    from gpu_ci.errors import GpuCiError

    plan, pkgs = warm
    cache = pkgs / "rattler"
    got = fetch.fetch_and_extract(plan, pkgs, cache, None)  # job A's checks
    entry = plan.conda[1]
    target = cache / entry.dist_name
    tmp = target.with_name(f".{target.name}.tmp-deadjob")
    shutil.copytree(target, tmp, symlinks=True)
    (tmp / ".gpu-ci-archive-sha256").unlink()
    listed = json.loads((target / "info" / "paths.json").read_text())["paths"][0]["_path"]

    def killed_in_rmtree(path, *args, **kwargs):
        os.unlink(os.path.join(path, listed))  # the first file removed, then the kill
        raise _Killed

    monkeypatch.setattr(cache_trust.shutil, "rmtree", killed_in_rmtree)
    with pytest.raises(_Killed):
        cache_trust.publish(tmp, target, "0" * 64, "deadjob", "1" * 64)
    monkeypatch.undo()
    if (target / listed).exists():
        assert (target / ".gpu-ci-archive-sha256").read_text() == "0" * 64  # B's, whole
    with pytest.raises(GpuCiError, match="replaced by another job"):
        install._not_replaced(plan.conda, cache, got.facts)
    transaction.sweep_cache(pkgs, cache)  # job B's token is dead: its leftovers go
    assert sorted(p.name for p in cache.iterdir() if "deadjob" in p.name) == []


NO_PIPE = """
import errno, os, sys
from pathlib import Path
from gpu_ci.conda import fetch, lockfile

text = open(sys.argv[1]).read()
plan = lockfile.plan(lockfile.parse(text), text, "{subdir}", ["main"])
cache = Path(sys.argv[2]) / "rattler"


def no_descriptor_left():
    raise OSError(errno.EMFILE, "Too many open files")


os.pipe = no_descriptor_left
with fetch.Ahead(plan, cache) as ahead:
    print("same" if ahead.result() == fetch.warm_checks(plan, cache) else "differs")
"""


def test_a_child_that_cannot_get_its_pipe_costs_the_checks_made_here(warm, tmp_path):
    """Out of descriptors (a job at its limit, or a cache of many entries): no pipe, no
    child, and the job checks the cache itself rather than failing."""
    plan, pkgs = warm
    proc = subprocess.run(
        [sys.executable, "-c", NO_PIPE.format(subdir=SUBDIR), str(tmp_path / "lock.txt"), pkgs],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert (proc.returncode, proc.stdout.split()) == (0, ["same"]), proc.stderr


def test_a_stamp_nested_past_the_parsers_depth_is_no_stamp(warm):
    """A stamp planted in the shared cache (a job of a fork can write there) nested too
    deep for ``json``: the entry is not trusted from it (hashed, or extracted again), not
    a traceback in every later job on the runner."""
    from gpu_ci.conda import verified

    plan, pkgs = warm
    entry = pkgs / "rattler" / plan.conda[0].dist_name
    deep = "[" * 200_000 + "]" * 200_000
    (entry / ".gpu-ci-verified").write_text(deep)
    assert verified.check(entry, plan.conda[0].digest) is None
    # and its paths.json, which hashing the entry reads: the entry is extracted again
    paths = entry / "info" / "paths.json"
    good = paths.read_bytes()
    paths.unlink()  # the cache's file is hard-linked into the first environment
    paths.write_text(deep)
    from gpu_ci.conda import fetch

    got = fetch.fetch_and_extract(plan, pkgs, pkgs / "rattler", None)
    assert not got.fetched[0].cached and paths.read_bytes() == good


@pytest.mark.parametrize("known", [0, 1])
def test_an_entry_without_facts_is_still_checked_at_the_link(warm, known):
    """Facts for fewer entries than the plan's (none, or only the first): the entries past
    them are still asked of their digest marker, never skipped."""
    from gpu_ci.conda import fetch, install
    from gpu_ci.errors import GpuCiError

    plan, pkgs = warm
    cache = pkgs / "rattler"
    got = fetch.fetch_and_extract(plan, pkgs, cache, None)
    (cache / plan.conda[-1].dist_name / ".gpu-ci-archive-sha256").write_text("0" * 64)
    with pytest.raises(GpuCiError, match="replaced by another job"):
        install._not_replaced(plan.conda, cache, got.facts[:known])


def test_the_child_runs_no_finalizer_of_the_jobs_garbage(warm, tmp_path):
    """Garbage of the job with a finalizer (a temporary file's, say), not yet collected when
    the child is forked: a collection in the child would run that finalizer a second time;
    the child collects nothing."""
    assert _ahead(warm, tmp_path, "collects") == ["same", "child-gone", "not-by-child"]


def test_a_cache_that_does_not_exist_yet_costs_no_child_and_no_check(warm, tmp_path):
    """An ephemeral runner's first job: nothing to check, so no fork (and no checks made
    here: ``checked-here`` would be printed)."""
    assert _ahead(warm, tmp_path, "absent") == ["not-forked", "nothing-trusted"]


def test_no_child_where_children_are_reaped_by_the_kernel(warm, tmp_path):
    """With SIGCHLD ignored (inherited so from a runner's wrapper) the child's status cannot
    be read and its pid may be another process's when it is killed: the checks are made
    here."""
    assert _ahead(warm, tmp_path, "sigchld") == ["not-forked"]


def test_a_stamp_touched_back_to_its_old_mtime_is_not_taken_as_unchanged(warm):
    """The stamp's identity includes its ctime (a stamp is never hard-linked): on a file
    system with 1-second times a replacement could match the rest."""
    from gpu_ci.conda import fetch, verified

    plan, pkgs = warm
    cache = pkgs / "rattler"
    got = fetch.fetch_and_extract(plan, pkgs, cache, None)
    entry = os.path.join(cache, plan.conda[0].dist_name)
    assert verified.unchanged_stamp(entry, got.facts[0])
    stamp = os.path.join(entry, ".gpu-ci-verified")
    before = os.lstat(stamp)
    os.utime(stamp, ns=(before.st_atime_ns, before.st_mtime_ns))  # moves only the ctime
    assert os.lstat(stamp).st_mtime_ns == before.st_mtime_ns
    assert not verified.unchanged_stamp(entry, got.facts[0])
