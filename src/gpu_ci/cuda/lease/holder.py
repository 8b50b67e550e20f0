"""gpu-lease's holder: the process that keeps the GPUs' locks.

It runs detached, takes the GPUs' locks and keeps them until the job ends.

Composite actions have no post step, so ``mode: lease`` starts this process (a new session,
as gpu-monitor's sampler) and returns once it answered; it holds the locks (see
:mod:`gpu_ci.cuda.lease.lease`) until one of:

* ``mode: release`` (a step with ``if: always()``) sends it SIGTERM;
* the job's process ends: it watches the process that started the step's shell (on a
  runner, ``Runner.Worker``, which lives exactly as long as the job), by pid *and* start
  time (a recycled pid is not the job), every ``POLL_S``;
* the runner ends the job's processes: its environment keeps ``RUNNER_TRACKING_ID``, which
  the runner's clean-up of orphan processes looks for;
* it dies (crash, ``kill -9``, OOM killer): the kernel releases its locks.

Protocol: the command writes one JSON request to the holder's stdin and reads one JSON line
from its stdout (``{"ok": true, "gpus": [...]}`` or ``{"ok": false, "error": ...}``); the
holder then closes both, so nothing ties it to the step that started it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpu_ci import jobdirs
from gpu_ci.cuda.detached import Detached, Stop, stop
from gpu_ci.cuda.lease import lease

MARKER = "gpu_ci.cuda.lease.holder"
"""In the holder's command line: a release signals a pid only when it finds this there."""
POLL_S = 0.5
"""How often the holder looks for its job, and a waiting lease tries again."""
POLL_VARIABLE = "GPU_CI_LEASE_POLL_S"
"""Tests: poll faster than ``POLL_S`` (between 0.01 and 5 s)."""
STATE_NAME = "holder.json"
HOLDER = Detached(
    module=MARKER, state_name=STATE_NAME, log_name="holder.log", keep_prefixes=("LC_", "FAKE_NVML_")
)
"""The holder as a detached process. Besides the common allow-list it keeps the fake NVML's
files of the tests; never the job's ``env:``."""
JOB_PID_VARIABLE = "GPU_CI_LEASE_JOB_PID"
"""Tests: the pid whose end ends the lease (instead of the step shell's parent)."""


@dataclass(frozen=True)
class Request:
    directory: str
    count: int
    min_free: int
    wait_s: float
    job_pid: int
    job_start: str
    who: dict[str, str]
    poll_s: float = POLL_S


# -- the job's process --------------------------------------------------------------------


