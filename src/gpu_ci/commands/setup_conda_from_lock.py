"""``gpu-ci setup-conda-from-lock``: Miniforge + a locked environment, never the vendor conda."""

from __future__ import annotations

import os
import time
from pathlib import Path

from gpu_ci import urls
from gpu_ci.conda import lockfile
from gpu_ci.conda import options as conda_options
from gpu_ci.errors import GpuCiError
from gpu_ci.inputs import Inputs
from gpu_ci.runtime import Runtime, markdown_table


def options_from(inputs: Inputs, environ) -> conda_options.SetupOptions:
    # Read by the action's cache steps, not here; refused here too (CLI, and a typo must
    # never mean "no cache" in silence).
    inputs.choice("cache", conda_options.CACHE_MODES)
    inputs.boolean("cache-write")
    return conda_options.build(
        lock_file=inputs["lock-file"], platform=inputs["platform"],
        categories=inputs.items("categories"),
        engine=inputs.choice("engine", conda_options.ENGINES),
        miniforge=inputs.boolean("miniforge"), miniforge_version=inputs["miniforge-version"],
        installer_url=inputs["installer-url"], installer_sha256=inputs["installer-sha256"],
        activate=inputs.boolean("activate"), dry_run=inputs.boolean("dry-run"),
        root=inputs["root"], pkgs_dir=inputs["pkgs-dir"], prefix=inputs["prefix"],
        environment_name=inputs["environment-name"], environ=environ,
        stream=inputs.boolean("stream-downloads"))


