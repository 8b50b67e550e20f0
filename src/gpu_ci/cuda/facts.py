"""What the driver reports, as plain data: the input of every CUDA check.

:class:`NvmlSnapshot` is filled by :mod:`gpu_ci.cuda.nvml`: on a runner from the real
driver, in tests from a fake NVML library configured with readings of real GPU machines.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: nvmlBrandType_t values (nvml.h).
BRANDS = {
    0: "unknown",
    1: "quadro",
    2: "tesla",
    3: "nvs",
    4: "grid",
    5: "geforce",
    6: "titan",
    7: "vapps",
    8: "vpc",
    9: "vcs",
    10: "vws",
    11: "cloudgaming",
    12: "quadrortx",
    13: "nvidiartx",
    14: "nvidia",
    15: "geforcertx",
    16: "titanrtx",
    17: "dla",
    18: "vgamedev",
    19: "npu",
}


@dataclass(frozen=True)
class MigInstance:
    """A MIG device: what CUDA sees when CUDA_VISIBLE_DEVICES selects it."""

    uuid: str
    name: str = ""
    memory_total_bytes: int | None = None
    other_processes: int | None = None
    """Compute processes on this instance (read through its own MIG device handle)."""


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    uuid: str
    compute_capability: tuple[int, int]
    memory_total_bytes: int
    brand: str = "unknown"
    mig_enabled: bool | None = None
    mig_uuids: tuple[str, ...] = ()
    persistence_mode: bool | None = None
    ecc_uncorrected_volatile: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    other_processes: int | None = None
    unreadable: tuple[str, ...] = ()
    """Optional queries that failed with something other than 'not supported'."""
    mig_instances: tuple[MigInstance, ...] = ()
    """Name and memory of each MIG device (same order as ``mig_uuids``), when readable."""
    mig_selected: str = ""
    """The MIG device UUID CUDA_VISIBLE_DEVICES selected: this Gpu then describes the slice."""

    @property
    def cc(self) -> str:
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"

    def as_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "compute_capability": self.cc,
            "memory_mib": self.memory_total_bytes // (1024 * 1024),
            "mig": "enabled"
            if self.mig_enabled
            else ("disabled" if self.mig_enabled is False else "n/a"),
            "mig_instances": list(self.mig_uuids),
            "brand": self.brand,
            **({"mig_selected": self.mig_selected} if self.mig_selected else {}),
        }


@dataclass(frozen=True)
class NvmlSnapshot:
    ok: bool
    error_code: int | None = None
    """nvmlReturn_t of the failure, when ``ok`` is false."""
    error_name: str = ""
    failed_call: str = ""
    driver_version: str = ""
    cuda_driver_version: int = 0
    """NVML's integer: 12040 is CUDA 12.4."""
    gpus: tuple[Gpu, ...] = ()
    kernel_module_version: str = ""
    """From /proc/driver/nvidia/version, when readable."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def cuda(self) -> tuple[int, int]:
        value = self.cuda_driver_version
        return value // 1000, (value % 1000) // 10

    @property
    def cuda_text(self) -> str:
        return f"{self.cuda[0]}.{self.cuda[1]}" if self.cuda_driver_version else ""

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpus"] = [asdict(g) for g in self.gpus]
        return data
