"""setup-conda-from-lock installing real conda packages from a local channel over HTTP."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("rattler", reason="py-rattler needs Python >= 3.10")
pytest.importorskip("rattler_build", reason="py-rattler-build needs Python >= 3.10")

from tests.conda_channel import ChannelServer, build_channel  # noqa: E402
from tests.conftest import parse_output_file, tree_digest  # noqa: E402


@pytest.fixture(scope="session")
def channel(tmp_path_factory):
    root = tmp_path_factory.mktemp("channel")
    built = build_channel(root)
    built.server = ChannelServer(root).start()
    yield built
    built.server.stop()


@pytest.fixture
def setup(run_cli, tmp_path, channel):
    """Run setup-conda-from-lock with a lock text; returns the result with handy paths."""
    channel.server.faults.clear()
    cache = tmp_path / "toolcache"

    def run(lock_text: str, *args: str, env=None, name="lock.txt"):
        lock = tmp_path / name
        lock.write_text(lock_text)
        for f in ("github_env", "github_path"):
            (tmp_path / f).touch()
        full = {"RUNNER_TOOL_CACHE": str(cache), "GITHUB_ENV": str(tmp_path / "github_env"),
                "GITHUB_PATH": str(tmp_path / "github_path"), "GPU_CI_HTTP_BACKOFF": "0.01",
                "GPU_CI_HTTP_RETRIES": "2"}
        full.update(env or {})
        result = run_cli(["setup-conda-from-lock", "--lock-file", str(lock),
                          "--miniforge", "false", *args], full)
        result.github_env = parse_output_file((tmp_path / "github_env").read_text())
        result.github_path = (tmp_path / "github_path").read_text().split()
        return result

    run.default_prefix = cache / "miniforge3" / "26.3.2-3" / "envs" / "ci"
    return run


def test_explicit_lock_creates_a_working_environment(setup, channel):
    result = setup(channel.explicit_lock(["libhello", "hello", "hello-data"]))
    assert result.returncode == 0, result.stdout + result.stderr
    prefix = Path(result.outputs["prefix"])
    assert prefix == setup.default_prefix
    assert result.outputs["packages"] == "3" and result.outputs["reused"] == "false"
    assert result.outputs["python"] == "" and result.outputs["conda"] == ""
    # the final prefix, not the staging directory, is written into placeholders
    assert (prefix / "share/libhello/prefix.txt").read_text() == f"installed at {prefix}\n"
    assert f"hello from {prefix}" in (prefix / "bin/hello").read_text()
    meta = json.loads((prefix / "conda-meta/hello-2.1-h1_3.json").read_text())
    assert meta["url"] == channel.archive_url(channel.archives[1])
    assert not list(prefix.parent.glob(".*gpu-ci-*"))  # no staging left behind
    # activation for later steps
    assert result.github_env["CONDA_PREFIX"] == str(prefix)
    assert result.github_env["HELLO_HOME"] == f"{prefix}/share/hello"
    assert result.github_env["HELLO_ACTIVATED"] == "yes"
    assert result.github_path == [str(prefix / "bin")]
    assert "| reused | no |" in result.summary
    assert "time: download+verify" in result.summary and "time: extract+link" in result.summary


def test_unified_lock_with_pip_entry_and_a_real_interpreter(setup, channel):
    import subprocess

    result = setup(channel.unified_lock(pip=True), name="conda-lock.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.outputs["packages"] == "5"  # 4 conda (virtual __glibc skipped) + 1 pip
    python = result.outputs["python"]
    out = subprocess.run([python, "-c", "import gpuci_demo, sys; print(gpuci_demo.VALUE, "
                          "sys.prefix)"], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["42", result.outputs["prefix"]]


def test_same_lock_again_is_reused_without_downloads(setup, channel):
    lock = channel.explicit_lock(["libhello", "hello"])
    first = setup(lock)
    assert first.returncode == 0
    before = len(channel.server.log)
    second = setup(lock)
    assert second.outputs["reused"] == "true"
    assert len(channel.server.log) == before
    assert second.outputs["lock-sha256"] == first.outputs["lock-sha256"]


def test_cache_key_names_lock_platform_engine_and_miniforge(setup, channel):
    result = setup(channel.explicit_lock(["libhello"]), "--dry-run", "true")
    key = result.outputs["cache-key"]
    assert "linux-64" in key and "rattler" in key and "mf26.3.2-3" in key
    assert result.outputs["lock-sha256"][:32] in key


def test_dry_run_downloads_nothing(setup, channel):
    before = len(channel.server.log)
    result = setup(channel.explicit_lock(), "--dry-run", "true")
    assert result.returncode == 0
    assert len(channel.server.log) == before
    assert not setup.default_prefix.exists()
    assert "  hello 2.1 h1_3" in result.stdout


def test_categories_include_dev_packages(setup, channel):
    lock = channel.unified_lock(["libhello", "hello"], dev=["hello-data"])
    main = setup(lock, "--dry-run", "true", name="a.yml")
    both = setup(lock, "--dry-run", "true", "--categories", "main,dev", name="a.yml")
    assert (main.outputs["packages"], both.outputs["packages"]) == ("2", "3")


def test_corrupted_download_names_the_package_and_both_hashes(setup, channel):
    hello = channel.archives[1]
    channel.server.fail(f"channel/linux-64/{hello.filename}", "corrupt", "corrupt", "corrupt")
    result = setup(channel.explicit_lock(["libhello", "hello"]))
    assert result.returncode == 1
    error = result.errors[0]
    assert "md5 mismatch for hello 2.1 (h1_3)" in error
    assert hello.md5 in error
    assert not setup.default_prefix.exists()


def test_truncated_download_is_fetched_again(setup, channel):
    hello = channel.archives[1]
    channel.server.fail(f"channel/linux-64/{hello.filename}", "truncate")
    result = setup(channel.explicit_lock(["libhello", "hello"]))
    assert result.returncode == 0, result.stdout
    assert [s for _, s in channel.server.requests(hello.filename)][-2:] == [200, 206]


def test_server_error_then_retry(setup, channel):
    hello = channel.archives[1]
    channel.server.fail(f"channel/linux-64/{hello.filename}", "500", "503")
    result = setup(channel.explicit_lock(["libhello", "hello"]))
    assert result.returncode == 0, result.stdout
    assert [s for _, s in channel.server.requests(hello.filename)][-3:] == [500, 503, 200]


def test_persistent_server_error_fails_cleanly(setup, channel):
    hello = channel.archives[1]
    channel.server.fail(f"channel/linux-64/{hello.filename}", *["500"] * 5)
    result = setup(channel.explicit_lock(["libhello", "hello"]))
    assert result.returncode == 1
    assert "failed after 3 attempts (HTTP 500)" in result.errors[0]
    assert not setup.default_prefix.exists()


def test_not_found_is_not_retried(setup, channel):
    lock = channel.explicit_lock(["libhello"]).replace("libhello-1.0", "libhello-9.9")
    result = setup(lock)
    assert result.returncode == 1
    assert "HTTP 404" in result.errors[0] and "libhello-9.9-h0_0.tar.bz2" in result.errors[0]
    assert len(channel.server.requests("libhello-9.9")) == 1


def test_unknown_platform_lists_the_locked_ones(setup, channel):
    result = setup(channel.unified_lock(), "--platform", "win-64", name="c.yml")
    assert result.returncode == 1
    assert "no packages for win-64; it locks linux-64, osx-arm64" in result.errors[0]


def test_failure_leaves_an_existing_environment_exactly_as_it_was(setup, channel):
    first = setup(channel.explicit_lock(["libhello"]))
    prefix = Path(first.outputs["prefix"])
    before = tree_digest(prefix)
    hello = channel.archives[1]
    channel.server.fail(f"channel/linux-64/{hello.filename}", *["corrupt"] * 3)
    failed = setup(channel.explicit_lock(["libhello", "hello"]))
    assert failed.returncode == 1
    assert tree_digest(prefix) == before


def test_pip_failure_rolls_back_to_the_previous_environment(setup, channel):
    first = setup(channel.explicit_lock(["python"]))
    prefix = Path(first.outputs["prefix"])
    before = tree_digest(prefix)
    good = channel.explicit_lock(["python", "hello", "libhello"], pip=True)
    wheel_sha = hashlib.sha256(channel.wheel.read_bytes()).hexdigest()
    failed = setup(good.replace(wheel_sha, "0" * 64))  # pip's hash check must refuse it
    assert failed.returncode == 1
    assert "pip entries failed" in failed.errors[0]
    assert tree_digest(prefix) == before
    assert not list(prefix.parent.glob(".*gpu-ci-*"))


def test_pip_entries_without_python_in_the_lock(setup, channel):
    result = setup(channel.explicit_lock(["libhello"], pip=True))
    assert result.returncode == 1
    assert "no python to install them with" in result.errors[0]
    assert not setup.default_prefix.exists()


def test_explicit_prefix_input(setup, channel, tmp_path):
    target = tmp_path / "my env"
    result = setup(channel.explicit_lock(["libhello"]), "--prefix", str(target / "x"))
    assert result.returncode == 0 and result.outputs["prefix"] == str(target / "x")


def test_root_with_spaces_is_unusable(setup, channel, tmp_path):
    result = setup(channel.explicit_lock(["libhello"]), "--root", str(tmp_path / "a b"))
    assert result.returncode == 2 and "must not contain spaces" in result.errors[0]


def test_engine_conda_needs_miniforge(setup, channel):
    result = setup(channel.explicit_lock(["libhello"]), "--engine", "conda")
    assert result.returncode == 2 and "engine: conda needs miniforge: true" in result.errors[0]


# -- Miniforge -------------------------------------------------------------------------------

FAKE_INSTALLER = """#!/bin/bash
# Installer-shaped stand-in for Miniforge3-*.sh: same flags, lays down bin/conda.
set -e
prefix=""
while getopts "bup:" opt; do
  case $opt in b) ;; u) ;; p) prefix="$OPTARG" ;; *) exit 2 ;; esac
