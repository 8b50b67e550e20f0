"""The real Prometheus Pushgateway (Debian package ``prometheus-pushgateway``) on loopback.

It binds port 0 and we read the port it chose from its log, so concurrent test runs never
collide; persistence is off, so nothing is written outside the test. ``.ci/run`` installs
the package; tests skip with the reason when the binary is missing.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

BINARIES = ("prometheus-pushgateway", "pushgateway")


def binary() -> str | None:
    return next((found for name in BINARIES if (found := shutil.which(name))), None)


#: Skips a test where the Pushgateway is not installed.
needs_pushgateway = pytest.mark.skipif(
    binary() is None,
    reason="prometheus-pushgateway is not installed (apt-get install "
    "prometheus-pushgateway; .ci/run does)",
)


def job_env(run_id: str, attempt: str, runner: str) -> dict[str, str]:
    """The job's GitHub variables gpu-monitor labels its pushed metrics with."""
    return {
        "GITHUB_REPOSITORY": "octo-org/octo-repo",
        "GITHUB_WORKFLOW": "CUDA CI",
        "GITHUB_JOB": "tests",
        "GITHUB_RUN_ID": run_id,
        "GITHUB_RUN_ATTEMPT": attempt,
        "RUNNER_NAME": runner,
    }


@contextmanager
def pushgateway(timeout: float = 30) -> Iterator[str]:
    """Start a pushgateway; yields its base URL (``http://127.0.0.1:<port>``)."""
    exe = binary()
    if exe is None:
        raise RuntimeError(
            "prometheus-pushgateway is not installed (apt-get install prometheus-pushgateway)"
        )
    proc = subprocess.Popen(
        [exe, "--web.listen-address=127.0.0.1:0", "--persistence.file="],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    found: list[str] = []
    ready = threading.Event()

    def read_log() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            match = re.search(r'msg="Listening on" address=(127\.0\.0\.1:\d+)', line)
            if match and not found:
                found.append(match.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=read_log, daemon=True).start()
    try:
        if not ready.wait(timeout) or not found:
            raise RuntimeError("prometheus-pushgateway did not start listening")
        yield f"http://{found[0]}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def metrics(url: str) -> str:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        return response.read().decode()
