"""gpu-monitor's sampler: the process that records NVML readings.

It reads NVML every ``interval`` seconds and appends one JSON line per sample to a
file under ``RUNNER_TEMP``.

Composite actions have no post step, so ``mode: start`` launches this process and returns;
``mode: report`` stops it and reads the file (:mod:`gpu_ci.cuda.monitor.report`). The file
is the only channel between the two, so it is plain JSON Lines that a user can upload and
read without us:

* ``{"kind": "start", "version": 1, "ts": <epoch s>, "interval": s, "pid": n, "gpus": [...]}``
* ``{"kind": "sample", "ts": ..., "gpus": [{"index", "util", "mem_util", "mem_used",
  "power_mw", "temp", "sm_mhz", "throttle", "procs": [[pid, bytes, name], ...],
  "util_busy_s", "energy_mj", "mem_reserved", "violation_ns": {"power": ns, ...}}]}``
  (a field the GPU does not support is ``null``; a lost GPU is absent). ``util_busy_s``:
  busy seconds since the previous sample from the driver's utilisation sample buffer
  (``nvmlDeviceGetSamples``), which covers the whole interval where a single reading
  covers one driver sample period; ``energy_mj``: the driver's energy counter;
  ``mem_used`` is allocated memory and ``mem_reserved`` the driver's reservation
  (``nvmlDeviceGetMemoryInfo_v2``; on drivers without it ``mem_used`` is v1's reserved +
  allocated and ``mem_reserved`` is null); ``violation_ns``: the violation counters.
  A MIG slice is an entry with ``"slice": slot`` (its parent's ``index``): its own memory
  and processes (through its MIG device handle), utilisation from GPM
  (``nvmlGpmMigSampleGet``; ``null`` where unsupported), and the board's power as
  ``board_power_mw`` (the whole GPU's, never the slice's), and the board's counters as
  ``board_pcie_bytes``, ``board_nvlink_kib``, ``board_ecc``, ``board_remap`` (read through
  the parent handle: nvml.h has them per device, not per MIG device). The start line's GPU entry of
  a slice has ``slice``, ``gi`` (its GPU instance id) and ``util_source``.
  Each entry may also hold ``gpm`` ({"sm", "occupancy", "tensor",
  "dram"}: GPM percentages since the previous sample, Hopper and newer; null otherwise),
  ``pcie_bytes`` / ``nvlink_kib`` ([tx, rx] driver counters from field values),
  ``ecc`` ([corrected, uncorrected] volatile counts) and ``remap`` ([correctable,
  uncorrectable, pending, failure] rows), each null where unsupported; ``procs`` is null
  where the driver did not list the processes (NO_PERMISSION, ...); a process entry has a
  4th item ``false`` when NVML lists a PID this namespace cannot name (a host PID seen from
  a container).
* ``{"kind": "event", "ts": ..., "gpu": i, "type": "xid" | "ecc-sbe" | "ecc-dbe" | ...,
  "data": n, "gi": n, "ci": n}`` (``EVENT_TYPES`` names them; the GPU and compute instance
  of the event; 0xFFFFFFFF: none); a recovery-action event and an Xid 154 also hold
  ``"recovery_action"``: the driver's NVML_FI_DEV_GET_GPU_RECOVERY_ACTION read when the
  event arrived (nvmlDeviceGpuRecoveryAction_t), null where the field is unsupported
* ``{"kind": "error", "ts": ..., "gpu": i, "call": "...", "code": n, "name": "GPU_IS_LOST",
  "gap": bool}`` (only GPU_IS_LOST ends a GPU's samples; any other error is a gap, written
  once, and the GPU is asked again each sample); ``"call": "nvmlEventSetWait"`` with
  ``"gpu": -1``: the event set failed and no events were watched after it
* ``{"kind": "stop", "ts": ..., "reason": "signal" | "max-samples" | "max-duration" |
  "size-limit" | "all-gpus-lost", "samples": n}``

Memory is bounded: nothing accumulates in the process but a small cache of process names.
The file is bounded too (``MAX_BYTES``); a sampler killed with ``kill -9`` leaves a file
without a ``stop`` line, which the report says. One sampler per job: it holds an exclusive
``flock`` on ``sampler.lock`` for its whole life, so a second ``start`` sees it and leaves it
alone. Time comes from one clock function, which tests replace through the environment
(``GPU_CI_MONITOR_FAKE_CLOCK=<epoch>``: sample *i* is at ``epoch + i * interval`` and the
sampler does not sleep; ``GPU_CI_MONITOR_FAKE_LAG=<s>`` makes each sample that much late, a
sampler that falls behind), so that the tests are deterministic.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from gpu_ci import locks
from gpu_ci.cuda.detached import BASE_KEEP, Detached
from gpu_ci.cuda.monitor.reader import (
    EVENT_TYPES,
    RECOVERY_EVENT,
    XID_RECOVERY_ACTION_CHANGED,
    Reader,
    address,
    gpu_header,
    mig_devices,
    slice_header,
)
from gpu_ci.cuda.nvml_codes import ERROR_NAMES, GPU_IS_LOST, TIMEOUT

FORMAT_VERSION = 1
LOCK_NAME = "sampler.lock"
STATE_NAME = "sampler.json"
SAMPLES_NAME = "samples.jsonl"
LOG_NAME = "sampler.log"
MAX_BYTES = 64 * 2**20
"""The sample file stops growing here (about 2 days of one GPU at 1 s)."""
MAX_DURATION_S = 5 * 24 * 3600.0
"""GitHub's longest job (self-hosted, 5 days): a sampler nobody stopped ends by itself."""
MARKER = "gpu_ci.cuda.monitor.sampler"
"""In the sampler's command line: the report signals a pid only when it finds this there."""
SAMPLER = Detached(
    module=MARKER,
    state_name=STATE_NAME,
    log_name=LOG_NAME,
    keep=BASE_KEEP | {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "RUNNER_TEMP"},
    keep_prefixes=("LC_", "GPU_CI_MONITOR_", "FAKE_NVML_"),
)
"""The sampler as a detached process. It keeps the test knobs (``GPU_CI_MONITOR_*``,
``FAKE_NVML_*``: the fake libnvidia-ml's files) and which GPUs the job sees."""


