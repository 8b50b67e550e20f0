"""Review of the raw cache reads (f954f97) and the distant-server probe (d58f13a): what a
planted FIFO, a concurrent job or a hostile package could still do."""

from __future__ import annotations

import os
import stat

import pytest

from testkit.conda.jobs import finish, rattler_entry, spawn

pytest.importorskip("rattler", reason="py-rattler needs Python >= 3.10")


def _sidecar_of_a_job(locks, tmp_path):
    """A job whose archives our downloader fetched (``stream-downloads: false``, as with
    credentials or a proxy): its package cache, where the md5 sidecar of one entry goes (for
    the test to plant something there; the entry's stamp, which records the sha256 instead,
    removed) and the job's inputs. The archives are removed, so that the next job fetches
    them again and looks at the sidecar after linking."""
    pkgs = tmp_path / "pkgs"
    off = {"INPUT_STREAM_DOWNLOADS": "false"}
    code, out = finish(spawn(locks["small"], tmp_path / "a", pkgs, env=off))
    assert code == 0, out
    entry = rattler_entry(pkgs, "hello-data")
    sidecar = entry.with_name(entry.name + ".gpu-ci-md5")
    assert not os.path.lexists(sidecar)  # the stamp records the sha256: no sidecar made
    (entry / ".gpu-ci-verified").unlink()  # without it, the sidecar is what is read
    for archive in (pkgs / "archives").iterdir():
        archive.unlink()
    return pkgs, sidecar, off


def test_a_fifo_at_the_md5_sidecar_does_not_stop_our_downloader(channel, locks, tmp_path):
    """With ``stream-downloads: false`` (or credentials, a proxy) the archive is fetched by
    our downloader and its sha256 recorded in the md5 sidecar after linking: the sidecar is
    compared first, and a FIFO planted there made that read wait for a writer forever."""
    pkgs, sidecar, off = _sidecar_of_a_job(locks, tmp_path)
    os.mkfifo(sidecar)

    code, out = finish(spawn(locks["small"], tmp_path / "b", pkgs, env=off))
    assert code == 0, out
    assert (tmp_path / "b" / "share" / "hello" / "data.txt").read_text() == "data\n"
    assert stat.S_ISREG(os.lstat(sidecar).st_mode)  # recorded again, in a file


def test_a_directory_at_the_md5_sidecar_costs_the_record_not_the_job(channel, locks, tmp_path):
    """The sidecar is a shortcut for the next job: a directory where it goes (left by
    another job on a self-hosted host) made its rename fail with EISDIR, raised as an
    internal error after the environment was linked."""
    pkgs, sidecar, off = _sidecar_of_a_job(locks, tmp_path)
    (sidecar / "kept").mkdir(parents=True)

    code, out = finish(spawn(locks["small"], tmp_path / "b", pkgs, env=off))
    assert code == 0, out
    assert (tmp_path / "b" / "share" / "hello" / "data.txt").read_text() == "data\n"
    assert (sidecar / "kept").is_dir()  # not ours: left as it is
    assert not list(pkgs.glob("rattler/.*.tmp-*"))


@pytest.mark.parametrize("port", ["99999", "abc"])
def test_a_lock_url_with_a_port_no_server_has_is_a_lock_error(channel, tmp_path, port):
    """The lock's author writes the port: one out of range or not a number was an internal
    error (ValueError from ``urlsplit(url).port``, deep in a download or the probe's origin
    key), not the lock line to fix."""
    import re

    lock = tmp_path / "bad.lock"
    lock.write_text(
        re.sub(r"(//127\.0\.0\.1):\d+", rf"\1:{port}", channel.explicit_lock(["libhello"]), count=1)
    )
    code, out = finish(spawn(lock, tmp_path / "env", tmp_path / "pkgs"))
    assert code == 1, out
    assert "internal error" not in out
    assert f"127.0.0.1:{port}/" in out and "is not a valid URL (Port" in out
    assert "Re-lock it." in out


