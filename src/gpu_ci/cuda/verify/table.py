"""NVIDIA's CUDA toolkit to driver table, with our rules' facts.

NVIDIA's CUDA toolkit → bundled driver table, and the facts the rules add to it.

``cuda-toolkit-driver-table.yaml`` extends ``shared/reference/cuda-toolkit-driver-table.yaml``
(a test keeps the reference's rows a subset of it; rows past it are under ``unconfirmed``,
each with its source); ``cuda-builds.yaml``
holds what the rules need beyond it (architecture floors, driver branch end-of-life, the
framework builds that exist), each fact with its source. Both are data, refreshed when NVIDIA
or a framework publishes a release; code only reads them, through the JSON renderings next to
them (``scripts/render_actions.py`` writes those; a test keeps them equal to the YAML), so that
the check never pays for importing PyYAML.

Table 3 lists the driver *bundled* with each toolkit, not the minimum: under minor-version
compatibility an application built with CUDA X.Y runs on any driver at or above its major's
floor (580 for 13.x, 525.60.13 for 12.x, 450.80.02 for 11.x). So the minimum driver is
:meth:`DriverTable.min_driver` (the floor) and the bundled one is named only as "newest".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

DATA = Path(__file__).parent.parent.parent / "data"
TABLE_PATH = DATA / "cuda-toolkit-driver-table.yaml"
TABLE_JSON = TABLE_PATH.with_suffix(".json")
BUILDS_PATH = DATA / "cuda-builds.yaml"
BUILDS_JSON = BUILDS_PATH.with_suffix(".json")


def _mm(text: str) -> tuple[int, int]:
    parts = text.split(".")
    return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0


@dataclass(frozen=True)
class DriverTable:
    toolkit_driver: dict[str, str]
    """'12.6.0' -> the Linux driver bundled with that toolkit (every row, ``secondary`` and
    ``unconfirmed`` too, less those whose driver is not known)."""
    compat_floor: dict[int, str]
    """CUDA major -> minimum Linux driver for minor-version compatibility."""

    def bundled_driver(self, major: int, minor: int) -> str | None:
        """The driver bundled with the first release of CUDA ``major.minor`` (Table 3):
        the first driver whose own CUDA version is ``major.minor``, not a minimum."""
        candidates = [
            (tuple(int(p) for p in toolkit.split(".")), driver)
            for toolkit, driver in self.toolkit_driver.items()
            if _mm(toolkit) == (major, minor)
        ]
        return min(candidates)[1] if candidates else None

    def min_driver(self, major: int, minor: int = 0) -> str | None:
        """The oldest driver that runs code built with CUDA ``major.minor``: its major's
        minor-version-compatibility floor (CUDA 11 and newer)."""
        return self.compat_floor.get(major)

    def newest(self) -> tuple[int, int]:
        return max(_mm(t) for t in self.toolkit_driver)


@lru_cache(maxsize=1)
def load_table(path: Path = TABLE_JSON) -> DriverTable:
    with open(path, encoding="utf-8") as handle:
        doc = json.load(handle)
    rows: dict[str, Any] = {
        **doc["toolkit_min_driver"],
        **(doc.get("secondary") or {}),
        **(doc.get("unconfirmed") or {}),
    }
    toolkits = {str(k): str(v[0]) for k, v in rows.items() if v and v[0]}
    floors = {
        int(k): str(v["linux_min"])
        for k, v in doc["minor_version_compatibility"].items()
        if v.get("linux_min")
    }
    return DriverTable(toolkits, floors)


@dataclass(frozen=True)
class Build:
    """One framework build that exists (a torch ``cu128`` wheel, ``cupy-cuda12x``, ...)."""

    family: str
    tag: str
    cuda: tuple[int, int]
    arch: tuple[str, ...]
    """Targets shipped (empty: compiled at run time for the GPU, e.g. CuPy's NVRTC)."""
    install: str
    versions: str = ""
    """Framework releases published for this build: '2.6-' (still published), '2.0-2.7'."""

    @property
    def current(self) -> bool:
        return not self.versions or self.versions.endswith("-")


@dataclass(frozen=True)
class ArchEol:
    name: str
    low: tuple[int, int]
    high: tuple[int, int]
    branch: str


@dataclass(frozen=True)
class NumbaHelpers:
    """What a numba flavour needs installed for minor-version compatibility: one package
    out of each group."""

    groups: tuple[tuple[str, ...], ...]
    install: str
    """The fix, with ``{major}`` for the CUDA major."""

    def missing(self, installed: frozenset[str]) -> list[tuple[str, ...]]:
        return [
            g
            for g in self.groups
            if not any(
                n in installed or (n.endswith("*") and any(i.startswith(n[:-1]) for i in installed))
                for n in g
            )
        ]


@dataclass(frozen=True)
class Branch:
    """A data-center driver branch in NVIDIA's support matrix."""

    branch: int
    kind: str
    """'long-term support' or 'production'."""
    end_of_life: str
    """'2028-08'; 'ended' (on a date not captured); '' when not published."""
    confirmed: bool = True

    def ended(self, today: str) -> bool:
        """Has it reached end of life by ``today`` ('2026-12-01')?"""
        if self.end_of_life == "ended":
            return True
        return bool(self.end_of_life) and self.end_of_life < today[:7]


@dataclass(frozen=True)
class BuildFacts:
    min_cc_by_major: dict[int, tuple[int, int]]
    new_arch_cc: tuple[int, int]
    new_arch_min_cuda: tuple[int, int]
    eol: tuple[ArchEol, ...]
    numba_helpers: tuple[str, ...]
    builds: tuple[Build, ...]
    compat_branches: tuple[int, ...] = ()
    """Kernel driver branches forward compatibility is supported from."""
    branches: tuple[Branch, ...] = ()
    """Data-center branches with their kind and end of life (forward compatibility runs
    only on a long-term or production branch that has not ended)."""
    numba: dict[str, NumbaHelpers] = field(default_factory=dict)
    """'numba-cuda' / 'numba' -> what minor-version compatibility needs."""

    def branch(self, number: int) -> Branch | None:
        return next((b for b in self.branches if b.branch == number), None)

    def last_branch(self, cc: tuple[int, int]) -> ArchEol | None:
        return next((e for e in self.eol if e.low <= cc <= e.high), None)

    def builds_of(self, family: str) -> list[Build]:
        return [b for b in self.builds if b.family == family]


@lru_cache(maxsize=1)
def load_builds(path: Path = BUILDS_JSON) -> BuildFacts:
    with open(path, encoding="utf-8") as handle:
        doc = json.load(handle)
    builds = []
    for family, entry in doc["builds"].items():
        for item in entry["items"]:
            builds.append(
                Build(
                    family,
                    item["tag"],
                    _mm(item["cuda"]),
                    tuple(item.get("arch") or ()),
                    entry["install"].format(tag=item["tag"]),
                    str(item.get("versions") or ""),
                )
            )
    return BuildFacts(
        min_cc_by_major={
            int(k): _mm(v) for k, v in doc["cuda_min_compute_capability"]["by_major"].items()
        },
        new_arch_cc=_mm(doc["new_architectures"]["min_compute_capability"]),
        new_arch_min_cuda=_mm(doc["new_architectures"]["min_cuda"]),
        eol=tuple(
            ArchEol(
                e["name"],
                _mm(e["compute_capability"][0]),
                _mm(e["compute_capability"][1]),
                str(e["branch"]),
            )
            for e in doc["driver_branch_last"]["by_architecture"]
        ),
        numba_helpers=tuple(doc["numba_minor_version_compatibility"]["helpers"]),
        builds=tuple(builds),
        compat_branches=tuple(int(b["branch"]) for b in doc["forward_compatibility"]["branches"]),
        branches=tuple(
            Branch(
                int(b["branch"]),
                str(b["kind"]),
                str(b.get("end_of_life") or ""),
                not str(b.get("source", "")).startswith("unconfirmed"),
            )
            for b in doc["forward_compatibility"]["branches"]
        ),
        numba={
            name: NumbaHelpers(tuple(tuple(g) for g in entry["needs"]), entry["install"])
            for name, entry in doc["numba_minor_version_compatibility"]["by_package"].items()
        },
    )


def driver_at_least(driver: str, minimum: str) -> bool:
    """Compare NVIDIA driver versions numerically ('570.124.06' >= '570.26')."""
    try:
        return Version(driver) >= Version(minimum)
    except InvalidVersion:
        return False


def driver_branch(driver: str) -> int | None:
    head = driver.split(".")[0]
    return int(head) if head.isdigit() else None
