"""setup-conda-from-lock's options, validated once, and the layout rules of root and prefix.

The command turns its inputs into one frozen :class:`SetupOptions` (as gpu-gate's
``GateConfig``); everything after that reads plain values. The layout rules live here:
where Miniforge's root goes by default, which roots are usable, and which prefixes we must
refuse because replacing them would delete what we did not create.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from gpu_ci.errors import GpuCiError, UsageError
from gpu_ci.retry import RetryPolicy

ENGINES = ("rattler", "conda")
MINIFORGE_MODES = ("auto", "true", "false")
"""Values of input ``miniforge``: ``auto`` (the default) installs Miniforge only where the job
needs it, ``true`` always (``conda`` on ``PATH`` for later steps), ``false`` never."""
CACHE_MODES = ("true", "false", "environment")
"""Values of input ``cache``: the package cache, nothing, or the finished environment. The
action's cache steps run before the command and read the same three (specs.py)."""
MARKER = "conda-meta/gpu-ci-lock.json"
"""Written into every environment this action creates (and the lock it holds)."""


class SetupOptions(NamedTuple):
    """The action's inputs, checked and resolved into paths and modes.

    A NamedTuple, not a frozen dataclass: that costs ~1.3 ms to create on Python 3.11, a
    NamedTuple ~0.2 ms."""

    lock_file: str
    platform: str
    categories: tuple[str, ...]
    engine: str
    miniforge: bool
    """Whether this job installs Miniforge: :func:`wants_miniforge` of the inputs."""
    miniforge_version: str
    installer_url: str
    installer_sha256: str
    activate: bool
    dry_run: bool
    root: Path
    pkgs_dir: Path
    prefix: Path
    retry: RetryPolicy
    stream: bool = True
    """Archives without credentials are downloaded and extracted in one stream by rattler."""
    pixi_environment: str = "default"
    """The environment of a pixi.lock to install."""
    cuda_override: str = ""
    """The CUDA version a pixi.lock's ``__cuda`` needs are checked against, not the driver's."""

    def __setattr__(self, name: str, value: object) -> None:
        """Assigning a field raises what a frozen dataclass raised."""
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    @property
    def condarc(self) -> Path:
        return self.root / ".condarc"

    @property
    def envs_dir(self) -> Path:
        return self.root / "envs"


def runner_subdir() -> str:
    """The conda platform of this runner. ``os.uname()`` where there is one (what
    ``platform.system()``/``machine()`` return on POSIX, without importing ``platform``:
    ~2-4 ms of every run), ``platform`` on Windows."""
    if hasattr(os, "uname"):
        system, machine = os.uname().sysname, os.uname().machine.lower()
    else:  # pragma: no cover - Windows
        import platform as _platform

        system, machine = _platform.system(), _platform.machine().lower()
    arch = {
        "x86_64": "64",
        "amd64": "64",
        "aarch64": "aarch64",
        "arm64": "arm64",
        "ppc64le": "ppc64le",
    }.get(machine, machine)
    if system == "Linux":
        return f"linux-{'aarch64' if arch == 'arm64' else arch}"
    if system == "Darwin":
        return f"osx-{'arm64' if arch in ('arm64', 'aarch64') else '64'}"
    if system == "Windows":
        return "win-64"
    raise UsageError(f"cannot tell the conda platform of {system}/{machine}: set 'platform'.")


def wants_miniforge(engine: str, miniforge: str | bool) -> bool:
    """Whether a job installs Miniforge, from ``engine`` and input ``miniforge``.

    The environment never needs it (activation is exported by the action itself): only
    ``engine: conda`` runs its conda, so ``auto`` installs it for that engine alone, and a
    job whose later steps run ``conda`` says so with ``true``. ``false`` with
    ``engine: conda`` is a contradiction and refused. A bool is the same as its word."""
    mode = str(miniforge).strip().lower()
    if mode not in MINIFORGE_MODES:
        raise UsageError(
            f"input 'miniforge' must be one of {', '.join(MINIFORGE_MODES)}; got {miniforge!r}."
        )
    if engine == "conda" and mode == "false":
        raise UsageError(
            "engine: conda needs miniforge: true or auto (it runs the installed Miniforge's "
            "conda); use engine: rattler with miniforge: false."
        )
    return mode == "true" or engine == "conda"


def default_root(environ: Mapping[str, str], version: str) -> Path:
    base = environ.get("RUNNER_TOOL_CACHE") or environ.get("RUNNER_TEMP")
    if not base:
        base = str(Path.home() / ".cache" / "gpu-ci")
    return Path(base) / "miniforge3" / version


def checked_root(value: str) -> Path:
    if " " in value:
        raise UsageError(f"input 'root' must not contain spaces (conda packages break): {value!r}.")
    root = Path(value)
    if not root.is_absolute():
        raise UsageError(f"input 'root' must be an absolute path: {value!r}.")
    probe = root
    while not probe.exists():
        probe = probe.parent
    if not os.access(probe, os.W_OK):
        raise GpuCiError(
            f"root {root} is not writable by this user (nearest existing "
            f"directory {probe}); choose a writable root, e.g. under "
            "$RUNNER_TOOL_CACHE."
        )
    return root


