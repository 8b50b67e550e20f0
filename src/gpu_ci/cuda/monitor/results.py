"""gpu-monitor's results: the report's inputs and what it computed.

Frozen data only: the computation fills them, the findings judge them, the views
render them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from gpu_ci.cuda.monitor import right_size as rs
from gpu_ci.cuda.monitor.recording import GpuInfo, Recording

# -- inputs besides the recording -------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    """A span of the job: a step from the jobs API, or the monitor's own window."""

    name: str
    start: float
    end: float


@dataclass(frozen=True)
class Pricing:
    usd_per_minute: Decimal | None
    source: str
    """How the price was chosen, e.g. ``price-per-hour: 3.12`` or the SKU and its date."""
    per_gpu: bool = False
    """The price is one GPU's (``price-per-gpu-hour``): the job pays it for each GPU it
    watched (those CUDA_VISIBLE_DEVICES gave it, e.g. a gpu-lease), not the whole runner."""


@dataclass(frozen=True)
class Limits:
    expect_gpu_use: bool = False
    max_memory: int | None = None
    """Bytes; fails when any GPU's peak memory is above it."""
    min_utilisation: float | None = None
    """Percent; fails when any GPU's mean utilisation is below it."""
    unknown_fails: bool = False
    """A check whose counter the GPU does not support fails (else: a warning says so)."""


# -- results ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessUse:
    pid: int
    name: str
    peak_memory: int


@dataclass(frozen=True)
class GpuUsage:
    gpu: GpuInfo
    samples: int
    busy_s: float | None
    """None: no utilisation reading at all (unknown, never 0)."""
    util_mean: float | None
    util_p95: float | None
    util_max: float | None
    mem_util_mean: float | None
    peak_memory: int
    peak_process: str
    peak_at_s: float | None
    energy_wh: float | None
    power_max_w: float | None
    temp_max: int | None
    throttled_s: float | None
    throttle_reasons: dict[str, float]
    processes: tuple[ProcessUse, ...]
    lost_at_s: float | None
    board_energy_wh: float | None = None
    """A MIG slice: the whole board's energy, shown as such and never charged to the slice."""
    memory_reserved: int | None = None
    """The most memory the driver reserved (nvmlMemory_v2_t); None where not read."""
    activity: dict[str, float | None] = field(default_factory=dict)
    """Mean GPM ratio (percent) by ``ACTIVITY`` name; {} where GPM is unsupported (unknown)."""
    io: dict[str, int | None] = field(default_factory=dict)
    """Bytes moved during the job: ``pcie_tx``, ``pcie_rx``, ``nvlink_tx``, ``nvlink_rx``
    (None: the counter is unsupported)."""
    health: dict[str, int | None] = field(default_factory=dict)
    """Growth during the job: ``ecc_corrected``, ``ecc_uncorrected``, ``rows_remapped``;
    and ``remap_pending`` / ``remap_failure`` at the end (None: not supported)."""
    foreign_processes: tuple[int, ...] = ()
    """PIDs on this GPU that NVML listed but this PID namespace cannot resolve."""
    processes_unknown_s: float = 0.0
    """Seconds of samples whose process list the driver did not give (NO_PERMISSION, ...)."""
    board_io: dict[str, int | None] | None = None
    """A MIG slice: ``io`` of the whole board (every tenant's), never the slice's; None for
    a whole GPU."""
    board_health: dict[str, int | None] | None = None
    """A MIG slice: ``health`` of the whole board; None for a whole GPU."""


@dataclass(frozen=True)
class PhaseUsage:
    name: str
    start_s: float
    duration_s: float
    samples: int
    busy_s: float | None
    util_mean: float | None
    peak_memory: int
    energy_wh: float | None


@dataclass(frozen=True)
class Cost:
    window_s: float
    window_from: str
    """``job`` (the jobs API's started_at) or ``monitor`` (the start step)."""
    paid_minutes: int
    gpu_minutes_paid: float
    gpu_minutes_used: float | None
    idle_fraction: float | None
    """None when a GPU's busy time is unknown (no utilisation counter) or part of the paid
    time was not watched (``unwatched``: the sampler died or stopped on a limit)."""
    usd_per_minute: Decimal | None
    price_source: str
    cost_usd: Decimal | None
    idle_cost_usd: Decimal | None
    per_gpu: bool = False
    """``usd_per_minute`` is one GPU's: cost = price × GPU-minutes paid."""


@dataclass(frozen=True)
class Finding:
    level: str
    """``error`` fails the step (an assertion); ``warning`` and ``notice`` report."""
    code: str
    message: str
    at_s: float | None = None


@dataclass(frozen=True)
class Report:
    recording: Recording
    end: float
    gpus: tuple[GpuUsage, ...]
    phases: tuple[PhaseUsage, ...]
    phases_from: str
    cost: Cost
    findings: tuple[Finding, ...] = field(default=())
    right_size: rs.Advice | None = None
    """The smallest GPU or MIG profile that would have held the job (None: no table)."""

    @property
    def ok(self) -> bool:
        return not any(f.level == "error" for f in self.findings)

    @property
    def gpu_used(self) -> bool:
        """Whether this job used a GPU.

        A process of this job's PID namespace used a GPU, or a GPU without processes of another
        namespace was busy (a foreign process's busy time is not the job's).
        """
        return any(
            g.processes or ((g.busy_s or 0) > 0 and not g.foreign_processes) for g in self.gpus
        )

    @property
    def foreign_only(self) -> bool:
        """The only GPU users were processes this PID namespace cannot resolve."""
        return not self.gpu_used and any(g.foreign_processes for g in self.gpus)

    @property
    def use_unknown(self) -> bool:
        """Whether GPU use is unknown for lack of process lists.

        No use was seen, but the driver did not list the processes of some samples.
        """
        return not self.gpu_used and any(g.processes_unknown_s > 0 for g in self.gpus)