def test_lock_urls_with_valid_ports_still_parse():
    from gpu_ci.conda import lockfile

    digest = "#" + "0" * 32
    for url in (
        "https://u:p@h.example:8443/c/linux-64/a-1-h0_0.conda",
        "https://[::1]:8443/c/linux-64/a-1-h0_0.conda",
        "https://h.example/c/linux-64/a-1-h0_0.conda",
    ):
        assert lockfile.parse(f"@EXPLICIT\n{url}{digest}\n").packages[0]["entry"].url == url


# Ends as ``python -m gpu_ci`` does once py-rattler ran: without finalizing the interpreter,
# which rattler's runtime threads can crash (seen here: SIGSEGV after "streamed 18").
_STREAM_CHILD = """
import os
import sys
from pathlib import Path
from gpu_ci.conda import fetch
url, sha, md5, count, cache = sys.argv[1:6]
cache = Path(cache)
cache.mkdir()
jobs = [(i, f"{url}/{i:02d}.conda", cache / f"entry{i:02d}", sha, md5)
        for i in range(int(count))]
print("streamed", len(fetch.stream_and_extract(jobs, 30.0, log=lambda _: None)), flush=True)
os._exit(0)
"""


def test_out_of_file_descriptors_streams_are_left_to_the_careful_path(channel, tmp_path):
    """Widened to ``WIDE`` streams per distant origin, a job holds ~3x the descriptors (a
    lock, a socket, a file being extracted per stream): where a runner's limit is low
    (macOS: 256, several origins) the per-entry lock's open() failed with EMFILE outside the
    stream's ``try`` and took the whole job down, although a stream that fails is only left
    to our downloader."""
    import resource
    import shutil
    import subprocess
    import sys

    from testkit.conda.jobs import ROOT
    from testkit.conda_channel import ChannelServer

    archive = next(a for a in channel.archives if a.filename.endswith(".conda"))
    root = tmp_path / "served"
    (root / "c").mkdir(parents=True)
    for i in range(60):
        shutil.copyfile(archive.path, root / "c" / f"{i:02d}.conda")
    server = ChannelServer(root, latency=0.05).start()  # distant, kept alive: widened

    def few_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))

    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                _STREAM_CHILD,
                f"{server.url}/c",
                archive.sha256,
                archive.md5,
                "60",
                str(tmp_path / "cache"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=few_descriptors,
            cwd=str(ROOT),
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )
    finally:
        server.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    streamed = int(proc.stdout.split()[1])
    from gpu_ci.conda import cache_trust, verified

    published = [
        e
        for e in (tmp_path / "cache").iterdir()
        if e.name.startswith("entry") and e.suffix != ".lock"
    ]
    assert len(published) >= streamed
    # Each published entry is a whole extraction of this archive (its digest marker names
    # it). Its stamp verifies, or it has none: a stamp the descriptor limit kept from being
    # written costs the next job a hash, no more (verified.write), never a wrong entry.
    for entry in published:
        marker = (entry / cache_trust.SHA_MARKER).read_text()
        assert marker in (archive.sha256, f"sha256:{archive.sha256}"), (entry.name, marker)
        stamped = (entry / verified.STAMP).exists()
        assert not stamped or verified.check(entry, archive.sha256) is not None, entry.name


# Eight spellings of this host's loopback address: eight origins to a client that keys its
# gates by host name, one server to count what they ask of it at once.
LOOPBACK_SPELLINGS = (
    "127.0.0.1",
    "127.1",
    "127.0.1",
    "2130706433",
    "0x7f000001",
    "localhost",
    "0177.0.0.1",
    "127.0.0.01",
)


