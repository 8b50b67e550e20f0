"""A pytest plugin that tells GPU failures apart: out-of-memory reruns, memory named.

Load it with ``-p gpu_ci.pytest_plugin`` or ``PYTEST_PLUGINS=gpu_ci.pytest_plugin``. It
runs in the job's own Python (3.9+) with the standard library and pytest alone; NVML is
read through ctypes. A test that fails with a GPU out-of-memory error is rerun (after the
frameworks' caches are released); memory other processes hold before the tests, each
test's leftover and known peak are reported: terminal, job summary, annotations, JSON.
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator
from typing import Any

import pytest

from gpu_ci.pytest_plugin import gpus, options, peaks, report, reruns
from gpu_ci.pytest_plugin.gpus import MIB
from gpu_ci.pytest_plugin.nvml import Nvml, NvmlError

NAME = "gpu_ci_pytest_plugin"
RERUNS = "gpu_ci_pytest_plugin_reruns"


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # gpu-lease's map, as its README's conftest applies it: this worker's GPU, before any
    # test imports a framework (CUDA reads CUDA_VISIBLE_DEVICES once).
    device = gpus.worker_device(os.environ)
    if device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = device
    settings = options.read(config, os.environ)
    memory = GpuMemory(config, settings)
    config.pluginmanager.register(memory, NAME)
    config.pluginmanager.register(reruns.OomReruns(settings.reruns, memory.who_holds), RERUNS)


class GpuMemory:
    """The plugin's state for one pytest process.

    One per process: the controller, or one xdist worker."""

    def __init__(self, config: pytest.Config, settings: options.Settings) -> None:
        self.config = config
        self.settings = settings
        workerinput = getattr(config, "workerinput", None)
        self.worker = str(workerinput["workerid"]) if workerinput else "main"
        self.is_worker = workerinput is not None
        self.record = report.new_record()
        self.record["settings"] = {
            "oom_reruns": settings.reruns,
            "leak_threshold_mib": settings.leak_mib,
        }
        self.parts: dict[str, report.Record] = {}
        self.written = False
        self.mine = gpus.own_pids()
        self.unmatched = False
        self.nvml: Nvml | None = None
        self.devices: list[gpus.Device] = []
        opened = Nvml.open()
        if isinstance(opened, str):
            self._note(f"GPU memory not read: {opened}")
            return
        self.nvml = opened
        try:
            self.devices, notes = gpus.job_devices(opened, os.environ)
        except NvmlError as exc:
            self._note(f"GPU memory not read: {exc}")
            return
        for note in notes:
            self._note(note)
        self.record["workers"][self.worker] = {
            "devices": [{"index": d.index, "uuid": d.uuid} for d in self.devices],
            "pid": os.getpid(),
        }

    def _note(self, text: str) -> None:
        if text not in self.record["notes"]:
            self.record["notes"].append(text)

    # -- before the tests -------------------------------------------------------------

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.record["started"] = time.time()
        if self.is_worker or self.nvml is None:
            return
        for dev in self.devices:
            try:
                mem = self.nvml.memory(dev.handle)
            except NvmlError as exc:
                self._note(f"GPU {dev.index}: memory not read ({exc})")
                continue
            self.record["gpus"].append(
                {
                    "index": dev.index,
                    "uuid": dev.uuid,
                    "total_mib": round(mem.total / MIB, 1),
                    "free_mib": round(mem.free / MIB, 1),
                }
            )
        held = [
            h for h in gpus.holders(self.nvml, self.devices, self.mine) if h.whose != "this process"
        ]
        self.record["held_before"] = [h.as_json() for h in held]
        self._require_free()

    def _require_free(self) -> None:
        need = self.settings.require_free
        if need is None:
            return
        kind, amount = need
        short = []
        for g in self.record["gpus"]:
            wanted = amount * g["total_mib"] if kind == "share" else amount
            if g["free_mib"] < wanted:
                short.append(
                    f"GPU {g['index']} has {g['free_mib']:,.0f} MiB free of "
                    f"{g['total_mib']:,.0f} (wanted {wanted:,.0f})"
                )
        if short:
            who = "; ".join(
                f"pid {h['pid']} ({h['name']}, {h['whose']}) holds {h['mib']} MiB on GPU {h['gpu']}"
                for h in self.record["held_before"]
            )
            pytest.exit(
                "gpu-ci: --gpu-require-free not met before the first test: "
                + "; ".join(short)
                + (f". Held by: {who}" if who else ""),
                returncode=1,
            )

    # -- each test ----------------------------------------------------------------------

    def _own_bytes(self) -> int | None:
        if self.nvml is None or not self.devices:
            return None
        total = 0
        for dev in self.devices:
            try:
                procs = self.nvml.processes(dev.handle)
            except NvmlError:
                return None
            mine = gpus.own_bytes(procs, self.mine)
            if mine is None:
                self.unmatched = True
                return None
            total += mine
        return total

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, Any, None]:
        """This process's memory before setup and after teardown, and the known peak."""
        start = time.time()
        peaks.reset()
        before, cached_before = self._own_bytes(), peaks.cached()
        yield
        after, cached_after = self._own_bytes(), peaks.cached()
        peak, source = peaks.read()
        # ours, else pytest-rerunfailures' (its execution_count) where it reran an OOM: it
        # reruns any failure, and an assertion it reran is no out-of-memory rerun
        reruns = getattr(item, "_gpu_ci_oom_reruns", None)
        if reruns is None:
            ran = int(getattr(item, "execution_count", 1) or 1)
            reruns = max(0, ran - 1) if getattr(item, "_gpu_ci_oom", None) else 0
        path, line = _location(item)
        self.record["tests"].append(
            {
                "nodeid": item.nodeid,
                "path": path,
                "line": line,
                "worker": self.worker,
                "gpus": [d.index for d in self.devices],
                "start": round(start, 3),
                "end": round(time.time(), 3),
                "outcome": getattr(item, "_gpu_ci_outcome", "passed"),
                "oom": getattr(item, "_gpu_ci_oom", None),
                "oom_reruns": reruns,
                "leftover_mib": _leftover(before, after, cached_before, cached_after),
                "context_created": before == 0 and bool(after),
                "peak_mib": peak,
                "peak_source": source,
            }
        )

    def who_holds(self) -> str:
        """Who holds memory on the job's GPUs now: the out-of-memory failure's section."""
        if self.nvml is None:
            return "not known: NVML is not readable here"
        held = gpus.holders(self.nvml, self.devices, self.mine)
        if not held:
            return "no process is listed on the job's GPUs" + (
                " (NVML lists PIDs of another namespace)" if self.unmatched else ""
            )
        return "\n".join(
            f"GPU {h.gpu}: pid {h.pid} ({h.name}) {h.mib} MiB, {h.whose}" for h in held
        )

    # -- after the tests ------------------------------------------------------------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """xdist: a worker's record, sent back as its ``workeroutput``."""
        part = getattr(node, "workeroutput", {}).get(NAME)
        if part is not None:
            name = str(getattr(node, "workerinput", {}).get("workerid", len(self.parts)))
            self.parts[name] = part

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.record["finished"] = time.time()
        if self.unmatched:
            self._note(
                "NVML lists the processes by PIDs of another namespace (a container) and "
                "none is this process's: per-test leftovers are unknown (run the container "
                "with --pid=host to match them)"
            )
        if self.nvml is not None:
            self.nvml.close()
            self.nvml = None
        if self.is_worker:
            self.config.workeroutput[NAME] = self.record  # type: ignore[attr-defined]
            return
        self.record = report.merge(self.record, self.parts)
        if self.settings.report:
            failed = report.write(self.record, self.settings.report)
            if failed:
                self._note(f"GPU memory report not written to {self.settings.report}: {failed}")
            self.written = failed is None
        summary = os.environ.get("GITHUB_STEP_SUMMARY", "")
        if summary:
            text = report.markdown(self.record, self.settings.leak_mib, self.settings.top)
            try:
                with open(summary, "a") as f:
                    f.write(text)
            except OSError as exc:
                self._note(f"job summary not written: {exc}")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker:
            return
        tr = terminalreporter
        s = self.settings
        rec = self.record
        lines = [
            f"{row[0]}: {row[1]} (GPU {row[2]}{', ' + row[3] + ' MiB' if row[3] else ''}) {row[4]}"
            for row in report.rows(rec, s.leak_mib, s.top)
        ]
        lines += rec["notes"]
        if lines:
            tr.write_sep("-", "GPU memory (gpu-ci)")
            for line in lines:
                tr.write_line(line)
        for h in report.held_over(rec, s.held_warn_mib):
            tr.write_line(
                f"WARNING: GPU {h['gpu']}: pid {h['pid']} ({h['name']}, {h['whose']}) held "
                f"{h['mib']} MiB before the first test"
            )
        if os.environ.get("GITHUB_ACTIONS") == "true":
            for line in report.workflow_warnings(rec, s.leak_mib, s.held_warn_mib):
                tr.write_line(line)
        if self.written:
            tr.write_line(f"GPU memory report: {s.report}")


def _leftover(before: int | None, after: int | None, cached_0: int, cached_1: int) -> float | None:
    """What the test took from the GPU and still uses, in MiB.

    NVML's growth of this process, but no more than its growth beyond the caching
    allocators' unused blocks: a block freed and kept cached is not a leak."""
    if before is None or after is None:
        return None
    grown = after - before
    in_use = (after - cached_1) - (before - cached_0)
    return round(min(grown, in_use) / MIB, 1)


def _location(item: pytest.Item) -> tuple[str, int | None]:
    path, line, _ = item.location
    return path, None if line is None else line + 1