@dataclass(frozen=True)
class SamplerConfig:
    directory: Path
    interval: float = 1.0
    fake_epoch: float | None = None
    """Tests: the clock reads ``fake_epoch + i * interval`` and the sampler never sleeps."""
    max_samples: int = 0
    """Tests and benchmarks: stop after this many samples (0: until signalled)."""
    max_bytes: int = MAX_BYTES
    fake_lag: float = 0.0
    """Tests: a sampler that falls behind: each sample takes ``interval + fake_lag`` on the
    fake clock (as slow driver calls make a real one late)."""

    @classmethod
    def from_environ(
        cls, directory: Path, interval: float, environ: Mapping[str, str]
    ) -> SamplerConfig:
        fake = environ.get("GPU_CI_MONITOR_FAKE_CLOCK", "").strip()
        limit = environ.get("GPU_CI_MONITOR_MAX_SAMPLES", "").strip()
        size = environ.get("GPU_CI_MONITOR_MAX_BYTES", "").strip()  # tests: a tiny disk
        lag = environ.get("GPU_CI_MONITOR_FAKE_LAG", "").strip()
        return cls(
            directory,
            interval,
            float(fake) if fake else None,
            int(limit) if limit else 0,
            int(size) if size else MAX_BYTES,
            float(lag) if lag and fake else 0.0,
        )


# -- reading NVML -----------------------------------------------------------------------


class _Writer:
    def __init__(self, handle: TextIO, max_bytes: int) -> None:
        self.handle = handle
        self.max_bytes = max_bytes
        self.written = handle.tell()

    def write(self, record: dict[str, Any]) -> bool:
        """Append one line; False once the file reached its limit."""
        line = json.dumps(record, separators=(",", ":")) + "\n"
        if self.written + len(line) > self.max_bytes and record["kind"] != "stop":
            return False
        self.handle.write(line)
        self.handle.flush()
        self.written += len(line)
        return True


