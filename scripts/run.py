"""Run gpu-ci from this checkout: ``"$GPU_CI_PYTHON" <checkout>/scripts/run.py <action>``.

The bootstrapped venv holds dependencies only; the package is loaded from the ``src/`` next
to this file, so every action runs exactly the code of the checkout it was called from,
whatever else shares the venv. Nothing is written into the venv (no ``.pyc``): it is
verified against its manifest before each job reuses it.
"""

import sys
from pathlib import Path

sys.dont_write_bytecode = True
# sys.path[0] is this script's directory: replace it with the checkout's src/
sys.path[0] = str(Path(__file__).resolve().parent.parent / "src")

# The same entry as ``python -m gpu_ci`` (which leaves without finalizing once py-rattler
# ran: its threads can crash the interpreter at exit after a complete install).
import runpy  # noqa: E402

runpy.run_module("gpu_ci", run_name="__main__", alter_sys=True)
