"""A repository's self-hosted runners through the REST API: JIT-register, list, get, delete.

A just-in-time runner (``generate-jitconfig``) takes exactly one job and is removed by GitHub
after it; its labels are the only way a job asks for it, so the caller makes one unguessable.
The default runner group (id 1) is a repository's only group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpu_ci.github.client import ApiError, Rest

DEFAULT_GROUP = 1


@dataclass(frozen=True)
class Runner:
    id: int
    name: str
    status: str
    """``online`` or ``offline``."""
    busy: bool
    labels: tuple[str, ...]

    @classmethod
    def from_json(cls, data: Any) -> Runner:
        return cls(
            int(data["id"]),
            str(data["name"]),
            str(data.get("status", "")),
            bool(data.get("busy")),
            tuple(str(label.get("name", "")) for label in data.get("labels") or ()),
        )


@dataclass(frozen=True)
class Registration:
    runner: Runner
    jit_config: str
    """The base64 configuration the runner starts with (a secret: mask it)."""


def register_jit(
    rest: Rest, repository: str, name: str, labels: Sequence[str], group: int = DEFAULT_GROUP
) -> Registration:
    """A JIT runner ``name`` with ``labels``, for one job (POST generate-jitconfig)."""
    body = {"name": name, "runner_group_id": group, "labels": list(labels), "work_folder": "_work"}
    answer = rest.post(f"/repos/{repository}/actions/runners/generate-jitconfig", body)
    if not isinstance(answer, dict):
        raise ApiError("POST generate-jitconfig", 201, "the answer is not a JSON object")
    return Registration(Runner.from_json(answer["runner"]), str(answer["encoded_jit_config"]))


def list_runners(rest: Rest, repository: str) -> list[Runner]:
    pages = rest.get_pages(f"/repos/{repository}/actions/runners", key="runners")
    return [Runner.from_json(r) for r in pages]


def get_runner(rest: Rest, repository: str, runner_id: int) -> Runner | None:
    """The runner, or None when GitHub no longer has it (404)."""
    try:
        return Runner.from_json(rest.get(f"/repos/{repository}/actions/runners/{runner_id}"))
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def delete_runner(rest: Rest, repository: str, runner_id: int) -> bool:
    """Remove a registration; False when it was already gone (404 is fine)."""
    try:
        rest.delete(f"/repos/{repository}/actions/runners/{runner_id}")
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    return True
