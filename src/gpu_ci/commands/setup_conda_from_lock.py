"""``gpu-ci setup-conda-from-lock``: Miniforge + a locked environment, never the vendor conda."""

from __future__ import annotations

import os
import platform as _platform
import time
from pathlib import Path

from gpu_ci import urls
from gpu_ci.conda import lockfile
from gpu_ci.errors import GpuCiError, UsageError
from gpu_ci.inputs import Inputs
from gpu_ci.runtime import Runtime, markdown_table


def runner_subdir() -> str:
    system, machine = _platform.system(), _platform.machine().lower()
    arch = {"x86_64": "64", "amd64": "64", "aarch64": "aarch64", "arm64": "arm64",
            "ppc64le": "ppc64le"}.get(machine, machine)
    if system == "Linux":
        return f"linux-{'aarch64' if arch == 'arm64' else arch}"
    if system == "Darwin":
        return f"osx-{'arm64' if arch in ('arm64', 'aarch64') else '64'}"
    if system == "Windows":
        return "win-64"
    raise UsageError(f"cannot tell the conda platform of {system}/{machine}: set 'platform'.")


def default_root(environ, version: str) -> Path:
    base = environ.get("RUNNER_TOOL_CACHE") or environ.get("RUNNER_TEMP")
    if not base:
        base = str(Path.home() / ".cache" / "gpu-ci")
    return Path(base) / "miniforge3" / version


def checked_root(value: str) -> Path:
    if " " in value:
        raise UsageError(f"input 'root' must not contain spaces (conda packages break): "
                         f"{value!r}.")
    root = Path(value)
    if not root.is_absolute():
        raise UsageError(f"input 'root' must be an absolute path: {value!r}.")
    probe = root
    while not probe.exists():
        probe = probe.parent
    if not os.access(probe, os.W_OK):
        raise GpuCiError(f"root {root} is not writable by this user (nearest existing "
                         f"directory {probe}); choose a writable root, e.g. under "
                         "$RUNNER_TOOL_CACHE.")
    return root


def run(inputs: Inputs, rt: Runtime) -> int:
    environ = rt.environ
    path = inputs["lock-file"]
    miniforge_on = inputs.boolean("miniforge")
    activate = inputs.boolean("activate")
    dry_run = inputs.boolean("dry-run")
    engine = inputs.choice("engine", ("rattler", "conda"))
    if engine == "conda" and not miniforge_on:
        raise UsageError("engine: conda needs miniforge: true (it runs the installed "
                         "Miniforge's conda); use engine: rattler with miniforge: false.")
    version = inputs["miniforge-version"].strip()
    platform = inputs["platform"].strip() or runner_subdir()
    categories = inputs.items("categories")
    from gpu_ci.conda.channels import Network

    network = Network.parse(inputs["channel-mirrors"], inputs["channel-credentials"])
    for secret in network.secrets():
        rt.mask(secret)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise GpuCiError(f"lock-file {path} does not exist (relative paths are read from "
                         f"{os.getcwd()}).") from None
    except OSError as exc:
        raise GpuCiError(f"lock-file {path} cannot be read ({exc.strerror}).") from None
    lock = lockfile.parse(text, path)
    for channel in lock.channels:
        for secret in urls.secrets_in(channel):
            rt.mask(secret)
    plan = lockfile.plan(lock, text, platform, categories, path)
    for url in [*(e.url for e in plan.conda), *(e.url for e in plan.pip)]:
        for secret in urls.secrets_in(url):
            rt.mask(secret)
    cache_key = (f"gpu-ci-conda-{plan.platform}-{engine}-mf{version}-"
                 f"{'+'.join(sorted(plan.categories))}-{plan.lock_sha256[:32]}")
    rt.set_output("lock-sha256", plan.lock_sha256)
    rt.set_output("packages", str(plan.count))
    rt.set_output("cache-key", cache_key)

    if dry_run:
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
    from gpu_ci.downloads import RetryPolicy

    root = checked_root(inputs["root"] or str(default_root(environ, version)))
    pkgs_dir = Path(inputs["pkgs-dir"]) if inputs["pkgs-dir"] else root / "pkgs"
    prefix = Path(inputs["prefix"]) if inputs["prefix"] else root / "envs" / (
        inputs["environment-name"] or "ci")
    if not prefix.is_absolute():
        raise UsageError(f"input 'prefix' must be an absolute path: {inputs['prefix']!r}.")
    vendor = conda_isolation.detect(environ)
    if vendor.root and Path(vendor.root).resolve() in (root.resolve(), *root.resolve().parents):
        raise GpuCiError(f"root {root} is inside the vendor conda at {vendor.root}; choose a "
                         "root elsewhere (the vendor conda is never written).")
    condarc = root / ".condarc"
    sub_env = conda_isolation.isolated_env(environ, vendor, condarc, pkgs_dir, root / "envs")
    policy = RetryPolicy(retries=int(environ.get("GPU_CI_HTTP_RETRIES") or 4),
                         backoff=float(environ.get("GPU_CI_HTTP_BACKOFF") or 0.5))
    phases: dict[str, float] = {}
    from gpu_ci import downloads

    downloads.configure(network, downloads.Progress(rt.info))
    mf = None
    if miniforge_on:
        from gpu_ci.conda import miniforge

        started = time.monotonic()
        miniforge.write_condarc(condarc, pkgs_dir, root / "envs")
        mf = miniforge.ensure(version, root, root.parent / ".installers", sub_env,
                              url=inputs["installer-url"], sha256=inputs["installer-sha256"],
                              policy=policy)
        phases["miniforge"] = time.monotonic() - started
    report = env_install.install(plan, prefix, pkgs_dir, sub_env, engine=engine,
                                 conda=mf.conda if mf else None, policy=policy)
    phases.update(report.phases)
    python = prefix / "bin" / "python"
    rt.set_output("prefix", str(prefix))
    rt.set_output("python", str(python) if python.exists() else "")
    rt.set_output("conda", str(mf.conda) if mf else "")
    rt.set_output("reused", "true" if report.reused else "false")
    if activate:
        from gpu_ci.conda import activation

        for name, value in sorted(activation.capture(prefix, sub_env).items()):
            rt.export_variable(name, value)
        if mf:
            rt.add_path(str(mf.root / "condabin"))
        for entry in activation.path_entries(prefix):
            rt.add_path(entry)
    verb = "reused" if report.reused else "created"
    rt.info(f"setup-conda-from-lock: {verb} {prefix} from {path} ({plan.count} packages, "
            f"{report.downloaded_bytes / 1e6:.1f} MB downloaded, "
            f"{sum(phases.values()):.1f} s)")
    if vendor.root:
        rt.info(f"setup-conda-from-lock: vendor conda at {vendor.root} ({vendor.found_by}) was "
                "left alone.")
    rt.summary(_summary(plan, path, mf, vendor, report, phases))
    return 0


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
        rows.append(("downloaded", f"{report.downloaded_bytes / 1e6:.1f} MB "
                     f"({report.cached_archives} archives from cache)"))
        for phase, seconds in (phases or {}).items():
            rows.append((f"time: {phase}", f"{seconds:.2f} s"))
    return "### setup-conda-from-lock\n\n" + markdown_table(["", ""], rows)
