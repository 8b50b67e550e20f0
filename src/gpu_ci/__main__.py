"""``python -m gpu_ci``: how the composite actions invoke the CLI."""

import os
import sys

from gpu_ci.cli import main

code = main()
if "rattler" in sys.modules:
    # py-rattler's runtime threads can crash the interpreter while it finalizes, after a
    # complete install (measured on 2 loaded cores: SIGSEGV at exit in 1 of 30 runs of
    # setup-conda-from-lock, and in rattler.install's own scripts). Outputs, environment
    # files and the summary are written and closed by now: leave without finalizing.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
raise SystemExit(code)