class RawOptions(NamedTuple):
    """The action's inputs as given, before :func:`build` checks them."""

    lock_file: str
    platform: str
    categories: Sequence[str]
    engine: str
    miniforge: str | bool
    miniforge_version: str
    installer_url: str
    installer_sha256: str
    activate: bool
    dry_run: bool
    root: str
    pkgs_dir: str
    prefix: str
    environment_name: str
    stream: bool = True
    pixi_environment: str = "default"
    cuda_override: str = ""


def _checked_name(raw: RawOptions) -> str:
    """The environment's name; a relative prefix or an odd name refused."""
    prefix = raw.prefix
    if prefix and not Path(prefix).is_absolute():
        raise UsageError(f"input 'prefix' must be an absolute path: {prefix!r}.")
    name = raw.environment_name or "ci"
    if not prefix and (os.sep in name or name in (".", "..")):
        raise UsageError(
            f"input 'environment-name' must be a plain name, got {name!r}: use 'prefix' for a path."
        )
    return name


def build(raw: RawOptions, environ: Mapping[str, str]) -> SetupOptions:
    """Validate the inputs together. Each refusal names the input and the fix."""
    if raw.engine not in ENGINES:
        raise UsageError(f"input 'engine' must be one of {', '.join(ENGINES)}; got {raw.engine!r}.")
    install_miniforge = wants_miniforge(raw.engine, raw.miniforge)
    version = raw.miniforge_version.strip()
    root_path = Path(raw.root) if raw.root else default_root(environ, version)
    if not raw.dry_run:
        root_path = checked_root(str(root_path))
    name = _checked_name(raw)
    override = raw.cuda_override.strip()
    if override and not re.fullmatch(r"\d+(\.\d+){0,2}", override):
        raise UsageError(
            f"input 'cuda-override' must be a CUDA version such as 12.4; got {raw.cuda_override!r}."
        )
    if raw.pkgs_dir and not Path(raw.pkgs_dir).is_absolute():
        raise UsageError(f"input 'pkgs-dir' must be an absolute path: {raw.pkgs_dir!r}.")
    return SetupOptions(
        lock_file=raw.lock_file,
        platform=raw.platform.strip() or runner_subdir(),
        categories=tuple(raw.categories),
        engine=raw.engine,
        miniforge=install_miniforge,
        miniforge_version=version,
        installer_url=raw.installer_url,
        installer_sha256=raw.installer_sha256,
        activate=raw.activate,
        dry_run=raw.dry_run,
        root=root_path,
        pkgs_dir=Path(raw.pkgs_dir) if raw.pkgs_dir else root_path / "pkgs",
        prefix=Path(raw.prefix) if raw.prefix else root_path / "envs" / name,
        retry=RetryPolicy.from_environ(environ),
        stream=raw.stream,
        pixi_environment=raw.pixi_environment.strip() or "default",
        cuda_override=override,
    )


def is_environment(path: Path) -> bool:
    """A conda environment: made by this action (its marker), by conda, mamba or micromamba
    (``conda-meta/history``) or by rattler/pixi (package records in ``conda-meta``)."""
    meta = path / "conda-meta"
    if (path / MARKER).is_file() or (meta / "history").is_file():
        return True
    try:
        return any(p.suffix == ".json" for p in meta.iterdir())
    except OSError:
        return False


def refuse_prefix(prefix: Path, root: Path, environ: Mapping[str, str]) -> None:
    """Refuse, never delete: a prefix is replaced only if it is a conda environment.

    Replacing a prefix renames the old one aside and removes it once the new one is in
    place; that is only right for an environment. A directory with anything else in it (a
    checkout, a home directory) is refused, and so are the places whose loss would be a
    disaster even when they happen to hold a ``conda-meta``: ``/``, ``$HOME``, the
    workspace and the Miniforge root itself (or anything above them).
    """
    target = Path(os.path.abspath(prefix))
    guarded = [("the file system root", Path("/")), ("the Miniforge root", root)]
    for label, var in (
        ("$HOME", "HOME"),
        ("the workspace ($GITHUB_WORKSPACE)", "GITHUB_WORKSPACE"),
    ):
        if environ.get(var):
            guarded.append((label, Path(environ[var])))
    for label, place in guarded:
        place = Path(os.path.abspath(place))
        if target == place or target in place.parents:
            raise GpuCiError(
                f"prefix {target} is {label}{'' if target == place else f' or above it ({place})'}"
                f": an environment there would replace it. Pass a dedicated directory, e.g. "
                f"prefix: {root / 'envs' / 'ci'} (or leave prefix empty).",
                title="unsafe prefix",
            )
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise GpuCiError(
            f"prefix {target} exists and is not a directory; pass a path for a new environment.",
            title="unsafe prefix",
        )
    if target.is_dir() and any(target.iterdir()) and not is_environment(target):
        raise GpuCiError(
            f"prefix {target} exists, is not empty and is not a conda environment (no "
            "conda-meta with history or package records); it is left untouched. Pass a new or "
            "empty directory as prefix, or remove that one yourself if it is really "
            "disposable.",
            title="unsafe prefix",
        )
