"""``gpu-ci verify-cuda-env``: read NVML and the installed frameworks, report findings."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path

from gpu_ci import __version__
from gpu_ci.cuda import checks as cuda_checks
from gpu_ci.cuda import frameworks
from gpu_ci.cuda import probe as framework_probe
from gpu_ci.cuda import require as require_spec
from gpu_ci.cuda.table import load_table
from gpu_ci.cuda.visibility import visible_gpus
from gpu_ci.errors import GpuCiError, UsageError
from gpu_ci.inputs import Inputs
from gpu_ci.runtime import Runtime, markdown_table


def libcuda_dir(environ: Mapping[str, str]) -> str:
    """The directory of the first libcuda.so.1 the dynamic loader would take from
    LD_LIBRARY_PATH (where a forward-compatibility package is put)."""
    for entry in environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        if entry and (Path(entry) / "libcuda.so.1").exists():
            return entry
    return ""


def selection(inputs: Inputs) -> tuple[str, ...] | None:
    chosen = frameworks.parse_selection(inputs["frameworks"])
    if chosen:
        unknown = [n for n in chosen if n not in frameworks.KNOWN]
        if unknown:
            raise UsageError(f"input 'frameworks' names {', '.join(unknown)}; use auto or any "
                             f"of {', '.join(frameworks.KNOWN)}.")
    return chosen


def run(inputs: Inputs, rt: Runtime) -> int:
    started = time.monotonic()
    requirements = require_spec.parse_lines(inputs.lines("require"))
    fail_on = inputs.choice("fail-on", ("error", "warning"))
    deep = inputs.boolean("deep")
    require_gpu = inputs.boolean("require-gpu")
    chosen = selection(inputs)
    environ = rt.environ

    from gpu_ci.cuda.nvml import read_snapshot

    snapshot = read_snapshot()
    nvml_s = time.monotonic() - started
    vis = visible_gpus(snapshot.gpus, environ) if snapshot.ok else None

    python = framework_probe.resolve_python(inputs["python"], environ)
    facts, probe_error = framework_probe.collect(python, environ)
    found = frameworks.consumers(facts)
    extra: list[cuda_checks.Finding] = []
    if inputs["python"] and python is None:
        extra.append(cuda_checks.Finding(
            "error", "python-not-found", f"input 'python' is {inputs['python']!r}, which is "
            "not an executable on PATH.", "point it at the environment's interpreter, e.g. "
            "the 'python' output of setup-conda-from-lock."))
    elif python is None:
        extra.append(cuda_checks.Finding(
            "info", "python-not-found", "no python on PATH: installed frameworks were not "
            "checked.", "set the 'python' input."))
    elif probe_error:
        extra.append(cuda_checks.Finding("error", "python-probe-failed", probe_error,
                                         "check that the interpreter runs."))
    if chosen:
        found = [c for c in found if c.family in chosen]
        for family in chosen:
            if not any(c.family == family for c in found):
                extra.append(cuda_checks.Finding(
                    "error", "framework-not-found",
                    f"frameworks names {family}, but it is not installed for "
                    f"{facts.python or 'the target interpreter'}.",
                    "install it, or drop it from 'frameworks'."))

    deep_results: list[dict] = []
    if deep and python and snapshot.ok and vis is not None:
        families = sorted({c.family for c in found} & {"torch", "cupy", "jax"})
        if families:
            deep_results, deep_error = framework_probe.deep_probe(
                python, families, len(vis.gpus), environ)
            if deep_error:
                extra.append(cuda_checks.Finding("error", "deep-check-failed", deep_error))

    findings = extra + cuda_checks.run_checks(cuda_checks.CheckInput(
        snapshot=snapshot, visibility=vis, consumers=found, table=load_table(),
        env=cuda_checks.EnvFacts(
            libcuda_dir=libcuda_dir(environ),
            nvidia_require_cuda=environ.get("NVIDIA_REQUIRE_CUDA", ""),
            nvidia_disable_require=environ.get("NVIDIA_DISABLE_REQUIRE", "").lower()
            in ("1", "true", "yes")),
        requirements=requirements, deep=deep_results, require_gpu=require_gpu))
    bad = cuda_checks.failing(findings, fail_on)
    elapsed = time.monotonic() - started

    gpus = [g.as_json() for g in (vis.gpus if vis else ())]
    rt.set_output("ok", "false" if bad else "true")
    rt.set_output("driver-version", snapshot.driver_version)
    rt.set_output("cuda-driver-version", snapshot.cuda_text)
    rt.set_output("gpu-count", str(len(gpus)))
    rt.set_output("gpus", json.dumps(gpus))
    rt.set_output("frameworks", json.dumps([c.as_json() for c in found]))
    rt.set_output("findings", json.dumps([f.as_json() for f in findings]))

    if snapshot.ok:
        rt.info(f"verify-cuda-env: driver {snapshot.driver_version} (CUDA {snapshot.cuda_text}), "
                f"{len(gpus)} visible GPU(s): "
                + (", ".join(f"{g['name']} ({g['compute_capability']})" for g in gpus) or "none"))
    for c in found:
        rt.info(f"verify-cuda-env: {c.name} {c.version}: CUDA {c.cuda or '-'} ({c.source})")
    for f in findings:
        text = f"[{f.code}] {f.message}" + (f" Fix: {f.fix}" if f.fix else "")
        {"error": rt.error, "warning": rt.warning, "info": rt.notice}[f.level](
            text, title=f"verify-cuda-env: {f.code}")
    verdict = "failed" if bad else "ok"
    rt.info(f"verify-cuda-env: {verdict} ({len(findings)} finding(s), {elapsed * 1000:.0f} ms)")
    rt.summary(summarize(snapshot, gpus, found, findings, verdict))

    if inputs["report-file"]:
        report = {"gpu_ci_version": __version__, "ok": not bad, "fail_on": fail_on,
                  "snapshot": snapshot.as_json(), "visible_gpus": gpus,
                  "python": facts.python, "frameworks": [c.as_json() for c in found],
                  "deep": deep_results, "findings": [f.as_json() for f in findings],
                  "timing_s": {"nvml": round(nvml_s, 4), "total": round(elapsed, 4)}}
        try:
            path = Path(inputs["report-file"])
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            raise GpuCiError(f"cannot write report-file {inputs['report-file']}: "
                             f"{exc.strerror}.") from None
    return 1 if bad else 0


def summarize(snapshot, gpus, found, findings, verdict: str) -> str:
    parts = [f"### verify-cuda-env: {verdict}\n"]
    if snapshot.ok:
        parts.append(f"Driver **{snapshot.driver_version}**, CUDA **{snapshot.cuda_text}**\n")
        parts.append(markdown_table(
            ["GPU", "name", "compute capability", "memory (MiB)", "MIG", "UUID"],
            [(g["index"], g["name"], g["compute_capability"], g["memory_mib"], g["mig"],
              g["uuid"]) for g in gpus]))
    if found:
        parts.append(markdown_table(["framework", "version", "built for CUDA", "learned from"],
                                    [(c.name, c.version, c.cuda or "-", c.source)
                                     for c in found]))
    if findings:
        parts.append(markdown_table(["level", "code", "message", "fix"],
                                    [(f.level, f.code, f.message, f.fix) for f in findings]))
    return "\n".join(parts)
