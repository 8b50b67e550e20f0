"""Review 2, s3: ``parallel.downloaded`` when its consumer stops early (a ``for`` body that
raises: KeyboardInterrupt, a broken extraction pool; Python then closes the generator),
and ``ALL_PROXY`` written as curl accepts it (``host:port``, no scheme)."""

from __future__ import annotations

import sys

import pytest

from gpu_ci.conda import parallel
from gpu_ci.downloads import Download, part_path
from gpu_ci.retry import RetryPolicy

pytest.importorskip("rattler", reason="py-rattler needs Python >= 3.10")


def _items(channel, folder):
    folder.mkdir()
    archives = [a for a in channel.archives if a.subdir != "noarch"][:3] or channel.archives[:3]
    rels = [a.path.relative_to(channel.server.root).as_posix() for a in archives]
    return (
        archives,
        rels,
        [
            Download(
                f"{channel.server.url}/{rel}", folder / a.filename, a.filename, a.sha256, a.md5
            )
            for a, rel in zip(archives, rels)
        ],
    )


def test_a_consumer_that_stops_early_closes_the_downloads(channel, tmp_path):
    """Closing the generator (what a ``for`` loop does when its body raises) must not be
    answered by another ``yield`` (RuntimeError: generator ignored GeneratorExit, the thread
    pools never shut down); once it returns, no download of it is still running."""
    channel.server.faults.clear()
    archives, rels, items = _items(channel, tmp_path / "archives")
    channel.server.fail(rels[1], "slow:1")  # still in flight when the consumer stops
    downloads = parallel.downloaded(items, [0, 1, 2], RetryPolicy(), narrow=3)
    index, got = next(downloads)
    assert not isinstance(got, BaseException), got
    downloads.close()  # raised RuntimeError before the fix
    for item, archive in zip(items, archives):  # each finished: complete, or not there
        assert not part_path(item.dest).exists()
        assert not item.dest.exists() or item.dest.read_bytes() == archive.data


def test_a_consumer_raising_keyboard_interrupt_leaves_no_download_running(channel, tmp_path):
    channel.server.faults.clear()
    archives, rels, items = _items(channel, tmp_path / "archives")
    channel.server.fail(rels[1], "slow:1")
    unraisable = []

    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        with pytest.raises(KeyboardInterrupt):
            for _ in parallel.downloaded(items, [0, 1, 2], RetryPolicy(), narrow=3):
                raise KeyboardInterrupt
    finally:
        sys.unraisablehook = hook
    assert unraisable == []  # "Exception ignored in: <generator ...>" before the fix
    assert items[1].dest.read_bytes() == archives[1].data  # waited for, not left running


@pytest.fixture
def proxy():
    from testkit.conda_channel import ForwardProxy

    started = ForwardProxy().start()
    yield started
    started.stop()


@pytest.mark.parametrize("stream", ["true", "false"])
def test_all_proxy_without_a_scheme_is_an_http_proxy(
    channel, locks, tmp_path, proxy, monkeypatch, stream
):
    """curl reads ``ALL_PROXY=host:port`` as an HTTP proxy (rattler's client too); urllib's
    ``HTTP_PROXY=host:port`` as well. Our downloader went around it (and said 'direct', so
    the streams went to rattler's client, which took the proxy)."""
    from testkit.conda.jobs import PROXY_VARIABLES, SMALL, finish, spawn

    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    env = {"ALL_PROXY": proxy.url.removeprefix("http://"), "INPUT_STREAM_DOWNLOADS": stream}
    code, out = finish(spawn(locks["small"], tmp_path / "env", tmp_path / "pkgs", env=env))
    assert code == 0, out
    for filename in [a.filename for a in channel.archives if a.name in SMALL]:
        assert any(url.endswith(filename) for url in proxy.seen), (filename, proxy.seen, out)


