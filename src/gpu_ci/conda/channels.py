"""Private channels and mirrors: where each download really goes, and with which credentials.

``channel-mirrors`` rewrites a URL prefix to a mirror (longest prefix wins)::

    https://conda.anaconda.org/conda-forge/ => https://artifactory.example.com/api/conda/cf/

``channel-credentials`` names one origin per line and how to authenticate to it::

    artifactory.example.com = bearer <token>
    https://nexus.example.com:8443 = basic <user>:<password>
    conda.anaconda.org = token <token>          (anaconda.org: /t/<token>/ in the path)

An origin without a scheme means ``https://``. Credentials are attached only to requests whose
scheme, host and port equal the line's (a redirect to another origin drops them); they never
appear in messages (every secret is handed to the runner's mask list, and error messages name
the origin and the line number, never the line). Pure: parsing and routing, no I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import urlsplit, urlunsplit

from gpu_ci.errors import UsageError
from gpu_ci.urls import DEFAULT_PORTS, mask_url, origin

if TYPE_CHECKING:
    from gpu_ci.downloads import Route

MIRRORS_INPUT = "channel-mirrors"
CREDENTIALS_INPUT = "channel-credentials"
KINDS = ("bearer", "basic", "token")


# NamedTuples, not frozen dataclasses: each class costs every run ~0.2 ms to create, not ~1.3.


def _b64(secret: str) -> str:
    """A Basic credential's encoding. ``base64`` is imported only when needed."""
    import base64

    return base64.b64encode(secret.encode()).decode()


class Mirror(NamedTuple):
    """One ``channel-mirrors`` rule: URLs under ``original`` are fetched from ``mirror``."""

    original: str
    mirror: str


class Credential(NamedTuple):
    """One channel credential, sent to its origin only."""

    origin: tuple[str, str, int]
    """(scheme, host, port), lower case: credentials go to this origin only."""
    kind: str
    secret: str

    @property
    def host(self) -> str:
        scheme, host, port = self.origin
        return host if port == DEFAULT_PORTS.get(scheme) else f"{host}:{port}"


def _lines(text: str) -> list[tuple[int, str]]:
    return [
        (n, line.strip())
        for n, line in enumerate(text.splitlines(), 1)
        if line.strip() and not line.strip().startswith("#")
    ]


def _slash(url: str) -> str:
    return url if url.endswith("/") else url + "/"


def parse_mirrors(text: str) -> tuple[Mirror, ...]:
    mirrors = []
    for number, line in _lines(text):
        original, arrow, mirror = (part.strip() for part in line.partition("=>"))
        if not arrow or not original or not mirror:
            raise UsageError(
                f"input '{MIRRORS_INPUT}' line {number}: expected "
                f"'<channel URL prefix> => <mirror URL prefix>', got "
                f"{mask_url(line)!r}."
            )
        for what, url in (("channel", original), ("mirror", mirror)):
            if urlsplit(url).scheme not in ("http", "https", "file") or "://" not in url:
                raise UsageError(
                    f"input '{MIRRORS_INPUT}' line {number}: the {what} "
                    f"{mask_url(url)!r} is not an http(s):// or file:// URL."
                )
        mirrors.append(Mirror(_slash(original), _slash(mirror)))
    return tuple(mirrors)


def parse_credentials(text: str) -> tuple[Credential, ...]:
    """Parse ``<origin> = <kind> <secret>`` lines. Errors never quote a line's secret."""
    credentials: list[Credential] = []
    for number, line in _lines(text):
        where = f"input '{CREDENTIALS_INPUT}' line {number}"
        host, equals, rest = (part.strip() for part in line.partition("="))
        kind, _, secret = rest.partition(" ")
        kind, secret = kind.lower(), secret.strip()
        if not equals or not host or kind not in KINDS or not secret:
            raise UsageError(
                f"{where}: expected '<host> = bearer <token>', '<host> = basic "
                "<user>:<password>' or '<host> = token <anaconda.org token>' "
                "(the line is not shown: it may hold a secret)."
            )
        if kind == "basic" and ":" not in secret:
            raise UsageError(f"{where}: basic credentials are '<user>:<password>'.")
        if any(c.isspace() for c in secret) or (kind == "token" and "/" in secret):
            raise UsageError(
                f"{where}: the {kind} secret must be one word without spaces"
                f"{' or slashes' if kind == 'token' else ''}."
            )
        url = host if "://" in host else f"https://{host}"
        where_to = origin(url)
        if not where_to[1] or where_to[2] < 0 or urlsplit(url).path.strip("/"):
            raise UsageError(
                f"{where}: {host!r} is not a host (write 'host', 'host:port' or "
                "'https://host:port', without a path)."
            )
        credential = Credential(where_to, kind, secret)
        if any(c.origin == where_to for c in credentials):
            raise UsageError(
                f"{where}: a second line for {credential.host}; give one line per host."
            )
        credentials.append(credential)
    return tuple(credentials)


class Network(NamedTuple):
    """Mirrors and credentials for every download of one run."""

    mirrors: tuple[Mirror, ...] = ()
    credentials: tuple[Credential, ...] = ()

    @classmethod
    def parse(cls, mirrors: str, credentials: str) -> Network:
        return cls(parse_mirrors(mirrors), parse_credentials(credentials))

    def secrets(self) -> list[str]:
        """Every string that must never be printed: for the runner's mask list."""
        out = []
        for c in self.credentials:
            out.append(c.secret)
            if c.kind == "basic":
                out.append(c.secret.partition(":")[2])
                out.append(_b64(c.secret))
        return [s for s in out if s]

    def credential(self, url: str) -> Credential | None:
        where_to = origin(url)
        return next((c for c in self.credentials if c.origin == where_to), None)

    def mirrored(self, url: str) -> str:
        best = max(
            (m for m in self.mirrors if url.startswith(m.original)),
            key=lambda m: len(m.original),
            default=None,
        )
        return url if best is None else best.mirror + url[len(best.original) :]

    def authorize(self, url: str) -> tuple[str, dict[str, str]]:
        """The URL and headers to request ``url`` with: credentials of its own origin only."""
        credential = self.credential(url)
        if credential is None:
            return url, {}
        if credential.kind == "token":
            parts = urlsplit(url)
            if not parts.path.startswith("/t/"):
                url = urlunsplit(parts._replace(path=f"/t/{credential.secret}{parts.path}"))
            return url, {}
        if credential.kind == "bearer":
            return url, {"Authorization": f"Bearer {credential.secret}"}
        token = _b64(credential.secret)
        return url, {"Authorization": f"Basic {token}"}

    def route(self, url: str) -> Route:
        from gpu_ci.downloads import Route

        target = self.mirrored(url)
        fetch_url, headers = self.authorize(target)
        credential = self.credential(target)
        host = credential.host if credential else _host(target)
        if credential:
            hint = (
                f"the {credential.kind} credentials for {host} in '{CREDENTIALS_INPUT}' "
                "were refused: check the secret and its permissions on that channel"
            )
        else:
            hint = (
                f"{host} asks for credentials: add a line for it to "
                f"'{CREDENTIALS_INPUT}' (e.g. '{host} = bearer ${{{{ secrets.TOKEN }}}}')"
            )
        return Route(fetch_url, headers, mirror=target if target != url else "", hint=hint)


def _host(url: str) -> str:
    scheme, host, port = origin(url)
    return host if port == DEFAULT_PORTS.get(scheme) else f"{host}:{port}"
