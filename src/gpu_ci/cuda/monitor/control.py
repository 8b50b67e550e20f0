"""Start gpu-monitor's sampler and read back what it wrote.

``mode: start`` starts it detached; ``mode: report`` reads its file.

The sampler itself and its file format are :mod:`gpu_ci.cuda.monitor.sampler`; the numbers made from
the file are :mod:`gpu_ci.cuda.monitor.report`. Here is what lies between the command and
those two: the job's private directory, the one-sampler-per-job lock, the sampler's
environment (an allow-list: it outlives the step), waiting for it to be ready, and reading
its file within the size the sampler may write.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpu_ci import jobdirs, locks
from gpu_ci.cuda import detached
from gpu_ci.cuda.facts import Gpu
from gpu_ci.cuda.monitor import recording as mr
from gpu_ci.cuda.monitor import sampler as monitor
from gpu_ci.cuda.nvml_codes import GPU_IS_LOST
from gpu_ci.errors import GpuCiError

NO_GPU_NAME = "no-gpu"
"""Left by a start that found no GPU: the report then says so instead of failing."""


LOST_PREFIX = "lost: "
"""The no-gpu note of a start that NVML answered GPU_IS_LOST: a broken GPU runner, not a
CPU runner (the report warns ``gpu-lost`` and leaves the GPU count unknown)."""


def no_gpu_reason(directory: Path) -> str:
    """Why the start found no GPU, from its note.

    Why the start found no GPU (its ``no-gpu`` file, at most one line of 500 characters: the job's
    steps could have replaced it with anything, a FIFO included).
    """
    try:
        raw = detached.read_small(directory / NO_GPU_NAME, 4096)
    except OSError as exc:
        return f"the start's no-gpu note is unreadable ({exc.strerror})"
    lines = raw.decode("utf-8", "replace").strip().splitlines()
    return mr.printable(lines[0][:500]) if lines else "no GPU was found"


READY_TIMEOUT_S = 30.0
"""How long a start waits for the sampler to hold its lock and write its header."""
READ_SLACK = 2**20
"""Read this much past the sampler's size limit (its stop line and events may pass it)."""
LOW_SPACE = 2**20
"""Below this much free space a start that fails names the full disk."""


@dataclass(frozen=True)
class Start:
    """What a start did: found no GPU (``no_gpu`` says why), found a sampler already running
    for this job (``running``: its pid, or ``?``), or started one (``pid``) for ``gpus``."""

    gpus: tuple[Gpu, ...] = ()
    no_gpu: str = ""
    running: str = ""
    pid: int = 0


def job_directory(runner_temp: str, environ: Mapping[str, str]) -> Path:
    """The job's own directory under RUNNER_TEMP.

    The runner empties RUNNER_TEMP per job, but jobs may share one. The key keeps them
    apart: matrix legs share run id, attempt and job id, so the runner's name is in it.
    """
    return jobdirs.job_directory(runner_temp, environ, "gpu-ci-monitor")


def lock_held(directory: Path) -> bool:
    """Whether a sampler holds ``sampler.lock``; the kernel drops it when it dies.

    A lock that is no regular file (a planted FIFO) is no sampler's.
    """
    try:
        fd = detached.open_regular(directory / monitor.LOCK_NAME)
    except OSError:
        return False
    try:  # the same inode, reopened through /proc: nothing can be swapped in between
        return locks.held(Path(f"/proc/self/fd/{fd}"))
    finally:
        os.close(fd)


def is_our_sampler(pid: int, directory: Path) -> bool:
    """Whether ``pid`` runs our sampler for this directory."""
    return monitor.SAMPLER.is_ours(pid, directory)


def stop_sampler(
    directory: Path, wait_s: float = 15.0, sleep: Callable[[float], None] = time.sleep
) -> str:
    """Stop the job's sampler and wait for its last line.

    Returns ``stopped``, ``not-running`` (it had ended: killed, or finished), or ``killed``
    (it ignored SIGTERM for ``wait_s``).
    """
    if not lock_held(directory):
        return "not-running"
    pid = int((monitor.SAMPLER.read_state(directory) or {}).get("pid") or 0)
    how = detached.Stop(pid, directory, lambda: not lock_held(directory), wait_s, sleep=sleep)
    outcome = detached.stop(monitor.SAMPLER, how)
    return "not-running" if outcome == "not-ours" else outcome


def require_private(directory: Path) -> None:
    why = detached.make_private(directory)
    if why:
        raise GpuCiError(
            f"gpu-monitor will not use {directory}: {why}. Another user may have "
            "made it; set RUNNER_TEMP to a directory of this user (the runner "
            "does) or remove it.",
            title="gpu-monitor: unsafe directory",
        )


