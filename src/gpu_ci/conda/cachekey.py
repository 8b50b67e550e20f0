"""The action's cache keys, for the cache steps and the output.

The key holds everything that changes what is cached: the runner, the platform input, the
engine, Miniforge's version (and whether its installer is in the package cache: a cache
saved without it must not hide it from a job that installs it), the categories, or a pixi
lock's environment, and the sha256 of the lock file's bytes. The values for conda-lock's
locks are those the action's cache steps have always used, so users' caches keep hitting.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple, Protocol

from gpu_ci.conda.lockfile import sha256_of


class Inputs(Protocol):
    """The action's inputs by name (the command's ``Inputs``)."""

    def __getitem__(self, name: str, /) -> str: ...


class KeyInputs(NamedTuple):
    """The raw inputs a key is made of."""

    runner_os: str
    runner_arch: str
    platform: str
    engine: str
    miniforge: str
    version: str
    categories: str
    lock_sha256: str
    """Of the file's bytes, as read from disk."""
    pixi_environment: str = ""
    """A pixi lock's environment; '' for other locks."""

    @classmethod
    def of(
        cls, inputs: Inputs, environ: Mapping[str, str], lock_sha256: str, pixi: str
    ) -> KeyInputs:
        """The key's inputs from the action's inputs and the runner's ``RUNNER_*``."""
        return cls(
            environ.get("RUNNER_OS", ""),
            environ.get("RUNNER_ARCH", ""),
            inputs["platform"],
            inputs["engine"],
            inputs["miniforge"],
            inputs["miniforge-version"],
            inputs["categories"],
            lock_sha256,
            pixi,
        )


def _runner(k: KeyInputs, installer: bool) -> str:
    runner = f"{k.runner_os}-{k.runner_arch}-{k.platform or 'auto'}-{k.engine}-mf{k.version}"
    return runner + ("+installer-" if installer else "-")


def _selection(k: KeyInputs) -> str:
    """The categories, or ``pixi+<environment>``, as one key-safe word."""
    words = f"pixi+{k.pixi_environment}" if k.pixi_environment else k.categories
    return re.sub(r"[^A-Za-z0-9_.-]", "+", words)


def installs_miniforge(miniforge: str, engine: str) -> bool:
    """Whether the package cache holds Miniforge's installer (as ``options`` decides)."""
    mode, eng = miniforge.lower(), engine.lower()
    return mode == "true" or (mode == "auto" and eng == "conda")


def restore_prefix(k: KeyInputs) -> str:
    """The package cache's restore-keys prefix: any lock of this runner and setup."""
    return f"gpu-ci-conda-v1-{_runner(k, installs_miniforge(k.miniforge, k.engine))}"


def packages_key(k: KeyInputs) -> str:
    """The key of the package cache (``cache: true``)."""
    return f"{restore_prefix(k)}{_selection(k)}-{k.lock_sha256}"


def environment_key(k: KeyInputs, path: str) -> str:
    """The key of a finished environment: valid only at its own path."""
    where = sha256_of(path.encode("utf-8", "surrogateescape"))[:16]
    return f"gpu-ci-conda-env-v1-{_runner(k, False)}{_selection(k)}-{where}-{k.lock_sha256}"


def step_outputs(inputs: Inputs, environ: Mapping[str, str], mode: str, path: str) -> str:
    """The cache step's ``key`` and ``restore-prefix`` lines, for ``$GITHUB_OUTPUT``."""
    from pathlib import Path

    from gpu_ci.conda import pixi
    from gpu_ci.errors import GpuCiError

    lock = inputs["lock-file"]
    try:
        data = Path(lock).read_bytes()
    except OSError as exc:
        raise GpuCiError(f"lock-file {lock} cannot be read ({exc.strerror}).") from None
    text = data.decode("utf-8", "replace")
    name = inputs["pixi-environment"] if pixi.is_pixi(lock, text) else ""
    k = KeyInputs.of(inputs, environ, sha256_of(data), name)
    if mode == "environment":
        return f"key={environment_key(k, path)}\nrestore-prefix=\n"
    return f"key={packages_key(k)}\nrestore-prefix={restore_prefix(k)}\n"
