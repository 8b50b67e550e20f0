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



def strip_credentials(url: str) -> str:
    parts = urlsplit(url)
    if parts.username or parts.password:
        netloc = parts.hostname or ""
        if parts.port:
            netloc += f":{parts.port}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return url
