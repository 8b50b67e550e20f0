"""``gpu-ci gpu-monitor``: ``mode: start`` launches the sampler; ``mode: report`` stops it and
reports what each GPU did, what it cost, and which steps used it.

Wiring only: the sampler and the file format are :mod:`gpu_ci.cuda.monitor`, the numbers and
views :mod:`gpu_ci.cuda.monitor_report`, the jobs API :mod:`gpu_ci.github.steps`, the price
table :mod:`gpu_ci.pricing`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path

import gpu_ci
from gpu_ci.cuda import monitor
from gpu_ci.cuda import monitor_report as mr
from gpu_ci.errors import GpuCiError, UsageError
from gpu_ci.inputs import Inputs
from gpu_ci.runtime import Runtime

NO_GPU_NAME = "no-gpu"
"""Left by a start that found no GPU: the report then says so instead of failing."""
READY_TIMEOUT_S = 30.0
READ_SLACK = 2**20
LOW_SPACE = 2**20
"""Below this much free space a start that fails names the full disk."""
"""Read this much past the sampler's size limit (its stop line and events may pass it)."""


def run(inputs: Inputs, rt: Runtime) -> int:
    mode = inputs.choice("mode", ("start", "report"))
    interval = parse_interval(inputs["interval"])
    if not sys.platform.startswith("linux"):
        rt.notice(f"gpu-monitor runs on Linux runners; this is {sys.platform}: nothing "
                  "watched.", title="gpu-monitor")
        return 0
    directory = monitor.job_directory(
        rt.environ.get("RUNNER_TEMP") or tempfile.gettempdir(), rt.environ)
    if mode == "start":
        return start(directory, interval, rt)
    return report(inputs, directory, rt)


def parse_interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.05 <= value <= 3600:
        raise UsageError(f"input 'interval' of gpu-monitor must be seconds between 0.05 and "
                         f"3600 (e.g. 1 or 0.5); got {text!r}.")
    return value


# -- start ------------------------------------------------------------------------------


def start(directory: Path, interval: float, rt: Runtime) -> int:
    try:
        return _start(directory, interval, rt)
    except OSError as exc:  # a full or read-only RUNNER_TEMP, after the directory exists
        raise GpuCiError(f"gpu-monitor: cannot write {exc.filename or directory}: "
                         f"{exc.strerror or exc}. RUNNER_TEMP must be writable and have "
                         "space; nothing is watched.", title="gpu-monitor: start") from None


def _start(directory: Path, interval: float, rt: Runtime) -> int:
    from gpu_ci.cuda.nvml import read_snapshot
    from gpu_ci.cuda.visibility import visible_gpus

    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise GpuCiError(f"cannot create {directory} for the samples: {exc.strerror}. "
                         "RUNNER_TEMP must be writable.") from None
    require_private(directory)
    snapshot = read_snapshot()
    visible = visible_gpus(snapshot.gpus, rt.environ).gpus if snapshot.ok else ()
    if not visible:
        why = (f"NVML is not available ({snapshot.error_name})" if not snapshot.ok
               else "no GPU is visible to this job")
        (directory / NO_GPU_NAME).write_text(why + "\n", encoding="utf-8")
        rt.notice(f"gpu-monitor: {why}; nothing to watch (a CPU runner?). The report step "
                  "will say so and succeed.", title="gpu-monitor: no GPU")
        rt.set_output("gpu-count", "0")
        return 0
    with open(directory / "start.lock", "a+") as guard:
        fcntl.flock(guard.fileno(), fcntl.LOCK_EX)  # two starts at once: one sampler
        if monitor.lock_held(directory):
            state = monitor.read_state(directory) or {}
            rt.notice(f"gpu-monitor: a sampler already runs for this job (pid "
                      f"{state.get('pid', '?')}); this start changes nothing.",
                      title="gpu-monitor")
            rt.set_output("samples-file", str(directory / monitor.SAMPLES_NAME))
            return 0
        pid = spawn(directory, interval, [g.index for g in visible], rt.environ)
    names = ", ".join(f"{g.index} {mr.printable(g.name)}" for g in visible)
    rt.info(f"gpu-monitor: sampling {len(visible)} GPU(s) ({names}) every {interval:g} s "
            f"(pid {pid}) into {directory / monitor.SAMPLES_NAME}")
    rt.set_output("gpu-count", str(len(visible)))
    rt.set_output("samples-file", str(directory / monitor.SAMPLES_NAME))
    return 0


