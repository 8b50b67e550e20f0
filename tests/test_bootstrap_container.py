"""The bootstrap in jobs without Python (issue 30): a real Debian userland with no Python,
where the bootstrap installs one and verify-cuda-env reports the (fake) GPU the way the
NVIDIA container runtime shows it; and the no-root, no-package-manager path, which downloads
the pinned uv (from a loopback server holding PyPI's wheel) and checks its sha256.

The Debian root (``debootstrap --variant=minbase``, Debian's own tool and mirror) is built
once and kept under ``${XDG_CACHE_HOME:-~/.cache}/gpu-ci-tests``: built aside, renamed into
place, one builder at a time (``testkit/debian_root.py``, which the cold-start benchmark
shares). Each test runs in an overlay of it (a copy where overlayfs is missing), in a
private mount namespace, so the cached root is never written.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_ci.cuda.facts import NvmlSnapshot
from gpu_ci.cuda.verify.checks import EnvFacts, in_container, nvml_findings
from testkit.cli import parse_output_file
from testkit.cuda_env import build_fake_nvml, observed_h200, write_config
from testkit.debian_root import (
    CHECKOUT,
    ENTER,
    MULTIARCH,
    cache_dir,
    debian_root,
    locked,
    pip_config_into,
)
from testkit.shared import ROOT
from testkit.standalone_python import CONDA_PREFIX_SETUP, StandalonePython, conda_prefix_into

PROVISION = ROOT / "scripts" / "provision-python.sh"
BOOTSTRAP = ROOT / "scripts" / "bootstrap.sh"
WHEEL_PLATFORM = {"x86_64": "musllinux_1_1_x86_64", "aarch64": "musllinux_1_1_aarch64"}

linux_only = pytest.mark.skipif(
    sys.platform != "linux", reason="the bootstrap's Python provisioning is Linux only"
)


def uv_pin() -> dict[str, str]:
    """The bootstrap's own pin for this machine (one source of truth: provision-python.sh)."""
    proc = subprocess.run(
        ["bash", "-c", f'. "{PROVISION}"; echo "$UV_VERSION"; uv_pin "$(uname -m)"'],
        capture_output=True,
        text=True,
        check=True,
    )
    version, pin = proc.stdout.split("\n")[:2]
    url, wheel, offset, csize, crc, size, binary = pin.split()
    return {
        "version": version,
        "url": url,
        "wheel_sha256": wheel,
        "binary_sha256": binary,
        "offset": offset,
        "compressed": csize,
        "crc": crc,
        "size": size,
    }


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="session")
def uv_wheel() -> bytes:
    """PyPI's uv wheel that the bootstrap pins, downloaded once with pip and kept."""
    pin = uv_pin()
    name = pin["url"].rsplit("/", 1)[1]
    path = cache_dir() / "uv-wheels" / name
    if not path.is_file() or sha256(path.read_bytes()) != pin["wheel_sha256"]:
        path.parent.mkdir(parents=True, exist_ok=True)
        with locked(path.parent / ".lock"), tempfile.TemporaryDirectory() as tmp:
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--only-binary",
                    ":all:",
                    "--platform",
                    WHEEL_PLATFORM[platform.machine()],
                    "--python-version",
                    "3.12",
                    "-d",
                    tmp,
                    f"uv=={pin['version']}",
                ],
                capture_output=True,
                text=True,
            )
            assert proc.returncode == 0, proc.stdout + proc.stderr
            got = Path(tmp) / name
            assert sha256(got.read_bytes()) == pin["wheel_sha256"], "PyPI's wheel changed?"
            os.replace(got, path)
    data = path.read_bytes()
    assert sha256(data) == pin["wheel_sha256"]
    return data


