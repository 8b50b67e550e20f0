"""Crash points: where the tests make this process die by ``kill -9``, phase by phase.

Crash safety is a claim about every phase (download, extract, link, pip, swap); a test can
only check it by killing the process *in* each phase. ``crash_point("link")`` sends SIGKILL to
this process when ``GPU_CI_TEST_KILL_AT`` names that phase *and* pytest is running the test
(``PYTEST_CURRENT_TEST`` is set), so no workflow input or stray variable can trigger it.
"""

from __future__ import annotations

import os
import signal

PHASES = ("download", "extract", "link", "pip", "swap")


def crash_point(phase: str, *, parent: bool = False) -> None:
    """Die here when the test asks for it; ``parent``: a worker takes its job down first."""
    if os.environ.get("GPU_CI_TEST_KILL_AT") != phase or "PYTEST_CURRENT_TEST" not in os.environ:
        return
    if parent:
        os.kill(os.getppid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