@pytest.mark.parametrize("stream", ["true", "false"])
def test_a_socks_all_proxy_is_named_not_gone_around(channel, locks, tmp_path, monkeypatch, stream):
    """``ALL_PROXY=socks5://...`` (curl takes it; urllib cannot speak SOCKS): the job
    connected straight to the server, around the proxy the runner names. Now a specific
    error, nothing downloaded, the proxy's password masked."""
    from testkit.conda.jobs import PROXY_VARIABLES, finish, spawn

    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    channel.server.log.clear()
    env = {"ALL_PROXY": "socks5://user:s3cret@127.0.0.1:9", "INPUT_STREAM_DOWNLOADS": stream}
    code, out = finish(spawn(locks["small"], tmp_path / "env", tmp_path / "pkgs", env=env))
    assert code == 1, out
    assert "ALL_PROXY" in out and "HTTPS_PROXY" in out, out
    assert "s3cret" not in out and "Traceback" not in out, out
    names = [a.filename for a in channel.archives]
    assert [r for r in channel.server.log if r[0].rpartition("/")[2] in names] == []
    assert not (tmp_path / "env").exists()


@pytest.mark.slow
def test_no_download_starts_after_an_error_even_one_waiting_for_its_origin(
    channel, tmp_path, monkeypatch
):
    """Two origins, one widened by its first answer (the second pool's threads take the
    queue) and one whose first download still holds its one permit. Downloads handed to a
    thread before the first error but still waiting for their origin's permit started after
    it, against "after an error no other download starts". The near origin's log says which
    were requested."""
    import shutil

    from testkit.conda.jobs import PROXY_VARIABLES
    from testkit.conda_channel import ChannelServer

    for name in PROXY_VARIABLES:  # the probe goes only where no proxy applies
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    archive = next(a for a in channel.archives if a.filename.endswith(".conda"))
    root = tmp_path / "served"
    (root / "c").mkdir(parents=True)
    names = ["a0", "b0", "a1", "b1", "b2", "b3"]
    for name in names:
        shutil.copyfile(archive.path, root / "c" / f"{name}.conda")
    distant = ChannelServer(root, backlog=128, latency=0.05).start()
    near = ChannelServer(root, backlog=128).start()
    distant.fail("c/a0.conda", "slow:1.5")  # holds the one narrow thread until it widened
    for name in ("b0", "b1", "b2", "b3"):  # whichever thread takes the near origin's one
        near.fail(f"c/{name}.conda", "slow:1.5")  # permit first holds it past the error
    distant.fail("c/a1.conda", "404")  # the first error, while b1-b3 wait for that permit
    (tmp_path / "out").mkdir()
    items = [
        Download(
            f"{(distant if n[0] == 'a' else near).url}/c/{n}.conda",
            tmp_path / "out" / f"{n}.conda",
            n,
            archive.sha256,
            archive.md5,
        )
        for n in names
    ]
    try:
        got = dict(parallel.downloaded(items, list(range(len(items))), RetryPolicy(), 1))
    finally:
        distant.stop()
        near.stop()
    assert "HTTP 404" in str(got[2]), got
    # one near download held the permit when the error came; none of the others started
    # (which one is the threads' race: they reach the origin's permit in any order)
    assert len([p for p, _ in near.log if p.rpartition("/")[2].startswith("b")]) == 1


@pytest.mark.parametrize("stream", ["true", "false"])
def test_a_redirect_to_a_malformed_url_is_named_not_an_internal_error(setup, channel, stream):
    """A hostile or broken mirror answering ``Location: http://[::1/x`` (urlsplit's
    ValueError) was an 'internal error in gpu-ci': now the archive and the server are
    named, nothing is installed, and it is not retried."""
    hello = channel.archives[1]
    rel = f"channel/linux-64/{hello.filename}"
    channel.server.fail(rel, *["redirect:http://[::1/x"] * 6)
    result = setup(
        channel.explicit_lock(["libhello", "hello"]), env={"INPUT_STREAM_DOWNLOADS": stream}
    )
    assert result.returncode == 1, result.stdout
    assert "internal error" not in result.stdout + result.stderr
    assert "hello 2.1" in result.errors[0] and "redirect" in result.errors[0], result.errors
    assert not setup.default_prefix.exists()
    channel.server.faults.clear()
