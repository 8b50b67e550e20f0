"""Repository roles, as GitHub's permission answer names them.

The gate, the approval rules and the runner admission hook rank roles the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Repository roles in increasing order of trust.
ROLE_RANK = {"none": 0, "read": 1, "triage": 2, "write": 3, "maintain": 4, "admin": 5}


def role_of(permission_answer: Mapping[str, Any]) -> tuple[str, bool]:
    """(role, exact) from ``GET .../collaborators/{user}/permission``.

    ``role_name`` is exact; a custom role or an older server without it falls back to the
    legacy ``permission`` field, which reports maintain as write and triage as read.
    """
    role = str(permission_answer.get("role_name") or "").lower()
    if role in ROLE_RANK:
        return role, True
    legacy = str(permission_answer.get("permission") or "none").lower()
    return (legacy if legacy in ROLE_RANK else "none"), False
