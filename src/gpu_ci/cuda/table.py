"""NVIDIA's CUDA toolkit → minimum driver table, shipped as package data.

The YAML is a verbatim copy of ``shared/reference/cuda-toolkit-driver-table.yaml`` (a test
compares them). It is data, refreshed when NVIDIA publishes a release; code only reads it,
through the JSON rendering next to it (``scripts/render_actions.py`` writes it; a test keeps
it equal to the YAML), so that the check never pays for importing PyYAML.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from packaging.version import InvalidVersion, Version

TABLE_PATH = Path(__file__).parent.parent / "data" / "cuda-toolkit-driver-table.yaml"
TABLE_JSON = TABLE_PATH.with_suffix(".json")


@dataclass(frozen=True)
class DriverTable:
    toolkit_min_driver: dict[str, str]
    """'12.6.0' -> minimum Linux driver."""
    compat_floor: dict[int, str]
    """CUDA major -> minimum Linux driver for minor-version compatibility."""

    def min_driver(self, major: int, minor: int) -> str | None:
        """The minimum driver for the first release of CUDA ``major.minor``."""
        candidates = []
        for toolkit, driver in self.toolkit_min_driver.items():
            parts = toolkit.split(".")
            if len(parts) >= 2 and (int(parts[0]), int(parts[1])) == (major, minor):
                candidates.append((tuple(int(p) for p in parts), driver))
        return min(candidates)[1] if candidates else None


@lru_cache(maxsize=1)
def load_table(path: Path = TABLE_JSON) -> DriverTable:
    import json

    with open(path, encoding="utf-8") as handle:
        doc = json.load(handle)
    toolkits = {str(k): str(v[0]) for k, v in doc["toolkit_min_driver"].items() if v[0]}
    floors = {int(k): str(v["linux_min"])
              for k, v in doc["minor_version_compatibility"].items() if v.get("linux_min")}
    return DriverTable(toolkits, floors)


def driver_at_least(driver: str, minimum: str) -> bool:
    """Compare NVIDIA driver versions numerically ('570.124.06' >= '570.26')."""
    try:
        return Version(driver) >= Version(minimum)
    except InvalidVersion:
        return False
