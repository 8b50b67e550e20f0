"""Keep away from the vendor's conda: detect it, report it, never run or write it.

GPU images ship a conda the job user cannot modify. Every subprocess we start gets an
environment without that conda's variables and without its ``bin``/``condabin`` on PATH,
and a ``CONDARC`` of our own, so nothing we run can read its configuration or write to it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

SCRUBBED = (
    "CONDA_PREFIX",
    "CONDA_SHLVL",
    "CONDA_DEFAULT_ENV",
    "CONDA_EXE",
    "CONDA_PYTHON_EXE",
    "_CE_CONDA",
    "_CE_M",
    "MAMBA_ROOT_PREFIX",
    "PYTHONPATH",
    "PYTHONHOME",
    "CONDA_PROMPT_MODIFIER",
)


# NamedTuples, not frozen dataclasses: each class costs every run ~0.2 ms to create, not ~1.3.


class VendorConda(NamedTuple):
    """The runner image's own conda, kept out of the job's way."""

    root: str
    """The vendor installation's root, or '' when none was found."""
    found_by: str
    writable: bool


def _root_of(conda_path: Path) -> Path:
    # <root>/bin/conda or <root>/condabin/conda
    return conda_path.resolve().parent.parent


def detect(environ: Mapping[str, str]) -> VendorConda:
    candidates: list[tuple[str, Path]] = []
    if environ.get("CONDA"):
        candidates.append(("CONDA", Path(environ["CONDA"])))
    if environ.get("CONDA_EXE"):
        candidates.append(("CONDA_EXE", _root_of(Path(environ["CONDA_EXE"]))))
    on_path = shutil.which("conda", path=environ.get("PATH"))
    if on_path:
        candidates.append(("conda on PATH", _root_of(Path(on_path))))
    for how, root in candidates:
        if root.exists():
            return VendorConda(str(root), how, os.access(root, os.W_OK))
    return VendorConda("", "", False)


def isolated_env(
    environ: Mapping[str, str], vendor: VendorConda, condarc: Path, pkgs_dir: Path, envs_dir: Path
) -> dict[str, str]:
    env = {k: v for k, v in environ.items() if k not in SCRUBBED}
    if vendor.root:
        drop = {str(Path(vendor.root) / "bin"), str(Path(vendor.root) / "condabin")}
        env["PATH"] = os.pathsep.join(
            p for p in env.get("PATH", "").split(os.pathsep) if p.rstrip("/") not in drop
        )
    env.update(
        {
            "CONDARC": str(condarc),
            "CONDA_PKGS_DIRS": str(pkgs_dir),
            "CONDA_ENVS_DIRS": str(envs_dir),
        }
    )
    return env
