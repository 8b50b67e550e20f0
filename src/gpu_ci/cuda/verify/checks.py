"""Everything that decides whether CUDA code will run, as findings with fixes.

Pure functions: an NVML snapshot, the CUDA consumers found, optional deep-probe results,
``require`` lines and a few environment facts go in; a list of :class:`Finding` comes out.
Each finding has a stable ``code`` for people who grep logs and for tests. The consumer and
architecture rules live in :mod:`.compat`; this module adds the driver, loader, visibility,
MIG, requirement and health rules.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_ci.cuda import require as require_spec
from gpu_ci.cuda.facts import Gpu, NvmlSnapshot
from gpu_ci.cuda.verify.arch import parse_targets, reach, sm_name
from gpu_ci.cuda.verify.compat import (
    Context,
    consumer_findings,
    forward_compat_branch_findings,
    supported_branches,
)
from gpu_ci.cuda.verify.findings import LEVELS, Finding, failing
from gpu_ci.cuda.verify.frameworks import CudaConsumer
from gpu_ci.cuda.verify.health import OUT_OF_SERVICE, health_findings
from gpu_ci.cuda.verify.table import BuildFacts, DriverTable, driver_branch, load_builds
from gpu_ci.cuda.visibility import Visibility

__all__ = ["LEVELS", "CheckInput", "EnvFacts", "Finding", "failing", "run_checks"]


NO_DRIVER = (
    "no NVIDIA driver visible to this job (CPU runner, or a container started "
    "without the NVIDIA runtime / --gpus)"
)

#: Messages and fixes for NVML's failure codes (nvmlReturn_t), by name.
NVML_ERRORS: dict[str, tuple[str, str]] = {
    "LIBRARY_NOT_FOUND": (
        NO_DRIVER,
        "run the job on a GPU runner; in a container, start it "
        "with the NVIDIA container runtime (docker --gpus all, or "
        "`options: --gpus all` for a job container).",
    ),
    "DRIVER_NOT_LOADED": (
        "the NVIDIA kernel module is not loaded (typical after a kernel "
        "update without a DKMS rebuild).",
        "rebuild and load the module (dkms autoinstall; modprobe nvidia) or "
        "reboot into the kernel the driver was built for.",
    ),
    "LIB_RM_VERSION_MISMATCH": (
        "the user-space driver library and the loaded kernel module "
        "are different versions (driver upgraded without a reboot).",
        "reboot the runner, or unload and reload the nvidia kernel modules.",
    ),
    "NO_PERMISSION": (
        "this user may not open the NVIDIA device files (/dev/nvidia*).",
        "add the runner user to the group owning /dev/nvidia* (often 'video') "
        "or fix the container's device cgroup rules.",
    ),
    "GPU_IS_LOST": (
        "a GPU fell off the bus or stopped responding (a hardware fault).",
        f"{OUT_OF_SERVICE}, then reset or replace it.",
    ),
    "RESET_REQUIRED": (
        "a GPU needs a reset before it can be used.",
        "reset the GPU (nvidia-smi -r) or reboot the runner.",
    ),
    "CORRUPTED_INFOROM": (
        "a GPU's infoROM is corrupted (a hardware fault).",
        f"{OUT_OF_SERVICE}: the board needs service.",
    ),
    "INSUFFICIENT_POWER": (
        "a GPU reports insufficient power (a hardware fault).",
        f"{OUT_OF_SERVICE} and check its power cables and supply.",
    ),
    "IRQ_ISSUE": (
        "the driver reports an interrupt problem with a GPU (a hardware fault).",
        f"{OUT_OF_SERVICE} and check the kernel log (dmesg).",
    ),
    "OPERATING_SYSTEM": (
        "the operating system blocked the NVML request.",
        "check container/security policies for device access.",
    ),
    "FUNCTION_NOT_FOUND": (
        "the driver's NVML library is older than nvidia-ml-py expects.",
        "upgrade the NVIDIA driver.",
    ),
    "TIMEOUT": (
        "the driver did not answer in time.",
        "retry; if it persists, check the kernel log (dmesg).",
    ),
    "MEMORY": ("NVML ran out of memory.", "retry; if it persists, check the runner's memory."),
    "UNINITIALIZED": ("NVML was not initialised.", "report this as a bug in gpu-ci."),
}


@dataclass(frozen=True)
class EnvFacts:
    """What the environment says about how CUDA will be loaded."""

    libcuda_path: str | None = None
    """The file the dynamic loader takes for libcuda.so.1 (LD_LIBRARY_PATH, then the
    ldconfig cache), symlinks resolved; '' when it cannot be loaded; None when not looked."""
    libcuda_error: str = ""
    nvidia_require_cuda: str = ""
    nvidia_disable_require: bool = False
    driver_capabilities: str | None = None
    """NVIDIA_DRIVER_CAPABILITIES, when set (the container runtime mounts libcuda only with
    'compute' or 'all')."""
    visible_devices: str | None = None
    """NVIDIA_VISIBLE_DEVICES, when set: the GPUs the NVIDIA container runtime mounts (with
    the driver's libraries and nvidia-smi) into a container; unset or void, none."""
    in_container: bool = False
    """The job runs in a container (see :func:`in_container`)."""


def in_container(environ: Mapping[str, str], root: Path = Path("/")) -> bool:
    """Docker writes /.dockerenv, Podman /run/.containerenv, systemd-nspawn and others set
    ``container``: a job container of GitHub Actions is one of the first two."""
    return (
        bool(environ.get("container"))
        or (root / ".dockerenv").exists()
        or (root / "run" / ".containerenv").exists()
    )


def _capabilities(caps: str) -> set[str]:
    return {c.strip().lower() for c in caps.split(",")}


CONTAINER_FIX = (
    "start the job container with the NVIDIA runtime and every GPU: `container: "
    "options: --gpus all` with `env: NVIDIA_VISIBLE_DEVICES: all` and "
    "`NVIDIA_DRIVER_CAPABILITIES: compute,utility` (see the README's container "
    "section)."
)


def container_no_driver(env: EnvFacts) -> tuple[str, str] | None:
    """Why a job container sees no NVML.

    Why a job container sees no NVML, from what the NVIDIA container runtime reads: the
    container-specific message and fix for LIBRARY_NOT_FOUND (None outside a container).
    """
    if not (
        env.in_container or env.visible_devices is not None or env.driver_capabilities is not None
    ):
        return None
    head = "no NVIDIA driver visible to this job: "
    visible = env.visible_devices
    caps = env.driver_capabilities
    if visible is None:
        return (
            head + "NVIDIA_VISIBLE_DEVICES is not set in this container, so the NVIDIA "
            "container runtime mounted no GPU, no driver library and no nvidia-smi "
            "(nvidia/cuda images set it; most other images do not).",
            CONTAINER_FIX,
        )
    if visible.strip().lower() in ("", "void", "none"):
        return (
            head + f"NVIDIA_VISIBLE_DEVICES={visible!r} in this container, so the NVIDIA "
            "container runtime mounted no GPU and no driver library.",
            CONTAINER_FIX,
        )
    if caps is not None and not ({"utility", "all"} & _capabilities(caps)):
        return (
            head + f"NVIDIA_DRIVER_CAPABILITIES={caps!r} lacks 'utility', so the NVIDIA "
            "container runtime mounted no NVML (libnvidia-ml.so.1) and no nvidia-smi.",
            "start the container with NVIDIA_DRIVER_CAPABILITIES=compute,utility (or "
            "all), e.g. `env: NVIDIA_DRIVER_CAPABILITIES: compute,utility`.",
        )
    return (
        head + f"NVIDIA_VISIBLE_DEVICES={visible!r}, but no driver library was mounted "
        "into this container: it was not started with the NVIDIA runtime.",
        CONTAINER_FIX,
    )


@dataclass(frozen=True)
class CheckInput:
    snapshot: NvmlSnapshot
    visibility: Visibility | None
    consumers: Sequence[CudaConsumer]
    table: DriverTable
    env: EnvFacts = field(default_factory=EnvFacts)
    requirements: Sequence[require_spec.Requirement] = ()
    deep: Sequence[dict[str, Any]] = ()
    require_gpu: bool = True
    builds: BuildFacts = field(default_factory=load_builds)
    health: str = "error"
    """Level of hardware-health faults: 'error', or 'warning' (the ``health: warn`` input)."""
    installed: frozenset[str] = frozenset()
    """Distribution names in the target interpreter (for helper packages such as
    pynvjitlink)."""
    job_cuda: str = ""
    """The CUDA the job's tests load ('12.9', '12.x'; see :mod:`.source`), for
    ``driver=earliest``."""


DATA_CENTER = re.compile(
    r"\b(A100|A800|A30|A40|A10G?|A16|A2|H100|H800|H200|H20|GH200|B100|B200|B300|GB200|GB300|"
    r"L4|L40S?|L20|T4|V100|P100|P40|P4|K80|M60)\b",
    re.IGNORECASE,
)


def is_data_center(gpu: Gpu) -> bool:
    return gpu.brand == "tesla" or bool(DATA_CENTER.search(gpu.name))


def nvml_findings(
    snapshot: NvmlSnapshot, require_gpu: bool, env: EnvFacts | None = None
) -> list[Finding]:
    if snapshot.ok:
        return []
    name = snapshot.error_name or "UNKNOWN"
    message, fix = NVML_ERRORS.get(
        name,
        (
            f"NVML call {snapshot.failed_call} failed with {name} (code {snapshot.error_code}).",
            "check the driver installation (nvidia-smi) and the kernel log (dmesg).",
        ),
    )
    if name == "LIBRARY_NOT_FOUND" and env is not None:
        message, fix = container_no_driver(env) or (message, fix)
    if name == "LIB_RM_VERSION_MISMATCH" and snapshot.kernel_module_version:
        message += f" The loaded kernel module is {snapshot.kernel_module_version}."
    code = "no-driver" if name == "LIBRARY_NOT_FOUND" else f"nvml-{name.lower().replace('_', '-')}"
    level = "error" if require_gpu else "info"
    return [Finding(level, code, message[0].upper() + message[1:], fix)]


def visibility_findings(
    snapshot: NvmlSnapshot, vis: Visibility, require_gpu: bool
) -> list[Finding]:
    out = []
    if vis.unresolved:
        out.append(
            Finding(
                "warning",
                "visible-devices-unresolved",
                f"{vis.unresolved} matches no GPU; CUDA ignores it and every entry after it.",
                "use indices, GPU-/MIG- UUIDs that nvidia-smi -L lists.",
            )
        )
    if vis.order_uncertain:
        fix = (
            "set CUDA_DEVICE_ORDER=PCI_BUS_ID for the job (CUDA then numbers GPUs as "
            "nvidia-smi does), or select GPUs by UUID in CUDA_VISIBLE_DEVICES "
            "(nvidia-smi -L lists them)."
        )
        if vis.by_index:
            out.append(
                Finding(
                    "warning",
                    "device-order-not-pci",
                    f"{vis.by_index} selects by index, but {vis.order_uncertain}: "
                    "CUDA's index N need not be nvidia-smi's (NVML's) GPU N, so "
                    "which GPU it selects is unknown; every GPU it may be is "
                    "checked.",
                    fix,
                )
            )
        else:
            out.append(
                Finding(
                    "info",
                    "device-order-not-pci",
                    f"{vis.order_uncertain}: CUDA's index N need not be the GPU "
                    "N reported here (NVML's PCI order).",
                    fix,
                )
            )
    if not vis.gpus:
        out.append(_no_gpu_finding(snapshot, vis, "error" if require_gpu else "info"))
    return out


def _no_gpu_finding(snapshot: NvmlSnapshot, vis: Visibility, level: str) -> Finding:
    """Why no GPU is visible: hidden by a variable, not injected, or not attached."""
    if snapshot.gpus and vis.hidden_by:
        return Finding(
            level,
            "no-visible-gpu",
            f"the driver sees {len(snapshot.gpus)} GPU(s) but {vis.hidden_by} hides all of them.",
            "fix or unset that variable for this job.",
        )
    if vis.runtime_devices:
        return Finding(
            level,
            "no-visible-gpu",
            f"the driver reports no GPU; the container was started with "
            f"{vis.runtime_devices}, which the container runtime reads "
            "on the host to choose the GPUs it injects.",
            "start the container with the GPUs it needs (--gpus, or "
            "NVIDIA_VISIBLE_DEVICES=all or host indices/UUIDs).",
        )
    return Finding(
        level,
        "no-visible-gpu",
        "the driver reports no GPU.",
        "check that the runner has a GPU attached (nvidia-smi -L).",
    )


def loader_findings(inp: CheckInput) -> list[Finding]:
    """Check that CUDA loads the right driver library.

    NVML answered, but can CUDA load its driver library, and is it the right one?
    """
    env = inp.env
    # NVML's _v2 CUDA version is libcuda's own answer: LIBRARY_NOT_FOUND there means no
    # libcuda.so.1, even where the loader was not asked
    unloadable = inp.snapshot.extra.get("libcuda") == "LIBRARY_NOT_FOUND"
    if env.libcuda_path is None and not unloadable:
        return []
    if not env.libcuda_path:
        caps = env.driver_capabilities
        hint = ""
        if caps is not None and not ({"compute", "all"} & _capabilities(caps)):
            hint = (
                f" NVIDIA_DRIVER_CAPABILITIES={caps!r} lacks 'compute', so the container "
                "runtime mounted NVML but not libcuda."
            )
        level = "error" if inp.require_gpu else "info"
        return [
            Finding(
                level,
                "libcuda-missing",
                "NVML works (driver " + inp.snapshot.driver_version + "), but the CUDA "
                "driver library libcuda.so.1 cannot be loaded"
                + (f" ({env.libcuda_error})" if env.libcuda_error else "")
                + ": CUDA "
                "programs will find no device." + hint,
                "start the container with NVIDIA_DRIVER_CAPABILITIES=compute,utility "
                "(or all), e.g. `options: --gpus all -e NVIDIA_DRIVER_CAPABILITIES="
                "compute,utility`; on a bare runner, install the driver's CUDA library "
                "(libnvidia-compute / nvidia-driver-libs).",
            )
        ]
    return forward_compat_findings(inp)


def _compat_version(path: str) -> str:
    match = re.search(r"libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$", path)
    return match.group(1) if match else ""


def forward_compat_findings(inp: CheckInput) -> list[Finding]:
    env = inp.env
    out: list[Finding] = []
    path = (env.libcuda_path or "").replace("\\", "/")
    if "/compat/" in path and inp.visibility:
        for gpu in inp.visibility.gpus:
            if is_data_center(gpu):
                continue
            level = "warning" if gpu.brand in ("quadro", "quadrortx", "nvidiartx") else "error"
            out.append(
                Finding(
                    level,
                    "forward-compat-unsupported",
                    f"libcuda is loaded from {env.libcuda_path} (forward "
                    f"compatibility) but GPU {gpu.index} ({gpu.name}, brand "
                    f"{gpu.brand}) is not a data-center GPU: CUDA fails with 804 "
                    "'forward compatibility was attempted on non supported HW'.",
                    "remove the compat directory from LD_LIBRARY_PATH (or from "
                    "/etc/ld.so.conf.d, then run ldconfig) and upgrade the driver "
                    "instead.",
                )
            )
        compat = _compat_version(path)
        kernel = inp.snapshot.driver_version
        branch = driver_branch(kernel)
        if compat and kernel and _older(compat, kernel):
            out.append(
                Finding(
                    "error",
                    "forward-compat-mismatch",
                    f"libcuda {compat} from {env.libcuda_path} (forward "
                    f"compatibility) is older than the installed driver {kernel}: "
                    "CUDA fails with 803 'system has unsupported display driver / "
                    "cuda driver combination'.",
                    "drop the compat directory: the installed driver is newer and "
                    "runs this CUDA itself.",
                )
            )
        elif compat and branch is not None and branch not in inp.builds.compat_branches:
            out.append(
                Finding(
                    "error",
                    "forward-compat-mismatch",
                    f"libcuda {compat} from {env.libcuda_path} (forward "
                    f"compatibility) needs the kernel driver on a supported branch "
                    f"({supported_branches(inp.builds)}); "
                    f"driver {kernel} is R{branch}: CUDA fails with 803.",
                    "move the runner to a long-term or production branch driver, or "
                    "drop the compat package and upgrade the driver.",
                )
            )
        elif compat and kernel:
            out += forward_compat_branch_findings(inp.builds, kernel, env.libcuda_path or "")
    if env.nvidia_disable_require:
        out.append(
            Finding(
                "warning",
                "nvidia-disable-require",
                "NVIDIA_DISABLE_REQUIRE=true: the container runtime skipped its "
                "CUDA version check.",
                "unset NVIDIA_DISABLE_REQUIRE unless the driver is known to fit.",
            )
        )
    return out


def _older(a: str, b: str) -> bool:
    def key(v: str) -> tuple[int, ...]:
        return tuple(int(p) for p in v.split(".") if p.isdigit())

    return key(a) < key(b)


def deep_findings(inp: CheckInput) -> list[Finding]:
    out: list[Finding] = []
    gpus = inp.visibility.gpus if inp.visibility else ()
    for result in inp.deep:
        name = result.get("name", "?")
        arch_list = result.get("arch_list")
        no_image = False
        if arch_list:
            targets = parse_targets(arch_list)
            for gpu in gpus:
                got = reach(targets, gpu.compute_capability)
                sm = sm_name(gpu.compute_capability)
                if got == "ptx":
                    out.append(
                        Finding(
                            "warning",
                            "arch-ptx-only",
                            f"{name} has no binary ({sm}) for GPU {gpu.index} "
                            f"({gpu.name}, {gpu.cc}); it will JIT-compile PTX at "
                            "start-up (slow, and fails if the PTX is newer than the "
                            "driver).",
                            f"install a {name} build whose arch list includes {sm}.",
                        )
                    )
                elif got is None:
                    no_image = True
                    out.append(
                        Finding(
                            "error",
                            "no-kernel-image",
                            f"{name} is built for {', '.join(arch_list)}, none of "
                            f"which runs on GPU {gpu.index} ({gpu.name}, compute "
                            f"capability {gpu.cc}): CUDA would fail with 'no kernel "
                            "image is available for execution on the device'.",
                            f"install a {name} build that includes {sm}; the GPU is fine.",
                        )
                    )
        if not result.get("ok", False):
            out.append(
                Finding(
                    "error",
                    "deep-check-failed",
                    f"{name} could not use the GPU: {result.get('error', '')}",
                    "see the message; run with deep: true locally to reproduce.",
                )
            )
        for comp in result.get("computations", []):
            error = str(comp.get("error") or "")
            if comp.get("ok") or (no_image and "no kernel image" in error):
                continue
            if "no kernel image" in error:
                out.append(
                    Finding(
                        "error",
                        "no-kernel-image",
                        f"{name}: GPU {comp.get('gpu')}: {error}",
                        f"install a {name} build that includes this GPU's "
                        "architecture; the GPU is fine.",
                    )
                )
                continue
            out.append(
                Finding(
                    "error",
                    "gpu-computation-failed",
                    f"{name}: a tiny computation on GPU {comp.get('gpu')} failed: "
                    f"{error or 'wrong result'}",
                    "if other jobs on this GPU fail the same way, "
                    f"{OUT_OF_SERVICE} and check the kernel log (dmesg, Xid).",
                )
            )
    return out


def requirement_findings(inp: CheckInput) -> list[Finding]:
    snap = inp.snapshot
    major = inp.job_cuda.split(".")[0]
    facts = require_spec.Facts(
        cuda=snap.cuda_text,
        driver=snap.driver_version,
        gpus=inp.visibility.gpus if inp.visibility else (),
        job_cuda=inp.job_cuda,
        earliest_driver=(inp.table.min_driver(int(major)) or "") if major.isdigit() else "",
    )
    out = []
    reqs = list(inp.requirements)
    if inp.env.nvidia_require_cuda and not inp.env.nvidia_disable_require:
        try:
            reqs.append(
                require_spec.parse_requirement(inp.env.nvidia_require_cuda, "NVIDIA_REQUIRE_CUDA")
            )
        except Exception as exc:  # a broken image variable is a finding, not a crash
            out.append(Finding("warning", "nvidia-require-cuda-unreadable", str(exc)))
    for req in reqs:
        failing_conditions = require_spec.unmet(req, facts)
        if failing_conditions is None:
            continue
        code = "require-unmet"
        source = "require"
        if req.text == inp.env.nvidia_require_cuda.strip():
            code, source = "nvidia-require-cuda-unmet", "NVIDIA_REQUIRE_CUDA"
        out.append(
            Finding(
                "error",
                code,
                f"{source} '{req.text}' does not hold: "
                f"{', '.join(require_spec.explain(c, facts) for c in failing_conditions)} "
                "fails for "
                f"{require_spec.describe(facts)}.",
                "run the job on a runner that satisfies it, or change the requirement.",
            )
        )
    return out


def run_checks(inp: CheckInput) -> list[Finding]:
    findings = nvml_findings(inp.snapshot, inp.require_gpu, inp.env)
    if not inp.snapshot.ok or inp.visibility is None:
        return findings
    findings += visibility_findings(inp.snapshot, inp.visibility, inp.require_gpu)
    findings += loader_findings(inp)
    ctx = Context(inp.snapshot, inp.visibility.gpus, inp.table, inp.builds, inp.installed)
    findings += consumer_findings(ctx, inp.consumers)
    findings += deep_findings(inp)
    if inp.env.libcuda_path is None:
        findings += forward_compat_findings(inp)
    findings += requirement_findings(inp)
    findings += health_findings(inp.visibility, inp.health)
    return findings
