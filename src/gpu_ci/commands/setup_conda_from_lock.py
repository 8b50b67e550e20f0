"""``gpu-ci setup-conda-from-lock``: a locked environment (and Miniforge where the job needs it),
never the vendor conda."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from gpu_ci import urls
from gpu_ci.conda import options as conda_options
from gpu_ci.conda import pipeline
from gpu_ci.inputs import Inputs
from gpu_ci.markdown import Markdown, code, escape
from gpu_ci.runtime import Runtime, markdown_table

if TYPE_CHECKING:
    from gpu_ci.conda.install import InstallReport
    from gpu_ci.conda.isolation import VendorConda
    from gpu_ci.conda.lockfile import InstallPlan
    from gpu_ci.conda.miniforge import Miniforge, Pending
    from gpu_ci.downloads import Downloader


def options_from(inputs: Inputs, environ: Mapping[str, str]) -> conda_options.SetupOptions:
    # Read by the action's cache steps, not here; refused here too (CLI, and a typo must
    # never mean "no cache" in silence).
    inputs.choice("cache", conda_options.CACHE_MODES)
    inputs.boolean("cache-write")
    raw = conda_options.RawOptions(
        lock_file=inputs["lock-file"],
        platform=inputs["platform"],
        categories=inputs.items("categories"),
        engine=inputs.choice("engine", conda_options.ENGINES),
        miniforge=inputs.choice("miniforge", conda_options.MINIFORGE_MODES),
        miniforge_version=inputs["miniforge-version"],
        installer_url=inputs["installer-url"],
        installer_sha256=inputs["installer-sha256"],
        activate=inputs.boolean("activate"),
        dry_run=inputs.boolean("dry-run"),
        root=inputs["root"],
        pkgs_dir=inputs["pkgs-dir"],
        prefix=inputs["prefix"],
        environment_name=inputs["environment-name"],
        stream=inputs.boolean("stream-downloads"),
        pixi_environment=inputs["pixi-environment"],
        cuda_override=inputs["cuda-override"],
    )
    return conda_options.build(raw, environ)


def run(inputs: Inputs, rt: Runtime) -> int:
    opts = options_from(inputs, rt.environ)
    from gpu_ci.conda.channels import Network

    network = Network.parse(inputs["channel-mirrors"], inputs["channel-credentials"])
    for secret in network.secrets():  # before anything is printed
        rt.mask(secret)
    locked = pipeline.load(opts, mask=rt.mask)
    plan = locked.plan
    rt.set_output("lock-sha256", plan.lock_sha256)
    rt.set_output("packages", str(plan.count))
    rt.set_output("pypi-packages", str(len(plan.pip)))
    rt.set_output("pixi-environment", plan.environment)
    rt.set_output("cache-key", pipeline.cache_key(locked, inputs, rt.environ))
    if plan.left_out:
        rt.notice(
            f"{opts.lock_file}: left out {len(plan.left_out)} conda package(s) the lock "
            f"builds from source ({', '.join(plan.left_out)}); their dependencies are "
            "installed, the packages themselves are not built.",
            title="setup-conda-from-lock",
        )
    if opts.dry_run:
        return dry_run(rt, opts, locked)
    if plan.kind == "pixi":
        check_machine(rt, opts, plan)

    from gpu_ci import downloads

    isolation = pipeline.isolate(opts, rt.environ)
    downloader = downloads.Downloader(network, downloads.Progress(rt.info), opts.retry)
    phases: dict[str, float] = {}
    report, mf = install(rt, opts, plan, isolation.env, phases, downloader)
    phases.update(report.phases)
    publish(rt, opts, mf, report, isolation.env)
    verb = "reused" if report.reused else "created"
    rt.info(
        f"setup-conda-from-lock: {verb} {opts.prefix} from {opts.lock_file} ({plan.count} "
        f"packages, {_downloaded(report)}, {sum(phases.values()):.1f} s)"
    )
    if isolation.vendor.root:
        rt.info(
            f"setup-conda-from-lock: vendor conda at {isolation.vendor.root} "
            f"({isolation.vendor.found_by}) was left alone."
        )
    rt.summary(_summary(plan, opts.lock_file, mf, isolation.vendor, report, phases))
    return 0


def check_machine(rt: Runtime, opts: conda_options.SetupOptions, plan: InstallPlan) -> None:
    """Refuse what this machine cannot run, before any download.

    The driver's CUDA version is read (through the cuda wing) only when the lock needs
    ``__cuda`` and no override is set. PyPI sources must be in the checkout.
    """
    from pathlib import Path

    from gpu_ci.conda import pixi, virtual

    cuda, cuda_from = opts.cuda_override, "cuda-override"
    if not cuda and any(r.name == "__cuda" for r in plan.requirements):
        cuda, cuda_from = driver_cuda(), "the NVIDIA driver"
    machine = virtual.Machine(cuda, virtual.glibc_version(), cuda_from)
    virtual.check(plan.requirements, machine, opts.lock_file)
    checkout = rt.environ.get("GITHUB_WORKSPACE") or str(Path(opts.lock_file).resolve().parent)
    pixi.check_sources(plan, Path(checkout))


def driver_cuda() -> str:
    """The CUDA version the NVIDIA driver supports (``12.4``), '' without a driver."""
    from gpu_ci.cuda import nvml

    snapshot = nvml.read_snapshot()
    return snapshot.cuda_text if snapshot.ok else ""


def install(
    rt: Runtime,
    opts: conda_options.SetupOptions,
    plan: InstallPlan,
    env: Mapping[str, str],
    phases: dict[str, float],
    downloader: Downloader,
) -> tuple[InstallReport, Miniforge | None]:
    """The environment, and Miniforge where the job installs it. ``engine: conda`` waits
    for Miniforge (its conda creates the environment); otherwise Miniforge is downloaded
    and installed on its own thread while the environment is, and waited for after it."""
    from gpu_ci.conda import install as env_install
    from gpu_ci.conda.fetch import Fetching

    pending = None
    if opts.miniforge:  # imported only then: most jobs do not install it (~4 ms)
        from gpu_ci.conda import miniforge as conda_miniforge

        pending = conda_miniforge.start(opts, env, downloader)
    mf = miniforge(rt, opts, pending, phases) if pending and opts.engine == "conda" else None
    try:
        fetching = Fetching(opts.retry, opts.stream, downloader)
        method = env_install.Method(opts.engine, mf.conda if mf else None, fetching)
        report = env_install.install(
            plan, opts.prefix, opts.pkgs_dir, env, method=method, log=rt.info
        )
    except BaseException:
        if pending is not None and mf is None:  # never leave its installer running half-way
            with contextlib.suppress(BaseException):
                pending.result()
        raise
    if pending is not None and mf is None:
        mf = miniforge(rt, opts, pending, phases)
    return report, mf


def miniforge(
    rt: Runtime, opts: conda_options.SetupOptions, pending: Pending, phases: dict[str, float]
) -> Miniforge:
    """Miniforge installed or reused for the job, its wait in ``phases``.

    A warning when its checksum came only from beside the installer."""
    waited = time.monotonic()
    mf = pending.result()
    phases["miniforge"] = time.monotonic() - max(waited, pending.started)
    if mf.checksum_from == "release":
        rt.warning(
            f"Miniforge {opts.miniforge_version}: this package ships no sha256 for "
            "it, so the installer was checked against the .sha256 file beside it "
            "(same origin); set installer-sha256 to pin it.",
            title="setup-conda-from-lock",
        )
    return mf


def dry_run(rt: Runtime, opts: conda_options.SetupOptions, locked: pipeline.Locked) -> int:
    plan = locked.plan
    rt.info(
        f"setup-conda-from-lock (dry run): {locked.lock.kind} lock {opts.lock_file}, "
        f"platform {plan.platform}, {_selection(plan)}"
    )
    rt.info(f"channels: {', '.join(urls.mask_url(c) for c in plan.channels)}")
    rt.info(f"{len(plan.conda)} conda + {len(plan.pip)} pip packages:")
    for e in plan.conda:
        rt.info(f"  {e.name} {e.version} {e.build}")
    for p in plan.pip:
        rt.info(f"  {p.name} {p.version} (pip{', ' + p.source if p.source else ''})")
    for r in dict.fromkeys(plan.requirements):
        rt.info(
            f"  needs {r.name} {r.spec or '(any)'} "
            f"({r.source}{'' if r.required else ', if present'})"
        )
    rt.summary(_summary(plan, opts.lock_file, None, None, None, None, dry_run=True))
    return 0


def publish(
    rt: Runtime,
    opts: conda_options.SetupOptions,
    mf: Miniforge | None,
    report: InstallReport,
    env: Mapping[str, str],
) -> None:
    """The prefix's outputs and, with ``activate``, its activation for later steps."""
    prefix = opts.prefix
    python = prefix / "bin" / "python"
    rt.set_output("prefix", str(prefix))
    rt.set_output("python", str(python) if python.exists() else "")
    rt.set_output("conda", str(mf.conda) if mf else "")
    rt.set_output("reused", "true" if report.reused else "false")
    if opts.activate:
        from gpu_ci.conda import activation

        for name, value in sorted(activation.capture(prefix, env).items()):
            rt.export_variable(name, value)
        if mf:
            rt.add_path(str(mf.root / "condabin"))
        for entry in activation.path_entries(prefix):
            rt.add_path(entry)


