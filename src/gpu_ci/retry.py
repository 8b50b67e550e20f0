"""One retry policy for everything that talks HTTP: downloads, Miniforge, the GitHub API.

A transient failure (a 5xx, a 429, a reset connection, a short body) is retried with
exponential backoff ``backoff * 2 ** (n - 1)`` seconds, capped at ``max_wait`` (a server's
``Retry-After`` wins when it gives one, within the same cap).

The default backoff is 1.0 s, the API client's: GitHub asks integrators to wait at least a
second between retries after a secondary rate limit, and a CDN that answers 5xx needs seconds
rather than milliseconds to recover, so the downloads' former 0.5 s only spent its first two
attempts inside the same outage. Four retries at 1 s wait at most 1 + 2 + 4 + 8 = 15 s.

The policy is read once from the environment (``GPU_CI_HTTP_RETRIES``, ``_BACKOFF``,
``_MAX_WAIT``, ``_TIMEOUT``); a value that is not a number is a :class:`UsageError` naming
the variable, never an internal error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

from gpu_ci.errors import UsageError

ENV_PREFIX = "GPU_CI_HTTP_"


class _Policy(NamedTuple):
    attempts: int
    """Tries in all (the first plus ``attempts - 1`` retries); at least 1."""
    backoff: float
    """Seconds before the first retry; doubled for each further one."""
    max_wait: float
    """The longest single wait, whatever the backoff or a Retry-After header says."""
    timeout: float
    """Seconds without a byte from the server before an attempt counts as failed."""


class RetryPolicy(_Policy):
    """How often and how patiently a request is tried.

    A NamedTuple, not a frozen dataclass: every action imports it, and a frozen dataclass
    costs ~1.3 ms to create."""

    __slots__ = ()

    def __new__(
        cls, attempts: int = 5, backoff: float = 1.0, max_wait: float = 30.0, timeout: float = 60.0
    ) -> RetryPolicy:
        if attempts < 1:
            raise UsageError(f"retry attempts must be at least 1, got {attempts}.")
        for name, value in (("backoff", backoff), ("max_wait", max_wait), ("timeout", timeout)):
            if not math.isfinite(value) or value < 0:
                raise UsageError(f"retry {name} must be a finite number >= 0, got {value!r}.")
        return super().__new__(cls, attempts, backoff, max_wait, timeout)

    @property
    def retries(self) -> int:
        return self.attempts - 1

    def wait(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        wanted = retry_after if retry_after is not None else self.backoff * 2 ** (attempt - 1)
        return max(0.0, min(wanted, self.max_wait))

    @classmethod
    def from_environ(
        cls, environ: Mapping[str, str], defaults: RetryPolicy | None = None
    ) -> RetryPolicy:
        """The policy the environment asks for, on top of ``defaults``.

        ``GPU_CI_HTTP_RETRIES`` counts retries (so 0 means one attempt), as it always has.
        """
        base = defaults or cls()
        retries = _number(environ, "RETRIES", base.retries, integer=True)
        return cls(
            attempts=int(retries) + 1,
            backoff=_number(environ, "BACKOFF", base.backoff),
            max_wait=_number(environ, "MAX_WAIT", base.max_wait),
            timeout=_number(environ, "TIMEOUT", base.timeout),
        )


def _number(
    environ: Mapping[str, str], suffix: str, default: float, integer: bool = False
) -> float:
    name = ENV_PREFIX + suffix
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    kind = "a whole number >= 0" if integer else "a number of seconds >= 0"
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        raise UsageError(
            f"{name}={raw!r} is not {kind}: fix or unset it (the default is {default:g})."
        ) from None
    if value < 0 or not math.isfinite(value):
        raise UsageError(
            f"{name}={raw!r} is not {kind}: fix or unset it (the default is {default:g})."
        )
    return value
