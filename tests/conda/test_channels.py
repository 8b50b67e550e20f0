"""Mirrors, credentials and progress: the pure parts of gpu_ci.conda.channels and downloads."""

from __future__ import annotations

import pytest

from gpu_ci.conda.channels import Network
from gpu_ci.downloads import Downloader, Progress, Verdicts, keeps_alive
from gpu_ci.errors import UsageError


def test_longest_mirror_prefix_wins():
    net = Network.parse(
        "https://conda.anaconda.org/ => https://m.example/all/\n"
        "https://conda.anaconda.org/nvidia => https://m.example/nv\n",
        "",
    )
    assert net.route("https://conda.anaconda.org/nvidia/linux-64/a.conda").url == (
        "https://m.example/nv/linux-64/a.conda"
    )
    assert net.route("https://conda.anaconda.org/conda-forge/noarch/b.conda").url == (
        "https://m.example/all/conda-forge/noarch/b.conda"
    )
    # a prefix matches at a path boundary only: /nvidia-extra is not /nvidia
    assert net.route("https://conda.anaconda.org/nvidia-extra/x.conda").url == (
        "https://m.example/all/nvidia-extra/x.conda"
    )
    unmirrored = net.route("https://other.example/c.conda")
    assert unmirrored.url == "https://other.example/c.conda" and not unmirrored.mirror


def test_credentials_go_to_their_exact_origin_only():
    net = Network.parse(
        "",
        "repo.example = bearer T0K\n"
        "http://127.0.0.1:8080 = basic u:p\n"
        "conda.anaconda.org = token abc123\n",
    )
    assert net.authorize("https://repo.example/x")[1] == {"Authorization": "Bearer T0K"}
    assert net.authorize("https://repo.example:443/x")[1] == {"Authorization": "Bearer T0K"}
    for other in (
        "http://repo.example/x",
        "https://repo.example:8443/x",
        "https://evil.example/repo.example/x",
        "https://sub.repo.example/x",
    ):
        assert net.authorize(other) == (other, {}), other
    assert net.authorize("http://127.0.0.1:8080/a")[1] == {"Authorization": "Basic dTpw"}
    assert net.authorize("http://127.0.0.1:8081/a")[1] == {}
    assert net.authorize("https://conda.anaconda.org/org/linux-64/a.conda") == (
        "https://conda.anaconda.org/t/abc123/org/linux-64/a.conda",
        {},
    )
    assert sorted(net.secrets()) == sorted(["T0K", "u:p", "p", "dTpw", "abc123"])


def test_credentials_apply_to_the_mirror_not_the_original():
    net = Network.parse(
        "https://conda.anaconda.org/ => https://mirror.example/cf/",
        "mirror.example = bearer S\nconda.anaconda.org = bearer O",
    )
    route = net.route("https://conda.anaconda.org/conda-forge/a.conda")
    assert route.url == "https://mirror.example/cf/conda-forge/a.conda"
    assert route.headers == {"Authorization": "Bearer S"}
    assert route.mirror == route.url
    assert "mirror.example" in route.hint and "refused" in route.hint


@pytest.mark.parametrize(
    "line",
    [
        "host = bearer",
        "host bearer zq9",
        "host = ntlm zq9",
        "= bearer zq9",
        "host = basic zq9",
        "host = bearer zq9 words",
        "host = token zq9/b",
        "https://host/path = bearer zq9",
        "host:abc = bearer zq9",
    ],
)
def test_bad_credentials_lines(line):
    with pytest.raises(UsageError) as info:
        Network.parse("", f"# comment\n{line}\n")
    assert "input 'channel-credentials' line 2" in info.value.message
    assert "zq9" not in info.value.message  # the secret is never quoted


def test_one_line_per_host():
    with pytest.raises(UsageError, match="a second line for h.example"):
        Network.parse("", "h.example = bearer a\nhttps://h.example:443 = bearer b")


@pytest.mark.parametrize(
    "line", ["https://a.example/ mirror.example/", "a => ", "https://a.example/ => mirror.example/"]
)
def test_bad_mirror_lines(line):
    with pytest.raises(UsageError, match="'channel-mirrors' line 1"):
        Network.parse(line, "")


def test_progress_reports_bytes_and_rate_every_interval_not_per_chunk():
    now = [100.0]  # set up long before the first bytes (e.g. while Miniforge installs)
    lines: list[str] = []
    progress = Progress(lines.append, interval=5.0, clock=lambda: now[0])
    now[0] = 200.0
    for _ in range(56):  # 56 MB over 14 s, in 1 MB chunks
        progress.add(1_000_000)
        now[0] += 0.25
    assert lines == [
        "downloading: 21.0 MB in 5 s (4.2 MB/s now)",
        "downloading: 41.0 MB in 10 s (4.0 MB/s now)",
    ]


@pytest.mark.parametrize(
    ("version", "connection", "keeps"),
    [
        (11, "", True),
        (11, "keep-alive", True),
        (11, "close", False),
        (11, "Keep-Alive, Close", False),
        (10, "", False),
        (10, "keep-alive", False),  # HTTP/1.0 at all: narrow (its keep-alive is an extension)
    ],
)
def test_what_a_response_says_of_its_connection(version, connection, keeps):
    assert keeps_alive(version, connection) is keeps


def test_one_answer_that_closes_keeps_an_origin_narrow():
    """A server that closes some connections is treated as one that closes them all: many
    downloads at once would overflow its listen backlog when it does."""
    verdicts = Verdicts()
    assert verdicts.of("https://h/a") is None
    verdicts.note("https://h/a", True)
    assert verdicts.of("https://H:443/b") is True  # one origin
    verdicts.note("https://h/c", False)
    verdicts.note("https://h/d", True)
    assert verdicts.of("https://h/e") is False
    assert verdicts.of("http://h/e") is None  # another origin


def test_a_redirect_gets_the_credentials_of_its_own_origin_only():
    """The one rule, for both request paths (kept-alive connections and urllib's)."""
    net = Network.parse("", "a.example = bearer A\nb.example = bearer B\n")
    downloader = Downloader(net)
    sent = {"Authorization": "Bearer A"}
    assert downloader.redirected("https://a.example/x", "https://b.example/y", sent) == (
        "https://b.example/y",
        {"Authorization": "Bearer B"},
    )
    assert downloader.redirected("https://a.example/x", "https://c.example/y", sent) == (
        "https://c.example/y",
        {},
    )
    assert downloader.redirected("https://a.example/x", "https://a.example:443/z", sent)[1] == (
        sent
    )
    assert Downloader().redirected("https://a.example/x", "http://a.example/x", sent)[1] == {}
