"""A builder for gpu-gate's inputs, as a workflow writes them."""

from __future__ import annotations

from typing import Any

from gpu_ci.github.gate import GateInputs

#: The required inputs of a plain label gate; each test overrides what it is about.
DEFAULTS: dict[str, Any] = {
    "label": "CUDA CI",
    "min_permission": "write",
    "run_on": ["push"],
    "require_fresh_head": True,
    "paths": [],
    "skip_draft": False,
    "gpu_runs_on": "gpu",
    "cpu_runs_on": "ubuntu-latest",
}


def gate_inputs(**overrides: Any) -> GateInputs:
    """gpu-gate's inputs: :data:`DEFAULTS` with ``overrides``."""
    return GateInputs(**{**DEFAULTS, **overrides})