def _downloaded(report: InstallReport) -> str:
    text = f"{report.downloaded_bytes / 1e6:.1f} MB downloaded"
    if report.streamed_archives:
        text += f" + {report.streamed_archives} archives streamed into the package cache"
    return text


def _selection(plan: InstallPlan) -> str:
    """What was picked from the lock: a pixi environment, or categories."""
    if plan.kind == "pixi":
        return f"pixi environment {plan.environment}"
    return f"categories {','.join(plan.categories)}"


def _plan_rows(
    plan: InstallPlan, path: str, report: InstallReport | None
) -> list[tuple[str, object]]:
    """The summary's rows on the lock: what was picked, from where, by what."""
    picked = (
        ("pixi environment", plan.environment)
        if plan.kind == "pixi"
        else ("categories", ", ".join(plan.categories))
    )
    rows: list[tuple[str, object]] = [
        ("lock", Markdown(f"{escape(plan.kind)} {code(path)}")),
        ("lock sha256", plan.lock_sha256),
        ("platform", plan.platform),
        picked,
        ("conda packages", len(plan.conda)),
        ("pip packages", len(plan.pip)),
    ]
    if plan.kind == "pixi":
        rows.append(("channels", _listed(plan.channels)))
    if plan.pip and plan.indexes:
        rows.append(("PyPI indexes", _listed(plan.indexes)))
    if plan.left_out:
        rows.append(("left out (built from source)", ", ".join(plan.left_out)))
    if report is not None and report.pip_installer:
        rows.append(("pip packages installed by", report.pip_installer))
    return rows


