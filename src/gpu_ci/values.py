"""Checks of input values that commands and wings share.

Each refuses a bad value with a :class:`UsageError` that names the input and says what
to write. :mod:`gpu_ci.inputs` resolves the inputs; these check their values, so the
wings, which never import the wiring, can use them too.
"""

from __future__ import annotations

import json
from typing import Any

from gpu_ci.errors import UsageError


def required(name: str, value: str, how: str) -> str:
    """A text input, stripped; empty is a :class:`UsageError`.

    ``how`` says what to write instead, as a sentence."""
    text = value.strip()
    if not text:
        raise UsageError(f"input '{name}' is empty: {how}")
    return text


def json_value(name: str, text: str, fix: str) -> Any:
    """An input that looks like JSON, parsed.

    Text that does not parse is a :class:`UsageError` that says where, then ``fix``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"input '{name}' looks like JSON but does not parse ({exc.msg} at column "
            f"{exc.colno}): {fix}"
        ) from None
