"""Other projects' files, read where they live: ``../shared`` beside the project root.

The project keeps no copies of other projects' files (GitHub's example webhook payloads,
conda-lock's and setup-micromamba's test lock files, ARC's chart values and CRD, NVIDIA's
driver table, the H200 readings): CI and every developer have ``../shared`` beside the clone
(``shared/README.md`` lists what it holds). A test that needs one of them is skipped, with the
path and the reason, where it is absent.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"


def _absent(path: Path) -> str:
    return (
        f"{path} is absent: other projects' files are read from ../shared beside the "
        "project root (see shared/README.md), never copied into the project"
    )


def shared_path(*parts: str) -> Path:
    """``../shared/<parts>``; skips the calling test where it does not exist."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(_absent(path))
    return path


def shared_params(folder: str, pattern: str = "*") -> list[Any]:
    """Parameters for ``pytest.mark.parametrize``: each file of ``../shared/<folder>`` that
    matches ``pattern`` (id: its name), or one skipped parameter naming the absent folder."""
    path = SHARED / folder
    files = sorted(path.glob(pattern)) if path.is_dir() else []
    if not files:
        return [
            pytest.param(
                None, id="shared-absent", marks=pytest.mark.skip(reason=_absent(path / pattern))
            )
        ]
    return [pytest.param(p, id=p.name) for p in files]


def webhook(name: str) -> dict[str, Any]:
    """GitHub's example payload ``<event>.<action>[.variant]``, safe to edit.

    Read from ../shared/fixtures/webhooks (octokit/webhooks) and deep-copied."""
    path = shared_path("fixtures", "webhooks", f"{name}.json")
    with open(path, encoding="utf-8") as handle:
        return copy.deepcopy(json.load(handle))


def lock_file(name: str) -> Path:
    """A lock file of conda-lock's or setup-micromamba's tests in ../shared/fixtures/lockfiles."""
    return shared_path("fixtures", "lockfiles", name)
