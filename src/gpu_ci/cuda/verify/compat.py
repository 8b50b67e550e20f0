"""Will the installed CUDA consumers run on this driver and these GPUs? Fixes that exist.

Two questions per consumer (torch, cupy, jax, the runtime wheels, conda's cuda-version, ...):

- **driver**: code built with CUDA X.Y needs a driver whose CUDA is >= X.Y, or, under
  minor-version compatibility, a driver at or above X's floor (580 / 525.60.13 / 450.80.02),
  with limits (no JIT of newer PTX). The floor is the minimum; the driver Table 3 lists for a
  toolkit is the one *bundled* with it and is named only as the newest.
- **architecture**: the build's compiled targets (read from the build, see :mod:`.arch`) must
  reach each visible GPU; without them, the CUDA major's oldest architecture and "Blackwell
  needs CUDA >= 12.8" decide.

One finding per root cause: every consumer that fails for the same reason is listed in it.
Fixes name a build that exists (``cuda-builds.yaml``) and fits the GPU's architecture and the
driver, or say that none does.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass

from gpu_ci.cuda.facts import Gpu, NvmlSnapshot
from gpu_ci.cuda.verify.arch import parse_targets, reach, sm_name
from gpu_ci.cuda.verify.findings import Finding
from gpu_ci.cuda.verify.frameworks import CudaConsumer
from gpu_ci.cuda.verify.table import Build, BuildFacts, DriverTable, driver_at_least, driver_branch

#: Families whose kernels are compiled ahead of time into the build (no run-time compiler).
PREBUILT = ("torch", "tensorflow", "jax", "onnxruntime", "paddle")


@dataclass(frozen=True)
class Context:
    snapshot: NvmlSnapshot
    gpus: tuple[Gpu, ...]
    table: DriverTable
    builds: BuildFacts
    installed: frozenset[str] = frozenset()


def label(c: CudaConsumer) -> str:
    return f"{c.name} {c.version}"


def _names(consumers: Sequence[CudaConsumer]) -> str:
    return ", ".join(f"{label(c)} (CUDA {c.cuda}, from {c.source})" for c in consumers)


def _mm(pair: tuple[int, int]) -> str:
    return f"{pair[0]}.{pair[1]}"


def driver_runs(ctx: Context, cuda: tuple[int, int]) -> str | None:
    """'native', 'minor-compat' or None: can this driver run code built with ``cuda``?"""
    have = ctx.snapshot.cuda
    if cuda <= have:
        return "native"
    floor = ctx.table.min_driver(cuda[0])
    if cuda[0] == have[0] and floor and driver_at_least(ctx.snapshot.driver_version, floor):
        return "minor-compat"
    return None


def _arch_ok(ctx: Context, build: Build, gpu: Gpu) -> bool:
    oldest = ctx.builds.min_cc_by_major.get(build.cuda[0])
    if oldest and gpu.compute_capability < oldest:
        return False
    if build.arch:
        return reach(parse_targets(build.arch), gpu.compute_capability) == "sass"
    return True


def suggest(ctx: Context, family: str, need_native: bool = False) -> str:
    """The newest build of a family this host runs.

    The newest existing build of ``family`` that this driver runs and that covers every visible GPU,
    as an install line; or a sentence saying that none exists.
    """
    candidates = []
    for build in ctx.builds.builds_of(family):
        if build.tag in ctx.installed:  # never "install" what is installed (cupy-cuda13x)
            continue
        mode = driver_runs(ctx, build.cuda)
        if mode is None or (need_native and mode != "native"):
            continue
        if all(_arch_ok(ctx, build, gpu) for gpu in ctx.gpus):
            candidates.append((build.current, mode == "native", build.cuda, build))
    if not candidates:
        if not ctx.builds.builds_of(family):
            return ""
        return (
            f"no published {family} build runs on driver {ctx.snapshot.driver_version} "
            "with " + ", ".join(f"GPU {g.index} ({g.name}, {g.cc})" for g in ctx.gpus)
        )
    _current, _native, _cuda, build = max(candidates, key=lambda c: (c[0], c[1], c[2]))
    ships = f", {family} {build.versions}" if build.versions and not build.current else ""
    if build.arch:
        ships += ", ships " + " ".join(
            sorted({sm_name(g.compute_capability) for g in ctx.gpus} & set(build.arch))
            or build.arch
        )
    return f"`{build.install}` (CUDA {_mm(build.cuda)}{ships})"


def driver_fix(ctx: Context, major: int) -> str:
    """How to get a driver that runs CUDA ``major``: its floor, capped by each GPU's last
    supported driver branch."""
    floor = ctx.table.min_driver(major)
    if not floor:
        return "upgrade the driver"
    branch = driver_branch(floor) or 0
    for gpu in ctx.gpus:
        eol = ctx.builds.last_branch(gpu.compute_capability)
        if eol and int(eol.branch) < branch:
            return (
                f"no driver runs CUDA {major} on GPU {gpu.index} ({gpu.name}, {eol.name}): "
                f"R{eol.branch} is the last driver branch for {eol.name}"
            )
    for gpu in ctx.gpus:
        eol = ctx.builds.last_branch(gpu.compute_capability)
        if eol:
            return (
                f"upgrade the driver to {floor} or newer within the R{eol.branch} branch "
                f"(CUDA {major}.x's minimum; R{eol.branch} is the last branch for "
                f"{eol.name}, GPU {gpu.index})"
            )
    newest = [(t, d) for t, d in ctx.table.toolkit_driver.items() if t.split(".")[0] == str(major)]
    text = f"upgrade the driver to {floor} or newer (CUDA {major}.x's minimum)"
    if newest:
        toolkit, bundled = max(newest, key=lambda td: tuple(int(p) for p in td[0].split(".")))
        text += f"; the newest, bundled with CUDA {toolkit}, is {bundled}"
    return text


def _build_fix(ctx: Context, consumers: Sequence[CudaConsumer], need_native: bool = False) -> str:
    parts = []
    for family in dict.fromkeys(c.family for c in consumers):
        line = suggest(ctx, family, need_native)
        if line:
            parts.append(f"for {family}, {line}")
    return "; ".join(parts)


def _join(*parts: str) -> str:
    return "; or ".join(p for p in parts if p) + "."


def driver_findings(ctx: Context, consumers: Sequence[CudaConsumer]) -> list[Finding]:
    snap = ctx.snapshot
    too_old: dict[int, list[CudaConsumer]] = {}
    minor: dict[int, list[CudaConsumer]] = {}
    for c in consumers:
        need = c.cuda_tuple
        if need is None or c.cpu_only or c.rocm:
            continue
        mode = driver_runs(ctx, need)
        if mode is None:
            too_old.setdefault(need[0], []).append(c)
        elif mode == "minor-compat":
            minor.setdefault(need[0], []).append(c)
    out = []
    for major, group in sorted(too_old.items()):
        need = max(c.cuda_tuple or (0, 0) for c in group)
        floor = ctx.table.min_driver(major)
        why = (
            f"driver {snap.driver_version} supports CUDA {snap.cuda_text} at most"
            + (
                f" and is below CUDA {major}'s minor-version compatibility floor {floor}"
                if floor and major == snap.cuda[0]
                else ""
            )
            + f"; CUDA {_mm(need)} needs driver {floor or '(unknown)'} or newer"
        )
        out.append(
            Finding(
                "error",
                "driver-too-old-for-cuda",
                f"Built for CUDA {major}.x: {_names(group)}; {why}.",
                _join(
                    driver_fix(ctx, major),
                    _build_fix(ctx, group)
                    and f"install builds this driver runs: {_build_fix(ctx, group)}",
                ),
            )
        )
    for _major, group in sorted(minor.items()):
        need = max(c.cuda_tuple or (0, 0) for c in group)
        bundled = ctx.table.bundled_driver(*need)
        out += numba_findings(ctx, [c for c in group if c.family == "numba"], need)
        out.append(
            Finding(
                "warning",
                "minor-version-compatibility",
                f"{_names(group)}: driver {snap.driver_version} (CUDA "
                f"{snap.cuda_text}) runs CUDA {_mm(need)} through minor-version "
                "compatibility: PTX JIT of newer PTX is unavailable and newer APIs "
                "may fail (cudaErrorCallRequiresNewerDriver).",
                _join(
                    f"for CUDA {_mm(need)}'s full feature set, use a driver "
                    f"whose CUDA is {_mm(need)} or newer"
                    + (f" (the one bundled with it is {bundled})" if bundled else ""),
                    _build_fix(ctx, group, need_native=True),
                ),
            )
        )
    return out


def numba_findings(
    ctx: Context, numba: Sequence[CudaConsumer], need: tuple[int, int]
) -> list[Finding]:
    """numba under minor-version compatibility links through nvJitLink: numba-cuda through
    cuda-bindings with an nvidia-nvjitlink wheel, the target built into numba through
    pynvjitlink. Each flavour is told only what it needs."""
    out = []
    snap = ctx.snapshot
    for consumer in numba:
        helpers = ctx.builds.numba.get(consumer.name) or ctx.builds.numba.get("numba")
        if helpers is None:
            continue
        missing = helpers.missing(ctx.installed)
        if not missing:
            continue
        wanted = " and ".join(" or ".join(g) for g in missing)
        out.append(
            Finding(
                "error",
                "numba-minor-version-compatibility",
                f"{_names([consumer])}: driver {snap.driver_version} (CUDA "
                f"{snap.cuda_text}) runs CUDA {_mm(need)} only through "
                f"minor-version compatibility, for which {consumer.name} needs "
                f"{wanted} installed: kernels that need linking fail.",
                _join(
                    helpers.install.format(major=need[0]),
                    f"use a driver whose CUDA is {_mm(need)} or newer",
                ),
            )
        )
    return out


def supported_branches(builds: BuildFacts, today: str | None = None) -> str:
    """'R580 (long-term support), R595 (production), ...': the listed branches not ended."""
    today = today or datetime.date.today().isoformat()
    return ", ".join(f"R{b.branch} ({b.kind})" for b in builds.branches if not b.ended(today))


def forward_compat_branch_findings(
    builds: BuildFacts, kernel: str, compat_path: str, today: str | None = None
) -> list[Finding]:
    """Whether a compat libcuda's kernel branch reached end of life.

    A compat libcuda on a kernel branch NVIDIA lists, that has reached its end of life: no longer
    supported (still listed branches are fine; unlisted ones fail with 803, which the caller
    reports).
    """
    number = driver_branch(kernel)
    entry = builds.branch(number) if number is not None else None
    today = today or datetime.date.today().isoformat()
    if entry is None or not entry.ended(today):
        return []
    when = "" if entry.end_of_life == "ended" else f" in {entry.end_of_life}"
    current = supported_branches(builds, today)
    return [
        Finding(
            "warning",
            "forward-compat-branch-ended",
            f"libcuda from {compat_path} (forward compatibility) runs on driver "
            f"{kernel}, on the R{entry.branch} {entry.kind} branch, which reached its "
            f"end of life{when}: forward compatibility on it is no longer supported "
            "(no fixes; it may still work).",
            "move the runner to a supported data-center branch"
            + (f" ({current})" if current else "")
            + ", or drop the compat package and upgrade the driver.",
        )
    ]


ArchKey = tuple[str, int, str]
"""(finding code, GPU index, why: "", "ptx" or "new-arch")."""


def _arch_groups(
    ctx: Context, consumers: Sequence[CudaConsumer]
) -> dict[ArchKey, list[CudaConsumer]]:
    """Group the builds whose code misses a visible GPU.

    The builds whose code misses a visible GPU, grouped by (code, GPU, why).
    """
    groups: dict[tuple[str, int, str], list[CudaConsumer]] = {}
    for c in consumers:
        need = c.cuda_tuple
        if need is None or c.cpu_only or c.rocm:
            continue
        targets = parse_targets(c.arch) if c.arch else ()
        for gpu in ctx.gpus:
            cc = gpu.compute_capability
            oldest = ctx.builds.min_cc_by_major.get(need[0])
            if targets:
                got = reach(targets, cc)
                if got is None and oldest and cc < oldest:  # same root cause as below
                    groups.setdefault((f"arch-dropped-by-cuda{need[0]}", gpu.index, ""), []).append(
                        c
                    )
                elif got is None:
                    groups.setdefault(("no-kernel-image", gpu.index, ""), []).append(c)
                elif got == "ptx":
                    late = driver_runs(ctx, need) == "minor-compat"
                    key = "no-kernel-image" if late else "arch-ptx-only"
                    groups.setdefault((key, gpu.index, "ptx"), []).append(c)
            elif oldest and cc < oldest:
                groups.setdefault((f"arch-dropped-by-cuda{need[0]}", gpu.index, ""), []).append(c)
            elif (
                cc >= ctx.builds.new_arch_cc
                and need < ctx.builds.new_arch_min_cuda
                and c.exact_minor
            ):
                key = "no-kernel-image" if c.family in PREBUILT else "arch-ptx-only"
                groups.setdefault((key, gpu.index, "new-arch"), []).append(c)
    return groups


def _arch_finding(ctx: Context, key: ArchKey, gpu: Gpu, group: list[CudaConsumer]) -> Finding:
    """One group's finding: what misses the GPU, and which builds would reach it."""
    code, _index, why = key
    who = f"GPU {gpu.index} ({gpu.name}, compute capability {gpu.cc})"
    sm = sm_name(gpu.compute_capability)
    fix = _build_fix(ctx, group)
    lists = "; ".join(f"{label(c)} is built for {' '.join(c.arch)}" for c in group if c.arch)
    if code.startswith("arch-dropped-by-cuda"):
        major = code.rsplit("cuda", 1)[1]
        oldest = ctx.builds.min_cc_by_major[int(major)]
        msg = (
            f"{_names(group)}: CUDA {major} does not support {who}: it needs compute "
            f"capability {_mm(oldest)} or newer"
            + (
                f" ({lists}); CUDA would fail with 'no kernel image is available for "
                "execution on the device'."
                if lists
                else "."
            )
        )
        fix = _join(fix and f"install builds that still ship {sm}: {fix}", "run on a newer GPU")
    elif why == "new-arch":
        need = min(c.cuda_tuple or (0, 0) for c in group)
        msg = (
            f"{_names(group)}: CUDA {_mm(need)} predates the architecture of {who} "
            f"(code for compute capability {_mm(ctx.builds.new_arch_cc)} and newer "
            f"needs CUDA {_mm(ctx.builds.new_arch_min_cuda)} or newer), so only PTX "
            "JIT could reach it"
            + (
                ": CUDA would fail with 'no kernel image is available for execution on the device'."
                if code == "no-kernel-image"
                else " (slow start-up; fails if the PTX is newer than the driver)."
            )
        )
        fix = _join(
            fix and f"install a build for CUDA {_mm(ctx.builds.new_arch_min_cuda)} or newer: {fix}"
        )
    elif code == "no-kernel-image":
        msg = (
            f"{lists}: none of which runs on {who}"
            + (
                " (only PTX, which this driver cannot JIT under minor-version compatibility)"
                if why == "ptx"
                else ""
            )
            + ": CUDA would fail with 'no kernel image is available for execution on "
            "the device'."
        )
        how = (
            f"with TORCH_CUDA_ARCH_LIST={gpu.cc}"
            if {c.family for c in group} == {"torch"}
            else f"with code for {sm} (CMAKE_CUDA_ARCHITECTURES={sm.split('_')[1]})"
        )
        fix = _join(
            fix and f"install builds that include {sm}: {fix}",
            "" if fix else f"no published build includes {sm}: build from source " + how,
        )
    else:
        msg = (
            f"{lists}: no binary ({sm}) for {who}; it will JIT-compile PTX at start-up "
            "(slow, and fails if the PTX is newer than the driver)."
        )
        fix = _join(fix and f"install builds that include {sm}: {fix}")
    level = "warning" if code == "arch-ptx-only" else "error"
    return Finding(level, code, msg, fix)


