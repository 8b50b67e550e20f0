"""How many downloads run at once: few against a server on this host or one that closes
every connection, many (``fetch.WIDE``) against a distant server that keeps connections
open, where each small archive costs a round trip. The server counts the requests it
answers at once; no timing is asserted."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpu_ci.conda import fetch
from gpu_ci.downloads import Download, round_trip
from gpu_ci.retry import RetryPolicy
from tests.conda_channel import ChannelServer

pytest.importorskip("rattler", reason="py-rattler needs Python >= 3.10")

COPIES = 60
LATENCY = 0.05  # a CDN in another region; on loopback there is none


@pytest.fixture
def copies(channel, tmp_path):
    """One real archive of the test channel served under COPIES names (each a download of
    its own), with its digests."""
    archive = next(a for a in channel.archives if a.filename.endswith(".conda"))
    root = tmp_path / "served"
    folder = root / "channel" / archive.subdir
    folder.mkdir(parents=True)
    names = [f"copy{i:02d}-{archive.filename}" for i in range(COPIES)]
    for name in names:
        shutil.copyfile(archive.path, folder / name)
    return root, archive, [f"channel/{archive.subdir}/{n}" for n in names]


def _server(root: Path, **kw) -> ChannelServer:
    """A listen queue for every connection at once: a probe's connection dropped by a
    full queue would be retried a second later, after the downloads it was to widen."""
    return ChannelServer(root, backlog=128, **kw).start()


def _stream(server: ChannelServer, archive, rels: list[str], cache: Path) -> int:
    cache.mkdir()
    jobs = [
        (i, f"{server.url}/{rel}", cache / f"entry{i:02d}", archive.sha256, archive.md5)
        for i, rel in enumerate(rels)
    ]
    done = fetch.stream_and_extract(jobs, 30.0, log=lambda _: None)
    return len(done)


@pytest.mark.parametrize(
    ("protocol", "latency", "widens"),
    [
        ("HTTP/1.1", LATENCY, True),  # distant and kept alive: many at once
        ("HTTP/1.0", LATENCY, False),  # a new connection per archive: a small backlog overflows
        ("HTTP/1.1", 0.0, False),  # near: the CPU sets the pace, more would convoy
    ],
)
def test_streams_widen_only_for_a_distant_server_that_keeps_connections(
    copies, tmp_path, protocol, latency, widens
):
    root, archive, rels = copies
    server = _server(root, protocol=protocol, latency=latency)
    try:
        assert _stream(server, archive, rels, tmp_path / "cache") == COPIES
    finally:
        server.stop()
    # one probe per origin, never waited for: three round trips on one connection (all of
    # them when it widened), or one answer that closes it
    assert len(server.heads) == 3 if widens else len(server.heads) <= 3
    assert all("Authorization" not in h for h in server.heads)
    if widens:
        assert server.most_at_once > fetch.streams()
    else:
        assert server.most_at_once <= fetch.streams()


def _download(server: ChannelServer, archive, rels: list[str], folder: Path, narrow: int) -> None:
    folder.mkdir()
    items = [
        Download(
            f"{server.url}/{rel}", folder / f"a{i:02d}.conda", rel, archive.sha256, archive.md5
        )
        for i, rel in enumerate(rels)
    ]
    got = dict(fetch._downloaded(items, list(range(len(items))), RetryPolicy(), narrow))
    assert all(
        not isinstance(g, BaseException) and g.size == archive.path.stat().st_size
        for g in got.values()
    ), got


@pytest.mark.parametrize("latency", [LATENCY, 0.0])
def test_our_downloader_adds_threads_only_for_a_distant_server(copies, tmp_path, latency):
    """The careful path (credentials, proxies, ``stream-downloads: false``): ``narrow``
    threads, each with its kept-alive connection; WIDE in all once the origin proves
    distant. A near server sees no more connections than ``narrow``."""
    root, archive, rels = copies
    server = _server(root, latency=latency)
    narrow = 2
    try:
        _download(server, archive, rels, tmp_path / "archives", narrow)
    finally:
        server.stop()
    if latency:
        assert narrow < server.most_at_once <= fetch.WIDE
    else:
        assert server.most_at_once <= narrow
        assert len(server.peers) <= narrow  # one connection per thread, no more threads


def test_the_probe_tells_kept_alive_from_closed_and_says_nothing_of_ours(copies):
    root, _, rels = copies
    kept = _server(root, authorization="Bearer secret")
    closed = _server(root, protocol="HTTP/1.0")
    try:
        rtt = round_trip(f"{kept.url}/{rels[0]}", 5.0)  # a 401 still keeps the connection
        assert rtt is not None and rtt >= 0
        assert round_trip(f"{closed.url}/{rels[0]}", 5.0) is None
        assert round_trip("http://127.0.0.1:9/nothing-listens-here", 5.0) is None
    finally:
        kept.stop()
        closed.stop()
    assert [h.get("Authorization") for h in kept.heads] == [None] * 3
