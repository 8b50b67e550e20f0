"""``gpu-ci verify-cuda-env``: read NVML and the installed frameworks, report findings."""

from __future__ import annotations

import json
import time
from pathlib import Path

from gpu_ci import __version__
from gpu_ci.cuda import checks as cuda_checks
from gpu_ci.cuda import findings as cuda_findings
from gpu_ci.cuda import frameworks
from gpu_ci.cuda import probe as framework_probe
from gpu_ci.cuda.loader import locate_libcuda
from gpu_ci.cuda.options import VerifyOptions, parse_options
from gpu_ci.cuda.table import load_table
from gpu_ci.cuda.visibility import visible_gpus
from gpu_ci.errors import GpuCiError
from gpu_ci.inputs import Inputs
from gpu_ci.runtime import Runtime, markdown_table


def options_from(inputs: Inputs) -> VerifyOptions:
    return parse_options(
        require=inputs.lines("require"), fail_on=inputs["fail-on"],
        deep=inputs.boolean("deep"), require_gpu=inputs.boolean("require-gpu"),
        frameworks_text=inputs["frameworks"], python=inputs["python"],
        report_file=inputs["report-file"], health=inputs["health"])


def run(inputs: Inputs, rt: Runtime) -> int:
    started = time.monotonic()
    opts = options_from(inputs)
    environ = rt.environ

    from gpu_ci.cuda.nvml import read_snapshot

    snapshot = read_snapshot()
    nvml_s = time.monotonic() - started
    vis = visible_gpus(snapshot.gpus, environ) if snapshot.ok else None
    libcuda, libcuda_error = locate_libcuda() if snapshot.ok else (None, "")

    python = framework_probe.resolve_python(opts.python, environ)
    facts, probe_error = framework_probe.collect(python, environ)
    found = frameworks.consumers(facts)
    extra = cuda_findings.python_findings(opts.python, python, probe_error)
    if opts.frameworks:
        found = [c for c in found if c.family in opts.frameworks]
        extra += cuda_findings.selection_findings(opts.frameworks, [c.family for c in found],
                                                  facts.python)

    deep_results: list[dict] = []
    if opts.deep and python and snapshot.ok and vis is not None:
        families = sorted({c.family for c in found} & {"torch", "cupy", "jax"})
        if families:
            deep_results, deep_error = framework_probe.deep_probe(
                python, families, len(vis.gpus), environ)
            if deep_error:
                extra.append(cuda_findings.Finding("error", "deep-check-failed", deep_error))

    findings = extra + cuda_checks.run_checks(cuda_checks.CheckInput(
        snapshot=snapshot, visibility=vis, consumers=found, table=load_table(),
        env=cuda_checks.EnvFacts(
            libcuda_path=libcuda, libcuda_error=libcuda_error,
            nvidia_require_cuda=environ.get("NVIDIA_REQUIRE_CUDA", ""),
            nvidia_disable_require=environ.get("NVIDIA_DISABLE_REQUIRE", "").lower()
            in ("1", "true", "yes"),
            driver_capabilities=environ.get("NVIDIA_DRIVER_CAPABILITIES"),
            visible_devices=environ.get("NVIDIA_VISIBLE_DEVICES"),
            in_container=cuda_checks.in_container(environ)),
        requirements=opts.requirements, deep=deep_results, require_gpu=opts.require_gpu,
        health=opts.health, installed=frozenset(facts.dists)))
    fail_on = opts.fail_on
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

    if opts.report_file:
        report = {"gpu_ci_version": __version__, "ok": not bad, "fail_on": fail_on,
                  "snapshot": snapshot.as_json(), "visible_gpus": gpus,
                  "python": facts.python, "frameworks": [c.as_json() for c in found],
                  "deep": deep_results, "findings": [f.as_json() for f in findings],
                  "timing_s": {"nvml": round(nvml_s, 4), "total": round(elapsed, 4)}}
        try:
            path = Path(opts.report_file)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            raise GpuCiError(f"cannot write report-file {opts.report_file}: "
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
