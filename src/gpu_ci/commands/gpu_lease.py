"""``gpu-ci gpu-lease``: take whole GPUs of a shared host.

``mode: lease`` takes them for this job; ``mode: release`` gives them back (the job's
end does too).

Wiring only: the rules (directory, locks, which GPU is fit, the worker map) are
:mod:`gpu_ci.cuda.lease.lease`, the detached holder :mod:`gpu_ci.cuda.lease.holder`.
"""

from __future__ import annotations

import json
import os
import pwd
import sys
import tempfile
from pathlib import Path
from typing import Any

from gpu_ci.cuda.detached import make_private
from gpu_ci.cuda.lease import holder, lease
from gpu_ci.errors import GpuCiError, UsageError
from gpu_ci.inputs import Inputs
from gpu_ci.runtime import Runtime, markdown_table

TITLE = "gpu-lease"


def run(inputs: Inputs, rt: Runtime) -> int:
    mode = inputs.choice("mode", ("lease", "release"))
    if not sys.platform.startswith("linux"):
        raise GpuCiError(f"gpu-lease runs on Linux hosts; this is {sys.platform}.", title=TITLE)
    state_dir = job_state_dir(rt)
    if mode == "release":
        return release(state_dir, rt)
    count = positive_int(inputs["gpus"], "gpus")
    wait_s = minutes(inputs["wait-minutes"], "wait-minutes") * 60
    min_free = size(inputs["min-free-memory"], "min-free-memory") or 0
    per_worker = size(inputs["memory-per-worker"], "memory-per-worker") or None
    directory = checked_directory(inputs, rt)
    state = holder.current(state_dir)
    if state:
        rt.notice(
            f"gpu-lease: this job already holds {', '.join(state['uuids'])} (pid "
            f"{state['pid']}); this lease changes nothing.",
            title=TITLE,
        )
        return publish(rt, state["gpus"], per_worker)
    req = holder.Request(
        str(directory),
        count,
        max(min_free, per_worker or 0),
        wait_s,
        *job_watch(rt),
        who=who(rt),
        poll_s=holder.poll_seconds(rt.environ),
    )
    reply = holder.spawn(req, state_dir, rt.environ)
    if not reply.get("ok"):
        raise GpuCiError(f"gpu-lease: {reply.get('error')}", title=f"{TITLE}: no GPUs")
    return hold(rt, state_dir, directory, reply, per_worker)


def checked_directory(inputs: Inputs, rt: Runtime) -> Path:
    """The lease directory, refused when it is unsafe.

    The lease directory, refused (with how to make a safe one) when it is not safe.
    """
    directory = lease.directory_from(inputs["lease-dir"], rt.environ)
    why = lease.prepare_directory(directory)
    if why:
        raise GpuCiError(
            f"gpu-lease will not use the lease directory {directory}: {why}. Set "
            f"lease-dir (or {lease.DIRECTORY_VARIABLE}) to a directory made with "
            "'install -d -m 1777' by root.",
            title=f"{TITLE}: unsafe directory",
        )
    return directory


def hold(
    rt: Runtime, state_dir: Path, directory: Path, reply: dict[str, Any], per_worker: int | None
) -> int:
    """Record the holder and publish the leased GPUs.

    Record the holder for the release step and publish the GPUs; a lease the job cannot use must not
    outlive the step.
    """
    gpus = reply["gpus"]
    state = {
        "pid": reply["pid"],
        "directory": str(directory),
        "uuids": [g["uuid"] for g in gpus],
        "gpus": gpus,
    }
    try:
        (state_dir / holder.STATE_NAME).write_text(json.dumps(state) + "\n", encoding="utf-8")
        rt.info(
            f"gpu-lease: holding {len(gpus)} GPU(s) for this job (holder pid "
            f"{reply['pid']}, locks in {directory})"
        )
        return publish(rt, gpus, per_worker)
    except BaseException:
        holder.release(state_dir)
        raise


def publish(rt: Runtime, gpus: list[dict[str, Any]], per_worker: int | None) -> int:
    readings = [lease.Candidate(**g) for g in gpus]
    uuids = [g.uuid for g in readings]
    workers = lease.worker_devices(readings, per_worker)
    visible = ",".join(uuids)
    rt.export_variable("CUDA_VISIBLE_DEVICES", visible)
    rt.export_variable("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    rt.export_variable("GPU_CI_WORKER_DEVICES", ",".join(workers))
    rt.set_output("cuda-visible-devices", visible)
    rt.set_output("gpu-uuids", json.dumps(uuids))
    rt.set_output("xdist-workers", str(len(workers)))
    rt.set_output("worker-devices", json.dumps({f"gw{i}": u for i, u in enumerate(workers)}))
    rows = [
        (
            g.index,
            g.uuid,
            lease.gib(g.free_bytes) if g.free_bytes is not None else "?",
            workers.count(g.uuid),
        )
        for g in readings
    ]
    rt.summary(
        "### gpu-lease\n\n"
        + markdown_table(("GPU", "UUID", "free memory", "xdist workers"), rows)
        + f"\nCUDA_VISIBLE_DEVICES={visible}; pytest -n {len(workers)}\n"
    )
    return 0


def release(state_dir: Path, rt: Runtime) -> int:
    outcome = holder.release(state_dir)
    rt.info(
        f"gpu-lease: {outcome}"
        + (
            " (nothing was held: no lease, or its holder had ended)"
            if outcome == "not-held"
            else ""
        )
    )
    if outcome == "killed":
        rt.warning("gpu-lease: the holder ignored SIGTERM and was killed.", title=TITLE)
    return 0


def job_state_dir(rt: Runtime) -> Path:
    base = rt.environ.get("RUNNER_TEMP") or tempfile.gettempdir()
    directory = holder.state_directory(base, rt.environ)
    why = make_private(directory)
    if why:
        raise GpuCiError(
            f"gpu-lease will not use {directory}: {why}. Set RUNNER_TEMP to a "
            "directory of this user (the runner does).",
            title=TITLE,
        )
    return directory


def job_watch(rt: Runtime) -> tuple[int, str]:
    pid = holder.job_process(rt.environ)
    return pid, holder.start_time(pid) if pid else ""


def who(rt: Runtime) -> dict[str, str]:
    env = rt.environ
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        user = str(os.geteuid())
    return {
        "user": user,
        "repository": env.get("GITHUB_REPOSITORY", ""),
        "run_id": env.get("GITHUB_RUN_ID", ""),
        "job": env.get("GITHUB_JOB", ""),
        "runner": env.get("RUNNER_NAME", ""),
    }


def positive_int(text: str, name: str) -> int:
    value = text.strip()
    if not value.isdigit() or not 1 <= int(value) <= 64:
        raise UsageError(
            f"input '{name}' of gpu-lease must be a whole number of GPUs from 1 "
            f"to 64 (e.g. 2); got {text!r}."
        )
    return int(value)


def minutes(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 24 * 60:
        raise UsageError(
            f"input '{name}' of gpu-lease must be minutes from 0 to 1440 (e.g. "
            f"10, or 0.5); got {text!r}."
        )
    return value


def size(text: str, name: str) -> int | None:
    from gpu_ci.cuda.require import parse_bytes

    if not text.strip():
        return None
    try:
        return parse_bytes(text)
    except ValueError:
        raise UsageError(
            f"input '{name}' of gpu-lease must be a size such as 20GiB, 512MiB "
            f"or 80GB; got {text!r}."
        ) from None
