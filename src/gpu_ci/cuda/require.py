"""Constraint lines in the ``NVIDIA_REQUIRE_CUDA`` grammar of libnvidia-container.

Space separates alternatives (OR), comma separates conditions that must all hold (AND):
``cuda>=12.4 brand=tesla,driver>=535`` holds when the driver supports CUDA 12.4, or when
the GPU is a Tesla-brand board with driver 535 or newer. Keys: ``cuda`` (the driver's CUDA
version), ``driver``, ``arch`` (compute capability), ``brand``; and, our extensions,
``gpu-count``, ``memory`` (per GPU, e.g. ``memory>=40GiB``) and ``name`` (substring, e.g.
``name=H100``). GPU conditions must hold for every visible GPU.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from gpu_ci.cuda.facts import Gpu
from gpu_ci.errors import UsageError

KEYS = ("cuda", "driver", "arch", "brand", "gpu-count", "memory", "name")
OPERATORS = ("<=", ">=", "!=", "=", "<", ">")
_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_CONDITION = re.compile(r"^([A-Za-z-]+)(<=|>=|!=|=|<|>)(.+)$")


@dataclass(frozen=True)
class Condition:
    key: str
    op: str
    value: str

    def __str__(self) -> str:
        return f"{self.key}{self.op}{self.value}"


@dataclass(frozen=True)
class Requirement:
    text: str
    alternatives: tuple[tuple[Condition, ...], ...]


def parse_bytes(text: str) -> int:
    match = re.fullmatch(r"\s*([\d.]+)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(text)
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def parse_requirement(line: str, origin: str = "require") -> Requirement:
    alternatives = []
    for group in line.split():
        conditions = []
        for token in group.split(","):
            match = _CONDITION.match(token.strip())
            if not match or match.group(1).lower() not in KEYS:
                raise UsageError(
                    f"{origin}: cannot read {token!r} in {line!r}: write key<op>value with key "
                    f"one of {', '.join(KEYS)} and op one of {' '.join(OPERATORS)} "
                    "(space = OR, comma = AND)."
                )
            key, op, value = match.groups()
            key = key.lower()
            try:
                if key in ("cuda", "driver", "arch"):
                    Version(value)
                elif key == "gpu-count":
                    int(value)
                elif key == "memory":
                    parse_bytes(value)
            except (InvalidVersion, ValueError):
                raise UsageError(
                    f"{origin}: {token!r} in {line!r} has an unreadable value {value!r}."
                ) from None
            if key in ("brand", "name") and op not in ("=", "!="):
                raise UsageError(f"{origin}: {token!r}: {key} takes only = or !=.")
            conditions.append(Condition(key, op, value))
        alternatives.append(tuple(conditions))
    if not alternatives:
        raise UsageError(f"{origin}: empty requirement.")
    return Requirement(line.strip(), tuple(alternatives))


def _compare(left: Any, op: str, right: Any) -> bool:
    # versions, numbers or strings: compared as Python compares them (types checked by the caller)
    table: dict[str, bool] = {
        "=": left == right,
        "!=": left != right,
        "<": left < right,
        "<=": left <= right,
        ">": left > right,
        ">=": left >= right,
    }
    return table[op]


@dataclass(frozen=True)
class Facts:
    cuda: str
    driver: str
    gpus: tuple[Gpu, ...]


def _holds(cond: Condition, facts: Facts) -> bool:
    if cond.key == "cuda":
        return bool(facts.cuda) and _compare(Version(facts.cuda), cond.op, Version(cond.value))
    if cond.key == "driver":
        try:
            return _compare(Version(facts.driver), cond.op, Version(cond.value))
        except InvalidVersion:
            return False
    if cond.key == "gpu-count":
        return _compare(len(facts.gpus), cond.op, int(cond.value))
    if not facts.gpus:
        return False
    for gpu in facts.gpus:
        if cond.key == "arch":
            ok = _compare(Version(gpu.cc), cond.op, Version(cond.value))
        elif cond.key == "brand":
            ok = _compare(gpu.brand.lower(), cond.op, cond.value.lower())
        elif cond.key == "memory":
            ok = _compare(gpu.memory_total_bytes, cond.op, parse_bytes(cond.value))
        else:  # name: substring
            contains = cond.value.lower() in gpu.name.lower()
            ok = contains if cond.op == "=" else not contains
        if not ok:
            return False
    return True


def unmet(requirement: Requirement, facts: Facts) -> list[Condition] | None:
    """None when some alternative holds; else the failing conditions of each alternative."""
    failing: list[Condition] = []
    for group in requirement.alternatives:
        bad = [c for c in group if not _holds(c, facts)]
        if not bad:
            return None
        failing.extend(bad)
    return failing


def describe(facts: Facts) -> str:
    gpus = (
        "; ".join(
            f"{g.name} (arch {g.cc}, {g.memory_total_bytes / 2**30:.0f} GiB, brand {g.brand})"
            for g in facts.gpus
        )
        or "no GPU"
    )
    return f"driver {facts.driver or '?'} (CUDA {facts.cuda or '?'}), {len(facts.gpus)} GPU: {gpus}"


def parse_lines(lines: Sequence[str]) -> list[Requirement]:
    return [parse_requirement(line, f"require line {i + 1}") for i, line in enumerate(lines)]