def _listed(items: tuple[str, ...]) -> str:
    return Markdown(", ".join(code(urls.mask_url(i)) for i in items)) or "none"


def _summary(
    plan: InstallPlan,
    path: str,
    mf: Miniforge | None,
    vendor: VendorConda | None,
    report: InstallReport | None,
    phases: Mapping[str, float] | None,
    dry_run: bool = False,
) -> str:
    rows = _plan_rows(plan, path, report)
    if dry_run:
        rows.append(("mode", "dry run: nothing downloaded"))
    if mf:
        how = (
            "reused" if mf.reused else ("installer cached" if mf.installer_cached else "downloaded")
        )
        rows.append(("Miniforge", f"{mf.version} (sha256 {mf.sha256[:16]}…, {how})"))
    elif not dry_run:
        rows.append(("Miniforge", "not installed (`miniforge: true` puts conda on PATH)"))
    if vendor is not None:
        rows.append(
            (
                "vendor conda",
                f"{vendor.root} ({vendor.found_by}), untouched" if vendor.root else "none found",
            )
        )
    if report is not None:
        rows.append(("reused", "yes" if report.reused else "no"))
        if report.recovered:
            rows.append(("recovered", report.recovered))
        rows.append(
            ("downloaded", f"{_downloaded(report)} ({report.cached_archives} archives from cache)")
        )
        for phase, seconds in (phases or {}).items():
            rows.append((f"time: {phase}", f"{seconds:.2f} s"))
    return "### setup-conda-from-lock\n\n" + markdown_table(["", ""], rows)
