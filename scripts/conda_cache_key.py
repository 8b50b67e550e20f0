"""setup-conda-from-lock's cache step: ``key=`` and ``restore-prefix=`` lines on stdout.

``"$GPU_CI_PYTHON" <checkout>/scripts/conda_cache_key.py <packages|environment> <path>``,
with the action's inputs as ``INPUT_*``: the keys come from the same Python the command's
``cache-key`` output does (gpu_ci.conda.cachekey), loaded from this checkout's ``src/``.
"""

import os
import sys
from pathlib import Path

sys.dont_write_bytecode = True
sys.path[0] = str(Path(__file__).resolve().parent.parent / "src")

from gpu_ci.conda.cachekey import step_outputs  # noqa: E402
from gpu_ci.errors import GpuCiError  # noqa: E402
from gpu_ci.inputs import Inputs  # noqa: E402
from gpu_ci.specs import SETUP_CONDA_FROM_LOCK  # noqa: E402

try:
    inputs = Inputs(SETUP_CONDA_FROM_LOCK, {}, os.environ)
    sys.stdout.write(step_outputs(inputs, os.environ, sys.argv[1], sys.argv[2]))
except GpuCiError as exc:
    message = exc.message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    print(f"::error title=setup-conda-from-lock::{message}")
    raise SystemExit(1) from None
