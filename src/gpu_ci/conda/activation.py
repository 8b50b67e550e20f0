"""What ``conda activate`` would do, captured once for later steps.

Runs the environment's ``etc/conda/activate.d/*.sh`` scripts in bash with ``CONDA_PREFIX``
set, and diffs the environment before and after. The result goes to ``$GITHUB_ENV`` and
``$GITHUB_PATH`` so that a plain ``run: python ...`` step uses the environment.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

from gpu_ci.errors import GpuCiError

IGNORED = {"PATH", "SHLVL", "_", "PWD", "OLDPWD"}

SCRIPT = r"""
export CONDA_PREFIX="$1" CONDA_DEFAULT_ENV="$1" CONDA_SHLVL=1
export PATH="$1/bin:$PATH"
for script in "$1"/etc/conda/activate.d/*.sh; do
  [ -f "$script" ] && . "$script"
done
env -0
"""


def capture(prefix: Path, env: Mapping[str, str]) -> dict[str, str]:
    """The variables activation sets or changes (PATH excluded: see ``path_entries``)."""
    proc = subprocess.run(
        ["bash", "-c", SCRIPT, "activate", str(prefix)],
        env=dict(env),
        capture_output=True,
        timeout=60,
    )
    if proc.returncode != 0:
        raise GpuCiError(
            f"an activation script of {prefix} failed (exit {proc.returncode}): "
            f"{proc.stderr.decode('utf-8', 'replace')[-1000:]}"
        )
    after = dict(
        item.split("=", 1)
        for item in proc.stdout.decode("utf-8", "replace").split("\0")
        if "=" in item
    )
    return {
        k: v for k, v in after.items() if k not in IGNORED and env.get(k) != v and "\n" not in v
    }


def path_entries(prefix: Path) -> list[str]:
    return [str(prefix / "bin")]