@pytest.mark.slow
def test_streams_from_many_origins_stay_within_one_total(channel, tmp_path, monkeypatch):
    """The gate was one for all streams (``streams()``, measured against a small listen
    backlog and the CPU); per origin now, each widening on its own. A lock names its
    origins, so many of them (or several mirrors) multiplied the streams at once without
    bound: 8 origins near this host (none widens), 6 each, up to 48 at once."""
    import shutil

    from gpu_ci.conda import fetch
    from testkit.conda_channel import ChannelServer

    archive = next(a for a in channel.archives if a.filename.endswith(".conda"))
    root = tmp_path / "served"
    (root / "c").mkdir(parents=True)
    per_origin = 8
    for i in range(per_origin):
        shutil.copyfile(archive.path, root / "c" / f"{i:02d}.conda")
    # closes every connection: never widened; each answer waits, so the streams overlap
    server = ChannelServer(root, protocol="HTTP/1.0", latency=0.3).start()
    port = server.url.rsplit(":", 1)[1]
    cache = tmp_path / "cache"
    cache.mkdir()
    jobs = [
        (
            o * per_origin + i,
            f"http://{host}:{port}/c/{i:02d}.conda",
            cache / f"entry{o}-{i}",
            archive.sha256,
            archive.md5,
        )
        for o, host in enumerate(LOOPBACK_SPELLINGS)
        for i in range(per_origin)
    ]
    from gpu_ci.conda import streams

    monkeypatch.setattr(streams, "PROBES", 3)
    try:
        done = fetch.stream_and_extract(jobs, 30.0, log=lambda _: None)
    finally:
        server.stop()
    assert len(done) == len(jobs)
    # a probe is one request per origin, in the event loop (no thread), for at most PROBES
    # origins (3 here, of 8)
    assert len(server.heads) <= 3
    assert server.most_at_once <= fetch.streams()


@pytest.mark.slow
def test_our_downloader_from_many_origins_stays_within_one_total(channel, tmp_path):
    """The same for our downloader's threads (credentials, proxies, ``stream-downloads:
    false``): ``narrow`` at once in all, not per origin (2 here, 8 origins: up to 16)."""
    import shutil

    from gpu_ci.conda import parallel
    from gpu_ci.downloads import Download
    from gpu_ci.retry import RetryPolicy
    from testkit.conda_channel import ChannelServer

    archive = next(a for a in channel.archives if a.filename.endswith(".conda"))
    root = tmp_path / "served"
    (root / "c").mkdir(parents=True)
    shutil.copyfile(archive.path, root / "c" / "a.conda")
    server = ChannelServer(root, protocol="HTTP/1.0", latency=0.3).start()
    port = server.url.rsplit(":", 1)[1]
    (tmp_path / "archives").mkdir()
    items = [
        Download(
            f"http://{host}:{port}/c/a.conda",
            tmp_path / "archives" / f"{o}-{i}.conda",
            host,
            archive.sha256,
        )
        for o, host in enumerate(LOOPBACK_SPELLINGS)
        for i in range(2)
    ]
    narrow = 2
    try:
        got = dict(parallel.downloaded(items, list(range(len(items))), RetryPolicy(), narrow))
    finally:
        server.stop()
    assert all(
        not isinstance(g, BaseException) and g.size == archive.path.stat().st_size
        for g in got.values()
    ), got
    assert server.most_at_once <= narrow
    assert server.heads == []  # no probe: the downloads' own answers tell


_PROBE_CHILD = """
import asyncio, sys
from gpu_ci.conda.fetch import keeps_connections
print(asyncio.run(keeps_connections(sys.argv[1], 5.0)))
"""


@pytest.mark.parametrize("bypass", [False, True])
def test_the_probe_does_not_go_around_all_proxy(channel, tmp_path, bypass):
    """With only ALL_PROXY set, ``direct`` says yes (urllib knows no 'all' scheme), so the
    archives are streamed, and rattler's client takes them through that proxy; the probe
    went straight to the server, the one connection of the job around the proxy. NO_PROXY
    still lets it ask a server the proxy is bypassed for."""
    import subprocess
    import sys

    from testkit.conda.jobs import ROOT
    from testkit.conda_channel import ChannelServer

    server = ChannelServer(channel.root).start()
    proxy = ChannelServer(tmp_path).start()  # answers 404 to whatever it is asked
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.update({"PYTHONPATH": str(ROOT / "src"), "ALL_PROXY": proxy.url})
    if bypass:
        env["NO_PROXY"] = "127.0.0.1"
    archive = channel.archives[0]
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                _PROBE_CHILD,
                channel.archive_url(archive).replace(channel.server.url, server.url),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
    finally:
        server.stop()
        proxy.stop()
    assert proc.returncode == 0, proc.stderr
    assert proxy.heads == [] and proxy.seen == []
    if bypass:
        assert len(server.heads) == 1 and proc.stdout.strip() == "True"
    else:
        assert server.heads == [] and proc.stdout.strip() == "None"
