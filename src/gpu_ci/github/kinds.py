"""``gpu-runner-kinds``: named GPU runner kinds, each with its runs-on and price.

A workflow with several GPU jobs (a B200 and an 8-GPU H100 job; a matrix leg per GPU)
indexes the gate's ``runs-on-kinds`` output by kind, and the budget counts each kind's jobs
at that kind's price. gpu-gate, gpu-spend and gpu-watchdog read the input with this one
parser, so one value means the same runners and prices to all three.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from gpu_ci.errors import UsageError
from gpu_ci.values import json_value, required

#: A kind's name is a matrix value and an object key in expressions: keep it plain.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_EXAMPLE = (
    '{"b200": {"group": "gpu-b200", "price": "6.50/h"}, '
    '"h100x8": {"labels": ["linux", "h100x8"], "price": "linux_4_core_gpu"}, '
    '"cloud": {"label-prefix": "gpu-ci-", "price": "1.006/h"}}'
)


def runs_on_json(name: str, value: str) -> str:
    """A runner label or JSON value, as compact JSON.

    A plain label becomes a JSON string; JSON is validated and compacted."""
    text = required(name, value, "give a runner label or a JSON value.")
    if text[0] in '[{"':
        parsed = json_value(name, text, f"{text!r}.")
        if not isinstance(parsed, (str, list, dict)):
            raise UsageError(f"input '{name}' must be a label, a list or an object: {text!r}.")
        return json.dumps(parsed, separators=(",", ":"))
    return json.dumps(text)


@dataclass(frozen=True)
class RunnerKind:
    """One named kind: its compact runs-on JSON and its price as written."""

    name: str
    runs_on: str
    """Compact runs-on JSON; empty for a kind matched by ``label_prefix``."""
    price: str = ""
    """An amount (3.12/h, 0.052) or a GitHub-hosted GPU SKU; empty: gpu-price."""
    label_prefix: str = ""
    """A job asking for a label with this prefix is this kind's (gpu-cloud-runner's VMs)."""


def parse_kinds(text: str) -> tuple[RunnerKind, ...]:
    """The ``gpu-runner-kinds`` input: a JSON object of kind name to runner.

    A runner is a label, a list of labels, or ``{"group": ..., "labels": ...}`` with an
    optional ``"price"``."""
    if not text.strip():
        return ()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _error(f"is not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(value, dict) or not value:
        raise _error("must be a JSON object of kind names")
    return tuple(_kind(str(name), runner) for name, runner in value.items())


def _kind(name: str, runner: Any) -> RunnerKind:
    if not _NAME.fullmatch(name):
        raise _error(f"names a kind {name!r}: use letters, digits, '_', '.' or '-'")
    if isinstance(runner, str) and runner.strip():
        return RunnerKind(name, json.dumps(runner.strip()))
    if isinstance(runner, list) and runner and all(isinstance(x, str) for x in runner):
        return RunnerKind(name, json.dumps(runner, separators=(",", ":")))
    if not isinstance(runner, dict):
        raise _error(f"gives kind {name!r} neither a label, a list of labels nor an object")
    extra = sorted(set(runner) - {"group", "labels", "price", PREFIX_KEY})
    if extra:
        raise _error(f"gives kind {name!r} the key(s) {', '.join(extra)}")
    price = runner.get("price", "")
    if not isinstance(price, (str, int, float)) or isinstance(price, bool):
        raise _error(f"gives kind {name!r} a price that is not a string or a number")
    runs_on = {k: runner[k] for k in ("group", "labels") if k in runner}
    if PREFIX_KEY in runner:
        return _prefix_kind(name, runner[PREFIX_KEY], bool(runs_on), str(price).strip())
    if not runs_on:
        raise _error(f"gives kind {name!r} no 'group', no 'labels' and no '{PREFIX_KEY}'")
    return RunnerKind(name, json.dumps(runs_on, separators=(",", ":")), str(price).strip())


#: The key of a kind matched by a label prefix rather than by a runs-on of its own.
PREFIX_KEY = "label-prefix"


def _prefix_kind(name: str, prefix: Any, with_runs_on: bool, price: str) -> RunnerKind:
    """A kind whose jobs ask for labels made at run time.

    gpu-cloud-runner's one-VM labels all start ``gpu-ci-``."""
    if with_runs_on:
        raise _error(f"gives kind {name!r} both '{PREFIX_KEY}' and a group or labels")
    if not isinstance(prefix, str) or len(prefix.strip()) < 3:
        raise _error(f"gives kind {name!r} a '{PREFIX_KEY}' shorter than 3 characters")
    return RunnerKind(name, "", price, prefix.strip())


def _error(what: str) -> UsageError:
    return UsageError(
        f"input 'gpu-runner-kinds' {what}: write an object of kind names, each a label, a "
        f"list of labels or a runs-on object with an optional price, e.g. {_EXAMPLE}."
    )


def kinds_json(kinds: tuple[RunnerKind, ...], run: bool, cpu_runs_on: str) -> str:
    """The ``runs-on-kinds`` output: each kind's runners, or the CPU runner when not run."""
    values = {k.name: json.loads(k.runs_on if run else cpu_runs_on) for k in kinds if k.runs_on}
    return json.dumps(values, separators=(",", ":"))


def kinds_matrix(kinds: tuple[RunnerKind, ...], selected: tuple[str, ...]) -> str:
    """The ``matrix`` output: a ``strategy.matrix`` of the selected kinds with their runs-on.

    ``{"include": [{"kind": ..., "runs-on": ...}]}``: a job reads ``matrix.runs-on``, no
    computed index into another output."""
    legs = [
        {"kind": k.name, "runs-on": json.loads(k.runs_on)}
        for k in kinds
        if k.name in selected and k.runs_on
    ]
    return json.dumps({"include": legs}, separators=(",", ":"))
