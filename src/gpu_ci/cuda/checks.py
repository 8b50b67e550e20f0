"""Everything that decides whether CUDA code will run, as findings with fixes.

Pure functions: an NVML snapshot, the CUDA consumers found, optional deep-probe results,
``require`` lines and a few environment facts go in; a list of :class:`Finding` comes out.
Each finding has a stable ``code`` for people who grep logs and for tests.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from gpu_ci.cuda import require as require_spec
from gpu_ci.cuda.facts import Gpu, NvmlSnapshot
from gpu_ci.cuda.frameworks import CudaConsumer
from gpu_ci.cuda.table import DriverTable, driver_at_least
from gpu_ci.cuda.visibility import Visibility

LEVELS = ("info", "warning", "error")

NO_DRIVER = ("no NVIDIA driver visible to this job (CPU runner, or a container started "
             "without the NVIDIA runtime / --gpus)")

#: Messages and fixes for NVML's failure codes (nvmlReturn_t), by name.
NVML_ERRORS: dict[str, tuple[str, str]] = {
    "LIBRARY_NOT_FOUND": (NO_DRIVER, "run the job on a GPU runner; in a container, start it "
                          "with the NVIDIA container runtime (docker --gpus all, or "
                          "`options: --gpus all` for a job container)."),
    "DRIVER_NOT_LOADED": ("the NVIDIA kernel module is not loaded (typical after a kernel "
                          "update without a DKMS rebuild).",
                          "rebuild and load the module (dkms autoinstall; modprobe nvidia) or "
                          "reboot into the kernel the driver was built for; drain this runner "
                          "meanwhile."),
    "LIB_RM_VERSION_MISMATCH": ("the user-space driver library and the loaded kernel module "
                                "are different versions (driver upgraded without a reboot).",
                                "reboot the runner, or unload and reload the nvidia kernel "
                                "modules."),
    "NO_PERMISSION": ("this user may not open the NVIDIA device files (/dev/nvidia*).",
                      "add the runner user to the group owning /dev/nvidia* (often 'video') "
                      "or fix the container's device cgroup rules."),
    "GPU_IS_LOST": ("a GPU fell off the bus or stopped responding.",
                    "drain this runner and reset or replace the GPU."),
    "RESET_REQUIRED": ("a GPU needs a reset before it can be used.",
                       "drain this runner and reset the GPU (nvidia-smi -r) or reboot."),
    "CORRUPTED_INFOROM": ("a GPU's infoROM is corrupted.",
                          "drain this runner; the board needs service."),
    "INSUFFICIENT_POWER": ("a GPU reports insufficient power.",
                           "check the power cables and supply; drain this runner."),
    "IRQ_ISSUE": ("the driver reports an interrupt problem with a GPU.",
                  "drain this runner and check the kernel log (dmesg)."),
    "OPERATING_SYSTEM": ("the operating system blocked the NVML request.",
                         "check container/security policies for device access."),
    "FUNCTION_NOT_FOUND": ("the driver's NVML library is older than nvidia-ml-py expects.",
                           "upgrade the NVIDIA driver."),
    "TIMEOUT": ("the driver did not answer in time.", "retry; if it persists, drain the runner."),
    "MEMORY": ("NVML ran out of memory.", "retry; if it persists, drain the runner."),
    "UNINITIALIZED": ("NVML was not initialised.", "report this as a bug in gpu-ci."),
}


@dataclass(frozen=True)
class Finding:
    level: str
    code: str
    message: str
    fix: str = ""

    def as_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class EnvFacts:
    """What the environment says about how CUDA will be loaded."""

    libcuda_dir: str = ""
    """Directory of the first libcuda.so.1 on LD_LIBRARY_PATH, if any."""
    nvidia_require_cuda: str = ""
    nvidia_disable_require: bool = False


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


DATA_CENTER = re.compile(
    r"\b(A100|A800|A30|A40|A10G?|A16|A2|H100|H800|H200|H20|GH200|B100|B200|B300|GB200|GB300|"
    r"L4|L40S?|L20|T4|V100|P100|P40|P4|K80|M60)\b", re.IGNORECASE)


def is_data_center(gpu: Gpu) -> bool:
    return gpu.brand == "tesla" or bool(DATA_CENTER.search(gpu.name))


def nvml_findings(snapshot: NvmlSnapshot, require_gpu: bool) -> list[Finding]:
    if snapshot.ok:
        return []
    name = snapshot.error_name or "UNKNOWN"
    message, fix = NVML_ERRORS.get(name, (
        f"NVML call {snapshot.failed_call} failed with {name} (code {snapshot.error_code}).",
        "check the driver installation (nvidia-smi) and the kernel log (dmesg)."))
    if name == "LIB_RM_VERSION_MISMATCH" and snapshot.kernel_module_version:
        message += f" The loaded kernel module is {snapshot.kernel_module_version}."
    code = "no-driver" if name == "LIBRARY_NOT_FOUND" else f"nvml-{name.lower().replace('_', '-')}"
    level = "error" if require_gpu else "info"
    return [Finding(level, code, message[0].upper() + message[1:], fix)]


def visibility_findings(snapshot: NvmlSnapshot, vis: Visibility,
                        require_gpu: bool) -> list[Finding]:
    out = []
    if vis.unresolved:
        out.append(Finding("warning", "visible-devices-unresolved",
                           f"{vis.unresolved} matches no GPU; CUDA ignores it and every "
                           "entry after it.",
                           "use indices, GPU-/MIG- UUIDs that nvidia-smi -L lists."))
    if not vis.gpus:
        level = "error" if require_gpu else "info"
        if snapshot.gpus and vis.hidden_by:
            out.append(Finding(level, "no-visible-gpu",
                               f"the driver sees {len(snapshot.gpus)} GPU(s) but {vis.hidden_by} "
                               "hides all of them.",
                               "fix or unset that variable for this job."))
        else:
            out.append(Finding(level, "no-visible-gpu", "the driver reports no GPU.",
                               "check that the runner has a GPU attached (nvidia-smi -L)."))
    return out


def consumer_findings(inp: CheckInput) -> list[Finding]:
    snap = inp.snapshot
    out: list[Finding] = []
    driver_cuda = snap.cuda
    for c in inp.consumers:
        label = f"{c.name} {c.version}"
        if c.cpu_only:
            out.append(Finding("warning", "cpu-only-build",
                               f"{label} is a CPU-only build ({c.source}): it will not use the "
                               "GPU.",
                               f"install the CUDA build of {c.name} for CUDA "
                               f"{snap.cuda_text} or older."))
            continue
        need = c.cuda_tuple
        if need is None:
            continue
        need_text = f"{need[0]}.{need[1]}"
        floor = inp.table.compat_floor.get(need[0])
        minimum = inp.table.min_driver(*need)
        if need[0] > driver_cuda[0] or (
                need[0] == driver_cuda[0] and need[1] > driver_cuda[1]
                and not (floor and driver_at_least(snap.driver_version, floor))):
            why = (f"{label} was built for CUDA {need_text}, but driver {snap.driver_version} "
                   f"supports CUDA {snap.cuda_text} at most")
            if need[0] == driver_cuda[0] and floor:
                why += f" and is below CUDA {need[0]}'s minor-version compatibility floor {floor}"
            fix = (f"upgrade the driver to {minimum} or newer" if minimum else
                   "upgrade the driver")
            fix += (f", or install the {c.name} build for CUDA {snap.cuda_text} or older "
                    f"(learned from {c.source}).")
            out.append(Finding("error", "driver-too-old-for-cuda",
                               why + (f"; CUDA {need_text} needs driver {minimum} or newer."
                                      if minimum else "."), fix))
        elif need[0] == driver_cuda[0] and need[1] > driver_cuda[1]:
            out.append(Finding("warning", "minor-version-compatibility",
                               f"{label} was built for CUDA {need_text}; driver "
                               f"{snap.driver_version} (CUDA {snap.cuda_text}) runs it through "
                               "minor-version compatibility: PTX JIT of newer PTX is "
                               "unavailable and newer APIs may fail "
                               "(cudaErrorCallRequiresNewerDriver).",
                               f"upgrade the driver to {minimum or 'a newer release'}, or use "
                               f"the {c.name} build for CUDA {snap.cuda_text}."))
        if need[0] >= 13:
            for gpu in inp.visibility.gpus if inp.visibility else ():
                if gpu.compute_capability < (7, 5):
                    out.append(Finding("error", "arch-dropped-by-cuda13",
                                       f"{label} is built with CUDA {need_text}, which does not "
                                       f"support GPU {gpu.index} ({gpu.name}, compute "
                                       f"capability {gpu.cc}): CUDA 13 needs 7.5 or newer.",
                                       f"install the {c.name} build for CUDA 12, or run on a "
                                       "newer GPU."))
    return out


def _arch(entry: str) -> tuple[str, tuple[int, int]] | None:
    match = re.fullmatch(r"(sm|compute)_(\d+)(\d)[af]?", entry.strip())
    if not match:
        return None
    return match.group(1), (int(match.group(2)), int(match.group(3)))


def deep_findings(inp: CheckInput) -> list[Finding]:
    out: list[Finding] = []
    gpus = inp.visibility.gpus if inp.visibility else ()
    for result in inp.deep:
        name = result.get("name", "?")
        arch_list = result.get("arch_list")
        if arch_list:
            parsed = [a for a in (_arch(e) for e in arch_list) if a]
            for gpu in gpus:
                cc = gpu.compute_capability
                sass = [v for kind, v in parsed if kind == "sm" and v[0] == cc[0] and v <= cc]
                ptx = [v for kind, v in parsed if kind == "compute" and v <= cc]
                if sass:
                    continue
                if ptx:
                    out.append(Finding("warning", "arch-ptx-only",
                                       f"{name} has no binary (sm_{cc[0]}x) for GPU {gpu.index} "
                                       f"({gpu.name}, {gpu.cc}); it will JIT-compile PTX "
                                       f"{'/'.join(f'compute_{a}{b}' for a, b in ptx)} at "
                                       "start-up (slow, and fails if the PTX is newer than the "
                                       "driver).",
                                       f"install a {name} build whose arch list includes "
                                       f"sm_{cc[0]}{cc[1]}."))
                else:
                    out.append(Finding("error", "no-kernel-image",
                                       f"{name} is built for {', '.join(arch_list)}, none of "
                                       f"which runs on GPU {gpu.index} ({gpu.name}, compute "
                                       f"capability {gpu.cc}): CUDA would fail with 'no kernel "
                                       "image is available for execution on the device'.",
                                       f"install a {name} build that includes "
                                       f"sm_{cc[0]}{cc[1]}."))
        if not result.get("ok", False):
            out.append(Finding("error", "deep-check-failed",
                               f"{name} could not use the GPU: {result.get('error', '')}",
                               "see the message; run with deep: true locally to reproduce."))
        for comp in result.get("computations", []):
            if not comp.get("ok"):
                out.append(Finding("error", "gpu-computation-failed",
                                   f"{name}: a tiny computation on GPU {comp.get('gpu')} failed: "
                                   f"{comp.get('error') or 'wrong result'}",
                                   "drain this runner if other jobs fail the same way."))
    return out


def forward_compat_findings(inp: CheckInput) -> list[Finding]:
    env = inp.env
    out: list[Finding] = []
    compat = bool(env.libcuda_dir) and "/compat" in env.libcuda_dir.replace("\\", "/")
    if compat and inp.visibility:
        for gpu in inp.visibility.gpus:
            if is_data_center(gpu):
                continue
            level = "warning" if gpu.brand in ("quadro", "quadrortx", "nvidiartx") else "error"
            out.append(Finding(level, "forward-compat-unsupported",
                               f"libcuda is loaded from {env.libcuda_dir} (forward "
                               f"compatibility) but GPU {gpu.index} ({gpu.name}, brand "
                               f"{gpu.brand}) is not a data-center GPU: CUDA fails with 804 "
                               "'forward compatibility was attempted on non supported HW'.",
                               "remove the compat directory from LD_LIBRARY_PATH and upgrade "
                               "the driver instead."))
    if env.nvidia_disable_require:
        out.append(Finding("warning", "nvidia-disable-require",
                           "NVIDIA_DISABLE_REQUIRE=true: the container runtime skipped its "
                           "CUDA version check.",
                           "unset NVIDIA_DISABLE_REQUIRE unless the driver is known to fit."))
    return out


def requirement_findings(inp: CheckInput) -> list[Finding]:
    snap = inp.snapshot
    facts = require_spec.Facts(cuda=snap.cuda_text, driver=snap.driver_version,
                               gpus=inp.visibility.gpus if inp.visibility else ())
    out = []
    reqs = list(inp.requirements)
    if inp.env.nvidia_require_cuda and not inp.env.nvidia_disable_require:
        try:
            reqs.append(require_spec.parse_requirement(inp.env.nvidia_require_cuda,
                                                       "NVIDIA_REQUIRE_CUDA"))
        except Exception as exc:  # a broken image variable is a finding, not a crash
            out.append(Finding("warning", "nvidia-require-cuda-unreadable", str(exc)))
    for req in reqs:
        failing = require_spec.unmet(req, facts)
        if failing is None:
            continue
        code = "require-unmet"
        source = "require"
        if req.text == inp.env.nvidia_require_cuda.strip():
            code, source = "nvidia-require-cuda-unmet", "NVIDIA_REQUIRE_CUDA"
        out.append(Finding("error", code,
                           f"{source} '{req.text}' does not hold: "
                           f"{', '.join(str(c) for c in failing)} fails for "
                           f"{require_spec.describe(facts)}.",
                           "run the job on a runner that satisfies it, or change the "
                           "requirement."))
    return out


def health_findings(vis: Visibility) -> list[Finding]:
    out = []
    for g in vis.gpus:
        who = f"GPU {g.index} ({g.name})"
        if g.ecc_uncorrected_volatile:
            out.append(Finding("warning", "ecc-uncorrected-errors",
                               f"{who} has {g.ecc_uncorrected_volatile} volatile uncorrected "
                               "ECC errors since the last driver load.",
                               "drain this runner and reset the GPU."))
        if g.retired_pages_pending:
            out.append(Finding("warning", "retired-pages-pending",
                               f"{who} has retired pages pending a reboot.",
                               "drain this runner and reboot it."))
        if g.remapped_rows_failure:
            out.append(Finding("warning", "remapped-rows-failure",
                               f"{who} reports a row-remapping failure.",
                               "drain this runner: the board needs service."))
        elif g.remapped_rows_pending:
            out.append(Finding("warning", "remapped-rows-pending",
                               f"{who} has remapped rows pending a GPU reset.",
                               "drain this runner and reset the GPU."))
        if g.other_processes:
            out.append(Finding("warning", "gpu-busy",
                               f"{who} is already used by {g.other_processes} other "
                               "process(es); tests may run out of memory or be slow.",
                               "make sure earlier jobs cleaned up, or give this job its own GPU."))
        if g.mig_enabled:
            out.append(Finding("warning", "mig-enabled",
                               f"{who} is in MIG mode with {len(g.mig_uuids)} instance(s) "
                               f"({', '.join(g.mig_uuids) or 'none created'}): CUDA sees "
                               "instances, not the whole GPU.",
                               "select an instance with CUDA_VISIBLE_DEVICES=MIG-..., or "
                               "disable MIG on this runner."))
        if g.persistence_mode is False:
            out.append(Finding("warning", "persistence-mode-off",
                               f"{who} has persistence mode off: each CUDA start re-initialises "
                               "the driver (seconds).",
                               "enable it on the runner (nvidia-smi -pm 1, or "
                               "nvidia-persistenced)."))
        for what in g.unreadable:
            out.append(Finding("info", "health-unreadable", f"{who}: could not read {what}."))
    return out


def run_checks(inp: CheckInput) -> list[Finding]:
    findings = nvml_findings(inp.snapshot, inp.require_gpu)
    if not inp.snapshot.ok or inp.visibility is None:
        return findings
    findings += visibility_findings(inp.snapshot, inp.visibility, inp.require_gpu)
    findings += consumer_findings(inp)
    findings += deep_findings(inp)
    findings += forward_compat_findings(inp)
    findings += requirement_findings(inp)
    findings += health_findings(inp.visibility)
    return findings


def failing(findings: Sequence[Finding], fail_on: str) -> list[Finding]:
    threshold = LEVELS.index(fail_on)
    return [f for f in findings if LEVELS.index(f.level) >= threshold]