def start_time(pid: int) -> str:
    """Field 22 of /proc/<pid>/stat (clock ticks since boot): a pid plus this is one process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return text.rsplit(")", 1)[-1].split()[19] if ")" in text else ""


def parent_of(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
        return int(text.rsplit(")", 1)[-1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def job_process(environ: Mapping[str, str]) -> int:
    """The process whose end ends the lease: ``GPU_CI_LEASE_JOB_PID``, else the parent of the
    step's shell (the command runs in the shell's process tree: run.py runs it in-process).
    0 (no watch) where that is init or unknown: in a container the job's end ends the
    container and the holder with it."""
    given = environ.get(JOB_PID_VARIABLE, "").strip()
    if given:
        return int(given) if given.isdigit() else 0
    job = parent_of(os.getppid())
    return job if job > 1 else 0


def poll_seconds(environ: Mapping[str, str]) -> float:
    try:
        return min(5.0, max(0.01, float(environ[POLL_VARIABLE])))
    except (KeyError, ValueError):
        return POLL_S


def job_alive(pid: int, started: str) -> bool:
    return pid <= 0 or (start_time(pid) == started and started != "")


# -- the holder process ---------------------------------------------------------------------


def read_gpus(pynvml: Any) -> list[tuple[Any, lease.Candidate]]:
    """List every GPU's handle, index and UUID.

    (handle, index and UUID) of every GPU, in NVML's order; memory and processes are read by
    :func:`reading` once a GPU's lock is ours.
    """
    out = []
    for index in range(int(pynvml.nvmlDeviceGetCount())):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        out.append((handle, lease.Candidate(index, uuid, None, None, None)))
    return out


def reading(pynvml: Any, handle: Any, gpu: lease.Candidate) -> lease.Candidate:
    """Read a locked GPU's memory and compute processes.

    The GPU's memory and compute processes, read after its lock is ours (a job that released it a
    moment ago may have left a process behind); None where NVML cannot say.
    """
    from gpu_ci.cuda.nvml import memory_info, nvml_errors, running_processes

    total = free = procs = None
    with contextlib.suppress(*nvml_errors(pynvml)):
        total, used = memory_info(pynvml, handle)
        free = total - used
    with contextlib.suppress(*nvml_errors(pynvml)):
        procs = len(running_processes(pynvml, handle))
    mig = False
    with contextlib.suppress(*nvml_errors(pynvml)):  # NOT_SUPPORTED: a GPU without MIG
        mig = bool(pynvml.nvmlDeviceGetMigMode(handle)[0])
    return lease.Candidate(gpu.index, gpu.uuid, total, free, procs, mig)


def attempt(
    pynvml: Any, gpus: list[tuple[Any, lease.Candidate]], req: Request, skipped: dict[str, str]
) -> dict[str, tuple[int, lease.Candidate]]:
    """One scan: the locks taken (all of ``req.count``, or none: they are given back)."""
    directory = Path(req.directory)
    taken: dict[str, tuple[int, lease.Candidate]] = {}
    for handle, gpu in gpus:
        if len(taken) == req.count:
            break
        try:
            fd = lease.try_lock(directory, gpu.uuid)
        except OSError as exc:  # a planted FIFO or link, a file we may not open
            skipped[gpu.uuid] = f"its lock file cannot be used ({exc.strerror or exc})"
            continue
        if fd is None:
            skipped[gpu.uuid] = "leased by another job (holder not named)"
            continue
        now = reading(pynvml, handle, gpu)
        why = lease.unfit(now, req.min_free)
        if why:
            os.close(fd)
            skipped[gpu.uuid] = why
            continue
        skipped.pop(gpu.uuid, None)
        taken[gpu.uuid] = (fd, now)
    if len(taken) < req.count:
        for fd, _gpu in taken.values():
            os.close(fd)
        return {}
    return taken


def acquire(req: Request) -> tuple[dict[str, tuple[int, lease.Candidate]], str]:
    """Scan until ``req.count`` GPUs are ours or ``req.wait_s`` passed: (locks, error)."""
    import pynvml

    from gpu_ci.cuda.nvml import nvml_errors

    try:
        pynvml.nvmlInit()
    except nvml_errors(pynvml) as exc:
        return {}, f"NVML is not available ({exc}): no GPU to lease"
    try:
        gpus = read_gpus(pynvml)
        if len(gpus) < req.count:
            return {}, f"this host has {len(gpus)} GPU(s); {req.count} were asked for"
        deadline = time.monotonic() + req.wait_s
        skipped: dict[str, str] = {}
        while True:
            taken = attempt(pynvml, gpus, req, skipped)
            if taken or time.monotonic() >= deadline or not job_alive(req.job_pid, req.job_start):
                break
            time.sleep(req.poll_s * (0.5 + time.monotonic_ns() % 1000 / 1000))  # jitter
    finally:
        with contextlib.suppress(*nvml_errors(pynvml)):
            pynvml.nvmlShutdown()
    if taken:
        return taken, ""
    listed = [g for _h, g in gpus]
    held = lease.holders(Path(req.directory), [g.uuid for g in listed])
    return {}, lease.busy_message(req.count, req.wait_s / 60, skipped, held, listed)


def answer(message: dict[str, Any]) -> None:
    """Answer the starting step once, then detach from it.

    Write the one answer line, then detach stdin/stdout from the step that reads them.
    """
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)


class Released(Exception):
    """Raised by the signal handler: a release ends the wait at once (a sleep interrupted
    by a signal whose handler returns would sleep on, PEP 475)."""


def on_signal(signum: int, _frame: object) -> None:
    raise Released(signum)


def hold(req: Request) -> int:
    stop: list[int] = []  # while scanning, a signal is noted: the answer comes first
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: stop.append(signum))
    taken, error = acquire(req)
    if not taken:
        answer({"ok": False, "error": error})
        return 1
    directory, pid = Path(req.directory), os.getpid()
    for uuid, (_fd, _gpu) in taken.items():
        lease.write_info(
            directory, lease.Holder(uuid=uuid, pid=pid, started=time.time(), **req.who)
        )
    answer({"ok": True, "pid": pid, "gpus": [asdict(g) for _fd, g in taken.values()]})
    try:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, on_signal)
        while not stop and job_alive(req.job_pid, req.job_start):
            time.sleep(req.poll_s)
    except Released:
        pass
    finally:
        # the GPUs first: whatever the clean-up meets in the shared directory, the locks
        # are free (a same-user holder's fresh info file may lose its name meanwhile)
        for fd, _gpu in taken.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        lease.remove_info(directory, taken, pid)
    return 0


def main() -> int:
    try:
        req = Request(**json.loads(sys.stdin.readline()))
    except (ValueError, TypeError) as exc:
        answer({"ok": False, "error": f"bad request: {exc}"})
        return 2
    return hold(req)


# -- the command's side ---------------------------------------------------------------------


def state_directory(runner_temp: str, environ: Mapping[str, str]) -> Path:
    """The job's private directory under RUNNER_TEMP (the holder's state and log). The key
    keeps jobs that share a RUNNER_TEMP apart (matrix legs share run id, attempt and job id,
    so the runner's name is part of it), as gpu-monitor's does."""
    return jobdirs.job_directory(runner_temp, environ, "gpu-ci-lease")


def spawn(req: Request, state_dir: Path, environ: Mapping[str, str]) -> dict[str, Any]:
    """Start the detached holder, send ``req`` and return its answer."""
    proc = HOLDER.spawn(state_dir, [], environ, pipes=True)
    assert proc.stdin is not None and proc.stdout is not None
    with proc.stdin:
        proc.stdin.write(json.dumps(asdict(req)).encode() + b"\n")
    with proc.stdout:
        line = proc.stdout.readline()
    try:
        reply = json.loads(line)
    except ValueError:
        from gpu_ci.errors import GpuCiError

        proc.wait(5)
        raise GpuCiError(
            f"gpu-lease: the holder exited without an answer (status "
            f"{proc.returncode}): {HOLDER.log_tail(state_dir)}"
        ) from None
    if not reply.get("ok"):
        proc.wait(5)
    return dict(reply)


def holding(state: Mapping[str, Any]) -> bool:
    """Whether the job's holder still holds its first lock.

    True while the holder named in the job's state still holds its first lock.
    """
    from gpu_ci import locks

    uuids = state.get("uuids") or []
    return bool(uuids) and locks.held(
        Path(state.get("directory", "")) / lease.lock_name(str(uuids[0]))
    )


def current(state_dir: Path) -> dict[str, Any]:
    """The job's lease while its own holder still holds it.

    The job's lease while its own holder still holds it, else ``{}`` (a lock held by another job
    after ours died is not ours).
    """
    state = HOLDER.read_state(state_dir) or {}
    pid = int(state.get("pid") or 0)
    return state if pid > 0 and holding(state) and HOLDER.is_ours(pid, state_dir) else {}


def release(state_dir: Path, wait_s: float = 10.0) -> str:
    """Signal the job's holder and wait until its locks are free: ``released``,
    ``not-held`` (it had ended), or ``killed`` (it ignored SIGTERM for ``wait_s``)."""
    state = current(state_dir)
    if not state:
        return "not-held"
    how = Stop(int(state["pid"]), state_dir, lambda: not holding(state), wait_s, poll_s=0.02)
    outcome = stop(HOLDER, how)
    return {"stopped": "released", "not-ours": "not-held"}.get(outcome, outcome)


if __name__ == "__main__":
    sys.exit(main())
