"""Which GPUs a CUDA program in this job will see.

Which GPUs a CUDA program in this job will see, from the environment.

NVML lists every GPU the driver exposes; CUDA narrows that with ``CUDA_VISIBLE_DEVICES``:
indices, ``GPU-`` UUIDs (a unique prefix is enough) or ``MIG-`` UUIDs; an empty value hides
everything. CUDA stops at the first entry it cannot resolve.

``NVIDIA_VISIBLE_DEVICES`` is no filter here: the container runtime reads it once, on the
host, when it starts the container, and injects those GPUs (by *host* index or UUID);
inside, NVML numbers the injected GPUs from 0 and CUDA never reads the variable. So a
1-GPU container with ``NVIDIA_VISIBLE_DEVICES=3`` has GPU 0. Its value only explains, in
messages, why a container sees fewer GPUs (or none).

CUDA numbers GPUs by ``CUDA_DEVICE_ORDER``: ``FASTEST_FIRST`` (the default) makes the
device it guesses fastest 0 and leaves "the order of the rest unspecified" (CUDA C
Programming Guide, CUDA Environment Variables); only ``PCI_BUS_ID`` is NVML's order. GPUs of
one model tie, so the orders agree; on a host with two models they need not, and an index in
``CUDA_VISIBLE_DEVICES`` may select any of them. The index is then not resolved to NVML's
GPU of that number: every GPU it may select stays in the checks (see ``order_uncertain``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gpu_ci.cuda.facts import Gpu

VARIABLES = ("CUDA_VISIBLE_DEVICES",)
RUNTIME_VARIABLE = "NVIDIA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class Visibility:
    gpus: tuple[Gpu, ...]
    hidden_by: str = ""
    """The variable (and its value) that hid GPUs, for messages."""
    unresolved: str = ""
    """An entry that matched no GPU (CUDA ignores it and everything after it)."""
    runtime_devices: str = ""
    """``NVIDIA_VISIBLE_DEVICES=...`` when set: what the container runtime was asked to
    inject at container start (host indices), for messages only."""
    order_uncertain: str = ""
    """Why CUDA's index N need not be NVML's (CUDA_DEVICE_ORDER and the models), when so."""
    by_index: str = ""
    """``CUDA_VISIBLE_DEVICES=...`` when it selects by index under an uncertain order: its
    GPUs are then every GPU the indices may name."""


def slice_of(gpu: Gpu, uuid: str) -> Gpu:
    """The GPU as CUDA sees it when one MIG device is selected: the slice's name and memory
    (a 1g.10gb slice of an 80 GB A100 has 10 GB), so requirements apply to what runs."""
    inst = next((m for m in gpu.mig_instances if m.uuid == uuid), None)
    if inst is None:
        return replace(gpu, mig_selected=uuid)
    return replace(
        gpu,
        name=inst.name or gpu.name,
        mig_selected=uuid,
        other_processes=inst.other_processes,
        memory_total_bytes=(
            inst.memory_total_bytes
            if inst.memory_total_bytes is not None
            else gpu.memory_total_bytes
        ),
    )


def _resolve(entry: str, gpus: Sequence[Gpu]) -> Gpu | None:
    if entry.isdigit():
        index = int(entry)
        return gpus[index] if index < len(gpus) else None
    lowered = entry.lower()
    if lowered.startswith("mig-"):
        for gpu in gpus:
            for uuid in gpu.mig_uuids:
                if uuid.lower() == lowered:
                    return slice_of(gpu, uuid)
        return None
    if lowered.startswith("gpu-"):
        matches = [g for g in gpus if g.uuid.lower().startswith(lowered)]
        return matches[0] if len(matches) == 1 else None
    return None


def order_uncertainty(gpus: Sequence[Gpu], environ: Mapping[str, str]) -> str:
    """Why CUDA may number these GPUs unlike NVML.

    '' when CUDA numbers these GPUs as NVML does, else why not (for messages).
    """
    order = environ.get("CUDA_DEVICE_ORDER", "").strip()
    models = sorted(
        {f"{g.name} (sm_{g.compute_capability[0]}{g.compute_capability[1]})" for g in gpus}
    )
    if order.upper() == "PCI_BUS_ID" or len(models) < 2:
        return ""
    setting = f"CUDA_DEVICE_ORDER={order!r}" if order else "CUDA_DEVICE_ORDER is unset"
    return f"{setting} (FASTEST_FIRST) and the GPUs are of {len(models)} models: " + ", ".join(
        models
    )


def _apply(
    name: str, value: str, gpus: tuple[Gpu, ...], uncertain: bool = False
) -> tuple[tuple[Gpu, ...], str, bool]:
    """(GPUs selected, first unresolved entry, whether an index named them uncertainly)."""
    text = value.strip()
    if text.lower() in ("", "none", "void", "nodevfiles"):
        return (), "", False
    chosen: list[Gpu] = []
    by_index = False
    bad = ""
    for entry in (e.strip() for e in text.split(",")):
        gpu = _resolve(entry, gpus)
        if gpu is None:
            bad = entry
            break
        by_index = by_index or (uncertain and entry.isdigit())
        if gpu not in chosen:
            chosen.append(gpu)
    if by_index:  # CUDA's index N may be any of them: check every GPU it may select
        chosen += [g for g in gpus if g not in chosen]
    return tuple(chosen), bad, by_index


def visible_gpus(gpus: Sequence[Gpu], environ: Mapping[str, str]) -> Visibility:
    current = tuple(gpus)
    hidden_by = ""
    unresolved = ""
    uncertain = order_uncertainty(current, environ)
    by_index = ""
    for name in VARIABLES:
        if name not in environ:
            continue
        narrowed, bad, indexed = _apply(name, environ[name], current, bool(uncertain))
        if len(narrowed) < len(current):
            hidden_by = f"{name}={environ[name]!r}"
        if bad and not unresolved:
            unresolved = f"{name} entry {bad!r}"
        if indexed:
            by_index = f"{name}={environ[name]!r}"
        current = narrowed
    runtime = (
        f"{RUNTIME_VARIABLE}={environ[RUNTIME_VARIABLE]!r}" if RUNTIME_VARIABLE in environ else ""
    )
    # GPUs selected by UUID are unambiguous; CUDA's numbering of what remains may still differ
    return Visibility(
        current, hidden_by, unresolved, runtime, order_uncertainty(current, environ), by_index
    )
