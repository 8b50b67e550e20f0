"""The VM's user data, run for real against a loopback metadata service and release host.

What would change this machine is played by fakes on PATH that only log (``shutdown``,
``poweroff``, ``useradd``, ``usermod``, ``chown``, ``su``); the script's three addresses (the
metadata service, the runner's release URL, the runner's home) point at loopback stand-ins.
Everything else (``curl`` with IMDSv2's token, ``sha256sum``, ``tar``, ``pkill``) is real.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import signal
import subprocess
import tarfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpu_ci.cloud import userdata

VERSION = "2.329.0"
#: The stand-in runner: logs its arguments, then waits as the listener does.
RUN_SH = '#!/bin/bash\necho "run.sh $*" >> "$FAKE_LOG"\nexec -a Runner.Listener sleep 300\n'
FAKES = {
    "shutdown": 'echo "shutdown $*" >> "$FAKE_LOG"',
    "poweroff": 'echo "poweroff $*" >> "$FAKE_LOG"',
    "useradd": 'echo "useradd $*" >> "$FAKE_LOG"',
    "usermod": "true",
    "chown": "true",
    "su": 'cd "$FAKE_HOME" && HOME="$FAKE_HOME" exec bash -c "$3"',
}


def _tarball() -> bytes:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        info = tarfile.TarInfo("run.sh")
        info.size, info.mode = len(RUN_SH), 0o755
        tar.addfile(info, io.BytesIO(RUN_SH.encode()))
    return data.getvalue()


class Stand:
    """The metadata service (IMDSv2) and the release host, on one loopback server."""

    def __init__(self, tarball: bytes) -> None:
        self.tarball = tarball
        self.notice = False
        self.seen: list[str] = []
        stand = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def _answer(self, status: int, body: bytes = b"") -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_PUT(self) -> None:
                stand.seen.append(f"PUT {self.path}")
                ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
                self._answer(200, b"token-1") if ttl else self._answer(400)

            def do_GET(self) -> None:
                stand.seen.append(f"GET {self.path}")
                if self.path.endswith(f"actions-runner-linux-x64-{VERSION}.tar.gz"):
                    return self._answer(200, stand.tarball)
                if self.headers.get("X-aws-ec2-metadata-token") != "token-1":
                    return self._answer(401)  # IMDSv2: no token, no answer
                if self.path == "/latest/meta-data/spot/instance-action" and stand.notice:
                    return self._answer(200, b'{"action": "terminate"}')
                return self._answer(404)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


def _script(tmp: Path, stand: Stand, sha256: str) -> Path:
    text = userdata.render(userdata.Boot(120, 15, VERSION, sha256, "SklUQ09ORklH"))
    text = re.sub(r'^IMDS=".*"$', f'IMDS="{stand.url}"', text, count=1, flags=re.M)
    text = re.sub(r'^RUNNER_URL=".*"$', f'RUNNER_URL="{stand.url}"', text, count=1, flags=re.M)
    text = re.sub(r"^RUNNER_HOME=.*$", f"RUNNER_HOME={tmp / 'home'}", text, count=1, flags=re.M)
    path = tmp / "user-data.sh"
    path.write_text(text)
    return path


def _run(tmp: Path, script: Path) -> tuple[subprocess.Popen[bytes], Path]:
    fakes = tmp / "bin"
    fakes.mkdir()
    for name, body in FAKES.items():
        (fakes / name).write_text(f"#!/bin/bash\n{body}\n")
        (fakes / name).chmod(0o755)
    (tmp / "home").mkdir()
    log = tmp / "log"
    log.touch()
    env = {
        "PATH": f"{fakes}:{os.environ['PATH']}",
        "FAKE_LOG": str(log),
        "FAKE_HOME": str(tmp / "home"),
    }
    proc = subprocess.Popen(["bash", str(script)], env=env, start_new_session=True)
    return proc, log


def _wait_for(log: Path, text: str, seconds: float = 30) -> list[str]:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        lines = log.read_text().splitlines()
        if any(text in line for line in lines):
            return lines
        time.sleep(0.2)
    pytest.fail(f"{text!r} never came; the log: {log.read_text()!r}")


@pytest.mark.slow
def test_timers_first_then_the_jit_runner_and_a_spot_notice_ends_it(tmp_path):
    tarball = _tarball()
    stand = Stand(tarball)
    proc, log = _run(tmp_path, _script(tmp_path, stand, hashlib.sha256(tarball).hexdigest()))
    try:
        lines = _wait_for(log, "run.sh")
        assert lines[0].startswith("shutdown -h +120")  # the hard timer, before the runner
        assert "run.sh --jitconfig SklUQ09ORklH" in lines
        time.sleep(1)
        assert not any(line == "shutdown -h now" for line in log.read_text().splitlines())
        stand.notice = True  # AWS's two-minute warning
        lines = _wait_for(log, "shutdown -h now", 20)
        assert lines.index("shutdown -h now") > lines.index("run.sh --jitconfig SklUQ09ORklH")
        assert proc.wait(timeout=10) == 0  # the runner was stopped, the script ended
        assert "PUT /latest/api/token" in stand.seen  # IMDSv2: a token first
    finally:
        with contextlib.suppress(ProcessLookupError):  # the timers' sleeps
            os.killpg(proc.pid, signal.SIGKILL)
        stand.server.shutdown()


def test_a_runner_whose_sha256_differs_never_runs(tmp_path):
    stand = Stand(_tarball())
    proc, log = _run(tmp_path, _script(tmp_path, stand, "0" * 64))
    try:
        assert proc.wait(timeout=30) == 1
        lines = log.read_text().splitlines()
        assert lines[0].startswith("shutdown -h +120") and "shutdown -h now" in lines
        assert not any(line.startswith("run.sh") for line in lines)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        stand.server.shutdown()
