"""verify-cuda-env's run: read, check, and build the JSON report.

It reads NVML and the target Python, runs the checks, and builds the JSON report from
what was read.

The command reads the inputs and writes outputs, annotations, the summary and the report
file; everything between (what to read, in which order, what the findings are, whether they
fail the step) is here, so the decision is one function of the options and the environment.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_ci import __version__
from gpu_ci.cuda.facts import NvmlSnapshot
from gpu_ci.cuda.verify import checks as cuda_checks
from gpu_ci.cuda.verify import findings as cuda_findings
from gpu_ci.cuda.verify import frameworks
from gpu_ci.cuda.verify import probe as framework_probe
from gpu_ci.cuda.verify.findings import Finding
from gpu_ci.cuda.verify.frameworks import CudaConsumer, ProbeFacts
from gpu_ci.cuda.verify.loader import locate_libcuda
from gpu_ci.cuda.verify.options import VerifyOptions
from gpu_ci.cuda.verify.source import CudaSource, choose
from gpu_ci.cuda.verify.table import load_table
from gpu_ci.cuda.visibility import Visibility, visible_gpus

#: Frameworks the deep check can run a kernel with.
DEEP_FAMILIES = frozenset({"torch", "cupy", "jax"})


@dataclass(frozen=True)
class Verification:
    """What one verify-cuda-env run read and concluded.

    What one run read and concluded; ``failed`` are the findings at or above fail-on.
    """

    options: VerifyOptions
    snapshot: NvmlSnapshot
    visibility: Visibility | None
    facts: ProbeFacts
    found: list[CudaConsumer]
    source: CudaSource
    deep: list[dict[str, Any]]
    findings: list[Finding]
    failed: list[Finding]
    nvml_s: float
    elapsed_s: float

    @property
    def gpus(self) -> list[dict[str, Any]]:
        """The visible GPUs as JSON (outputs, summary and report share them)."""
        return [g.as_json() for g in (self.visibility.gpus if self.visibility else ())]

    def report(self) -> dict[str, Any]:
        """The ``report-file`` document (keys in this order: it is compared as text)."""
        return {
            "gpu_ci_version": __version__,
            "ok": not self.failed,
            "fail_on": self.options.fail_on,
            "snapshot": self.snapshot.as_json(),
            "visible_gpus": self.gpus,
            "python": self.facts.python,
            "frameworks": [c.as_json() for c in self.found],
            "deep": self.deep,
            "findings": [f.as_json() for f in self.findings],
            "timing_s": {"nvml": round(self.nvml_s, 4), "total": round(self.elapsed_s, 4)},
        }


def env_facts(
    libcuda: str | None, libcuda_error: str, environ: Mapping[str, str]
) -> cuda_checks.EnvFacts:
    """The container runtime's variables the checks read (NVIDIA's ``NVIDIA_*``)."""
    return cuda_checks.EnvFacts(
        libcuda_path=libcuda,
        libcuda_error=libcuda_error,
        nvidia_require_cuda=environ.get("NVIDIA_REQUIRE_CUDA", ""),
        nvidia_disable_require=environ.get("NVIDIA_DISABLE_REQUIRE", "").lower()
        in ("1", "true", "yes"),
        driver_capabilities=environ.get("NVIDIA_DRIVER_CAPABILITIES"),
        visible_devices=environ.get("NVIDIA_VISIBLE_DEVICES"),
        in_container=cuda_checks.in_container(environ),
    )


def verify(
    opts: VerifyOptions, environ: Mapping[str, str], clock: Callable[[], float] = time.monotonic
) -> Verification:
    """Run verify-cuda-env: read, probe, check.

    Read NVML, the loader and the target Python; deep-check when asked; run the checks.
    """
    from gpu_ci.cuda.nvml import read_snapshot  # pynvml only once there is something to read

    started = clock()
    snapshot = read_snapshot()
    nvml_s = clock() - started
    vis = visible_gpus(snapshot.gpus, environ) if snapshot.ok else None
    libcuda, libcuda_error = locate_libcuda() if snapshot.ok else (None, "")

    python = framework_probe.resolve_python(opts.python, environ)
    facts, probe_error = framework_probe.collect(python, environ)
    found = frameworks.consumers(facts)
    extra = cuda_findings.python_findings(opts.python, python, probe_error)
    if opts.frameworks:
        found = [c for c in found if c.family in opts.frameworks]
        extra += cuda_findings.selection_findings(
            opts.frameworks, [c.family for c in found], facts.python
        )
    source = choose(found, opts.cuda_from, facts.prefix)
    extra += source.findings

    deep: list[dict[str, Any]] = []
    if opts.deep and python and snapshot.ok and vis is not None:
        families = sorted({c.family for c in source.judged} & DEEP_FAMILIES)
        if families:
            deep, deep_error = framework_probe.deep_probe(python, families, len(vis.gpus), environ)
            if deep_error:
                extra.append(Finding("error", "deep-check-failed", deep_error))

    findings = extra + cuda_checks.run_checks(
        cuda_checks.CheckInput(
            snapshot=snapshot,
            visibility=vis,
            consumers=source.judged,
            job_cuda=source.cuda_text,
            table=load_table(),
            env=env_facts(libcuda, libcuda_error, environ),
            requirements=opts.requirements,
            deep=deep,
            require_gpu=opts.require_gpu,
            health=opts.health,
            installed=frozenset(facts.dists),
        )
    )
    return Verification(
        opts,
        snapshot,
        vis,
        facts,
        found,
        source,
        deep,
        findings,
        cuda_checks.failing(findings, opts.fail_on),
        nvml_s,
        clock() - started,
    )