#: What the sampler needs from the step's environment, and nothing else: the loader's and
#: Python's paths, locale, the runner's tracking id (so the runner's clean-up still ends it),
#: and the test knobs (``GPU_CI_MONITOR_*``, ``FAKE_NVML_*``: the fake libnvidia-ml's files).
SAMPLER_KEEP = frozenset({"PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "HOME", "LANG", "TZ",
                          "TMPDIR", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
                          "RUNNER_TRACKING_ID", "RUNNER_TEMP"})
SAMPLER_KEEP_PREFIXES = ("LC_", "GPU_CI_MONITOR_", "FAKE_NVML_")


def require_private(directory: Path) -> None:
    why = monitor.make_private(directory)
    if why:
        raise GpuCiError(f"gpu-monitor will not use {directory}: {why}. Another user may have "
                         "made it; set RUNNER_TEMP to a directory of this user (the runner "
                         "does) or remove it.", title="gpu-monitor: unsafe directory")


def sampler_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The sampler outlives this step, into steps that run a pull request's code as the same
    user (who can read /proc/<pid>/environ): it gets an allow-list, never the job's ``env:``
    (a secret there may have any name, e.g. ``GH_PAT`` or ``DATABASE_URL``)."""
    env = {k: v for k, v in environ.items()
           if k in SAMPLER_KEEP or k.startswith(SAMPLER_KEEP_PREFIXES)}
    # The bootstrapped venv holds dependencies only (scripts/run.py loads this checkout's
    # src/): the sampler must load the same checkout's code, never another copy.
    src = str(Path(gpu_ci.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def spawn(directory: Path, interval: float, indices: list[int],
          environ: Mapping[str, str]) -> int:
    """Start the detached sampler and wait until it holds its lock and wrote its header."""
    log = open(directory / monitor.LOG_NAME, "ab")  # noqa: SIM115 - handed to the child
    with log:
        proc = subprocess.Popen(
            [sys.executable, "-m", monitor.MARKER, str(directory), f"{interval:g}",
             ",".join(str(i) for i in indices)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=str(directory),
            env=sampler_environment(environ), start_new_session=True, close_fds=True)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        state = monitor.read_state(directory) or {}
        if state.get("pid") == proc.pid:
            return proc.pid
        if proc.poll() is not None:
            if (monitor.read_state(directory) or {}).get("pid") == proc.pid:
                return proc.pid  # it already finished (a test's max-samples)
            raise GpuCiError(f"the gpu-monitor sampler exited at once (status "
                             f"{proc.returncode}): {log_tail(directory)}{space_note(directory)}")
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, 15)
    raise GpuCiError(f"the gpu-monitor sampler did not start within {READY_TIMEOUT_S:.0f} s: "
                     f"{log_tail(directory)}")


def space_note(directory: Path) -> str:
    """Why a sampler may die without a word: its log is on the same full disk."""
    from gpu_ci.disk import free_bytes, mb

    try:
        free = free_bytes(directory)
    except OSError:
        return ""
    return (f" ({directory} has {mb(free)} free: no space left on RUNNER_TEMP's disk for the "
            "samples)" if free < LOW_SPACE else "")


def log_tail(directory: Path) -> str:
    try:
        text = (directory / monitor.LOG_NAME).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return text.strip()[-800:] or "(empty log)"


# -- report -----------------------------------------------------------------------------


def parse_limits(inputs: Inputs) -> mr.Limits:
    from gpu_ci.cuda.require import parse_bytes

    max_memory = None
    if inputs["max-memory"]:
        try:
            max_memory = parse_bytes(inputs["max-memory"])
        except ValueError:
            raise UsageError(f"input 'max-memory' must be a size such as 40GiB, 512MiB or "
                             f"80GB; got {inputs['max-memory']!r}.") from None
    min_util = None
    if inputs["min-utilisation"]:
        try:
            min_util = float(inputs["min-utilisation"].rstrip("% "))
        except ValueError:
            min_util = -1.0
        if not 0 <= min_util <= 100:
            raise UsageError(f"input 'min-utilisation' must be a percentage from 0 to 100 "
                             f"(e.g. 50); got {inputs['min-utilisation']!r}.")
    return mr.Limits(inputs.boolean("expect-gpu-use"), max_memory, min_util,
                     unknown_fails=inputs.boolean("fail-on-unknown"))


def parse_pricing(text: str, day: datetime) -> mr.Pricing:
    from gpu_ci.pricing import PriceError, load_table, parse_price

    if not text.strip():
        return mr.Pricing(None, "")
    table = load_table()
    try:
        price = parse_price(text, table, per="hour")
    except PriceError as exc:
        raise UsageError(f"input 'price-per-hour': {exc}") from None
    amount = price.on(day.date(), table)
    if amount is None:
        raise UsageError(f"input 'price-per-hour' names {price.sku}, which has no price on "
                         f"{day.date()} in the table (checked {table.checked}); write an "
                         "amount instead, e.g. 3.12.")
    source = (f"price-per-hour {text.strip()}" if price.sku is None else
              f"{price.sku} on {day.date()}, price table checked {table.checked}")
    return mr.Pricing(amount, source)


def report(inputs: Inputs, directory: Path, rt: Runtime) -> int:
    limits = parse_limits(inputs)
    now = time.time()
    pricing = parse_pricing(inputs["price-per-hour"], datetime.fromtimestamp(now, timezone.utc))
    samples = directory / monitor.SAMPLES_NAME
    if not samples.exists():
        if (directory / NO_GPU_NAME).exists():
            return report_no_gpu(directory, limits, rt)
        raise GpuCiError(
            "gpu-monitor mode: report found no samples for this job: add a step with "
            "'uses: gpu-ci-actions/gpu-ci-actions/actions/gpu-monitor@v1' and 'mode: start' "
            f"early in the job (looked in {directory}).", title="gpu-monitor: no start")
    require_private(directory)
    stopped = monitor.stop_sampler(directory)
    if stopped == "killed":
        rt.warning("gpu-monitor: the sampler ignored SIGTERM and was killed.")
    limit = monitor.SamplerConfig.from_environ(directory, 1.0, rt.environ).max_bytes
    try:
        with open(samples, "rb") as handle:  # never more than the sampler writes, plus slack
            data = handle.read(limit + READ_SLACK + 1)
        recording = mr.parse_recording(data[:limit + READ_SLACK].decode("utf-8", "replace"))
    except mr.RecordingError as exc:
        raise GpuCiError(f"gpu-monitor: {exc} Sampler log: {log_tail(directory)}") from None
    except OSError as exc:
        raise GpuCiError(f"gpu-monitor: cannot read {samples}: {exc.strerror}.") from None
    if len(data) > limit + READ_SLACK:  # something else wrote to it: a finding says so
        recording = dataclasses.replace(recording, truncated_at=limit + READ_SLACK)
    fake = rt.environ.get("GPU_CI_MONITOR_FAKE_CLOCK", "").strip()
    if fake:  # tests: the report's "now" is the sampler's fake clock at its end
        now = float(recording.stop["ts"]) if recording.stop else (
            (recording.sample_times[-1] if recording.sample_times else recording.started)
            + recording.interval)
    job = fetch_job(inputs, rt)
    steps = None
    if job is not None and job.steps:
        steps = [mr.Phase(s.name, s.started, s.completed if s.completed is not None else now)
                 for s in job.steps if s.started is not None]
    result = mr.compute(recording, end=now, steps=steps,
                        job_started=job.started if job else None,
                        pricing=pricing, limits=limits)
    report_path, csv_path = write_files(inputs, directory, result, rt)
    set_outputs(rt, result, report_path, csv_path)
    for f in result.findings[:mr.MAX_FINDINGS_SHOWN]:
        {"error": rt.error, "warning": rt.warning}.get(f.level, rt.notice)(
            f"[{f.code}] {f.message}", title=f"gpu-monitor: {f.code}")
    if len(result.findings) > mr.MAX_FINDINGS_SHOWN:
        rt.notice(f"gpu-monitor: {len(result.findings) - mr.MAX_FINDINGS_SHOWN} more findings "
                  f"in {report_path or 'the JSON report'}.", title="gpu-monitor")
    c = result.cost
    rt.info(f"gpu-monitor: {len(result.gpus)} GPU(s), {len(recording.sample_times)} samples; "
            f"{mr.outputs(result)['gpu-minutes-used'] or 'unknown'} of "
            f"{c.gpu_minutes_paid:.0f} GPU-minutes used, idle "
            + (f"{100 * c.idle_fraction:.0f} %" if c.idle_fraction is not None else "unknown")
            + (f", idle cost ${c.idle_cost_usd}" if c.idle_cost_usd is not None else ""))
    rt.summary(mr.markdown(result))
    if inputs["pushgateway-url"]:
        from gpu_ci.cuda.monitor_push import push

        try:
            push(inputs["pushgateway-url"], result, rt.environ)
            rt.info(f"gpu-monitor: pushed the job's metrics to {inputs['pushgateway-url']}")
        except Exception as exc:  # the gateway is optional: never fail the job for it
            rt.warning(f"gpu-monitor: could not push to {inputs['pushgateway-url']}: "
                       f"{type(exc).__name__}: {exc}", title="gpu-monitor: pushgateway")
    return 0 if result.ok else 1


def fetch_job(inputs: Inputs, rt: Runtime):  # -> JobTimes | None
    """The job's steps from the jobs API, or None (no token, no permission, no answer)."""
    env = rt.environ
    token = inputs["github-token"] or env.get("GITHUB_TOKEN", "")
    repository, run_id = env.get("GITHUB_REPOSITORY", ""), env.get("GITHUB_RUN_ID", "")
    if not (token and repository and run_id and env.get("RUNNER_NAME")):
        return None
    try:
        from gpu_ci.github.client import ClientSettings, RestClient
        from gpu_ci.github.steps import current_job_times

        client = RestClient(token, ClientSettings.from_environ(env))
        job = current_job_times(client, repository, run_id, env.get("GITHUB_RUN_ATTEMPT", ""),
                                env["RUNNER_NAME"])
    except Exception as exc:  # steps are a bonus: fall back to the monitor's window
        rt.notice(f"gpu-monitor: no per-step breakdown (the jobs API did not answer: "
                  f"{type(exc).__name__}); give the job 'actions: read' for it.",
                  title="gpu-monitor")
        return None
    if job is None:
        rt.notice("gpu-monitor: no per-step breakdown (this runner's job is not in the jobs "
                  "API's list).", title="gpu-monitor")
    return job


