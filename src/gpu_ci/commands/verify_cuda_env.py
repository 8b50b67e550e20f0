"""``gpu-ci verify-cuda-env``: read NVML and the installed frameworks, report findings."""

from __future__ import annotations

import json

from gpu_ci.cuda.verify import pipeline as verify
from gpu_ci.cuda.verify.options import VerifyInputs, VerifyOptions, parse_options
from gpu_ci.inputs import Inputs
from gpu_ci.runtime import Runtime, annotate_findings, markdown_table, write_report


def options_from(inputs: Inputs) -> VerifyOptions:
    raw = VerifyInputs(
        require=inputs.lines("require"),
        fail_on=inputs["fail-on"],
        deep=inputs.boolean("deep"),
        require_gpu=inputs.boolean("require-gpu"),
        frameworks_text=inputs["frameworks"],
        python=inputs["python"],
        report_file=inputs["report-file"],
        health=inputs["health"],
        cuda_from=inputs["cuda-from"],
    )
    return parse_options(raw)


def run(inputs: Inputs, rt: Runtime) -> int:
    opts = options_from(inputs)
    result = verify.verify(opts, rt.environ)
    snapshot, gpus, found, findings = result.snapshot, result.gpus, result.found, result.findings
    set_outputs(rt, result)
    if snapshot.ok:
        rt.info(
            f"verify-cuda-env: driver {snapshot.driver_version} (CUDA {snapshot.cuda_text}), "
            f"{len(gpus)} visible GPU(s): "
            + (", ".join(f"{g['name']} ({g['compute_capability']})" for g in gpus) or "none")
        )
    for c in found:
        rt.info(f"verify-cuda-env: {c.name} {c.version}: CUDA {c.cuda or '-'} ({c.source})")
    rt.info(f"verify-cuda-env: {result.source.describe()}")
    annotate_findings(rt, "verify-cuda-env", findings)
    verdict = "failed" if result.failed else "ok"
    rt.info(
        f"verify-cuda-env: {verdict} ({len(findings)} finding(s), {result.elapsed_s * 1000:.0f} ms)"
    )
    rt.summary(summarize(result, verdict))
    if opts.report_file:
        write_report(opts.report_file, json.dumps(result.report(), indent=2) + "\n")
    return 1 if result.failed else 0


def set_outputs(rt: Runtime, result: verify.Verification) -> None:
    gpus = result.gpus
    rt.set_output("ok", "false" if result.failed else "true")
    rt.set_output("driver-version", result.snapshot.driver_version)
    rt.set_output("cuda-driver-version", result.snapshot.cuda_text)
    rt.set_output("gpu-count", str(len(gpus)))
    rt.set_output("gpus", json.dumps(gpus))
    rt.set_output("frameworks", json.dumps([c.as_json() for c in result.found]))
    rt.set_output("findings", json.dumps([f.as_json() for f in result.findings]))


def summarize(result: verify.Verification, verdict: str) -> str:
    snapshot, gpus, found, findings = result.snapshot, result.gpus, result.found, result.findings
    parts = [f"### verify-cuda-env: {verdict}\n"]
    if snapshot.ok:
        parts.append(f"Driver **{snapshot.driver_version}**, CUDA **{snapshot.cuda_text}**\n")
        parts.append(
            markdown_table(
                ["GPU", "name", "compute capability", "memory (MiB)", "MIG", "UUID"],
                [
                    (
                        g["index"],
                        g["name"],
                        g["compute_capability"],
                        g["memory_mib"],
                        g["mig"],
                        g["uuid"],
                    )
                    for g in gpus
                ],
            )
        )
    if found:
        judged = result.source.describe()
        parts.append(f"{judged[0].upper()}{judged[1:]}.\n")
        noted = set(result.source.noted)
        parts.append(
            markdown_table(
                ["framework", "version", "built for CUDA", "learned from", "judged"],
                [
                    (c.name, c.version, c.cuda or "-", c.source, "no" if c in noted else "yes")
                    for c in found
                ],
            )
        )
    if findings:
        parts.append(
            markdown_table(
                ["level", "code", "message", "fix"],
                [(f.level, f.code, f.message, f.fix) for f in findings],
            )
        )
    return "\n".join(parts)