def _event_set(pynvml: Any, handles: Mapping[int, Any]) -> Any:
    """Create an event set for the GPUs' Xid and ECC events.

    An event set for the GPUs' Xid and ECC events; None where no GPU has any.
    """
    events: Any = None
    with contextlib.suppress(pynvml.NVMLError):
        events = pynvml.nvmlEventSetCreate()
        registered = 0
        for handle in handles.values():
            with contextlib.suppress(pynvml.NVMLError):
                wanted = pynvml.nvmlDeviceGetSupportedEventTypes(handle) & sum(EVENT_TYPES)
                if wanted:
                    pynvml.nvmlDeviceRegisterEvents(handle, wanted, events)
                    registered += 1
        if not registered:
            pynvml.nvmlEventSetFree(events)
            events = None
    return events


class _Run:
    """One sampler run: the GPUs it watches, its clock and its file."""

    def __init__(self, config: SamplerConfig, visible: list[int] | None, stop: list[str]) -> None:
        import pynvml

        self.nvml = pynvml
        self.config = config
        self.stop = stop
        self.reader = Reader()
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        indices = [i for i in range(count) if visible is None or i in visible]
        self.handles = {i: pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices}
        self.by_address = {address(h): i for i, h in self.handles.items()}
        self.slices = {i: mig_devices(pynvml, i, h, os.environ) for i, h in self.handles.items()}
        self.events = _event_set(pynvml, self.handles)
        fake = config.fake_epoch
        self.started = fake if fake is not None else time.time()
        self.step = 0
        self.lost: set[int] = set()
        self.failing: set[int] = set()

    def clock(self) -> float:
        """Now; under the tests' fake clock, sample *i*'s time."""
        if self.config.fake_epoch is None:
            return time.time()
        return self.started + self.step * (self.config.interval + self.config.fake_lag)

    def header(self) -> dict[str, Any]:
        """The start line: every GPU, or the job's MIG slices of a MIG board."""
        reader = self.reader
        gpus = [
            entry
            for i, h in self.handles.items()
            for entry in (
                [slice_header(reader, d) for d in self.slices[i]]
                if self.slices[i]
                else [gpu_header(reader, i, h)]
            )
        ]
        return {
            "kind": "start",
            "version": FORMAT_VERSION,
            "ts": self.started,
            "interval": self.config.interval,
            "pid": os.getpid(),
            "gpus": gpus,
        }

    def sample(self, out: _Writer, now: float) -> list[dict[str, Any]]:
        """Each watched GPU's entry; an error line once per gap.

        Only GPU_IS_LOST ends a GPU's samples. Any other failure (a TIMEOUT, an UNKNOWN
        under load) is a gap: the GPU is asked again next sample, and the error is
        written once per gap, not once per sample.
        """
        gpus: list[dict[str, Any]] = []
        for i, h in self.handles.items():
            if i in self.lost:
                continue
            try:
                if self.slices[i]:  # a MIG board: the job's slices, the board read once
                    board = self.reader.board(h)
                    counters = self.reader.board_counters(i, h)
                    gpus.extend(self.reader.read_slice(d, board, counters) for d in self.slices[i])
                else:
                    gpus.append(self.reader.read(i, h))
                self.failing.discard(i)
            except self.nvml.NVMLError as exc:
                code = int(exc.value)
                if code == GPU_IS_LOST:
                    self.lost.add(i)
                elif i in self.failing:
                    continue
                self.failing.add(i)
                out.write(_error(now, i, "sample", code, gap=code != GPU_IS_LOST))
        return gpus

    def wait(self, out: _Writer, began: float) -> None:
        """Wait out the interval, writing events as they arrive.

        Wait out the interval on the event set, writing the events that arrive.
        """
        fake = self.config.fake_epoch is not None
        budget = 0.0 if fake else max(0.0, self.config.interval - (time.monotonic() - began))
        deadline = time.monotonic() + budget
        while not self.stop:
            left = deadline - time.monotonic()
            if self.events is None:
                if left > 0:
                    time.sleep(left)
                return
            try:
                data = self.nvml.nvmlEventSetWait(self.events, max(0, int(left * 1000)))
            except self.nvml.NVMLError as exc:
                code = int(exc.value)
                if code != TIMEOUT:
                    # the event set broke: keep sampling without it, and say from when
                    # events went unwatched (no Xid after this is no evidence of none)
                    self.events = None
                    out.write(_error(self.clock(), -1, "nvmlEventSetWait", code, gap=True))
                return
            out.write(self.event(data))
            if left <= 0:
                return

    def event(self, data: Any) -> dict[str, Any]:
        """An event line, stamped with the current clock."""
        event = {
            "kind": "event",
            "ts": self.clock(),
            "gpu": self.by_address.get(address(data.device), -1),
            "type": EVENT_TYPES.get(int(data.eventType), str(data.eventType)),
            "data": int(data.eventData),
            "gi": int(data.gpuInstanceId),
            "ci": int(data.computeInstanceId),
        }
        if int(data.eventType) == RECOVERY_EVENT or (
            event["type"] == "xid" and event["data"] == XID_RECOVERY_ACTION_CHANGED
        ):
            event["recovery_action"] = self.reader.recovery_action(data.device)
        return event

    def loop(self, out: _Writer) -> str:
        """Sample until stopped; the stop line's reason ('' for a signal)."""
        while not self.stop:
            began = time.monotonic()
            now = self.clock()
            gpus = self.sample(out, now)
            if not gpus and len(self.lost) == len(self.handles):
                return "all-gpus-lost"
            if not out.write({"kind": "sample", "ts": now, "gpus": gpus}):
                return "size-limit"
            self.step += 1
            if self.config.max_samples and self.step >= self.config.max_samples:
                return "max-samples"
            if now - self.started >= MAX_DURATION_S:
                return "max-duration"
            self.wait(out, began)
        return ""

    def close(self) -> None:
        with contextlib.suppress(self.nvml.NVMLError):
            for pair in self.reader.gpm_pairs.values():
                for sample in pair:
                    self.nvml.nvmlGpmSampleFree(sample)
            if self.events is not None:
                self.nvml.nvmlEventSetFree(self.events)
            self.nvml.nvmlShutdown()


