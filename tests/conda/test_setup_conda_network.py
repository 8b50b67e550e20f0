"""setup-conda-from-lock over the network: resumed downloads, mirrors and credentials.

Real packages from a loopback channel (testkit/conda_channel.py); the mirrors are second
servers over the same files that demand credentials.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

pytest.importorskip("rattler", reason="py-rattler needs Python >= 3.10")
pytest.importorskip("rattler_build", reason="py-rattler-build needs Python >= 3.10")

from testkit.conda_channel import ChannelServer, build_channel  # noqa: E402

TOKEN = "s3cr3t-bearer-7f1c"
USER, PASSWORD = "ci-bot", "pa55-basic-9e2d"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


@pytest.fixture(scope="module")
def channel(tmp_path_factory):
    root = tmp_path_factory.mktemp("netchannel")
    built = build_channel(root, with_python=False)
    built.server = ChannelServer(root).start()
    yield built
    built.server.stop()


@pytest.fixture
def mirror(channel):
    """Start a mirror of the channel's files that requires an Authorization header."""
    started = []

    def start(authorization: str) -> ChannelServer:
        server = ChannelServer(channel.root.parent, authorization=authorization).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def setup(run_cli, tmp_path, channel):
    channel.server.faults.clear()
    channel.server.seen.clear()
    channel.server.log.clear()
    cache = tmp_path / "toolcache"

    def run(lock_text: str, *args: str, env=None):
        lock = tmp_path / "lock.txt"
        lock.write_text(lock_text)
        full = {
            "RUNNER_TOOL_CACHE": str(cache),
            "GPU_CI_HTTP_BACKOFF": "0.01",
            "GPU_CI_HTTP_RETRIES": "2",
        }
        full.update(env or {})
        return run_cli(
            [
                "setup-conda-from-lock",
                "--lock-file",
                str(lock),
                "--miniforge",
                "false",
                "--activate",
                "false",
                *args,
            ],
            full,
        )

    run.prefix = cache / "miniforge3" / "26.3.2-3" / "envs" / "ci"
    return run


def _everything(result) -> str:
    """All a run printed or wrote, less the ::add-mask:: commands (which must name secrets)."""
    text = result.stdout + result.stderr + result.summary + "".join(result.outputs.values())
    return "\n".join(line for line in text.splitlines() if not line.startswith("::add-mask::"))


def test_a_connection_cut_mid_archive_resumes_with_range(setup, channel):
    hello = channel.archives[1]
    channel.server.fail(f"channel/linux-64/{hello.filename}", "truncate")
    result = setup(channel.explicit_lock(["libhello", "hello"]), "--stream-downloads", "false")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [s for _, s in channel.server.requests(hello.filename)] == [200, 206]
    libhello = channel.archives[0]  # fetched once: rattler links from our cache, never fetches
    assert [s for _, s in channel.server.requests(libhello.filename)] == [200]
    ranges = [h.get("Range") for h in channel.server.seen if hello.filename in h["path"]]
    assert ranges == [None, f"bytes={len(hello.data) // 2}-"]  # only the missing half
    # the resumed archive was verified as a whole and installed
    assert (setup.prefix / "bin" / "hello").exists()


def test_a_resumed_file_that_fails_the_hash_starts_over(setup, channel):
    hello = channel.archives[1]
    # first half cut, then the rest "resumed" from a server whose file differs
    channel.server.fail(f"channel/linux-64/{hello.filename}", "truncate", "corrupt")
    result = setup(channel.explicit_lock(["libhello", "hello"]), "--stream-downloads", "false")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [s for _, s in channel.server.requests(hello.filename)] == [200, 206, 200]


def test_a_streamed_archive_cut_mid_way_is_fetched_by_our_downloader(setup, channel):
    """The default: rattler streams each archive into the cache; a cut stream leaves no
    partial file to resume (README), so our downloader fetches that archive, resuming any
    further cut with Range, and verifies it."""
    hello = channel.archives[1]
    channel.server.fail(f"channel/linux-64/{hello.filename}", "truncate", "truncate")
    result = setup(channel.explicit_lock(["libhello", "hello"]))
    assert result.returncode == 0, result.stdout + result.stderr
    assert [s for _, s in channel.server.requests(hello.filename)] == [200, 200, 206]
    ranges = [h.get("Range") for h in channel.server.seen if hello.filename in h["path"]]
    assert ranges == [None, None, f"bytes={len(hello.data) // 2}-"]
    assert "1 archives streamed into the package cache" in result.summary
    assert (setup.prefix / "bin" / "hello").exists()