done
[ -n "$prefix" ] || exit 2
mkdir -p "$prefix/bin" "$prefix/condabin"
printf '#!/bin/sh\\necho "conda 26.3.2"\\n' > "$prefix/bin/conda"
chmod +x "$prefix/bin/conda"
echo "installed into $prefix"
"""


@pytest.fixture
def installer(channel):
    from gpu_ci.conda.miniforge import installer_name

    name = installer_name("26.3.2-3")
    folder = channel.root.parent / "miniforge" / "26.3.2-3"
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / name
    script.write_text(FAKE_INSTALLER)
    sha = hashlib.sha256(script.read_bytes()).hexdigest()
    (folder / (name + ".sha256")).write_text(f"{sha}  {name}\n")
    return channel.url(f"miniforge/26.3.2-3/{name}"), sha


def test_miniforge_installed_from_verified_installer_then_reused(setup, channel, installer,
                                                                 tmp_path):
    url, sha = installer
    args = ("--miniforge", "true", "--installer-url", url)
    first = setup(channel.explicit_lock(["libhello"]), *args)
    assert first.returncode == 0, first.stdout + first.stderr
    conda = Path(first.outputs["conda"])
    assert conda.name == "conda" and conda.exists()
    assert f"sha256 {sha[:16]}" in first.summary
    assert str(conda.parent.parent / "condabin") in first.github_path
    condarc = conda.parent.parent / ".condarc"
    assert "pkgs_dirs" in condarc.read_text()
    second = setup(channel.explicit_lock(["libhello", "hello"]), *args)
    assert second.returncode == 0
    name = url.split("/")[-1]
    fetched = [p for p, _ in channel.server.log if p.endswith("/" + name)]
    assert len(fetched) == 1  # the installer was downloaded once, then reused
    assert "reused" in second.summary


def test_miniforge_wrong_checksum_installs_nothing(setup, channel, installer):
    url, _ = installer
    result = setup(channel.explicit_lock(["libhello"]), "--miniforge", "true",
                   "--installer-url", url, "--installer-sha256", "0" * 64)
    assert result.returncode == 1
    assert "sha256 mismatch for Miniforge 26.3.2-3" in result.errors[0]
    assert not (setup.default_prefix.parent.parent / "bin" / "conda").exists()


def test_miniforge_without_any_checksum_is_refused(setup, channel, installer):
    url, _ = installer
    channel.server.fail(url.split("/", 3)[3] + ".sha256", "404")
    result = setup(channel.explicit_lock(["libhello"]), "--miniforge", "true",
                   "--installer-url", url)
    assert result.returncode == 1
    assert "no checksum for the Miniforge installer" in result.errors[0]
    assert not setup.default_prefix.exists()


# -- the vendor's read-only conda, as an unprivileged user ------------------------------------

VENDOR_CONDA = """#!/bin/sh
# The vendor conda: running it at all is a failure of the action.
touch "{marker}"
exit 0
"""


@pytest.fixture(scope="session")
def unprivileged_python(tmp_path_factory):
    """Debian's python3 with our pure dependencies, readable by 'nobody'."""
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    system = Path("/usr/bin/python3")
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None or not system.exists():
        pytest.skip("needs root, setpriv and /usr/bin/python3 to drop privileges")
    version = subprocess.run([str(system), "-c", "import sys; print(sys.version_info[:2])"],
                             capture_output=True, text=True).stdout.strip()
    if version != str(tuple(sys.version_info[:2])):
        pytest.skip(f"/usr/bin/python3 is {version}, the wheels here are for "
                    f"{sys.version_info[:2]}")
    base = Path(tempfile.mkdtemp(prefix="gpu-ci-nobody-", dir="/tmp"))
    base.chmod(0o755)
    site = base / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(site), "pyyaml", "packaging", "py-rattler", "actions-toolkit"],
                   check=True, capture_output=True)
    shutil.copytree(Path(__file__).resolve().parents[1] / "src" / "gpu_ci",
                    base / "src" / "gpu_ci")
    subprocess.run(["chmod", "-R", "a+rX", str(base)], check=True)
    yield base, f"{site}:{base / 'src'}"
    shutil.rmtree(base, ignore_errors=True)


