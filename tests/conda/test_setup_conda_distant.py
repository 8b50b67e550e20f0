"""How many downloads run at once: few against a server that closes every connection, many
(``fetch.WIDE``) against one that keeps connections open, where each small archive costs a
round trip, decided from what the server's answers say, never from how long they took.
The server counts the requests it answers at once; no timing is asserted."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpu_ci.conda import fetch, parallel
from gpu_ci.downloads import Download
from gpu_ci.retry import RetryPolicy
from testkit.conda_channel import ChannelServer

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
    ("protocol", "latency", "head_latency", "widens"),
    [
        ("HTTP/1.1", 0.0, None, True),  # kept alive, near or far: many at once
        ("HTTP/1.1", LATENCY, 0.0, True),  # slow GETs, quick HEADs (Nagle): no timing decides
        ("HTTP/1.0", LATENCY, None, False),  # a new connection per archive: a small backlog
    ],
)
def test_streams_widen_only_for_a_server_that_keeps_connections(
    copies, tmp_path, protocol, latency, head_latency, widens
):
    root, archive, rels = copies
    narrow = fetch.streams()
    # held until more than ``narrow`` are in flight where it should widen (a host's load
    # then cannot hide it); never held where it must not (each GET would wait 2 s)
    gather = narrow if widens else 0
    server = _server(
        root, protocol=protocol, latency=latency, head_latency=head_latency, gather=gather
    )
    try:
        assert _stream(server, archive, rels, tmp_path / "cache") == COPIES
    finally:
        server.stop()
    # one probe per origin, one request on a connection of its own, nothing of ours in it
    assert len(server.heads) == 1
    assert all("Authorization" not in h for h in server.heads)
    if widens:
        assert narrow < server.most_at_once <= fetch.WIDE
    else:
        assert server.most_at_once <= narrow


def _download(server: ChannelServer, archive, rels: list[str], folder: Path, narrow: int) -> None:
    folder.mkdir()
    items = [
        Download(
            f"{server.url}/{rel}", folder / f"a{i:02d}.conda", rel, archive.sha256, archive.md5
        )
        for i, rel in enumerate(rels)
    ]
    got = dict(parallel.downloaded(items, list(range(len(items))), RetryPolicy(), narrow))
    assert all(
        not isinstance(g, BaseException) and g.size == archive.path.stat().st_size
        for g in got.values()
    ), got


@pytest.mark.parametrize("protocol", ["HTTP/1.1", "HTTP/1.0"])
def test_our_downloader_adds_threads_only_for_a_server_that_keeps_connections(
    copies, tmp_path, protocol
):
    """The careful path (credentials, proxies, ``stream-downloads: false``): ``narrow``
    threads, each with its kept-alive connection; WIDE in all once a response shows the
    origin keeps connections alive (no probe: the downloads' answers tell). A server that
    closes every connection never sees more than ``narrow`` at once. The server holds each
    GET until more than ``narrow`` are in flight (``gather``), so what it sees does not
    depend on how busy the host is."""
    root, archive, rels = copies
    narrow = 2
    server = _server(root, protocol=protocol, gather=narrow if protocol == "HTTP/1.1" else 0)
    try:
        _download(server, archive, rels, tmp_path / "archives", narrow)
    finally:
        server.stop()
    assert server.heads == []
    if protocol == "HTTP/1.1":
        assert narrow < server.most_at_once <= fetch.WIDE
        assert len(server.peers) <= fetch.WIDE  # one connection per thread
    else:
        assert server.most_at_once <= narrow
        assert server.connections == COPIES  # one per archive, as the server asks


def test_the_probe_tells_kept_alive_from_closed_and_says_nothing_of_ours(copies):
    import asyncio

    root, _, rels = copies
    kept = _server(root, authorization="Bearer secret")
    closed = _server(root, protocol="HTTP/1.0")
    try:
        # a 401 still keeps the connection
        assert asyncio.run(fetch.keeps_connections(f"{kept.url}/{rels[0]}", 5.0)) is True
        assert asyncio.run(fetch.keeps_connections(f"{closed.url}/{rels[0]}", 5.0)) is False
        nothing = "http://127.0.0.1:9/nothing-listens-here"
        assert asyncio.run(fetch.keeps_connections(nothing, 5.0)) is None
    finally:
        kept.stop()
        closed.stop()
    assert [h.get("Authorization") for h in kept.heads] == [None]
