"""Credentials inside URLs: masking them in text, listing them for the runner's mask list,
and stripping them before a request (they travel as a header instead).

Shared by every download (lock files, the Miniforge installer, channels): lock files and
mirrors carry ``user:password@`` and anaconda.org ``/t/<token>/`` credentials in URLs.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]+:[^/@\s]+@")
_TOKEN = re.compile(r"/t/[^/\s]+/")


def mask_url(text: str) -> str:
    """Hide ``user:password@`` and anaconda.org ``/t/<token>/`` parts of URLs."""
    if "@" not in text and "/t/" not in text:  # neither pattern can match (most lock URLs)
        return text
    return _TOKEN.sub("/t/***/", _CREDENTIALS.sub("***:***@", text))


def secrets_in(url: str) -> list[str]:
    """The secret parts of a URL, for the runner's mask list."""
    if "@" not in url and "/t/" not in url:  # no password, no token (most of a lock's URLs)
        return []
    out = []
    parts = urlsplit(url)
    if parts.password:
        out.append(parts.password)
    out += [m.group(0)[3:-1] for m in _TOKEN.finditer(url)]
    return out


#: The ports a URL without one means (RFC 3986 section 6.2.3): ``https://h`` is ``https://h:443``.
DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of ``url``: what decides whether a credential may go there.

    Scheme and host in lower case, the port written in the URL or else the scheme's default
    (:data:`DEFAULT_PORTS`; 0 for a scheme without one), so ``https://H`` and ``https://h:443``
    are one origin and ``http://h`` and ``https://h`` are two. A port that is no port
    (``h:abc``, ``h:99999``) is -1: it equals no readable URL's origin, so nothing is sent there
    on the strength of a match. One rule for every credential (the token's next-page check,
    a redirect's ``Authorization``, channel credentials) and every per-origin limit.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = -1
    return scheme, (parts.hostname or "").lower(), port or DEFAULT_PORTS.get(scheme, 0)


def strip_credentials(url: str) -> str:
    parts = urlsplit(url)
    if parts.username or parts.password:
        netloc = parts.hostname or ""
        if parts.port:
            netloc += f":{parts.port}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return url