def start(directory: Path, interval: float, environ: Mapping[str, str]) -> Start:
    """Start the job's sampler, unless one already runs.

    Start the sampler for the GPUs visible to this job, unless one already runs. An ``OSError``
    after the directory exists (a full or read-only disk) is the caller's to name: it also covers
    what the caller writes next (the runner's files are on the same disk).
    """
    from gpu_ci.cuda.nvml import read_snapshot
    from gpu_ci.cuda.visibility import visible_gpus

    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise GpuCiError(
            f"cannot create {directory} for the samples: {exc.strerror}. "
            "RUNNER_TEMP must be writable."
        ) from None
    require_private(directory)
    snapshot = read_snapshot()
    visible = visible_gpus(snapshot.gpus, environ).gpus if snapshot.ok else ()
    if not visible:
        why = (
            "no GPU is visible to this job"
            if snapshot.ok
            else f"{LOST_PREFIX}NVML answered GPU_IS_LOST ({snapshot.failed_call}): a GPU of "
            "this runner fell off the bus before the job (Xid 79 or another fatal error in "
            "the kernel log), so none was watched; drain this runner and reset the GPU"
            if snapshot.error_code == GPU_IS_LOST
            else f"NVML is not available ({snapshot.error_name})"
        )
        (directory / NO_GPU_NAME).write_text(why + "\n", encoding="utf-8")
        return Start(no_gpu=why)
    with open(directory / "start.lock", "a+") as guard:
        fcntl.flock(guard.fileno(), fcntl.LOCK_EX)  # two starts at once: one sampler
        if lock_held(directory):
            state = monitor.SAMPLER.read_state(directory) or {}
            return Start(visible, running=str(state.get("pid", "?")))
        pid = spawn(directory, interval, [g.index for g in visible], environ)
    return Start(visible, pid=pid)


def spawn(directory: Path, interval: float, indices: list[int], environ: Mapping[str, str]) -> int:
    """Start the detached sampler and wait until it is ready.

    Start the detached sampler and wait until it holds its lock and wrote its header.
    """
    args = [f"{interval:g}", ",".join(str(i) for i in indices)]
    proc = monitor.SAMPLER.spawn(directory, args, environ, pipes=False)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        state = monitor.SAMPLER.read_state(directory) or {}
        if state.get("pid") == proc.pid:
            return proc.pid
        if proc.poll() is not None:
            if (monitor.SAMPLER.read_state(directory) or {}).get("pid") == proc.pid:
                return proc.pid  # it already finished (a test's max-samples)
            raise GpuCiError(
                f"the gpu-monitor sampler exited at once (status "
                f"{proc.returncode}): {log_tail(directory)}{space_note(directory)}"
            )
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, 15)
    raise GpuCiError(
        f"the gpu-monitor sampler did not start within {READY_TIMEOUT_S:.0f} s: "
        f"{log_tail(directory)}"
    )


def space_note(directory: Path) -> str:
    """Why a sampler may die without a word: its log is on the same full disk."""
    from gpu_ci.disk import free_bytes, mb

    try:
        free = free_bytes(directory)
    except OSError:
        return ""
    return (
        f" ({directory} has {mb(free)} free: no space left on RUNNER_TEMP's disk for the samples)"
        if free < LOW_SPACE
        else ""
    )


def log_tail(directory: Path) -> str:
    return monitor.SAMPLER.log_tail(directory)


def read_recording(directory: Path, environ: Mapping[str, str]) -> mr.Recording:
    """Read and parse the sampler's file, within its size bound.

    The sampler's file, parsed; never more than the sampler writes, plus slack (more means something
    else wrote to it: the recording says where it was cut, a finding).
    """
    samples = directory / monitor.SAMPLES_NAME
    limit = monitor.SamplerConfig.from_environ(directory, 1.0, environ).max_bytes
    try:
        data = detached.read_small(samples, limit + READ_SLACK + 1)
        recording = mr.parse_recording(data[: limit + READ_SLACK].decode("utf-8", "replace"))
    except mr.RecordingError as exc:
        raise GpuCiError(f"gpu-monitor: {exc} Sampler log: {log_tail(directory)}") from None
    except detached.NotRegular as exc:
        raise GpuCiError(
            f"gpu-monitor: {samples} is {exc.strerror}: something in the job replaced the "
            "sampler's file; nothing to report."
        ) from None
    except OSError as exc:
        raise GpuCiError(f"gpu-monitor: cannot read {samples}: {exc.strerror}.") from None
    if len(data) > limit + READ_SLACK:
        recording = dataclasses.replace(recording, truncated_at=limit + READ_SLACK)
    return recording


def report_time(recording: mr.Recording, environ: Mapping[str, str], now: float) -> float:
    """The report's "now": ``now``, except under the tests' fake clock
    (``GPU_CI_MONITOR_FAKE_CLOCK``), where it is the sampler's clock at its end."""
    if not environ.get("GPU_CI_MONITOR_FAKE_CLOCK", "").strip():
        return now
    if recording.stop:
        return float(recording.stop["ts"])
    return (
        recording.sample_times[-1] if recording.sample_times else recording.started
    ) + recording.interval
