"""Constraint lines in the ``NVIDIA_REQUIRE_CUDA`` grammar of libnvidia-container.

Space separates alternatives (OR), comma separates conditions that must all hold (AND):
``cuda>=12.4 brand=tesla,driver>=535`` holds when the driver supports CUDA 12.4, or when
the GPU is a Tesla-brand board with driver 535 or newer. Keys: ``cuda`` (the driver's CUDA
version), ``driver``, ``arch`` (compute capability), ``brand``; and, our extensions,
``gpu-count``, ``memory`` (per GPU, e.g. ``memory>=40GiB``) and ``name`` (substring, e.g.
``name=H100``). GPU conditions must hold for every visible GPU.

Also our extensions: a value in double or single quotes may hold spaces and commas
(``name="RTX PRO 6000"``), and ``driver=earliest`` holds when the driver is on the oldest
driver branch that runs the job's CUDA (the caller says which driver that is).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from gpu_ci.cuda.facts import Gpu
from gpu_ci.cuda.sizes import BYTE_UNITS
from gpu_ci.errors import UsageError

KEYS = ("cuda", "driver", "arch", "brand", "gpu-count", "memory", "name")
OPERATORS = ("<=", ">=", "!=", "=", "<", ">")
_UNITS = {"": 1, **BYTE_UNITS}  # a bare number is bytes
_CONDITION = re.compile(r"^([A-Za-z-]+)(<=|>=|!=|=|<|>)(.+)$")


@dataclass(frozen=True)
class Condition:
    key: str
    op: str
    value: str

    def __str__(self) -> str:
        value = self.value
        if re.search(r"[\s,]", value):
            value = f"'{value}'" if '"' in value else f'"{value}"'
        return f"{self.key}{self.op}{value}"


@dataclass(frozen=True)
class Requirement:
    text: str
    alternatives: tuple[tuple[Condition, ...], ...]


def parse_bytes(text: str) -> int:
    match = re.fullmatch(r"\s*([\d.]+)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(text)
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


QUOTES = "\"'"
EARLIEST = "earliest"


def split_outside_quotes(text: str, separators: str, origin: str, line: str) -> list[str]:
    """Split ``text`` at separators outside quotes, keeping the quotes.

    An unclosed quote is a usage error naming its column in ``line``.
    """
    parts: list[str] = []
    current: list[str] = []
    quote = ""
    opened = 0
    for index, char in enumerate(text):
        if quote:
            current.append(char)
            if char == quote:
                quote = ""
        elif char in QUOTES:
            quote, opened = char, index
            current.append(char)
        elif char in separators or (separators == " " and char.isspace()):
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if quote:
        raise UsageError(
            f"{origin}: the quote {quote} at column {line.find(text) + opened + 1} of {line!r} "
            f"is never closed: close it, e.g. name={quote}RTX PRO 6000{quote}."
        )
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def unquote(value: str, token: str, origin: str) -> str:
    """The value without its surrounding quotes.

    A quote anywhere else is an error.
    """
    if len(value) >= 2 and value[0] in QUOTES and value[-1] == value[0]:
        inner = value[1:-1]
        if not inner.strip():
            raise UsageError(f"{origin}: {token!r} has an empty quoted value: write the text.")
        return inner
    if any(q in value for q in QUOTES):
        raise UsageError(
            f'{origin}: {token!r}: quotes must enclose the whole value, e.g. name="RTX PRO 6000".'
        )
    return value


def _condition(token: str, line: str, origin: str) -> Condition:
    match = _CONDITION.match(token.strip())
    if not match or match.group(1).lower() not in KEYS:
        raise UsageError(
            f"{origin}: cannot read {token!r} in {line!r}: write key<op>value with key "
            f"one of {', '.join(KEYS)} and op one of {' '.join(OPERATORS)} "
            '(space = OR, comma = AND; quote a value with spaces: name="RTX PRO 6000").'
        )
    key, op, raw = match.groups()
    key = key.lower()
    value = unquote(raw.strip(), token.strip(), origin)
    if key == "driver" and value.lower() == EARLIEST:
        if op != "=":
            raise UsageError(
                f"{origin}: {token.strip()!r}: earliest takes only = (driver=earliest: the "
                "driver is on the oldest branch that runs the job's CUDA)."
            )
        return Condition(key, op, EARLIEST)
    try:
        if key in ("cuda", "driver", "arch"):
            Version(value)
        elif key == "gpu-count":
            int(value)
        elif key == "memory":
            parse_bytes(value)
    except (InvalidVersion, ValueError):
        hint = " (or earliest)" if key == "driver" else ""
        raise UsageError(
            f"{origin}: {token.strip()!r} in {line!r} has an unreadable value {value!r}{hint}."
        ) from None
    if key in ("brand", "name") and op not in ("=", "!="):
        raise UsageError(f"{origin}: {token.strip()!r}: {key} takes only = or !=.")
    return Condition(key, op, value)


def parse_requirement(line: str, origin: str = "require") -> Requirement:
    alternatives = []
    for group in split_outside_quotes(line, " ", origin, line):
        conditions = [
            _condition(token, line, origin)
            for token in split_outside_quotes(group, ",", origin, line)
        ]
        if not conditions:
            raise UsageError(f"{origin}: {group!r} in {line!r} holds no condition.")
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
    job_cuda: str = ""
    """The CUDA the job's tests load ('12.9'); '' when none was found."""
    earliest_driver: str = ""
    """The oldest driver that runs ``job_cuda`` (from the shipped driver table)."""


def _branch(driver: str) -> str:
    head = driver.split(".")[0]
    return head if head.isdigit() else ""


def explain(cond: Condition, facts: Facts) -> str:
    """The failing condition, with what it was compared with.

    Only ``driver=earliest`` needs saying: the branch expected and the one found.
    """
    if cond.key != "driver" or cond.value != EARLIEST:
        return str(cond)
    if not facts.earliest_driver:
        why = (
            f"no driver for CUDA {facts.job_cuda} is in the driver table"
            if facts.job_cuda
            else "no CUDA was found in the job to take the earliest driver of"
        )
        return f"{cond} ({why})"
    return (
        f"{cond} (CUDA {facts.job_cuda}'s earliest driver branch is "
        f"R{_branch(facts.earliest_driver)}, its minimum driver {facts.earliest_driver}; "
        f"driver {facts.driver or '?'} is on R{_branch(facts.driver) or '?'})"
    )


def _holds(cond: Condition, facts: Facts) -> bool:
    if cond.key == "cuda":
        return bool(facts.cuda) and _compare(Version(facts.cuda), cond.op, Version(cond.value))
    if cond.key == "driver" and cond.value == EARLIEST:
        branch = _branch(facts.driver)
        return bool(branch) and branch == _branch(facts.earliest_driver)
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
