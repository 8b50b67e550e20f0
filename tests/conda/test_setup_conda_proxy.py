"""setup-conda-from-lock behind a forward proxy (a corporate network's ``HTTP_PROXY``): every
archive goes through it, by our downloader (rattler's client never streams around it), also
when only ``ALL_PROXY`` names it (as curl and rattler's client take it; urllib does not);
``NO_PROXY`` lets a host be reached directly."""

from __future__ import annotations

import pytest

from gpu_ci import routing
from testkit.conda.jobs import PROXY_VARIABLES, SMALL, finish, spawn
from testkit.conda_channel import ForwardProxy

pytest.importorskip("rattler", reason="py-rattler needs Python >= 3.10")


@pytest.fixture
def proxy():
    started = ForwardProxy().start()
    yield started
    started.stop()


@pytest.fixture(autouse=True)
def no_proxy_of_this_machine(monkeypatch):
    """Only the proxy variables a test chooses (``spawn`` copies this environment): an
    empty lowercase one would unset its uppercase twin, as urllib reads them."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def _archives(channel) -> list[str]:
    return [a.filename for a in channel.archives if a.name in SMALL]


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "ALL_PROXY"])
@pytest.mark.parametrize("stream", ["true", "false"])
def test_every_archive_goes_through_the_proxy(channel, locks, tmp_path, proxy, variable, stream):
    env = {variable: proxy.url, "INPUT_STREAM_DOWNLOADS": stream}
    code, out = finish(spawn(locks["small"], tmp_path / "env", tmp_path / "pkgs", env=env))
    assert code == 0, out
    assert (tmp_path / "env" / "share" / "hello" / "data.txt").read_text() == "data\n"
    for filename in _archives(channel):
        assert any(url.endswith(filename) for url in proxy.seen), (filename, proxy.seen, out)
    assert all(url.startswith(channel.server.url) for url in proxy.seen)


def test_no_proxy_reaches_the_server_directly(channel, locks, tmp_path, proxy):
    env = {"HTTP_PROXY": proxy.url, "NO_PROXY": "127.0.0.1"}
    code, out = finish(spawn(locks["small"], tmp_path / "env", tmp_path / "pkgs", env=env))
    assert code == 0, out
    assert proxy.seen == []


@pytest.mark.parametrize(
    "variables",
    [
        {},
        {"https_proxy": ""},
        {"Https_Proxy": "http://proxy.invalid:3128"},
        {"ALL_PROXY": "proxy.invalid:3128"},
        {"no_proxy": "*"},
        {"HTTP_PROXY": "http://proxy.invalid:3128", "http_proxy": ""},
    ],
)
def test_proxies_without_urllib_are_what_urllib_reads(monkeypatch, variables):
    """The shortcut that skips importing urllib.request when no ``*_proxy`` variable is set
    gives what urllib's reading gives, in every case (names in any case, empty values)."""
    from gpu_ci import downloads

    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    fast = downloads.proxies()
    monkeypatch.setattr(routing, "_may_name_proxies", lambda: True)
    assert fast == downloads.proxies()


def test_a_job_without_proxies_does_not_import_urllib_request():
    """Deciding that an archive may be streamed directly (``downloads.direct``) costs no
    import of urllib.request, http.client, email and ssl when no proxy is set."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    probe = (
        "import sys; from gpu_ci import downloads; "
        "assert downloads.direct('https://conda.anaconda.org/x.conda'); "
        "print('urllib.request' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == ("True" if sys.platform in ("darwin", "win32") else "False")