def test_read_only_vendor_conda_is_never_run_or_written(unprivileged_python, channel, installer):
    import shutil
    import subprocess
    import tempfile

    base, pythonpath = unprivileged_python
    work = Path(tempfile.mkdtemp(prefix="job-", dir=base))
    work.chmod(0o777)
    vendor = work / "vendor-conda"
    for sub in ("bin", "condabin", "conda-meta", "pkgs"):
        (vendor / sub).mkdir(parents=True)
    marker = work / "vendor-conda-was-run"
    for exe in (vendor / "bin" / "conda", vendor / "condabin" / "conda"):
        exe.write_text(VENDOR_CONDA.format(marker=marker))
        exe.chmod(0o755)
    (vendor / ".condarc").write_text("channels: [nvidia, defaults]\n")
    (vendor / "conda-meta" / "history").write_text("# vendor\n")
    subprocess.run(["chmod", "-R", "a-w", str(vendor)], check=True)
    before = tree_digest(vendor)
    home = work / "home"
    home.mkdir()
    home.chmod(0o777)
    lock = work / "lock.txt"
    lock.write_text(channel.explicit_lock(["libhello", "hello"]))
    outputs = work / "outputs"
    outputs.touch()
    outputs.chmod(0o666)
    url, _ = installer
    env = {"PATH": f"{vendor / 'bin'}:{vendor / 'condabin'}:/usr/bin:/bin",
           "HOME": str(home), "CONDA": str(vendor), "CONDA_EXE": str(vendor / "bin" / "conda"),
           "CONDA_PREFIX": str(vendor), "CONDA_SHLVL": "1", "PYTHONPATH": pythonpath,
           "RUNNER_TOOL_CACHE": str(work / "toolcache"), "GITHUB_OUTPUT": str(outputs)}
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           "/usr/bin/python3", "-m", "gpu_ci", "setup-conda-from-lock",
                           "--lock-file", str(lock), "--installer-url", url,
                           "--activate", "false"],
                          env=env, capture_output=True, text=True, cwd=str(work))
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert tree_digest(vendor) == before
        assert not marker.exists()
        assert not (home / ".condarc").exists()
        out = parse_output_file(outputs.read_text())
        prefix = Path(out["prefix"])
        assert (prefix / "bin" / "hello").exists()
        assert prefix.stat().st_uid == 65534
        assert f"vendor conda at {vendor}" in proc.stdout
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(work)], check=False)
        shutil.rmtree(work, ignore_errors=True)