class Files(http.server.ThreadingHTTPServer):
    """A loopback server of fixed files; records every path asked for."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.asked: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(handler) -> None:  # noqa: N805
                self.asked.append(handler.path)
                body = self.files.get(handler.path)
                handler.send_response(200 if body is not None else 404)
                handler.send_header("Content-Length", str(len(body or b"")))
                handler.end_headers()
                handler.wfile.write(body or b"")

            def log_message(handler, *args: object) -> None:  # noqa: N805
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"


@pytest.fixture
def serve() -> Iterator[object]:
    servers: list[Files] = []

    def start(files: dict[str, bytes]) -> Files:
        servers.append(Files(files))
        return servers[-1]

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


# -- no root, no package manager: the pinned uv --------------------------------------------


def tools_dir(where: Path, downloader: str) -> Path:
    """A PATH with what a bare image has (bash, coreutils, gzip) and one downloader: no
    Python, no package manager, no uv."""
    bin_dir = where / "bin"
    bin_dir.mkdir(parents=True)
    for tool in (
        "bash",
        "dirname",
        "uname",
        "id",
        "mktemp",
        "mkdir",
        "rm",
        "mv",
        "chmod",
        "cat",
        "cut",
        "head",
        "tail",
        "gzip",
        "sha256sum",
        "find",
        downloader,
    ):
        found = shutil.which(tool)
        if found is None:
            pytest.skip(f"{tool} is not installed on this machine")
        os.symlink(found, bin_dir / tool)
    return bin_dir


def as_unprivileged() -> list[str]:
    """Run as nobody when we are root (the path under test is the no-root one)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is needed to run the bootstrap as nobody")
    return [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]


def shared_tmp() -> Path:
    """A directory nobody (uid 65534) can use too (pytest's tmp_path is private to us)."""
    path = Path(tempfile.mkdtemp(prefix="gpu-ci-container-"))
    path.chmod(0o755)
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)
    return path


