"""Exceptions raised at the edges of the program.

The functional core returns errors as values; the shell turns them into one of these, and
the CLI turns these into exactly one ``::error::`` annotation and an exit code. Anything
else that escapes is a bug and is reported as such (still without a raw traceback).
"""

from __future__ import annotations


class GpuCiError(Exception):
    """An expected failure: the message says what went wrong, where, and how to fix it."""

    exit_code = 1

    def __init__(self, message: str, *, title: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.title = title


class UsageError(GpuCiError):
    """The arguments or inputs cannot be used at all (exit code 2)."""

    exit_code = 2
