"""The lock's ``__cuda`` and ``__glibc`` needs, checked against this machine.

A pixi lock records them twice: each platform's system requirements (``__cuda=12`` means
"at least CUDA 12", as pixi's ``[system-requirements]`` does) and the ``depends`` and
``constrains`` of its packages (``__cuda >=12``). A dependency must be met; a constraint
only binds where the machine has the package (a CPU machine has no ``__cuda``). The check
runs before anything is downloaded. The machine's CUDA version comes from the caller (the
command reads the driver); glibc is read here.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from gpu_ci.errors import GpuCiError

CHECKED = ("__cuda", "__glibc")

MACHINE_PROVIDED = frozenset(
    ("__archspec", "__cuda", "__glibc", "__linux", "__osx", "__unix", "__win")
)
"""Virtual packages: the machine provides them; a lock never installs one."""


class Requirement(NamedTuple):
    """One virtual package the environment needs, and who asked for it."""

    name: str
    spec: str
    """A conda version spec, e.g. ``>=12``; empty: any version."""
    source: str
    """Who asked: ``platform linux-64`` or ``package cuda-version``."""
    required: bool = True
    """False for a constraint: it binds only where the machine has the package."""


class Machine(NamedTuple):
    """What this machine offers: versions of ``__cuda`` and ``__glibc`` ('' = none)."""

    cuda: str = ""
    glibc: str = ""
    cuda_from: str = "the driver"
    """Where ``cuda`` came from, for messages: the driver, or the override input."""


def from_platform(entries: Iterable[str], platform: str) -> list[Requirement]:
    """Requirements from a lock platform's ``virtual-packages`` (``__cuda=12``)."""
    found = []
    for entry in entries:
        name, _, version = entry.partition("=")
        if name in CHECKED:
            version = version.split("=")[0]
            spec = _checked(f">={version}", entry, f"platform {platform}") if version else ""
            found.append(Requirement(name, spec, f"platform {platform}"))
    return found


def from_specs(specs: Iterable[str], package: str, required: bool) -> list[Requirement]:
    """Requirements from a package's ``depends`` (required) or ``constrains``.

    Each spec that names a checked package is read as a match spec: ``__cuda>=12``,
    ``__cuda >=12`` and ``__cuda[version='>=12']`` are one requirement. A spec that
    is not one is an error, never skipped (a skipped ``__cuda`` is an unchecked one)."""
    found = []
    for spec in specs:
        text = spec.strip()
        if not text.startswith(_PREFIXES):
            continue
        import rattler

        try:
            match = rattler.MatchSpec(text, strict=True)
        except Exception as exc:  # rattler's InvalidMatchSpecError
            raise GpuCiError(
                f"package {package}: its requirement {text!r} is not a valid match spec "
                f"({exc}). Re-lock it.",
                title="virtual packages",
            ) from None
        name = match.name.normalized if match.name else ""
        if name in CHECKED:
            version = str(match.version) if match.version else ""
            found.append(Requirement(name, version, f"package {package}", required))
    return found


_PREFIXES = tuple(CHECKED)


def _checked(spec: str, entry: str, source: str) -> str:
    """``spec`` when it is a version spec; else an error naming ``entry``."""
    import rattler

    try:
        rattler.VersionSpec(spec)
    except Exception as exc:  # rattler's InvalidVersionSpecError
        raise GpuCiError(
            f"{source}: virtual package {entry!r} does not give a valid version ({exc}). "
            "Re-lock it.",
            title="virtual packages",
        ) from None
    return spec


def refuse_installed(name: str, where: str) -> None:
    """Refuse a conda package that takes a virtual package's name."""
    if name in MACHINE_PROVIDED:
        raise GpuCiError(
            f"{where}: the lock installs a conda package named {name}, the name of a "
            "virtual package the machine provides (its driver or C library): installed, it "
            "would tell conda and pixi in this environment that the machine has what it may "
            "lack. Remove it from the lock; set cuda-override to prepare a CUDA environment "
            "on a machine without one.",
            title="virtual packages",
        )


def glibc_version() -> str:
    """This machine's glibc version, '' where there is none (musl, macOS)."""
    try:
        value = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, ValueError, OSError):
        return ""
    name, _, version = value.partition(" ")
    return version if name == "glibc" else ""


def problems(requirements: Sequence[Requirement], machine: Machine) -> list[str]:
    """Each requirement this machine does not meet, named with the machine's value."""
    import rattler

    found = []
    for req in dict.fromkeys(requirements):
        have = machine.cuda if req.name == "__cuda" else machine.glibc
        where = machine.cuda_from if req.name == "__cuda" else "this machine's C library"
        if not have:
            if req.required:
                found.append(
                    f"{req.name} {req.spec or '(any version)'} ({req.source}): {where} offers none"
                )
            continue
        if req.spec and not rattler.VersionSpec(req.spec).matches(rattler.Version(have)):
            found.append(f"{req.name} {req.spec} ({req.source}): {where} offers {have}")
    return found


def check(requirements: Sequence[Requirement], machine: Machine, path: str) -> None:
    """Refuse, before any download, a machine that lacks what the lock needs."""
    found = problems(requirements, machine)
    if found:
        raise GpuCiError(
            f"{path}: this machine does not meet the environment's virtual packages: "
            f"{'; '.join(found)}. Run the job on a machine that does, or, on a CPU runner "
            "that only prepares the environment, set cuda-override (as CONDA_OVERRIDE_CUDA "
            "does for conda and pixi) to the CUDA version the environment is meant for.",
            title="virtual packages",
        )