def write_files(inputs: Inputs, directory: Path, result: mr.Report,
                rt: Runtime) -> tuple[str, str]:
    report_path = Path(inputs["report-file"] or directory / "report.json")
    csv_path = Path(inputs["samples-csv"] or report_path.with_name("samples.csv"))
    try:
        for path, text in ((report_path, json.dumps(mr.as_json(result), indent=2) + "\n"),
                           (csv_path, mr.samples_csv(result.recording))):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
            try:  # a fresh name (O_EXCL): never written through a link planted at a fixed one
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    out.write(text)
                os.chmod(tmp, 0o644)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
    except OSError as exc:
        rt.warning(f"gpu-monitor: cannot write {exc.filename}: {exc.strerror}; the summary "
                   "and outputs still hold the numbers.", title="gpu-monitor")
        return "", ""
    return str(report_path), str(csv_path)


def set_outputs(rt: Runtime, result: mr.Report, report_path: str, csv_path: str) -> None:
    for name, value in mr.outputs(result).items():  # unknown figures are empty, never 0
        rt.set_output(name, value)
    rt.set_output("report-file", report_path)
    rt.set_output("samples-csv", csv_path)
    rt.set_output("findings", json.dumps([{"level": f.level, "code": f.code,
                                           "message": f.message}
                                          for f in result.findings[:mr.MAX_FINDINGS_SHOWN]]))


def report_no_gpu(directory: Path, limits: mr.Limits, rt: Runtime) -> int:
    why = (directory / NO_GPU_NAME).read_text(encoding="utf-8").strip()
    rt.set_output("ok", "false" if limits.expect_gpu_use else "true")
    rt.set_output("gpu-count", "0")
    rt.set_output("gpu-used", "false")
    rt.summary(f"### gpu-monitor: no GPU in this job\n\n{why}: nothing was watched.\n")
    if limits.expect_gpu_use:
        rt.error(f"[gpu-not-used] expect-gpu-use is true, but {why}.",
                 title="gpu-monitor: gpu-not-used")
        return 1
    rt.notice(f"gpu-monitor: {why}; nothing was watched.", title="gpu-monitor: no GPU")
    return 0
