"""verify-cuda-env's health checks: faults that make a GPU's answers wrong.

Uncorrectable ECC errors, failed or pending row remapping and pending page retirement
fail the step by default: the next test on that board can return wrong numbers.
``health: warn`` downgrades them. A busy GPU, MIG mode and persistence mode off are
warnings either way.
"""

from __future__ import annotations

from gpu_ci.cuda.facts import Gpu
from gpu_ci.cuda.verify.findings import Finding
from gpu_ci.cuda.visibility import Visibility

OUT_OF_SERVICE = "take this GPU out of service"


def _fault_findings(g: Gpu, who: str, health: str) -> list[Finding]:
    """The GPU's hardware faults, at the ``health`` level."""
    out = []
    if g.ecc_uncorrected_volatile:
        out.append(
            Finding(
                health,
                "ecc-uncorrected-errors",
                f"{who} has {g.ecc_uncorrected_volatile} volatile uncorrected "
                "ECC errors since the last driver load (a hardware fault).",
                f"{OUT_OF_SERVICE}; reset it (nvidia-smi -r) and run a memory "
                "diagnostic (dcgmi diag -r 3) before using it again.",
            )
        )
    if g.retired_pages_pending:
        out.append(
            Finding(
                health,
                "retired-pages-pending",
                f"{who} has retired pages pending a reboot.",
                "reboot the runner (or reset the GPU) to apply the retirement.",
            )
        )
    if g.remapped_rows_failure:
        out.append(
            Finding(
                health,
                "remapped-rows-failure",
                f"{who} reports a row-remapping failure (a hardware fault).",
                f"{OUT_OF_SERVICE}: the board needs service.",
            )
        )
    elif g.remapped_rows_pending:
        out.append(
            Finding(
                health,
                "remapped-rows-pending",
                f"{who} has remapped rows pending a GPU reset.",
                "reset the GPU (nvidia-smi -r) or reboot the runner to apply the remapping.",
            )
        )
    return out


def _mig_findings(g: Gpu, who: str) -> list[Finding]:
    """A MIG-mode GPU the job did not select an instance of."""
    out = []
    if g.mig_enabled and not g.mig_selected:
        if not g.mig_uuids:
            out.append(
                Finding(
                    "error",
                    "mig-no-instances",
                    f"{who} is in MIG mode with no MIG instances created: CUDA "
                    "sees no device on it.",
                    "create instances (nvidia-smi mig -cgi ... -C) and select "
                    "one with CUDA_VISIBLE_DEVICES=MIG-..., or disable MIG "
                    "(nvidia-smi -mig 0).",
                )
            )
        else:
            out.append(
                Finding(
                    "warning",
                    "mig-enabled",
                    f"{who} is in MIG mode with {len(g.mig_uuids)} instance(s) "
                    f"({', '.join(g.mig_uuids)}): CUDA sees instances, not the "
                    "whole GPU.",
                    "select an instance with CUDA_VISIBLE_DEVICES=MIG-..., or "
                    "disable MIG on this runner.",
                )
            )
    return out


def health_findings(vis: Visibility, health: str = "error") -> list[Finding]:
    """Each visible GPU's faults, users, MIG mode and persistence mode."""
    out = []
    for g in vis.gpus:
        who = f"GPU {g.index} ({g.name})"
        out.extend(_fault_findings(g, who, health))
        if g.other_processes:
            out.append(
                Finding(
                    "warning",
                    "gpu-busy",
                    f"{who} is already used by {g.other_processes} other "
                    "process(es); tests may run out of memory or be slow.",
                    "make sure earlier jobs cleaned up, or give this job its own GPU.",
                )
            )
        out.extend(_mig_findings(g, who))
        if g.persistence_mode is False:
            out.append(
                Finding(
                    "warning",
                    "persistence-mode-off",
                    f"{who} has persistence mode off: each CUDA start re-initialises "
                    "the driver (seconds).",
                    "enable it on the runner (nvidia-smi -pm 1, or nvidia-persistenced).",
                )
            )
        for what in g.unreadable:
            out.append(Finding("info", "health-unreadable", f"{who}: could not read {what}."))
    return out