def _mirrored(channel, server) -> str:
    return f"{channel.url('channel/')} => {server.url}/channel/"


def _through_mirror(setup, channel, server, lock: str, credential: str):
    """The job on the mirror, with ``credential`` (``bearer T``) for its host."""
    host = server.url.split("//")[1]
    return setup(
        lock,
        "--channel-mirrors",
        _mirrored(channel, server),
        "--channel-credentials",
        f"http://{host} = {credential}",
    )


def test_mirror_with_bearer_token(setup, channel, mirror):
    server = mirror(f"Bearer {TOKEN}")
    lock = channel.explicit_lock(["libhello", "hello"])
    result = _through_mirror(setup, channel, server, lock, f"bearer {TOKEN}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert not channel.server.requests("channel/")  # nothing from the original host
    assert sorted(s for _, s in server.log) == [200, 200]
    assert f"::add-mask::{TOKEN}" in result.stdout
    assert TOKEN not in _everything(result)


def test_mirror_with_basic_auth_and_401_without(setup, channel, mirror):
    server = mirror(f"Basic {BASIC}")
    lock = channel.explicit_lock(["libhello"])
    host = server.url.split("//")[1]
    refused = setup(lock, "--channel-mirrors", _mirrored(channel, server))
    assert refused.returncode == 1
    # the streamed attempt, then our downloader's, which names the input; never retried
    assert [s for _, s in server.log] == [401, 401]
    error = refused.errors[0]
    assert f"HTTP 401 for mirror {server.url}/channel/linux-64/" in error
    assert f"{host} asks for credentials" in error and "'channel-credentials'" in error
    assert not refused.outputs.get("prefix")

    result = _through_mirror(setup, channel, server, lock, f"basic {USER}:{PASSWORD}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert server.log[-1][1] == 200
    assert f"::add-mask::{PASSWORD}" in result.stdout
    for secret in (PASSWORD, BASIC):
        assert secret not in _everything(result)


def test_wrong_credentials_name_the_host_and_the_input(setup, channel, mirror):
    server = mirror(f"Bearer {TOKEN}")
    host = server.url.split("//")[1]
    lock = channel.explicit_lock(["libhello"])
    result = _through_mirror(setup, channel, server, lock, "bearer wrong-token-123")
    assert result.returncode == 1
    assert (
        f"the bearer credentials for {host} in 'channel-credentials' were refused"
        in (result.errors[0])
    )
    assert "wrong-token-123" not in result.errors[0]


def test_credentials_are_never_sent_to_another_origin(setup, channel, mirror):
    server = mirror(f"Bearer {TOKEN}")
    host = server.url.split("//")[1]
    # credentials for the mirror only; the lock's own host gets no header
    result = setup(
        channel.explicit_lock(["libhello"]),
        "--channel-credentials",
        f"http://{host} = bearer {TOKEN}",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert channel.server.seen and all("Authorization" not in h for h in channel.server.seen)
    assert not server.log


def test_a_mirror_serving_another_file_is_refused_naming_both_urls(setup, channel, tmp_path):
    libhello, hello = channel.archives[0], channel.archives[1]
    fake = tmp_path / "fake"
    (fake / "channel" / "linux-64").mkdir(parents=True)
    (fake / "channel" / "linux-64" / libhello.filename).write_bytes(hello.data)
    server = ChannelServer(fake).start()
    try:
        result = setup(
            channel.explicit_lock(["libhello"]), "--channel-mirrors", _mirrored(channel, server)
        )
    finally:
        server.stop()
    assert result.returncode == 1
    error = result.errors[0]
    assert "md5 mismatch for libhello" in error
    assert f"{server.url}/channel/linux-64/{libhello.filename}" in error
    assert channel.archive_url(libhello) in error
    assert not setup.prefix.exists()


def test_an_unreachable_mirror_is_named(setup, channel):
    import socket

    # a port bound but never listened on refuses connections, and stays ours for the whole
    # test (closed first, another test's server on another xdist worker could take it)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        result = setup(
            channel.explicit_lock(["libhello"]),
            "--channel-mirrors",
            f"{channel.url('channel/')} => http://127.0.0.1:{port}/cf/",
        )
    assert result.returncode == 1
    assert f"from mirror http://127.0.0.1:{port}/cf/linux-64/" in result.errors[0]
    assert "failed after 3 attempts" in result.errors[0]


@pytest.mark.parametrize(
    "line, fragment",
    [
        ("example.com = bearer", "expected '<host> = bearer <token>'"),
        ("example.com = password hunter2", "expected '<host> = bearer <token>'"),
        ("example.com = basic hunter2", "basic credentials are '<user>:<password>'"),
        ("https://example.com/path = bearer hunter2", "is not a host"),
    ],
)
def test_bad_credentials_lines_are_usage_errors_without_the_secret(setup, channel, line, fragment):
    result = setup(channel.explicit_lock(["libhello"]), "--channel-credentials", line)
    assert result.returncode == 2
    assert fragment in result.errors[0] and "line 1" in result.errors[0]
    assert "hunter2" not in result.stdout + result.stderr


def test_bad_mirror_line_is_a_usage_error(setup, channel):
    result = setup(
        channel.explicit_lock(["libhello"]),
        "--channel-mirrors",
        "https://conda.anaconda.org/conda-forge mirror.example.com",
    )
    assert result.returncode == 2
    assert "input 'channel-mirrors' line 1" in result.errors[0]


def test_a_redirect_to_another_origin_carries_no_credentials(setup, channel, mirror):
    libhello = channel.archives[0]
    server = mirror(f"Bearer {TOKEN}")
    host = server.url.split("//")[1]
    # the mirror sends the client on to the original channel (another origin)
    server.fail(
        f"channel/linux-64/{libhello.filename}", f"redirect:{channel.archive_url(libhello)}"
    )
    result = setup(
        channel.explicit_lock(["libhello"]),
        "--channel-mirrors",
        _mirrored(channel, server),
        "--channel-credentials",
        f"http://{host} = bearer {TOKEN}",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert [s for _, s in server.log] == [302]
    assert [s for _, s in channel.server.requests(libhello.filename)] == [200]
    assert all("Authorization" not in h for h in channel.server.seen)


def test_installer_url_behind_credentials(setup, channel, mirror):
    """The Miniforge installer and its .sha256 come through channel-credentials too."""
    import hashlib

    from gpu_ci.conda.miniforge import installer_name
    from testkit.conda.jobs import FAKE_INSTALLER, FAKE_MF, miniforge_args

    server = mirror(f"Bearer {TOKEN}")
    host = server.url.split("//")[1]
    folder = channel.root.parent / "mf-private"
    folder.mkdir(exist_ok=True)
    # a version without a shipped hash, so that its .sha256 is fetched (through the mirror)
    script = folder / installer_name(FAKE_MF)
    script.write_text(FAKE_INSTALLER)
    (folder / (script.name + ".sha256")).write_text(
        f"{hashlib.sha256(script.read_bytes()).hexdigest()}  {script.name}\n"
    )
    url = f"{server.url}/mf-private/{script.name}"
    args = miniforge_args(url)
    refused = setup(channel.explicit_lock(["libhello"]), *args)
    assert refused.returncode == 1
    assert f"HTTP 401 for {url}.sha256" in refused.errors[0]
    assert f"{host} asks for credentials" in refused.errors[0]
    result = setup(
        channel.explicit_lock(["libhello"]),
        *args,
        "--channel-credentials",
        f"http://{host} = bearer {TOKEN}",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert Path(result.outputs["conda"]).exists()
    assert TOKEN not in _everything(result)


def test_streamed_downloads_report_progress_and_stamp_the_entry(channel, tmp_path):
    """rattler's client reports no bytes: a long streamed download still shows in the log
    (archives done, time), and the entry it extracts is verified and stamped."""
    from gpu_ci.conda import fetch, verified

    hello = channel.archives[1]
    channel.server.fail(f"channel/linux-64/{hello.filename}", "slow:0.6")
    entry = tmp_path / "cache" / "hello-2.1-h1_3"
    entry.parent.mkdir()
    lines: list[str] = []
    done = fetch.stream_and_extract(
        [(0, channel.archive_url(hello), entry, hello.sha256, hello.md5)],
        30,
        log=lines.append,
        interval=0.2,
    )
    assert done[0].sha256 == hello.sha256 and done[0].md5 == hello.md5
    assert lines and lines[0].startswith(
        "downloading: 0 of 1 archives streamed into the package cache in "
    )
    assert verified.check(entry, hello.sha256) == done[0].facts


def test_a_streamed_archive_with_another_digest_is_not_published(channel, tmp_path):
    """The lock's digest is checked before the entry appears: a mismatch leaves nothing (the
    careful path then names both URLs)."""
    from gpu_ci.conda import fetch

    hello = channel.archives[1]
    entry = tmp_path / "cache" / "hello-2.1-h1_3"
    entry.parent.mkdir()
    done = fetch.stream_and_extract([(0, channel.archive_url(hello), entry, "", "0" * 32)], 30)
    assert done == {} and not entry.exists()
    assert [p.name for p in entry.parent.iterdir()] == [".hello-2.1-h1_3.gpu-ci.lock"]


def test_rattler_never_downloads_while_linking(channel, tmp_path):
    """rattler links only what we verified: when it will not use a cache entry (here its own
    record names another archive) it asks for the archive, and its client refuses before
    anything is sent (our fallback then fetches and verifies everything itself)."""
    import hashlib

    from gpu_ci.conda import fetch, install, lockfile
    from gpu_ci.errors import GpuCiError

    libhello = channel.archives[0]
    text = channel.explicit_lock(["libhello"])
    plan = lockfile.plan(lockfile.parse(text), text, "linux-64", ["main"])
    pkgs = tmp_path / "pkgs"
    install.install(plan, tmp_path / "env", pkgs, dict(os.environ), log=lambda _: None)
    cache = pkgs / "rattler"
    sha = hashlib.sha256(libhello.data).hexdigest()
    got = fetch.fetch_and_extract(plan, pkgs, cache, None)
    (cache / "libhello-1.0-h0_0.lock").write_bytes(bytes(8) + bytes.fromhex("ab" * 32))
    before = len(channel.server.requests(libhello.filename))
    with pytest.raises(GpuCiError, match="rattler asked for 127.0.0.1/.*libhello"):
        install.link_with_rattler(
            plan, got.fetched, [sha], tmp_path / "staging", tmp_path / "env2", cache, got.facts
        )
    assert len(channel.server.requests(libhello.filename)) == before


def test_the_rattler_client_refuses_for_good_once_linking_failed(channel, tmp_path):
    """The one process-wide rattler client refuses every request while linking. When linking
    ends in an error, rattler may still hold that client (a task past the error): it keeps
    refusing, as the old linking-only client always did, and the next stream gets a fresh
    client. A block that ends normally leaves the client usable."""
    import asyncio

    from rattler.package_streaming import download_and_extract

    from gpu_ci.conda.streams import RattlerClient

    hello = channel.archives[1]
    url = channel.archive_url(hello)
    clients = RattlerClient()

    def fetch(client, name):
        return asyncio.run(download_and_extract(client, url, tmp_path / name))

    with clients.refusing() as first, pytest.raises(Exception, match="rattler asked for 127"):
        fetch(first, "refused")
    fetch(first, "after-success")  # ended normally: the same client streams again
    assert clients.get() is first
    before = len(channel.server.requests(hello.filename))
    with pytest.raises(KeyError), clients.refusing() as second:
        raise KeyError("linking failed")
    with pytest.raises(Exception, match="rattler asked for 127.0.0.1/"):
        fetch(second, "after-error")
    assert len(channel.server.requests(hello.filename)) == before
    fresh = clients.get()
    assert fresh is not second
    fetch(fresh, "fresh")
    assert len(channel.server.requests(hello.filename)) == before + 1