def arch_findings(ctx: Context, consumers: Sequence[CudaConsumer]) -> list[Finding]:
    """Does each build's code reach each visible GPU? Grouped by (code, GPU, CUDA major)."""
    by_index = {g.index: g for g in ctx.gpus}
    return [
        _arch_finding(ctx, key, by_index[key[1]], group)
        for key, group in _arch_groups(ctx, consumers).items()
    ]


def rocm_and_cpu_findings(ctx: Context, consumers: Sequence[CudaConsumer]) -> list[Finding]:
    out = []
    for c in consumers:
        if not (c.rocm or c.cpu_only):
            continue
        fix = suggest(ctx, c.family)
        fix = (
            f"install the CUDA build of {c.name}: {fix}."
            if fix and "no published" not in fix
            else f"install a CUDA build of {c.name} for CUDA {ctx.snapshot.cuda_text} or older."
        )
        if c.rocm:
            out.append(
                Finding(
                    "warning",
                    "rocm-build",
                    f"{label(c)} is a ROCm (HIP) build ({c.source}): it runs on AMD "
                    "GPUs only and will not use this NVIDIA GPU.",
                    fix,
                )
            )
        else:
            out.append(
                Finding(
                    "warning",
                    "cpu-only-build",
                    f"{label(c)} is a CPU-only build ({c.source}): it will not use the GPU.",
                    fix,
                )
            )
    return out


def consumer_findings(ctx: Context, consumers: Sequence[CudaConsumer]) -> list[Finding]:
    return (
        rocm_and_cpu_findings(ctx, consumers)
        + driver_findings(ctx, consumers)
        + arch_findings(ctx, consumers)
    )