def bootstrap_bare(
    work: Path, downloader: str, cwd: Path | None = None, **env: str
) -> subprocess.CompletedProcess:
    """bootstrap.sh with only the tools of :func:`tools_dir` (made here unless ``downloader``
    is empty: then the test made them)."""
    bin_dir = tools_dir(work / "tools", downloader) if downloader else work / "tools" / "bin"
    full = {
        "PATH": str(bin_dir),
        "HOME": str(work / "home"),
        "GPU_CI_CACHE_DIR": str(work / "cache"),
        "GPU_CI_BOOTSTRAP_FALLBACKS": "",
        "GITHUB_STEP_SUMMARY": str(work / "summary.md"),
        "GITHUB_ENV": str(work / "github_env"),
        **env,
    }
    return subprocess.run(
        [*as_unprivileged(), str(bin_dir / "bash"), str(BOOTSTRAP), "verify-cuda-env"],
        env=full,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


@linux_only
@pytest.mark.parametrize("downloader", ["curl", "wget", "node"])
@pytest.mark.slow
def test_no_root_no_package_manager_downloads_and_checks_the_pinned_uv(uv_wheel, serve, downloader):
    pin = uv_pin()
    server = serve({"/uv.whl": uv_wheel})
    work = shared_tmp()
    try:
        proc = bootstrap_bare(
            work,
            downloader,
            GPU_CI_UV_URL=server.url("/uv.whl"),
            UV_PYTHON_INSTALL_MIRROR=server.url("/python"),
        )
        out = proc.stdout + proc.stderr
        assert server.asked[0] == "/uv.whl", out
        assert f"uv {pin['version']} verified (sha256 {pin['binary_sha256']})" in out
        binary = (
            work
            / "cache"
            / "gpu-ci-actions"
            / "python"
            / f"uv-{pin['version']}-{platform.machine()}"
            / "uv"
        )
        assert sha256(binary.read_bytes()) == pin["binary_sha256"]
        assert os.access(binary, os.X_OK)
        # uv then asks the (loopback) Python mirror, which has nothing: a clear failure.
        assert any(path.startswith("/python/") for path in server.asked[1:]), server.asked
        assert proc.returncode == 1
        assert "uv could not install Python 3.12" in proc.stdout
        assert "UV_PYTHON_INSTALL_MIRROR" in proc.stdout
        assert "::error title=gpu-ci bootstrap::No Python >= 3.9" in proc.stdout
    finally:
        shutil.rmtree(work, ignore_errors=True)


def uv_on_bare_path(work: Path, uv_wheel: bytes, pin: dict[str, str]) -> Path:
    """A bare image's tools (:func:`tools_dir`, curl) plus the pinned uv from its wheel."""
    mine = work / "uv-bin"
    mine.mkdir()
    with zipfile.ZipFile(io.BytesIO(uv_wheel)) as wheel:
        (mine / "uv").write_bytes(wheel.read(f"uv-{pin['version']}.data/scripts/uv"))
    (mine / "uv").chmod(0o755)
    tools = tools_dir(work / "tools", "curl")
    os.symlink(mine / "uv", tools / "uv")
    return tools


@linux_only
def test_a_uv_on_path_is_used_without_downloading_one(uv_wheel, serve):
    pin = uv_pin()
    server = serve({"/uv.whl": uv_wheel})
    work = shared_tmp()
    try:
        tools = uv_on_bare_path(work, uv_wheel, pin)
        proc = bootstrap_bare(
            work,
            "",
            GPU_CI_UV_URL=server.url("/uv.whl"),
            UV_PYTHON_INSTALL_MIRROR=server.url("/python"),
        )
        out = proc.stdout + proc.stderr
        assert "/uv.whl" not in server.asked, out
        assert f"installing a uv-managed Python 3.12 with {tools / 'uv'}" in out
        assert any(path.startswith("/python/") for path in server.asked), server.asked
        assert proc.returncode == 1 and "uv could not install Python 3.12" in proc.stdout
    finally:
        shutil.rmtree(work, ignore_errors=True)


@linux_only
def test_a_uv_toml_in_the_workspace_does_not_steer_the_python_download(uv_wheel, serve):
    """Red team (issue 44): the pull request's ``uv.toml`` names its own download list
    (sha256s included); the Python it brings would land in the shared home that later jobs
    reuse. uv runs from / without configuration files: only the admin's variables count."""
    pin = uv_pin()
    server = serve({"/uv.whl": uv_wheel})
    work = shared_tmp()
    try:
        uv_on_bare_path(work, uv_wheel, pin)
        workspace = work / "workspace"
        workspace.mkdir()
        (workspace / "uv.toml").write_text(
            f'python-downloads-json-url = "{server.url("/evil.json")}"\n'
            f'python-install-mirror = "{server.url("/evil")}"\n'
        )
        proc = bootstrap_bare(
            work, "", cwd=workspace, UV_PYTHON_INSTALL_MIRROR=server.url("/python")
        )
        assert not [p for p in server.asked if p.startswith("/evil")], server.asked
        assert any(path.startswith("/python/") for path in server.asked), server.asked
        assert proc.returncode == 1 and "uv could not install Python 3.12" in proc.stdout
    finally:
        shutil.rmtree(work, ignore_errors=True)


@linux_only
def test_a_uv_download_with_another_sha256_is_refused(uv_wheel, serve):
    pin = uv_pin()
    tampered = bytearray(uv_wheel)
    tampered[int(pin["offset"]) + 1000] ^= 0xFF  # one byte of the uv binary's stream
    server = serve({"/uv.whl": bytes(tampered)})
    work = shared_tmp()
    try:
        proc = bootstrap_bare(work, "curl", GPU_CI_UV_URL=server.url("/uv.whl"))
        assert proc.returncode == 1
        assert server.asked == ["/uv.whl"]  # nothing after the refusal
        assert f"not the pinned {pin['wheel_sha256']}: refused" in proc.stdout
        assert "::error title=gpu-ci bootstrap::No Python >= 3.9" in proc.stdout
        cache = work / "cache" / "gpu-ci-actions" / "python"
        assert not [p for p in cache.rglob("*") if p.is_file()], "nothing kept"
    finally:
        shutil.rmtree(work, ignore_errors=True)


@linux_only
def test_system_mode_without_root_names_the_fix(serve):
    server = serve({})
    work = shared_tmp()
    try:
        proc = bootstrap_bare(
            work, "curl", GPU_CI_INSTALL_PYTHON="system", GPU_CI_UV_URL=server.url("/uv.whl")
        )
        assert proc.returncode == 1
        assert server.asked == []
        assert "install-python: system cannot install one (not root)" in proc.stdout
        assert "install-python: managed" in proc.stdout
    finally:
        shutil.rmtree(work, ignore_errors=True)


@linux_only
def test_an_unknown_mode_is_refused():
    work = shared_tmp()
    try:
        proc = bootstrap_bare(work, "curl", GPU_CI_INSTALL_PYTHON="Conda")
        assert proc.returncode == 1
        assert "input install-python must be auto, system or managed; got 'Conda'" in proc.stdout
    finally:
        shutil.rmtree(work, ignore_errors=True)


@linux_only
def test_nothing_is_installed_where_a_python_exists(serve, tmp_path):
    server = serve({})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_CI_", "GITHUB_"))}
    env.update(
        {
            "GPU_CI_INSTALL_PYTHON": "managed",
            "GPU_CI_UV_URL": server.url("/uv.whl"),
            "GPU_CI_CACHE_DIR": str(tmp_path / "cache"),
            "GPU_CI_BOOTSTRAP_PYTHON": sys.executable,
            "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
            "GITHUB_ENV": str(tmp_path / "github_env"),
            "PATH": f"{ROOT / '.venv' / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}",
        }
    )
    proc = subprocess.run(
        ["bash", str(BOOTSTRAP), "verify-cuda-env"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert server.asked == []
    assert "No Python >= 3.9 in this job" not in proc.stdout
    assert not (tmp_path / "summary.md").exists()
    assert not (tmp_path / "cache" / "gpu-ci-actions" / "python").exists()


# -- what the job's workspace and a shared cache may not do ---------------------------------

#: A uv that "installs" this interpreter and logs each call: the provisioning path without
#: a download.
FAKE_UV = """#!/bin/bash
echo "$*" >> "$UV_LOG"
case "$1 $2" in
  "python install") exit 0 ;;
  "python find") echo "$REAL_PYTHON" ;;
  "--version ") echo "uv 0.0.0" ;;
esac
"""

#: Modules a pull request could plant in the workspace: each leaves a mark when it runs.
PLANTED = ("platform", "hashlib", "sitecustomize", "json")


def provision_with_fake_uv(work: Path, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    tools = tools_dir(work / "tools", "curl")
    (tools / "uv").write_text(FAKE_UV)
    (tools / "uv").chmod(0o755)
    return subprocess.run(
        [str(tools / "bash"), str(BOOTSTRAP), "verify-cuda-env"],
        env={
            "PATH": str(tools),
            "HOME": str(work / "home"),
            "GPU_CI_BOOTSTRAP_FALLBACKS": "",
            "GITHUB_ENV": str(work / "github_env"),
            "UV_LOG": str(work / "uv.log"),
            "REAL_PYTHON": sys.executable,
            **env,
        },
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@linux_only
def test_no_python_the_bootstrap_starts_runs_code_from_the_workspace(tmp_path):
    workspace = tmp_path / "workspace"
    marks = tmp_path / "marks"
    workspace.mkdir()
    marks.mkdir()
    for name in PLANTED:
        (workspace / f"{name}.py").write_text(f"open({str(marks / name)!r}, 'w').close()\n")
    (tmp_path / "not-a-dir").write_text("")
    proc = provision_with_fake_uv(
        tmp_path,
        workspace,
        PYTHONPATH=str(workspace),
        # bootstrap.py stops at its first write: the cache cannot be made under a file.
        GPU_CI_CACHE_DIR=str(tmp_path / "not-a-dir" / "cache"),
    )
    out = proc.stdout + proc.stderr
    version = ".".join(map(str, sys.version_info[:3]))
    assert f"installed Python {version}, a uv-managed Python (uv 0.0.0)" in out
    assert "cannot create" in out and proc.returncode == 1  # bootstrap.py ran, then stopped
    assert sorted(p.name for p in marks.iterdir()) == []


@linux_only
@pytest.mark.parametrize("planted", ["group-writable", "another-owner", "linked-home"])
def test_a_python_home_another_user_could_write_is_refused(tmp_path, planted):
    home = tmp_path / "cache" / "gpu-ci-actions" / "python"
    if planted == "linked-home":
        (tmp_path / "elsewhere").mkdir()
        home.parent.mkdir(parents=True)
        home.symlink_to(tmp_path / "elsewhere")
        why = f"{home} is a symbolic link"
    elif planted == "group-writable":
        (home / "managed").mkdir(parents=True)
        (home / "managed").chmod(0o777)
        why = f"{home / 'managed'} is writable by group or others"
    else:
        if os.geteuid() != 0:
            pytest.skip("only root can give a file to another user")
        (home / "managed").mkdir(parents=True)
        (home / "managed" / "python3").write_text("")
        os.chown(home / "managed" / "python3", 65534, 65534)
        why = f"{home / 'managed' / 'python3'} is owned by another user"
    proc = provision_with_fake_uv(
        tmp_path,
        tmp_path,
        GPU_CI_CACHE_DIR=str(tmp_path / "cache"),
        GPU_CI_INSTALL_PYTHON="managed",
    )
    assert proc.returncode == 1
    assert f"{why}: another user could have planted" in proc.stdout
    assert "its own GPU_CI_CACHE_DIR" in proc.stdout
    assert not (tmp_path / "uv.log").exists(), "uv was run in the foreign home"


# -- a real Debian userland without Python, as root --------------------------------------

needs_root = pytest.mark.skipif(
    sys.platform != "linux"
    or os.geteuid() != 0
    or not shutil.which("debootstrap")
    or not shutil.which("unshare")
    or not shutil.which("chroot"),
    reason="needs Linux, root, debootstrap (apt-get install debootstrap), unshare and chroot: "
    "the test builds a Debian root and runs the bootstrap in it with chroot",
)

#: The job's steps inside the root, as the runner runs a composite action's steps.
JOB = r"""
set -u
export RUNNER_TEMP=/job/runner-temp RUNNER_TOOL_CACHE=/job/tool-cache
export GITHUB_STEP_SUMMARY=/job/summary.md FAKE_NVML_CONFIG=/etc/fake-nvml.cfg
export NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
mkdir -p "$RUNNER_TEMP" "$RUNNER_TOOL_CACHE"
if [ -f /etc/gpu-ci-tests-ca.crt ]; then  # this machine's pip trusts these CAs
  export PIP_CERT=/etc/gpu-ci-tests-ca.crt SSL_CERT_FILE=/etc/gpu-ci-tests-ca.crt
fi
[ ! -f /job/pip.env ] || { set -a; . /job/pip.env; set +a; }
command -v python3 python >/dev/null && { echo "the root has a Python"; exit 3; }
step() {  # <name>: the bootstrap, then verify-cuda-env, with this step's files
  : > "/job/$1.env"; : > "/job/$1.out"
  GITHUB_ENV="/job/$1.env" bash /opt/gpu-ci/scripts/bootstrap.sh verify-cuda-env \
    > "/job/$1.bootstrap.log" 2>&1 || { echo "bootstrap failed: $?"; return 1; }
  set -a; . "/job/$1.env"; set +a
  "$GPU_CI_PYTHON" -c 'import importlib.util as u; print(u.find_spec("pip") is None)' \
    > "/job/$1.nopip"
  GITHUB_OUTPUT="/job/$1.out" INPUT_REQUIRE_GPU=true \
    "$GPU_CI_PYTHON" /opt/gpu-ci/scripts/run.py verify-cuda-env > "/job/$1.verify.log" 2>&1
  echo "$?" > "/job/$1.rc"
}
step first
step second
# The same container started with NVIDIA_DRIVER_CAPABILITIES=utility: NVML, no libcuda.
rm -f /usr/lib/*/libcuda.so.1 && /sbin/ldconfig
unset GPU_CI_PYTHON GPU_CI_ROOT GPU_CI_GROUPS
NVIDIA_DRIVER_CAPABILITIES=utility step nocompute
# An image without NVIDIA_VISIBLE_DEVICES: the runtime mounts nothing, not even NVML.
rm -f /usr/lib/*/libnvidia-ml.so.1 && /sbin/ldconfig
(unset NVIDIA_VISIBLE_DEVICES GPU_CI_PYTHON GPU_CI_ROOT GPU_CI_GROUPS; step novisible)
"""


def job_in_debian(work: Path, job: str, prepare=None) -> Path:
    """Run ``job`` in a fresh overlay of the Debian root; its steps' files, in ``work/job``."""
    if platform.machine() not in MULTIARCH:
        pytest.skip("x86_64 and aarch64 only")
    for name in ("ovl", "root", "job", "checkout"):
        (work / name).mkdir()
    for name in CHECKOUT:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(
                src, work / "checkout" / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy2(src, work / "checkout" / name)
    build_fake_nvml(work / "nvml")
    write_config(work / "nvml.cfg", observed_h200()[1])
    (work / "job" / "job.sh").write_text(job)
    pip_config_into(work)
    if prepare is not None:
        prepare(work / "job")
    proc = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "bash",
            "-c",
            ENTER,
            "enter",
            str(debian_root()),
            str(work),
            MULTIARCH[platform.machine()],
        ],
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    logs = "".join(
        f"--- {p.name}\n{p.read_text(errors='replace')}"
        for p in sorted((work / "job").glob("*.log"))
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr + logs
    return work / "job"


@pytest.fixture(scope="module")
def debian_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One job in a fresh overlay of the Debian root: its steps' logs, env and output files."""
    return job_in_debian(tmp_path_factory.mktemp("debian-job"), JOB)


@needs_root
@pytest.mark.slow
def test_debian_without_python_gets_one_and_verify_cuda_env_reports_the_gpu(debian_job):
    job = debian_job
    first = (job / "first.bootstrap.log").read_text()
    assert (job / "first.rc").read_text().strip() == "0", (job / "first.verify.log").read_text()
    # (b): root, apt-get, no Python: Debian's python3 from Debian's mirror.
    match = re.search(
        r"installed Python (3\.\d+\.\d+), the distribution's Python, installed "
        r"with apt-get \(python3 python3-venv\), in (\d+\.\d) s "
        r"\(install-python: auto\)",
        first,
    )
    assert match, first
    summary = (job / "summary.md").read_text()
    assert match.group(0) in summary
    assert summary.count("### gpu-ci bootstrap") == 1  # later steps installed nothing
    env = dict(line.split("=", 1) for line in (job / "first.env").read_text().splitlines())
    assert env["GPU_CI_BOOTSTRAP_PYTHON"] == "/usr/bin/python3"
    assert env["GPU_CI_PYTHON"].startswith("/job/tool-cache/gpu-ci-actions/")
    # Debian's python3 has no pip: pip ran from its python3-pip-whl wheel (no ensurepip)
    assert (job / "first.nopip").read_text().strip() == "True"
    outputs = parse_output_file((job / "first.out").read_text())
    assert outputs["ok"] == "true", outputs
    assert outputs["driver-version"] == "580.159.04"
    gpus = json.loads(outputs["gpus"])
    assert gpus and gpus[0]["name"] == "NVIDIA H200"
    # A later action of the job: the Python and the venv are there now.
    second = (job / "second.bootstrap.log").read_text()
    assert "bootstrapped earlier in this job" in second
    assert "No Python >= 3.9 in this job" not in second
    assert (job / "second.rc").read_text().strip() == "0"
    assert parse_output_file((job / "second.out").read_text())["ok"] == "true"


@needs_root
@pytest.mark.slow
def test_debian_container_without_compute_capability_is_named(debian_job):
    job = debian_job
    bootstrap = (job / "nocompute.bootstrap.log").read_text()
    assert "No Python >= 3.9 in this job" not in bootstrap  # Debian's python3, found
    assert "reused" in bootstrap
    assert (job / "nocompute.rc").read_text().strip() == "1"
    findings = json.loads(parse_output_file((job / "nocompute.out").read_text())["findings"])
    codes = {f["code"]: f for f in findings}
    assert "libcuda-missing" in codes, findings
    assert (
        "NVIDIA_DRIVER_CAPABILITIES='utility' lacks 'compute'"
        in codes["libcuda-missing"]["message"]
    )
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in codes["libcuda-missing"]["fix"]


@needs_root
@pytest.mark.slow
def test_debian_container_without_visible_devices_is_named(debian_job):
    job = debian_job
    assert (job / "novisible.rc").read_text().strip() == "1"
    findings = json.loads(parse_output_file((job / "novisible.out").read_text())["findings"])
    assert [f["code"] for f in findings] == ["no-driver"], findings
    assert "NVIDIA_VISIBLE_DEVICES is not set in this container" in findings[0]["message"]
    assert "--gpus all" in findings[0]["fix"]
    assert "NVIDIA_VISIBLE_DEVICES: all" in findings[0]["fix"]


#: An image like RAPIDS' ci-conda (:data:`CONDA_PREFIX_SETUP`); the conda hashed around the
#: job.
CONDA_JOB = (
    r"""
set -u
export RUNNER_TEMP=/job/runner-temp RUNNER_TOOL_CACHE=/job/tool-cache
export GITHUB_STEP_SUMMARY=/job/summary.md FAKE_NVML_CONFIG=/etc/fake-nvml.cfg
export NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
mkdir -p "$RUNNER_TEMP" "$RUNNER_TOOL_CACHE"
if [ -f /etc/gpu-ci-tests-ca.crt ]; then
  export PIP_CERT=/etc/gpu-ci-tests-ca.crt SSL_CERT_FILE=/etc/gpu-ci-tests-ca.crt
fi
[ ! -f /job/pip.env ] || { set -a; . /job/pip.env; set +a; }
"""
    + CONDA_PREFIX_SETUP
    + r"""
command -v python3 > /job/which.txt
digest() { (cd /opt/conda && find . -type f -exec sha256sum {} + | sort); }
digest > /job/conda.before
: > /job/conda.env; : > /job/conda.out
GITHUB_ENV=/job/conda.env bash /opt/gpu-ci/scripts/bootstrap.sh verify-cuda-env \
  > /job/conda.bootstrap.log 2>&1
echo "$?" > /job/conda.bootstrap.rc
set -a; . /job/conda.env; set +a
GITHUB_OUTPUT=/job/conda.out INPUT_REQUIRE_GPU=true \
  "$GPU_CI_PYTHON" /opt/gpu-ci/scripts/run.py verify-cuda-env > /job/conda.verify.log 2>&1
echo "$?" > /job/conda.rc
digest > /job/conda.after
"""
)


@needs_root
@pytest.mark.slow
def test_a_conda_python_alone_serves_the_actions_without_a_second_python(tmp_path):
    standalone = StandalonePython()
    try:
        if standalone.archive is None:
            pytest.skip(f"this host's Python cannot be packed as a prefix: {standalone.why}")

        def prepare(job: Path) -> None:
            why = conda_prefix_into(job, standalone.archive)
            if why:
                pytest.skip(why)

        job = job_in_debian(tmp_path, CONDA_JOB, prepare)
    finally:
        standalone.close()
    log = (job / "conda.bootstrap.log").read_text()
    assert (job / "which.txt").read_text().strip() == "/opt/conda/bin/python3"
    assert (job / "conda.bootstrap.rc").read_text().strip() == "0", log
    assert "/opt/conda/bin/python3 creates the bootstrap's own venv" in log
    assert "No Python >= 3.9 in this job" not in log  # no second Python installed
    env = dict(line.split("=", 1) for line in (job / "conda.env").read_text().splitlines())
    assert env["GPU_CI_PYTHON"].startswith("/job/tool-cache/gpu-ci-actions/")
    assert (job / "conda.rc").read_text().strip() == "0", (job / "conda.verify.log").read_text()
    assert parse_output_file((job / "conda.out").read_text())["ok"] == "true"
    assert (job / "conda.after").read_text() == (job / "conda.before").read_text()
    assert (job / "conda.before").read_text().count("\n") > 100  # the whole prefix, hashed


# -- verify-cuda-env's container findings, one by one ------------------------------------

NO_NVML = NvmlSnapshot(ok=False, error_code=12, error_name="LIBRARY_NOT_FOUND")


@pytest.mark.parametrize(
    ("env", "says", "fix"),
    [
        (
            EnvFacts(in_container=True),
            "NVIDIA_VISIBLE_DEVICES is not set in this container",
            "NVIDIA_VISIBLE_DEVICES: all",
        ),
        (
            EnvFacts(in_container=True, visible_devices="void"),
            "NVIDIA_VISIBLE_DEVICES='void'",
            "--gpus all",
        ),
        (
            EnvFacts(visible_devices="all", driver_capabilities="compute"),
            "NVIDIA_DRIVER_CAPABILITIES='compute' lacks 'utility'",
            "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
        ),
        (
            EnvFacts(
                in_container=True, visible_devices="all", driver_capabilities="compute,utility"
            ),
            "it was not started with the NVIDIA runtime",
            "--gpus all",
        ),
    ],
)
def test_each_container_failure_is_named_with_its_fix(env, says, fix):
    (finding,) = nvml_findings(NO_NVML, True, env)
    assert finding.code == "no-driver"
    assert finding.message.startswith("No NVIDIA driver visible to this job: ")
    assert says in finding.message
    assert fix in finding.fix


def test_outside_a_container_no_driver_says_cpu_runner():
    (finding,) = nvml_findings(NO_NVML, True, EnvFacts())
    assert "CPU runner" in finding.message


def test_in_container_reads_what_docker_and_podman_write(tmp_path):
    assert not in_container({}, tmp_path)
    assert in_container({"container": "podman"}, tmp_path)
    (tmp_path / ".dockerenv").write_text("")
    assert in_container({}, tmp_path)
    (tmp_path / ".dockerenv").unlink()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".containerenv").write_text("")
    assert in_container({}, tmp_path)