def read_lock(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise GpuCiError(f"lock-file {path} does not exist (relative paths are read from "
                         f"{os.getcwd()}).") from None
    except OSError as exc:
        raise GpuCiError(f"lock-file {path} cannot be read ({exc.strerror}).") from None


def run(inputs: Inputs, rt: Runtime) -> int:
    environ = rt.environ
    opts = options_from(inputs, environ)
    from gpu_ci.conda.channels import Network

    network = Network.parse(inputs["channel-mirrors"], inputs["channel-credentials"])
    for secret in network.secrets():  # before anything is printed
        rt.mask(secret)
    path = opts.lock_file
    text = read_lock(path)
    lock = lockfile.parse(text, path)
    for channel in lock.channels:
        for secret in urls.secrets_in(channel):
            rt.mask(secret)
    plan = lockfile.plan(lock, text, opts.platform, opts.categories, path)
    for url in [*(e.url for e in plan.conda), *(e.url for e in plan.pip)]:
        for secret in urls.secrets_in(url):
            rt.mask(secret)
    cache_key = (f"gpu-ci-conda-{plan.platform}-{opts.engine}-mf{opts.miniforge_version}-"
                 f"{'+'.join(sorted(plan.categories))}-{plan.lock_sha256[:32]}")
    rt.set_output("lock-sha256", plan.lock_sha256)
    rt.set_output("packages", str(plan.count))
    rt.set_output("cache-key", cache_key)

    if opts.dry_run:
        rt.info(f"setup-conda-from-lock (dry run): {lock.kind} lock {path}, platform "
                f"{plan.platform}, categories {','.join(plan.categories)}")
        rt.info(f"channels: {', '.join(urls.mask_url(c) for c in plan.channels)}")
        rt.info(f"{len(plan.conda)} conda + {len(plan.pip)} pip packages:")
        for e in plan.conda:
            rt.info(f"  {e.name} {e.version} {e.build}")
        for p in plan.pip:
            rt.info(f"  {p.name} {p.version} (pip)")
        rt.summary(_summary(plan, path, None, None, None, None, dry_run=True))
        return 0

    from gpu_ci.conda import install as env_install
    from gpu_ci.conda import isolation as conda_isolation

    root, prefix, pkgs_dir = opts.root, opts.prefix, opts.pkgs_dir
    conda_options.refuse_prefix(prefix, root, environ)
    vendor = conda_isolation.detect(environ)
    if vendor.root and Path(vendor.root).resolve() in (root.resolve(), *root.resolve().parents):
        raise GpuCiError(f"root {root} is inside the vendor conda at {vendor.root}; choose a "
                         "root elsewhere (the vendor conda is never written).")
    sub_env = conda_isolation.isolated_env(environ, vendor, opts.condarc, pkgs_dir,
                                           opts.envs_dir)
    # Before anything is downloaded (Miniforge included): can the result be put in place?
    env_install.check_writable(prefix, pkgs_dir)
    phases: dict[str, float] = {}
    from gpu_ci import downloads

    downloads.configure(network, downloads.Progress(rt.info))
    mf = None
    if opts.miniforge:
        from gpu_ci.conda import miniforge

        started = time.monotonic()
        miniforge.write_condarc(opts.condarc, pkgs_dir, opts.envs_dir)
        mf = miniforge.ensure(opts.miniforge_version, root, root.parent / ".installers",
                              sub_env, url=opts.installer_url, sha256=opts.installer_sha256,
                              policy=opts.retry)
        phases["miniforge"] = time.monotonic() - started
        if mf.checksum_from == "release":
            rt.warning(f"Miniforge {opts.miniforge_version}: this package ships no sha256 for "
                       "it, so the installer was checked against the .sha256 file beside it "
                       "(same origin); set installer-sha256 to pin it.",
                       title="setup-conda-from-lock")
    report = env_install.install(plan, prefix, pkgs_dir, sub_env, engine=opts.engine,
                                 conda=mf.conda if mf else None, policy=opts.retry,
                                 log=rt.info, stream=opts.stream)
    phases.update(report.phases)
    python = prefix / "bin" / "python"
    rt.set_output("prefix", str(prefix))
    rt.set_output("python", str(python) if python.exists() else "")
    rt.set_output("conda", str(mf.conda) if mf else "")
    rt.set_output("reused", "true" if report.reused else "false")
    if opts.activate:
        from gpu_ci.conda import activation

        for name, value in sorted(activation.capture(prefix, sub_env).items()):
            rt.export_variable(name, value)
        if mf:
            rt.add_path(str(mf.root / "condabin"))
        for entry in activation.path_entries(prefix):
            rt.add_path(entry)
    verb = "reused" if report.reused else "created"
    rt.info(f"setup-conda-from-lock: {verb} {prefix} from {path} ({plan.count} packages, "
            f"{_downloaded(report)}, "
            f"{sum(phases.values()):.1f} s)")
    if vendor.root:
        rt.info(f"setup-conda-from-lock: vendor conda at {vendor.root} ({vendor.found_by}) was "
                "left alone.")
    rt.summary(_summary(plan, path, mf, vendor, report, phases))
    return 0


def _downloaded(report) -> str:
    text = f"{report.downloaded_bytes / 1e6:.1f} MB downloaded"
    if report.streamed_archives:
        text += f" + {report.streamed_archives} archives streamed into the package cache"
    return text


def _summary(plan, path, mf, vendor, report, phases, dry_run: bool = False) -> str:
    rows = [("lock", f"{plan.kind} `{path}`"), ("lock sha256", plan.lock_sha256),
            ("platform", plan.platform), ("categories", ", ".join(plan.categories)),
            ("conda packages", len(plan.conda)), ("pip packages", len(plan.pip))]
    if dry_run:
        rows.append(("mode", "dry run: nothing downloaded"))
    if mf:
        how = "reused" if mf.reused else (
            "installer cached" if mf.installer_cached else "downloaded")
        rows.append(("Miniforge", f"{mf.version} (sha256 {mf.sha256[:16]}…, {how})"))
    if vendor is not None:
        rows.append(("vendor conda", f"{vendor.root} ({vendor.found_by}), untouched"
                     if vendor.root else "none found"))
    if report is not None:
        rows.append(("reused", "yes" if report.reused else "no"))
        if report.recovered:
            rows.append(("recovered", report.recovered))
        rows.append(("downloaded", f"{_downloaded(report)} "
                     f"({report.cached_archives} archives from cache)"))
        for phase, seconds in (phases or {}).items():
            rows.append((f"time: {phase}", f"{seconds:.2f} s"))
    return "### setup-conda-from-lock\n\n" + markdown_table(["", ""], rows)
