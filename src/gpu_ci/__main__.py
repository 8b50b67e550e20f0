"""``python -m gpu_ci``: how the composite actions invoke the CLI."""

import gc
import os
import sys

# Start-up creates objects that live as long as the process (modules, classes, functions):
# the cyclic collector traversed them ~20 times while they were imported, and again at exit,
# for nothing (5% of the instructions of a reused setup-conda-from-lock run). Collect nothing
# while importing, then exempt them from later collections; the command runs with the
# collector on, as usual.
gc.disable()
from gpu_ci.cli import main  # noqa: E402

gc.freeze()
gc.enable()

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
