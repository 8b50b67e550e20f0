"""Which way a request goes: proxies, direct connections, credentials.

Standard library only, imported lazily where it costs: a job that streams every archive
never imports ``urllib.request`` when no proxy is named.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from gpu_ci.errors import GpuCiError
from gpu_ci.urls import mask_url, origin, strip_credentials

if TYPE_CHECKING:
    import urllib.request


def proxies() -> dict[str, str]:
    """urllib's proxies from the environment, ``ALL_PROXY`` included.

    ``ALL_PROXY`` (an http or https proxy) serves http and https where no
    ``HTTP_PROXY``/``HTTPS_PROXY`` is set: curl and rattler's client take it so, and urllib
    does not (the archives it streams would go through the proxy and ours around it).
    ``NO_PROXY`` applies as urllib reads it."""
    if not _may_name_proxies():
        return {}
    import urllib.request

    found = dict(urllib.request.getproxies())
    every = found.get("all", "")
    if every and "://" not in every:  # 'host:port': curl and rattler take it as http://
        every = f"http://{every}"
    if urlsplit(every).scheme in ("http", "https"):
        for scheme in ("http", "https"):
            found.setdefault(scheme, every)
    elif every and not {"http", "https"} <= found.keys() and found.get("no") != "*":
        # e.g. socks5://: curl takes it, urllib cannot; never go around the proxy named
        raise GpuCiError(
            f"ALL_PROXY is {mask_url(every)}, a proxy our downloader cannot use (HTTP proxies "
            "only). Set HTTPS_PROXY and HTTP_PROXY to an HTTP proxy (they take precedence), "
            "or NO_PROXY='*' to connect directly.",
            title="unsupported proxy",
        )
    return found


def _may_name_proxies() -> bool:
    """False only where urllib's ``getproxies()`` is certainly empty: it reads nothing but
    the environment's ``*_proxy`` variables (not on macOS or Windows, which also ask the
    system), and none is set. Saves importing ``urllib.request`` (and ``http.client``,
    ``email``, ``ssl``) in a job that streams every archive (measured: 25-50 ms of a cold
    start)."""
    if sys.platform in ("darwin", "win32"):
        return True
    return any(value and name[-6:].lower() == "_proxy" for name, value in os.environ.items())


def direct(url: str) -> bool:
    """Whether ``url`` may go over a reused connection: http(s) and no proxy applies
    (requests through a proxy take urllib's path: *_PROXY, ALL_PROXY, NO_PROXY; ``proxies``)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or parts.username or not parts.hostname:
        return False
    return _unproxied(parts.scheme, parts.hostname)


@functools.lru_cache(maxsize=256)
def _unproxied(scheme: str, host: str) -> bool:
    """Once per origin: reading the proxy settings scans the whole environment."""
    if scheme not in proxies():
        return True
    import urllib.request

    return bool(urllib.request.proxy_bypass(host))


def request_for(url: str, headers: Mapping[str, str] | None = None) -> urllib.request.Request:
    import urllib.request

    parts = urlsplit(url)
    request = urllib.request.Request(
        strip_credentials(url), headers={"User-Agent": "gpu-ci-actions"}
    )
    if parts.username:
        import base64  # only for credentials in a URL

        token = base64.b64encode(f"{parts.username}:{parts.password or ''}".encode()).decode()
        request.add_unredirected_header("Authorization", f"Basic {token}")
    for key, value in (headers or {}).items():
        request.add_unredirected_header(key, value)
    return request


def same_origin_auth(old_url: str, new_url: str, unredirected: Mapping[str, str]) -> dict[str, str]:
    """A redirect within one origin keeps the request's ``Authorization`` (e.g. from
    ``user:password@`` in a lock URL); to another origin it is never sent."""
    value = unredirected.get("Authorization")
    if value and origin(old_url) == origin(new_url):
        return {"Authorization": value}
    return {}