def test_credentials_in_lock_urls_are_masked(setup, channel):
    lock = channel.explicit_lock(["libhello"]).replace("http://", "http://ci-bot:hunter2pw@")
    result = setup(lock, "--dry-run", "true")
    assert result.returncode == 0, result.stdout
    masks = [line for line in result.stdout.splitlines() if line.startswith("::add-mask::")]
    assert masks == ["::add-mask::hunter2pw"] * len(masks) and masks
    others = [line for line in result.stdout.splitlines() if not line.startswith("::add-mask")]
    assert not any("hunter2pw" in line for line in others)
    assert "***:***@127.0.0.1" in result.stdout  # the channels line, masked


FAKE_CONDA = """#!/bin/sh
# Stands in for Miniforge's conda at the process boundary: records how it was called.
printf '%s\\n' "$@" > "{log}.argv"
env > "{log}.env"
prefix=""; while [ $# -gt 0 ]; do [ "$1" = --prefix ] && prefix="$2"; shift; done
mkdir -p "$prefix/conda-meta" "$prefix/bin"
"""


def test_engine_conda_runs_the_writable_conda_isolated(setup, channel, installer, tmp_path):
    url, _ = installer
    first = setup(channel.explicit_lock(["libhello"]), "--miniforge", "true",
                  "--installer-url", url, "--dry-run", "false")
    conda = Path(first.outputs["conda"])
    log = tmp_path / "conda-call"
    conda.write_text(FAKE_CONDA.format(log=log))
    result = setup(channel.explicit_lock(["libhello", "hello"]), "--miniforge", "true",
                   "--installer-url", url, "--engine", "conda",
                   env={"CONDA_PREFIX": "/opt/vendor", "PYTHONPATH": "/opt/vendor/lib"})
    assert result.returncode == 0, result.stdout + result.stderr
    argv = (tmp_path / "conda-call.argv").read_text().split("\n")
    assert argv[:4] == ["create", "--yes", "--quiet", "--offline"]
    explicit_arg = argv[argv.index("--file") + 1]
    assert explicit_arg.endswith("explicit.txt")
    env = dict(line.split("=", 1) for line in
               (tmp_path / "conda-call.env").read_text().splitlines() if "=" in line)
    assert env["CONDARC"] == str(conda.parent.parent / ".condarc")
    assert env["CONDA_PKGS_DIRS"] == str(conda.parent.parent / "pkgs")
    assert "CONDA_PREFIX" not in env and "PYTHONPATH" not in env
    assert Path(result.outputs["prefix"], "conda-meta", "gpu-ci-lock.json").exists()


