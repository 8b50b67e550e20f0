"""verify-cuda-env's checks run on a hand-made NVML snapshot, without a process."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpu_ci.cuda.facts import Gpu, NvmlSnapshot
from gpu_ci.cuda.verify import checks as cuda_checks
from gpu_ci.cuda.verify.table import load_table
from gpu_ci.cuda.visibility import visible_gpus


def snapshot(*gpus: Gpu, driver: str = "580.159.04", cuda: int = 13000) -> NvmlSnapshot:
    """What NVML would report: these GPUs on a driver of this version."""
    return NvmlSnapshot(ok=True, driver_version=driver, cuda_driver_version=cuda, gpus=gpus)


def check(
    snap: NvmlSnapshot,
    found: Iterable[Any] = (),
    env: cuda_checks.EnvFacts | None = None,
    installed: frozenset[str] = frozenset(),
) -> Any:
    """The findings of the checks for ``snap`` and the frameworks ``found``."""
    return cuda_checks.run_checks(
        cuda_checks.CheckInput(
            snapshot=snap,
            visibility=visible_gpus(snap.gpus, {}),
            consumers=found,
            table=load_table(),
            env=env or cuda_checks.EnvFacts(),
            installed=installed,
        )
    )
