"""The VM's user data: three timers first, then a just-in-time runner for one job.

The hard timer (``max-minutes``) and the idle timer (no job within ``idle-minutes``) power
the VM off, which terminates it (the launch sets shutdown behaviour to terminate); a spot
VM also watches the metadata service for the interruption notice and stops the runner so the
job ends at once. Only then is the runner downloaded, its sha256 checked, and started as an
unprivileged user with the JIT configuration; when it exits, the VM powers off.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

RUNNER_URL = "https://github.com/actions/runner/releases/download"
IMDS = "http://169.254.169.254"


@dataclass(frozen=True)
class Boot:
    max_minutes: int
    idle_minutes: int
    runner_version: str
    runner_sha256: str
    jit_config: str


def check(boot: Boot) -> str:
    """Why ``boot`` cannot go into a shell script, or an empty string."""
    if not re.fullmatch(r"[0-9]+(\.[0-9]+){2}", boot.runner_version):
        return f"runner-version {boot.runner_version!r} is not a version like 2.329.0."
    if not re.fullmatch(r"[0-9a-f]{64}", boot.runner_sha256):
        return f"runner-sha256 {boot.runner_sha256!r} is not a sha256 (64 hex digits)."
    if not re.fullmatch(r"[A-Za-z0-9+/=]+", boot.jit_config):
        return "GitHub's JIT runner configuration is not base64."
    if not 0 < boot.idle_minutes <= boot.max_minutes:
        return "idle-minutes must be above 0 and at most max-minutes."
    return ""


_TIMERS = """\
#!/bin/bash
# gpu-ci cloud runner. Timers first: whatever fails later, this VM ends.
set -u
IMDS="{imds}"
RUNNER_URL="{url}"
RUNNER_HOME=/home/gpuci
# The hard timer: power off (= terminate) after max-minutes, by two means.
shutdown -h +{max_minutes} "gpu-ci: max-minutes ({max_minutes}) reached" || true
(sleep {max_seconds}; poweroff -f) >/dev/null 2>&1 &
# The idle timer: no job started within idle-minutes -> power off.
(
  end=$(( $(date +%s) + {idle_seconds} ))
  while [ "$(date +%s)" -lt "$end" ]; do
    pgrep -f Runner.Worker >/dev/null && exit 0
    sleep 5
  done
  echo "gpu-ci: no job within {idle_minutes} min; powering off" >&2
  shutdown -h now
) &
"""

_SPOT = """\
# The spot watcher (on-demand VMs never get a notice): on it, stop the runner so the job ends now.
(
  while sleep 5; do
    t=$(curl -sf -m 2 -X PUT "$IMDS/latest/api/token" \\
        -H "X-aws-ec2-metadata-token-ttl-seconds: 300") || continue
    if curl -sf -m 2 -H "X-aws-ec2-metadata-token: $t" \\
        "$IMDS/latest/meta-data/spot/instance-action" >/dev/null; then
      echo "gpu-ci: spot interruption notice; stopping the runner" >&2
      pkill -TERM -f Runner.Listener
      exit 0
    fi
  done
) &
"""

_RUNNER = """\
# The runner: one job (JIT), as an unprivileged user; the VM ends when it exits.
id gpuci >/dev/null 2>&1 || useradd -m -d "$RUNNER_HOME" -s /bin/bash gpuci
getent group docker >/dev/null && usermod -aG docker gpuci
cd "$RUNNER_HOME" || {{ shutdown -h now; exit 1; }}
if ! curl -fsSL --retry 5 -o runner.tar.gz \\
    "$RUNNER_URL/v{version}/actions-runner-linux-x64-{version}.tar.gz" \\
  || ! echo "{sha256}  runner.tar.gz" | sha256sum -c -; then
  echo "gpu-ci: the runner download failed or its sha256 differs" >&2
  shutdown -h now
  exit 1
fi
mkdir -p runner && tar xzf runner.tar.gz -C runner && chown -R gpuci: runner
su gpuci -c "cd ~/runner && ./run.sh --jitconfig {jit}"
shutdown -h now
"""


def render(boot: Boot) -> str:
    """The script. :func:`check` must pass: values go into the shell as they are."""
    problem = check(boot)
    if problem:
        raise ValueError(problem)
    text = _TIMERS.format(
        imds=IMDS,
        url=RUNNER_URL,
        max_minutes=boot.max_minutes,
        max_seconds=boot.max_minutes * 60 + 60,
        idle_minutes=boot.idle_minutes,
        idle_seconds=boot.idle_minutes * 60,
    )
    return (
        text
        + _SPOT
        + _RUNNER.format(
            url=RUNNER_URL,
            version=boot.runner_version,
            sha256=boot.runner_sha256,
            jit=boot.jit_config,
        )
    )