def test_stale_cache_entry_from_another_archive_is_extracted_again(setup, channel):
    libhello = channel.archives[0]
    cache = setup.default_prefix.parent.parent / "pkgs" / "rattler"
    cache_entry = cache / "libhello-1.0-h0_0"
    (cache_entry / "share" / "libhello").mkdir(parents=True)
    (cache_entry / "share" / "libhello" / "prefix.txt").write_text("stale\n")
    # rattler's lock file: revision, then the sha256 of the archive it extracted (another)
    (cache / "libhello-1.0-h0_0.lock").write_bytes(bytes(8) + bytes.fromhex("ab" * 32))
    (cache / "libhello-1.0-h0_0.gpu-ci-md5").write_text(f"{libhello.md5} {'ab' * 32}\n")
    before = len(channel.server.requests(libhello.filename))
    result = setup(channel.explicit_lock(["libhello"]))
    assert result.returncode == 0, result.stdout
    prefix = Path(result.outputs["prefix"])
    assert (prefix / "share/libhello/prefix.txt").read_text() == f"installed at {prefix}\n"
    assert len(channel.server.requests(libhello.filename)) == before + 1  # fetched again
    assert (cache / "libhello-1.0-h0_0.gpu-ci-md5").read_text() == (
        f"{libhello.md5} {libhello.sha256}\n")


def test_valid_cache_entry_is_trusted_without_its_archive(setup, channel):
    libhello = channel.archives[0]
    before = len(channel.server.requests(libhello.filename))
    first = setup(channel.explicit_lock(["libhello"]))  # md5-only lock
    assert first.returncode == 0, first.stdout
    pkgs = setup.default_prefix.parent.parent / "pkgs"
    shutil.rmtree(pkgs / "archives")  # as restored by cache: true (archives excluded)
    shutil.rmtree(setup.default_prefix)
    second = setup(channel.explicit_lock(["libhello"]))
    assert second.returncode == 0, second.stdout
    assert len(channel.server.requests(libhello.filename)) == before + 1  # once, then trusted
    assert "(1 archives from cache)" in second.summary
    meta = json.loads((setup.default_prefix / "conda-meta/libhello-1.0-h0_0.json").read_text())
    assert meta["url"] == channel.archive_url(libhello)
