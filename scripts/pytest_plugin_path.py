"""Print a fresh directory holding only the gpu-ci pytest plugin.

It is for the job's PYTHONPATH.

Run by the job's own Python (standard library only), in the step that runs the tests:

    PYTHONPATH="$(python "$GPU_CI_ROOT/scripts/pytest_plugin_path.py")" \\
        python -m pytest -p gpu_ci.pytest_plugin

The plugin's files are copied out of this checkout into a new directory under RUNNER_TEMP
(or the system's temporary directory): the job's Python writes its bytecode there, never
into the checkout our actions run from, and nothing is exported to later steps.
"""

import os
import shutil
import sys
import tempfile
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

#: Every file the plugin imports from this package (a test checks the list is whole).
FILES = (
    "gpu_ci/__init__.py",
    "gpu_ci/cuda/__init__.py",
    "gpu_ci/cuda/nvml_codes.py",
    "gpu_ci/cuda/pytest_link.py",
    "gpu_ci/cuda/sizes.py",
    "gpu_ci/pytest_plugin/__init__.py",
    "gpu_ci/pytest_plugin/gpus.py",
    "gpu_ci/pytest_plugin/nvml.py",
    "gpu_ci/pytest_plugin/oom.py",
    "gpu_ci/pytest_plugin/options.py",
    "gpu_ci/pytest_plugin/peaks.py",
    "gpu_ci/pytest_plugin/report.py",
    "gpu_ci/pytest_plugin/reruns.py",
)


def main() -> int:
    base = os.environ.get("RUNNER_TEMP") or tempfile.gettempdir()
    try:
        target = Path(tempfile.mkdtemp(prefix="gpu-ci-pytest-plugin-", dir=base))
        for rel in FILES:
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(SRC / rel, target / rel)
    except OSError as exc:
        print(f"gpu-ci: the pytest plugin could not be copied to {base}: {exc}", file=sys.stderr)
        return 1
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
