"""Credentials in a lock URL go to its own origin only, never to where a redirect points."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpu_ci.downloads import Download, RetryPolicy, fetch
from gpu_ci.routing import same_origin_auth
from gpu_ci.urls import origin

BODY = b"conda package bytes\n"


class Server:
    """A loopback HTTP server that logs each request's Authorization header and either
    redirects (``/to?url``) or serves ``BODY``."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                outer.seen.append((self.path, self.headers.get("Authorization")))
                if self.path.startswith("/to?"):
                    self.send_response(302)
                    self.send_header("Location", self.path[len("/to?") :])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(BODY)))
                self.end_headers()
                self.wfile.write(BODY)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture
def servers() -> Iterator[tuple[Server, Server]]:
    a, b = Server(), Server()
    yield a, b
    a.httpd.shutdown()
    b.httpd.shutdown()


def get(url: str, tmp_path) -> None:
    item = Download(url, tmp_path / "pkg.conda", "pkg", sha256=hashlib.sha256(BODY).hexdigest())
    fetch(item, RetryPolicy(attempts=1))
    assert (tmp_path / "pkg.conda").read_bytes() == BODY


def test_a_redirect_to_another_origin_drops_the_credentials(servers, tmp_path):
    a, b = servers
    target = f"{b.url}/pkg.conda"
    get(f"http://user:s3cret@127.0.0.1:{a.httpd.server_address[1]}/to?{target}", tmp_path)
    assert a.seen[0][1] is not None and a.seen[0][1].startswith("Basic ")  # its own origin
    assert b.seen == [("/pkg.conda", None)]  # the other origin: no credentials


def test_a_redirect_within_the_origin_keeps_them(servers, tmp_path):
    a, _ = servers
    port = a.httpd.server_address[1]
    get(f"http://user:s3cret@127.0.0.1:{port}/to?{a.url}/pkg.conda", tmp_path)
    assert [auth is not None for _, auth in a.seen] == [True, True]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("https://h/x", "https://h:443/y"),
        ("http://h", "http://h:80/"),
        ("HTTPS://H.Example/", "https://h.example:443"),
        ("https://u:p@h/", "https://h/"),
    ],
)
def test_one_origin_with_or_without_the_default_port(a, b):
    # The four helpers this replaced disagreed: two kept a missing port as None, so
    # https://h and https://h:443 were two origins for a redirect's Authorization.
    assert origin(a) == origin(b)
    assert same_origin_auth(a, b, {"Authorization": "Basic x"}) == {"Authorization": "Basic x"}


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("http://h/", "https://h/"),
        ("https://h/", "https://h:8443/"),
        ("https://h/", "https://g/"),
        ("https://h:abc/", "https://h/"),
        ("https://h:99999/", "https://h:443/"),
    ],
)
def test_other_origins_never_get_the_credentials(a, b):
    assert origin(a) != origin(b)
    assert same_origin_auth(a, b, {"Authorization": "Basic x"}) == {}


def test_origin_fills_in_the_documented_default_ports():
    assert origin("https://H.example/p") == ("https", "h.example", 443)
    assert origin("http://h.example/p") == ("http", "h.example", 80)
    assert origin("file:///tmp/x") == ("file", "", 0)
    assert origin("https://h:abc/")[2] == -1  # no port: equals no readable URL's origin