def _error(ts: float, gpu: int, call: str, code: int, *, gap: bool) -> dict[str, Any]:
    return {
        "kind": "error",
        "ts": ts,
        "gpu": gpu,
        "call": call,
        "code": code,
        "name": ERROR_NAMES.get(code, "UNKNOWN"),
        "gap": gap,
    }


def run_sampler(config: SamplerConfig, visible: list[int] | None = None) -> int:
    """The sampler's main loop (in the detached process). Returns its exit status."""
    directory = config.directory
    lock_fd = locks.try_exclusive(directory / LOCK_NAME, mode=0o600)
    if lock_fd is None:
        print("gpu-monitor: another sampler already runs for this job", file=sys.stderr)
        return 3
    stop: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        stop.append("signal")

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    run = _Run(config, visible, stop)
    samples_path = directory / SAMPLES_NAME
    with open(samples_path, "a", encoding="utf-8") as handle:
        out = _Writer(handle, config.max_bytes)
        out.write(run.header())
        state = {"pid": os.getpid(), "started": run.started, "samples": str(samples_path)}
        (directory / STATE_NAME).write_text(json.dumps(state) + "\n")
        reason = run.loop(out)
        stop_line = {
            "kind": "stop",
            "ts": run.clock(),
            "reason": reason or (stop[0] if stop else "signal"),
            "samples": run.step,
        }
        out.write(stop_line)
    run.close()
    os.close(lock_fd)
    return 0


def main(argv: list[str]) -> int:
    """``python -m gpu_ci.cuda.monitor.sampler <directory> <interval> [visible indices]``."""
    directory = Path(argv[0])
    visible = [int(x) for x in argv[2].split(",") if x] if len(argv) > 2 else None
    config = SamplerConfig.from_environ(directory, float(argv[1]), os.environ)
    try:
        return run_sampler(config, visible)
    except Exception as exc:  # the log is all a detached process has
        print(f"gpu-monitor sampler failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover - the detached process
    raise SystemExit(main(sys.argv[1:]))
