"""verify-cuda-env's options, validated once from the action's inputs.

The command layer reads the raw inputs and hands them here; everything after works on this
frozen object, so a typo in an input is one usage error (exit 2) before anything runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpu_ci.cuda import require as require_spec
from gpu_ci.cuda.verify import frameworks
from gpu_ci.cuda.verify.source import CUDA_FROM, FAMILY
from gpu_ci.errors import UsageError

FAIL_ON = ("error", "warning")
HEALTH = {"error": "error", "fail": "error", "warn": "warning", "warning": "warning"}


@dataclass(frozen=True)
class VerifyOptions:
    requirements: tuple[require_spec.Requirement, ...] = ()
    fail_on: str = "error"
    deep: bool = False
    require_gpu: bool = True
    frameworks: tuple[str, ...] | None = None
    """None: every framework found ('auto')."""
    python: str = ""
    report_file: str = ""
    health: str = "error"
    """Level of hardware-health faults: 'error' (default) or 'warning' (``health: warn``)."""
    cuda_from: str = "auto"
    """Which CUDA is judged: 'auto' (the job's environment, else the system toolkit), 'env',
    'wheels' or 'system'."""


@dataclass(frozen=True)
class VerifyInputs:
    """The action's inputs as given, before :func:`parse_options` checks them."""

    require: Sequence[str] = ()
    fail_on: str = "error"
    deep: bool = False
    require_gpu: bool = True
    frameworks_text: str = "auto"
    python: str = ""
    report_file: str = ""
    health: str = "error"
    cuda_from: str = "auto"


def parse_options(raw: VerifyInputs | None = None) -> VerifyOptions:
    """The inputs checked together; each refusal names the input and the fix."""
    raw = raw or VerifyInputs()
    require, fail_on, health, cuda_from = raw.require, raw.fail_on, raw.health, raw.cuda_from
    requirements = tuple(require_spec.parse_lines(list(require)))
    fail = fail_on.strip().lower()
    if fail not in FAIL_ON:
        raise UsageError(f"input 'fail-on' must be one of {', '.join(FAIL_ON)}; got {fail_on!r}.")
    level = HEALTH.get(health.strip().lower())
    if level is None:
        raise UsageError(f"input 'health' must be error or warn; got {health!r}.")
    source = cuda_from.strip().lower() or "auto"
    if source not in CUDA_FROM:
        raise UsageError(
            f"input 'cuda-from' must be one of {', '.join(CUDA_FROM)}; got {cuda_from!r} "
            "(auto: the job's environment, else the system toolkit)."
        )
    chosen = frameworks.parse_selection(raw.frameworks_text)
    if chosen:
        unknown = [n for n in chosen if n not in frameworks.KNOWN]
        if unknown:
            raise UsageError(
                f"input 'frameworks' names {', '.join(unknown)}; use auto or any "
                f"of {', '.join(frameworks.KNOWN)}."
            )
        family = FAMILY.get(source)
        if family and family not in chosen:
            raise UsageError(
                f"input 'cuda-from' is {source}, but 'frameworks' ({', '.join(chosen)}) leaves "
                f"out {family}, which {source} judges: add {family} to 'frameworks' or set "
                "cuda-from: auto."
            )
    return VerifyOptions(
        requirements=requirements,
        fail_on=fail,
        deep=raw.deep,
        require_gpu=raw.require_gpu,
        frameworks=chosen,
        python=raw.python.strip(),
        report_file=raw.report_file.strip(),
        health=level,
        cuda_from=source,
    )
