"""Which marks a test must carry, by the fixtures it uses.

``make check`` leaves out the tests marked ``e2e`` (act runs) and ``slow`` (a Debian root,
a venv bootstrapped from the lock). A test that uses one of those set-ups without its
mark would slow the fast loop silently, so tests/conftest.py refuses it at collection.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

#: The fixture that makes a test long, and the mark it requires.
REQUIRED_MARKS: Mapping[str, str] = {
    "act": "e2e",
    "debian_job": "slow",
    "bootstrapped": "slow",
    "shared_cache": "slow",
}


class Item(Protocol):
    """What this module reads of a pytest item."""

    nodeid: str
    fixturenames: list[str]

    def get_closest_marker(self, name: str) -> Any: ...


def missing_marks(items: Iterable[Item], required: Mapping[str, str] = REQUIRED_MARKS) -> list[str]:
    """``nodeid: needs mark`` for each item that uses a fixture without its mark."""
    missing = []
    for item in items:
        for fixture, mark in required.items():
            if fixture in item.fixturenames and item.get_closest_marker(mark) is None:
                missing.append(f"{item.nodeid}: uses {fixture!r}, needs @pytest.mark.{mark}")
    return missing
