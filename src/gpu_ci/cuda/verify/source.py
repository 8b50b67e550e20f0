"""Which CUDA the job's tests load, and so which CUDA is judged.

The job's environment comes first: its conda environment's CUDA packages (``env``), the
NVIDIA runtime and library wheels of the target interpreter (``wheels``) and the
frameworks' own builds. A system toolkit (``nvcc`` on PATH or under CUDA_HOME) is judged
only when nothing in the environment provides CUDA, or when ``cuda-from: system`` asks; a
system toolkit the environment shadows is a note naming both, never an error.

Framework builds (torch, CuPy, jax, ...) are always judged: whatever toolkit is on the
machine, the driver must run the CUDA they were built with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpu_ci.cuda.verify.findings import Finding
from gpu_ci.cuda.verify.frameworks import CudaConsumer

CUDA_FROM = ("auto", "env", "wheels", "system")

#: Where each provider family's CUDA comes from; every other family is a framework build.
ORIGIN = {"conda": "env", "cuda-runtime": "wheels", "nvcc": "system"}
#: The ``frameworks`` name of each source.
FAMILY = {source: family for family, source in ORIGIN.items()}

WHERE = {
    "env": "the conda environment",
    "wheels": "the NVIDIA wheels",
    "system": "the system toolkit",
}


def origin(consumer: CudaConsumer) -> str:
    """'env', 'wheels', 'system' or 'framework'."""
    return ORIGIN.get(consumer.family, "framework")


def provides(consumer: CudaConsumer) -> bool:
    """Does it bring a CUDA version?

    A CPU, ROCm or unreadable build brings none.
    """
    return consumer.cuda_tuple is not None and not (consumer.cpu_only or consumer.rocm)


@dataclass(frozen=True)
class CudaSource:
    """The CUDA consumers judged, those only noted, and why."""

    judged: tuple[CudaConsumer, ...]
    noted: tuple[CudaConsumer, ...]
    why: str
    findings: tuple[Finding, ...] = ()

    @property
    def cuda(self) -> tuple[int, int] | None:
        """The job's CUDA: the newest one judged (None when none is)."""
        versions = [c.cuda_tuple for c in self.judged if provides(c) and c.cuda_tuple]
        return max(versions) if versions else None

    @property
    def cuda_text(self) -> str:
        """The job's CUDA as its consumer wrote it.

        '12.9', or '12.x' for any minor of 12.
        """
        judged = [c for c in self.judged if provides(c)]
        newest = max(judged, key=lambda c: c.cuda_tuple or (0, 0), default=None)
        return newest.cuda or "" if newest else ""

    def describe(self) -> str:
        """One sentence for the log and the summary."""
        if self.cuda is None:
            return f"no CUDA version judged: {self.why}"
        names = ", ".join(_label(c) for c in self.judged if provides(c))
        return f"CUDA {self.cuda_text} judged ({names}): {self.why}"


def _label(c: CudaConsumer) -> str:
    return f"{c.name} {c.version} (CUDA {c.cuda})"


def _names(consumers: Sequence[CudaConsumer]) -> str:
    return ", ".join(f"{_label(c)} from {c.source}" for c in consumers)


def _note(judged: Sequence[CudaConsumer], noted: Sequence[CudaConsumer], why: str) -> Finding:
    system = [c for c in noted if origin(c) == "system"]
    return Finding(
        "info",
        "cuda-not-judged",
        f"Not judged: {_names(noted)}, because {why}. The tests load "
        + (_names([c for c in judged if provides(c)]) or "no CUDA from it")
        + ".",
        (
            "if the tests build or run with that toolkit, set cuda-from: system"
            if system
            else "set cuda-from to the source the tests load"
        )
        + "; otherwise nothing to do.",
    )


def choose(found: Sequence[CudaConsumer], cuda_from: str, prefix: str = "") -> CudaSource:
    """Split what was found into judged and noted, by ``cuda-from``."""
    frameworks = [c for c in found if origin(c) == "framework"]
    providers = {key: [c for c in found if origin(c) == key] for key in WHERE}
    if cuda_from == "auto":
        environment = [c for c in found if origin(c) != "system"]
        system = providers["system"]
        if not any(provides(c) for c in environment):
            why = (
                "nothing in the job's environment provides CUDA, so the system toolkit is judged"
                if system
                else "nothing in the job's environment or on the system provides CUDA"
            )
            return CudaSource(tuple(found), (), why)
        why = "the job's environment provides CUDA (cuda-from: auto)"
        notes = (_note(environment, system, "the job's environment shadows it"),) if system else ()
        return CudaSource(tuple(environment), tuple(system), why, notes)
    chosen = providers[cuda_from]
    others = [c for key, group in providers.items() if key != cuda_from for c in group]
    judged = tuple(frameworks + chosen)
    why = f"cuda-from is {cuda_from}"
    findings: list[Finding] = []
    if not any(provides(c) for c in chosen):
        findings.append(missing_source(cuda_from, prefix))
    if others:
        findings.append(_note(judged, others, why))
    return CudaSource(judged, tuple(others), why, tuple(findings))


def missing_source(cuda_from: str, prefix: str) -> Finding:
    """cuda-from names a source that holds no CUDA: what was looked at, and the fix."""
    looked = {
        "env": f"no CUDA package (cuda-version, cudatoolkit, cuda-cudart, cuda-nvcc) in "
        f"{prefix + '/conda-meta' if prefix else 'a conda environment (none was found)'}",
        "wheels": "no nvidia-cuda-runtime, nvidia-*-cuXX or cuda-toolkit wheel in the "
        "target interpreter",
        "system": "no nvcc on PATH or under CUDA_HOME / CUDA_PATH",
    }[cuda_from]
    return Finding(
        "error",
        "cuda-from-not-found",
        f"cuda-from is {cuda_from}, but {WHERE[cuda_from]} holds no CUDA: {looked}.",
        "point the python input at the interpreter the tests use, install that CUDA, "
        "or set cuda-from: auto.",
    )
