"""``gpu-ci gpu-monitor``: record the GPUs during a job, then report.

``mode: start`` launches the sampler; ``mode: report`` stops it and reports
what each GPU did, what it cost, and which steps used it.

Wiring only: starting the sampler and reading its file are :mod:`gpu_ci.cuda.monitor.control`,
the sampler and the file format :mod:`gpu_ci.cuda.monitor.sampler`, the numbers and views
:mod:`gpu_ci.cuda.monitor.report`, the pytest plugin's findings by time
:mod:`gpu_ci.cuda.pytest_link`, the jobs API :mod:`gpu_ci.github.steps`, the price table
:mod:`gpu_ci.pricing`.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from gpu_ci.cuda import pytest_link
from gpu_ci.cuda.monitor import control, results, right_size
from gpu_ci.cuda.monitor import recording as mr_recording
from gpu_ci.cuda.monitor import report as mr
from gpu_ci.cuda.monitor import sampler as monitor
from gpu_ci.cuda.monitor import views as mr_views
from gpu_ci.errors import GpuCiError, UsageError
from gpu_ci.inputs import Inputs
from gpu_ci.runtime import Runtime, annotate_findings, write_report
from gpu_ci.values import json_value

if TYPE_CHECKING:
    from gpu_ci.github.steps import JobTimes

#: The start's directory for the pytest plugin's reports (inside the job's private one).
PYTEST_REPORTS = "pytest"


def run(inputs: Inputs, rt: Runtime) -> int:
    mode = inputs.choice("mode", ("start", "report"))
    interval = parse_interval(inputs["interval"])
    if not sys.platform.startswith("linux"):
        rt.notice(
            f"gpu-monitor runs on Linux runners; this is {sys.platform}: nothing watched.",
            title="gpu-monitor",
        )
        return 0
    directory = control.job_directory(
        rt.environ.get("RUNNER_TEMP") or tempfile.gettempdir(), rt.environ
    )
    if mode == "start":
        return start(directory, interval, rt)
    return report(inputs, directory, rt)


def parse_interval(text: str) -> float:
    return _number(
        text,
        0.05,
        3600,
        f"input 'interval' of gpu-monitor must be seconds between 0.05 and "
        f"3600 (e.g. 1 or 0.5); got {text!r}.",
    )


def _number(text: str, low: float, high: float, refusal: str) -> float:
    """``text`` as a number from ``low`` to ``high``, else ``refusal``."""
    try:
        value = float(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise UsageError(refusal)
    return value


# -- start ------------------------------------------------------------------------------


def start(directory: Path, interval: float, rt: Runtime) -> int:
    try:
        return _start(directory, interval, rt)
    except OSError as exc:  # a full or read-only RUNNER_TEMP, after the directory exists
        raise GpuCiError(
            f"gpu-monitor: cannot write {exc.filename or directory}: "
            f"{exc.strerror or exc}. RUNNER_TEMP must be writable and have "
            "space; nothing is watched.",
            title="gpu-monitor: start",
        ) from None


def _nothing_started(started: control.Start, samples: str) -> tuple[str, str, str, str, str] | None:
    """Why no sampler starts (the annotation and its one output), or None: it starts."""
    if started.no_gpu.startswith(control.LOST_PREFIX):
        lost = started.no_gpu.removeprefix(control.LOST_PREFIX)
        return "warning", f"gpu-monitor: {lost}.", "gpu-monitor: gpu-lost", "gpu-count", ""
    if started.no_gpu:
        message = (
            f"gpu-monitor: {started.no_gpu}; nothing to watch (a CPU runner?). The "
            "report step will say so and succeed."
        )
        return "notice", message, "gpu-monitor: no GPU", "gpu-count", "0"
    if started.running:
        message = (
            f"gpu-monitor: a sampler already runs for this job (pid {started.running}); "
            "this start changes nothing."
        )
        return "notice", message, "gpu-monitor", "samples-file", samples
    return None


def _start(directory: Path, interval: float, rt: Runtime) -> int:
    started = control.start(directory, interval, rt.environ)
    samples = str(directory / monitor.SAMPLES_NAME)
    idle = _nothing_started(started, samples)
    if idle is not None:
        level, message, title, output, value = idle
        annotate = rt.warning if level == "warning" else rt.notice
        annotate(message, title=title)
        rt.set_output(output, value)
        return 0
    visible = started.gpus
    names = ", ".join(f"{g.index} {mr_recording.printable(g.name)}" for g in visible)
    rt.info(
        f"gpu-monitor: sampling {len(visible)} GPU(s) ({names}) every {interval:g} s "
        f"(pid {started.pid}) into {samples}"
    )
    rt.set_output("gpu-count", str(len(visible)))
    rt.set_output("samples-file", samples)
    # the pytest plugin's reports, read back by the report step and linked by time
    reports = directory / PYTEST_REPORTS
    reports.mkdir(mode=0o700, exist_ok=True)
    rt.export_variable(pytest_link.REPORT_DIR_VARIABLE, str(reports))
    return 0


# -- report -----------------------------------------------------------------------------


def parse_limits(inputs: Inputs) -> results.Limits:
    from gpu_ci.cuda.require import parse_bytes

    max_memory = None
    if inputs["max-memory"]:
        try:
            max_memory = parse_bytes(inputs["max-memory"])
        except ValueError:
            raise UsageError(
                f"input 'max-memory' must be a size such as 40GiB, 512MiB or "
                f"80GB; got {inputs['max-memory']!r}."
            ) from None
    min_util = None
    if inputs["min-utilisation"]:
        min_util = _number(
            inputs["min-utilisation"].rstrip("% "),
            0,
            100,
            f"input 'min-utilisation' must be a percentage from 0 to 100 "
            f"(e.g. 50); got {inputs['min-utilisation']!r}.",
        )
    return results.Limits(
        inputs.boolean("expect-gpu-use"),
        max_memory,
        min_util,
        unknown_fails=inputs.boolean("fail-on-unknown"),
    )


def pricing_inputs(inputs: Inputs, day: datetime) -> results.Pricing:
    """The price input: per runner or per GPU.

    ``price-per-hour`` (the runner) or ``price-per-gpu-hour`` (each GPU the job sees, on a shared
    host whose jobs lease their GPUs), never both.
    """
    runner, gpu = inputs["price-per-hour"].strip(), inputs["price-per-gpu-hour"].strip()
    if runner and gpu:
        raise UsageError(
            "gpu-monitor: set either 'price-per-hour' (what the runner costs) or "
            "'price-per-gpu-hour' (what each leased GPU of a shared host costs), not both."
        )
    key = inputs["price-key"].strip()
    if gpu:
        name = "price-per-gpu-hour"
        pricing = parse_pricing(priced_by_key(gpu, key, name), day, name=name)
        return dataclasses.replace(pricing, per_gpu=True)
    return parse_pricing(priced_by_key(runner, key, "price-per-hour"), day)


def priced_by_key(text: str, key: str, name: str) -> str:
    """A price input, or its ``price-key`` entry when it is an object.

    One gpu-monitor configuration then serves every runner group or kind of a matrix."""
    if not text.startswith("{"):
        if key:
            raise UsageError(
                f"input 'price-key' is {key!r} but '{name}' is one price, not a JSON object "
                "of prices by runner group or kind: drop price-key or key the prices."
            )
        return text
    prices = json_value(name, text, "write an object of prices by runner group or kind.")
    if not isinstance(prices, dict) or not all(
        isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in prices.values()
    ):
        raise UsageError(
            f"input '{name}' must be an object of prices by runner group or kind, e.g. "
            '{"gpu-b200": "6.50", "h100x8": "24"}.'
        )
    if key not in prices:
        raise UsageError(
            f"input '{name}' prices {', '.join(sorted(prices)) or 'nothing'}, but price-key "
            f"is {key or 'empty'!r}: set price-key to this job's runner group or kind "
            "(e.g. ${{ matrix.kind }})."
        )
    return str(prices[key])


def parse_pricing(text: str, day: datetime, name: str = "price-per-hour") -> results.Pricing:
    from gpu_ci.pricing import PriceError, load_table, parse_price

    if not text.strip():
        return results.Pricing(None, "")
    table = load_table()
    try:
        price = parse_price(text, table, per="hour")
    except PriceError as exc:
        raise UsageError(f"input '{name}': {exc}") from None
    amount = price.on(day.date(), table)
    if amount is None:
        raise UsageError(
            f"input '{name}' names {price.sku}, which has no price on "
            f"{day.date()} in the table (checked {table.checked}); write an "
            "amount instead, e.g. 3.12."
        )
    source = (
        f"{name} {text.strip()}"
        if price.sku is None
        else f"{price.sku} on {day.date()}, price table checked {table.checked}"
    )
    return results.Pricing(amount, source)


def sizes_on(day: datetime) -> right_size.Sizes:
    """Load the right-size table, priced as of ``day``.

    The right-size table, each size with a GitHub SKU priced as of ``day``.
    """
    from gpu_ci.pricing import load_table

    sizes = right_size.load_sizes()
    table = load_table()
    prices = {}
    for row in sizes.boards:
        found = table.price_on(row.sku, day.date()) if row.sku else None
        if found is not None:
            prices[row.name] = found.usd_per_minute
    return sizes.with_prices(prices)


def report(inputs: Inputs, directory: Path, rt: Runtime) -> int:
    limits = parse_limits(inputs)
    now = time.time()
    pricing = pricing_inputs(inputs, datetime.fromtimestamp(now, timezone.utc))
    if not (directory / monitor.SAMPLES_NAME).exists():
        if (directory / control.NO_GPU_NAME).exists():
            return report_no_gpu(directory, limits, rt)
        raise GpuCiError(
            "gpu-monitor mode: report found no samples for this job: add a step with "
            "'uses: gpu-ci-actions/gpu-ci-actions/actions/gpu-monitor@v2' and 'mode: start' "
            f"early in the job (looked in {directory}).",
            title="gpu-monitor: no start",
        )
    control.require_private(directory)
    if control.stop_sampler(directory) == "killed":
        rt.warning("gpu-monitor: the sampler ignored SIGTERM and was killed.")
    recording = control.read_recording(directory, rt.environ)
    now = control.report_time(recording, rt.environ, now)
    job = fetch_job(inputs, rt)
    result = mr.compute(
        recording,
        end=now,
        steps=job_steps(job, now),
        job_started=job.started if job else None,
        pricing=pricing,
        limits=limits,
        sizes=sizes_on(datetime.fromtimestamp(now, timezone.utc)),
    )
    report_path, csv_path = write_files(inputs, directory, result, rt)
    set_outputs(rt, result, report_path, csv_path)
    annotate_findings(rt, "gpu-monitor", result.findings[: mr_views.MAX_FINDINGS_SHOWN])
    if len(result.findings) > mr_views.MAX_FINDINGS_SHOWN:
        rt.notice(
            f"gpu-monitor: {len(result.findings) - mr_views.MAX_FINDINGS_SHOWN} more findings "
            f"in {report_path or 'the JSON report'}.",
            title="gpu-monitor",
        )
    rt.info(log_line(result, len(recording.sample_times)))
    rt.summary(mr_views.markdown(result))
    found = pytest_link.links(pytest_link.read_reports(str(directory / PYTEST_REPORTS)))
    if found:
        rt.summary(pytest_link.markdown(found, recording.started, recording.samples))
    if inputs["pushgateway-url"]:
        push(inputs["pushgateway-url"], result, rt)
    return 0 if result.ok else 1


def job_steps(job: JobTimes | None, now: float) -> list[results.Phase] | None:
    """The job's steps as report phases.

    The job's steps as phases (a running step ends now); None without the jobs API.
    """
    if job is None or not job.steps:
        return None
    return [
        results.Phase(s.name, s.started, s.completed if s.completed is not None else now)
        for s in job.steps
        if s.started is not None
    ]


def log_line(result: results.Report, samples: int) -> str:
    c = result.cost
    idle = f"{100 * c.idle_fraction:.0f} %" if c.idle_fraction is not None else "unknown"
    cost = f", idle cost ${c.idle_cost_usd}" if c.idle_cost_usd is not None else ""
    return (
        f"gpu-monitor: {len(result.gpus)} GPU(s), {samples} samples; "
        f"{mr_views.outputs(result)['gpu-minutes-used'] or 'unknown'} of "
        f"{c.gpu_minutes_paid:.0f} GPU-minutes used, idle {idle}{cost}"
    )


def push(url: str, result: results.Report, rt: Runtime) -> None:
    """Send the job's metrics to a Pushgateway.

    Send the job's metrics to a Pushgateway; it is optional, so never fail the job for it.
    """
    from gpu_ci.cuda.monitor.push import push as push_metrics

    try:
        push_metrics(url, result, rt.environ)
        rt.info(f"gpu-monitor: pushed the job's metrics to {url}")
    except Exception as exc:
        rt.warning(
            f"gpu-monitor: could not push to {url}: {type(exc).__name__}: {exc}",
            title="gpu-monitor: pushgateway",
        )


def fetch_job(inputs: Inputs, rt: Runtime) -> JobTimes | None:
    """Fetch the job's steps from the jobs API.

    The job's steps from the jobs API, or None (no token, no permission, no answer).
    """
    env = rt.environ
    token = inputs["github-token"] or env.get("GITHUB_TOKEN", "")
    repository, run_id = env.get("GITHUB_REPOSITORY", ""), env.get("GITHUB_RUN_ID", "")
    if not (token and repository and run_id and env.get("RUNNER_NAME")):
        return None
    try:  # imported here: a start, and a runner without the github extra, never load them
        from gpu_ci.github.client import connect
        from gpu_ci.github.steps import current_job_times

        client = connect(inputs["github-token"], env, rt.mask)
        job = current_job_times(
            client, repository, run_id, env.get("GITHUB_RUN_ATTEMPT", ""), env["RUNNER_NAME"]
        )
    except Exception as exc:  # steps are a bonus: fall back to the monitor's window
        rt.notice(
            f"gpu-monitor: no per-step breakdown (the jobs API did not answer: "
            f"{type(exc).__name__}); give the job 'actions: read' for it.",
            title="gpu-monitor",
        )
        return None
    if job is None:
        rt.notice(
            "gpu-monitor: no per-step breakdown (this runner's job is not in the jobs API's list).",
            title="gpu-monitor",
        )
    return job


def write_files(
    inputs: Inputs, directory: Path, result: results.Report, rt: Runtime
) -> tuple[str, str]:
    report_path = Path(inputs["report-file"] or directory / "report.json")
    csv_path = Path(inputs["samples-csv"] or report_path.with_name("samples.csv"))
    try:
        write_report(report_path, json.dumps(mr_views.as_json(result), indent=2) + "\n")
        write_report(csv_path, mr_views.samples_csv(result.recording), what="samples-csv")
    except GpuCiError as exc:  # the files are extras: the summary and outputs hold it all
        rt.warning(
            f"gpu-monitor: {exc.message} The summary and outputs still hold the numbers.",
            title="gpu-monitor",
        )
        return "", ""
    return str(report_path), str(csv_path)


def set_outputs(rt: Runtime, result: results.Report, report_path: str, csv_path: str) -> None:
    for name, value in mr_views.outputs(result).items():  # unknown figures are empty, never 0
        rt.set_output(name, value)
    rt.set_output("report-file", report_path)
    rt.set_output("samples-csv", csv_path)
    rt.set_output(
        "findings",
        json.dumps(
            [
                {"level": f.level, "code": f.code, "message": f.message}
                for f in result.findings[: mr_views.MAX_FINDINGS_SHOWN]
            ]
        ),
    )


def report_no_gpu(directory: Path, limits: results.Limits, rt: Runtime) -> int:
    why = control.no_gpu_reason(directory)
    if why.startswith(control.LOST_PREFIX):  # a broken GPU runner, not a CPU one
        why = why.removeprefix(control.LOST_PREFIX)
        rt.set_output("ok", "false" if limits.expect_gpu_use else "true")
        rt.set_output("gpu-count", "")
        rt.set_output("gpu-used", "")
        rt.summary(f"### gpu-monitor: a GPU was lost before the job\n\n{why}.\n")
        note = rt.error if limits.expect_gpu_use else rt.warning
        note(f"[gpu-lost] {why}.", title="gpu-monitor: gpu-lost")
        return 1 if limits.expect_gpu_use else 0
    rt.set_output("ok", "false" if limits.expect_gpu_use else "true")
    rt.set_output("gpu-count", "0")
    rt.set_output("gpu-used", "false")
    rt.summary(f"### gpu-monitor: no GPU in this job\n\n{why}: nothing was watched.\n")
    if limits.expect_gpu_use:
        rt.error(
            f"[gpu-not-used] expect-gpu-use is true, but {why}.", title="gpu-monitor: gpu-not-used"
        )
        return 1
    rt.notice(f"gpu-monitor: {why}; nothing was watched.", title="gpu-monitor: no GPU")
    return 0
