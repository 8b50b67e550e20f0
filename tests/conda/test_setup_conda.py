"""setup-conda-from-lock installing real conda packages from a local channel over HTTP."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

pytest.importorskip("rattler", reason="py-rattler needs Python >= 3.10")
pytest.importorskip("rattler_build", reason="py-rattler-build needs Python >= 3.10")

from testkit.cli import parse_output_file, tree_digest  # noqa: E402
from testkit.conda.jobs import (  # noqa: E402
    FAKE_MF,
    ROOT,
    SMALL,
    assert_cache_valid,
    assert_environment,
    assert_whole,
    job,
    miniforge_args,
    our_temporaries,
    spawn,
    survivors,
)


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
    assert "time: download+verify+extract" in result.summary and "time: link" in result.summary


def test_unified_lock_with_pip_entry_and_a_real_interpreter(setup, channel):
    import subprocess

    result = setup(channel.unified_lock(pip=True), name="conda-lock.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.outputs["packages"] == "5"  # 4 conda (virtual __glibc skipped) + 1 pip
    python = result.outputs["python"]
    out = subprocess.run(
        [python, "-c", "import gpuci_demo, sys; print(gpuci_demo.VALUE, sys.prefix)"],
        capture_output=True,
        text=True,
        check=True,
    )
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
    runner = {"RUNNER_OS": "Linux", "RUNNER_ARCH": "X64"}
    text = channel.explicit_lock(["libhello"])
    result = setup(text, "--dry-run", "true", "--platform", "linux-64", env=runner)
    key = result.outputs["cache-key"]
    sha = hashlib.sha256(text.encode()).hexdigest()  # of the file's bytes
    assert key == f"gpu-ci-conda-v1-Linux-X64-linux-64-rattler-mf26.3.2-3-main-{sha}"


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
    result = setup(channel.explicit_lock(["libhello", "hello"]), "--stream-downloads", "false")
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
    # the streamed attempt, then our downloader's one attempt that names the error: a retry
    # (GPU_CI_HTTP_RETRIES=2) would add more
    assert len(channel.server.requests("libhello-9.9")) == 2


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


def test_miniforge_installed_from_verified_installer_then_reused(
    setup, channel, installer, tmp_path
):
    url, sha = installer
    args = miniforge_args(url)
    before = len(channel.server.log)  # the channel serves other tests of this worker too
    first = setup(channel.explicit_lock(["libhello"]), *args)
    assert first.returncode == 0, first.stdout + first.stderr
    conda = Path(first.outputs["conda"])
    assert conda.name == "conda" and conda.exists()
    assert f"sha256 {sha[:16]}" in first.summary
    assert "ships no sha256 for it" in first.stdout  # same-origin fallback: a warning
    assert str(conda.parent.parent / "condabin") in first.github_path
    condarc = conda.parent.parent / ".condarc"
    assert "pkgs_dirs" in condarc.read_text()
    second = setup(channel.explicit_lock(["libhello", "hello"]), *args)
    assert second.returncode == 0
    name = url.split("/")[-1]
    fetched = [p for p, _ in channel.server.log[before:] if p.endswith("/" + name)]
    assert len(fetched) == 1  # the installer was downloaded once, then reused
    assert "reused" in second.summary


def test_miniforge_wrong_checksum_installs_nothing(setup, channel, installer):
    url, _ = installer
    result = setup(
        channel.explicit_lock(["libhello"]),
        *miniforge_args(url),
        "--installer-sha256",
        "0" * 64,
    )
    assert result.returncode == 1
    assert f"sha256 mismatch for Miniforge {FAKE_MF}" in result.errors[0]
    assert not (setup.default_prefix.parents[2] / FAKE_MF / "bin" / "conda").exists()


def test_miniforge_without_any_checksum_is_refused(setup, channel, installer):
    url, _ = installer
    channel.server.fail(url.split("/", 3)[3] + ".sha256", "404")
    result = setup(
        channel.explicit_lock(["libhello"]),
        *miniforge_args(url),
    )
    assert result.returncode == 1
    assert "no checksum for the Miniforge installer" in result.errors[0]
    assert not (setup.default_prefix.parents[2] / FAKE_MF / "envs" / "ci").exists()


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
    version = subprocess.run(
        [str(system), "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    if version != str(tuple(sys.version_info[:2])):
        pytest.skip(
            f"/usr/bin/python3 is {version}, the wheels here are for {sys.version_info[:2]}"
        )
    base = Path(tempfile.mkdtemp(prefix="gpu-ci-nobody-", dir="/tmp"))
    base.chmod(0o755)
    site = base / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(site),
            "pyyaml",
            "packaging",
            "py-rattler",
            "actions-toolkit",
        ],
        check=True,
        capture_output=True,
    )
    shutil.copytree(ROOT / "src" / "gpu_ci", base / "src" / "gpu_ci")
    subprocess.run(["chmod", "-R", "a+rX", str(base)], check=True)
    yield base, f"{site}:{base / 'src'}"
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
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
    env = {
        "PATH": f"{vendor / 'bin'}:{vendor / 'condabin'}:/usr/bin:/bin",
        "HOME": str(home),
        "CONDA": str(vendor),
        "CONDA_EXE": str(vendor / "bin" / "conda"),
        "CONDA_PREFIX": str(vendor),
        "CONDA_SHLVL": "1",
        "PYTHONPATH": pythonpath,
        "RUNNER_TOOL_CACHE": str(work / "toolcache"),
        "GITHUB_OUTPUT": str(outputs),
    }
    proc = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "/usr/bin/python3",
            "-m",
            "gpu_ci",
            "setup-conda-from-lock",
            "--lock-file",
            str(lock),
            "--installer-url",
            url,
            "--miniforge-version",
            FAKE_MF,
            "--activate",
            "false",
        ],
        env=env,
        capture_output=True,
        text=True,
        cwd=str(work),
    )
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
    first = setup(
        channel.explicit_lock(["libhello"]),
        *miniforge_args(url),
        "--dry-run",
        "false",
    )
    conda = Path(first.outputs["conda"])
    log = tmp_path / "conda-call"
    conda.write_text(FAKE_CONDA.format(log=log))
    result = setup(
        channel.explicit_lock(["libhello", "hello"]),
        *miniforge_args(url),
        "--engine",
        "conda",
        env={"CONDA_PREFIX": "/opt/vendor", "PYTHONPATH": "/opt/vendor/lib"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    argv = (tmp_path / "conda-call.argv").read_text().split("\n")
    assert argv[:4] == ["create", "--yes", "--quiet", "--offline"]
    explicit_arg = argv[argv.index("--file") + 1]
    assert explicit_arg.endswith("explicit.txt")
    env = dict(
        line.split("=", 1)
        for line in (tmp_path / "conda-call.env").read_text().splitlines()
        if "=" in line
    )
    assert env["CONDARC"] == str(conda.parent.parent / ".condarc")
    assert env["CONDA_PKGS_DIRS"] == str(conda.parent.parent / "pkgs")
    assert "CONDA_PREFIX" not in env and "PYTHONPATH" not in env
    assert Path(result.outputs["prefix"], "conda-meta", "gpu-ci-lock.json").exists()


def test_stale_cache_entry_from_another_archive_is_extracted_again(setup, channel):
    libhello = channel.archives[0]
    cache_entry = setup.default_prefix.parent.parent / "pkgs" / "rattler" / "libhello-1.0-h0_0"
    (cache_entry / "share" / "libhello").mkdir(parents=True)
    (cache_entry / "share" / "libhello" / "prefix.txt").write_text("stale\n")
    (cache_entry / ".gpu-ci-archive-sha256").write_text("0" * 32)
    result = setup(channel.explicit_lock(["libhello"]))
    assert result.returncode == 0, result.stdout
    prefix = Path(result.outputs["prefix"])
    assert (prefix / "share/libhello/prefix.txt").read_text() == f"installed at {prefix}\n"
    assert (cache_entry / ".gpu-ci-archive-sha256").read_text() == libhello.md5


def test_stale_rattler_cache_entry_from_another_archive_is_extracted_again(setup, channel):
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
        f"{libhello.md5} {libhello.sha256}\n"
    )


# -- never lose a file, never leave a half environment, safe when jobs run at once ----------


def test_a_directory_that_is_not_an_environment_is_refused_and_kept(setup, channel, tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "src").mkdir(parents=True)
    (checkout / ".git").mkdir()
    (checkout / "src" / "important.py").write_text("keep me\n")
    before = tree_digest(checkout)
    requests = len(channel.server.log)
    result = setup(channel.explicit_lock(["libhello"]), "--prefix", str(checkout))
    assert result.returncode == 1
    assert (
        f"prefix {checkout} exists, is not empty and is not a conda environment" in result.errors[0]
    )
    assert tree_digest(checkout) == before
    assert len(channel.server.log) == requests  # refused before any download


@pytest.mark.parametrize("which", ["home", "workspace", "root", "above-root", "slash"])
def test_home_workspace_and_roots_are_refused(setup, channel, tmp_path, which):
    home, workspace = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    workspace.mkdir()
    root = tmp_path / "mf"
    prefix = {
        "home": home,
        "workspace": workspace,
        "root": root,
        "above-root": tmp_path,
        "slash": Path("/"),
    }[which]
    result = setup(
        channel.explicit_lock(["libhello"]),
        "--prefix",
        str(prefix),
        "--root",
        str(root),
        env={"HOME": str(home), "GITHUB_WORKSPACE": str(workspace)},
    )
    assert result.returncode == 1, result.stdout
    assert (
        f"prefix {prefix}" in result.errors[0]
        and "pass a dedicated directory" in result.errors[0].lower()
    )
    assert "unsafe prefix" in result.stdout


@pytest.mark.slow  # 20 trials of 2-4 real installs at once: ~10 s
def test_concurrent_jobs_sharing_one_cache(channel, locks, tmp_path):
    """20 trials of 2-4 jobs started together on one empty package cache, half of them on
    one prefix: every job succeeds, every environment is complete, the cache is valid and
    holds no temporary file; jobs on one prefix take turns and say that they wait."""
    waited = 0
    for trial in range(20):
        base = tmp_path / f"t{trial}"
        pkgs = base / "pkgs"
        n = 2 + trial % 3
        same = trial % 2 == 0
        prefixes = [base / ("env" if same else f"env{i}") for i in range(n)]
        procs = [spawn(locks["small"], p, pkgs) for p in prefixes]
        outs = [proc.communicate(timeout=120)[0] for proc in procs]
        assert [proc.returncode for proc in procs] == [0] * n, "\n".join(outs)
        for prefix in set(prefixes):
            assert_environment(prefix, SMALL)
        assert_cache_valid(pkgs, channel)
        assert our_temporaries(base) == []
        if same:
            assert sum("setup-conda-from-lock: reused " in o for o in outs) == n - 1
            waited += sum("waiting for the lock on" in o for o in outs)
    assert waited > 0


@pytest.mark.parametrize("phase", ["download", "extract", "link", "pip", "swap"])
@pytest.mark.slow
def test_kill_9_in_each_phase_then_the_next_run_recovers(channel, locks, tmp_path, phase):
    prefix, pkgs = tmp_path / "env", tmp_path / "pkgs"
    rc, out = job(locks["old"], prefix, pkgs)
    assert rc == 0, out
    old = tree_digest(prefix)
    tag = uuid.uuid4().hex
    rc, out = job(locks["pip"], prefix, pkgs, tag=tag, env={"GPU_CI_TEST_KILL_AT": phase})
    assert rc == -signal.SIGKILL, out
    assert survivors(tag) == []  # no worker or pip outlived the job
    if phase != "swap":
        assert tree_digest(prefix) == old  # the old environment was never touched
    else:
        assert not prefix.exists()  # cut between the two renames
    # the next run with the old lock finds the old environment, complete
    rc, out = job(locks["old"], prefix, pkgs)
    assert rc == 0, out
    assert "reused" in out and tree_digest(prefix) == old
    assert our_temporaries(tmp_path) == []
    # and the new lock installs cleanly over it
    rc, out = job(locks["pip"], prefix, pkgs)
    assert rc == 0, out
    assert_whole(prefix, ["libhello", "hello", "python"], pkgs, channel, tmp_path)
    run = subprocess.run(
        [str(prefix / "bin" / "python"), "-c", "import gpuci_demo; print(gpuci_demo.VALUE)"],
        capture_output=True,
        text=True,
    )
    assert run.stdout.strip() == "42"


def test_pip_entries_are_installed_before_the_swap_and_point_at_the_prefix(
    channel, locks, tmp_path
):
    prefix = tmp_path / "env"
    rc, out = job(locks["pip"], prefix, tmp_path / "pkgs")
    assert rc == 0, out
    script = prefix / "bin" / "gpuci-demo"
    assert script.read_text().splitlines()[0] == f"#!{prefix / 'bin' / 'python'}"
    assert ".gpu-ci-new-" not in script.read_text()
    # nothing compiled with the staging path in it: Python compiles on first import
    assert not list(prefix.rglob("gpuci_demo/__pycache__/*.pyc"))
    assert subprocess.run([str(script)], capture_output=True, text=True).stdout == "42\n"


def test_kill_9_between_the_renames_restores_the_old_environment_as_it_was(
    channel, locks, tmp_path
):
    prefix, pkgs = tmp_path / "env", tmp_path / "pkgs"
    assert job(locks["small"], prefix, pkgs)[0] == 0
    old = tree_digest(prefix)
    rc, _ = job(locks["old"], prefix, pkgs, env={"GPU_CI_TEST_KILL_AT": "swap"})
    assert rc == -signal.SIGKILL
    rc, out = job(
        locks["small"], prefix, pkgs, env={"GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")}
    )
    assert rc == 0 and "rolled back an interrupted swap" in out and "reused" in out, out
    assert tree_digest(prefix) == old
    assert "| recovered | rolled back an interrupted swap" in (tmp_path / "summary.md").read_text()


def test_an_interrupted_1_0_0_backup_is_restored(channel, locks, tmp_path):
    """gpu-ci 1.0.0 renamed the old environment to .<name>.gpu-ci-old-<pid>-<ns> and, when
    killed, left it there: the next run puts it back."""
    prefix, pkgs = tmp_path / "env", tmp_path / "pkgs"
    assert job(locks["small"], prefix, pkgs)[0] == 0
    old = tree_digest(prefix)
    os.rename(prefix, tmp_path / ".env.gpu-ci-old-4242-123456789")
    rc, out = job(locks["small"], prefix, pkgs)
    assert rc == 0 and "interrupted gpu-ci 1.0.0" in out and "reused" in out, out
    assert tree_digest(prefix) == old


def test_an_environment_made_by_rattler_alone_is_replaced(channel, locks, tmp_path):
    prefix, pkgs = tmp_path / "env", tmp_path / "pkgs"
    assert job(locks["old"], prefix, pkgs)[0] == 0
    (prefix / "conda-meta" / "gpu-ci-lock.json").unlink()  # conda-meta/*.json records only
    rc, out = job(locks["small"], prefix, pkgs)
    assert rc == 0, out
    assert_environment(prefix, SMALL)


@pytest.fixture
def small_fs(tmpfs):
    """A 1 MiB tmpfs, mounted for the test (needs root and mount; skipped otherwise)."""
    return tmpfs("small")


@pytest.mark.parametrize("free_kib", [0, 8, 24, 56, 96, 128])
def test_disk_full_is_a_named_error_and_leaves_no_temporary_files(
    channel, locks, small_fs, free_kib
):
    filler = small_fs / "filler"
    with open(filler, "wb", buffering=0) as out, contextlib.suppress(OSError):
        while True:
            out.write(b"\0" * 4096)
            out.flush()
    size = filler.stat().st_size
    os.truncate(filler, max(0, size - free_kib * 1024))
    before = len(channel.server.log)
    rc, out = job(locks["pip"], small_fs / "env", small_fs / "pkgs")
    assert rc == 1, out
    assert "no space left" in out or "needs" in out and "free" in out, out
    assert "disk full" in out
    assert "attempts" not in out  # never retried as a network error
    assert our_temporaries(small_fs) == []
    assert not (small_fs / "env").exists()
    assert len(channel.server.log) - before <= 6  # one request per archive at most


@pytest.mark.parametrize("where", ["pkgs", "prefix"])
def test_read_only_cache_or_prefix_fails_before_any_download(
    channel, locks, tmp_path, tmpfs, where
):
    ro = tmpfs("ro", "ro,size=1m")
    before = len(channel.server.log)
    prefix = ro / "env" if where == "prefix" else tmp_path / "env"
    pkgs = ro / "pkgs" if where == "pkgs" else tmp_path / "pkgs"
    rc, out = job(locks["small"], prefix, pkgs, toolcache=tmp_path / "tc")
    assert rc == 1, out
    assert "read-only file system" in out and str(ro) in out
    assert "internal error" not in out
    assert len(channel.server.log) == before


def test_a_mount_point_prefix_fails_before_any_download(channel, locks, tmp_path, tmpfs):
    mnt = tmpfs("mnt")
    before = len(channel.server.log)
    rc, out = job(locks["small"], mnt, tmp_path / "pkgs")
    assert rc == 1 and f"prefix {mnt} is a mount point" in out, out
    assert len(channel.server.log) == before


def test_conda_meta_records_are_what_rattler_install_writes(channel, locks, tmp_path):
    """The same packages installed by rattler.install() from the channel's repodata (as
    conda or pixi would): every field of every conda-meta record agrees, except where the
    package sits on this disk and the repodata-only indexed_timestamp, and the archive's
    size: rattler's streaming client does not report it (README, "Limits")."""
    import asyncio

    import rattler

    prefix = tmp_path / "ours"
    rc, out = job(locks["small"], prefix, tmp_path / "pkgs")
    assert rc == 0, out
    records = []
    for archive in channel.archives:
        if archive.name in SMALL:
            repo = rattler.SparseRepoData(
                rattler.Channel(channel.url("channel")),
                archive.subdir,
                channel.root / archive.subdir / "repodata.json",
            )
            records += repo.load_records(rattler.PackageName(archive.name))
    reference = tmp_path / "reference"
    asyncio.run(
        rattler.install(
            records,
            target_prefix=str(reference),
            cache_dir=tmp_path / "refcache",
            show_progress=False,
            execute_link_scripts=False,
        )
    )
    local = {"extracted_package_dir", "link", "indexed_timestamp", "size"}
    compared = 0
    for theirs_path in sorted((reference / "conda-meta").glob("*.json")):
        theirs = json.loads(theirs_path.read_text())
        mine = json.loads((prefix / "conda-meta" / theirs_path.name).read_text())
        assert set(mine) - local == set(theirs) - local
        for key in set(theirs) - local - {"paths_data"}:
            assert mine[key] == theirs[key], (theirs_path.name, key)
            compared += 1
        for a, b in zip(mine["paths_data"]["paths"], theirs["paths_data"]["paths"]):
            if "prefix_placeholder" in b:  # the prefix is written into it: differs by path
                a, b = (
                    {k: v for k, v in d.items() if k not in ("sha256_in_prefix", "size_in_bytes")}
                    for d in (a, b)
                )
            assert a == b
    assert compared > 30
    hello = json.loads((prefix / "conda-meta" / "hello-2.1-h1_3.json").read_text())
    assert hello["depends"] == ["libhello >=1.0"]  # from index.json: the lock has none


def test_a_file_changed_in_the_package_cache_is_not_linked(channel, locks, tmp_path):
    pkgs = tmp_path / "pkgs"
    assert job(locks["small"], tmp_path / "a", pkgs)[0] == 0
    cached = pkgs / "rattler" / "hello-data-0.3-pyh0_0" / "share" / "hello" / "data.txt"
    original = cached.read_bytes()
    cached.unlink()  # break the hard link to a's copy, then change the cache's
    cached.write_bytes(b"evil\n")
    assert len(original) == len(b"evil\n")  # same size: only a hash can tell
    rc, out = job(locks["small"], tmp_path / "b", pkgs)
    assert rc == 0, out
    assert (tmp_path / "b" / "share" / "hello" / "data.txt").read_bytes() == original


def _hash_spy(monkeypatch, tmp_path):
    """Records (in a file: the workers are forked processes) each cache entry hashed in full."""
    from gpu_ci.conda import cache_trust

    log, real = tmp_path / "hashed.txt", cache_trust.cache_entry_problem

    def spy(entry):
        with open(log, "a") as out:
            out.write(f"{entry.name}\n")
        return real(entry)

    monkeypatch.setattr(cache_trust, "cache_entry_problem", spy)
    log.touch()
    return lambda: sorted(log.read_text().split())


def test_a_verified_entry_is_hashed_again_only_when_a_file_changed(channel, tmp_path, monkeypatch):
    """The stamp (verified.py) replaces re-hashing on every job: an entry is hashed again when
    one of its files was written (here: through the hard link from an environment, same
    size, same inode), and the changed file never reaches a new environment."""
    from gpu_ci.conda import install, lockfile

    text = channel.explicit_lock(["libhello", "hello", "hello-data"])
    plan = lockfile.plan(lockfile.parse(text), text, "linux-64", ["main"])
    pkgs, quiet = tmp_path / "pkgs", (lambda _: None)
    install.install(plan, tmp_path / "a", pkgs, dict(os.environ), log=quiet)
    hashed = _hash_spy(monkeypatch, tmp_path)
    report = install.install(plan, tmp_path / "b", pkgs, dict(os.environ), log=quiet)
    assert report.cached_archives == 3 and hashed() == []
    linked = tmp_path / "b" / "share" / "hello" / "data.txt"
    original = linked.read_bytes()
    assert linked.stat().st_nlink > 1  # the cache's file, hard-linked
    with open(linked, "r+b") as out:
        out.write(b"x" * len(original))
    report = install.install(plan, tmp_path / "c", pkgs, dict(os.environ), log=quiet)
    assert hashed() == ["hello-data-0.3-pyh0_0"]  # once, found changed, extracted again
    fresh = tmp_path / "c" / "share" / "hello" / "data.txt"
    assert fresh.read_bytes() == original and fresh.stat().st_ino != linked.stat().st_ino


def test_a_restored_cache_is_hashed_once_then_trusted(channel, tmp_path, monkeypatch):
    """A cache copied with its modification times (as ``actions/cache`` restores one) has new
    inodes: each entry is hashed against its paths.json once, then stamped for this host."""
    from gpu_ci.conda import install, lockfile

    text = channel.explicit_lock(["libhello", "hello", "hello-data"])
    plan = lockfile.plan(lockfile.parse(text), text, "linux-64", ["main"])
    quiet = lambda _: None  # noqa: E731
    install.install(plan, tmp_path / "a", tmp_path / "seed", dict(os.environ), log=quiet)
    subprocess.run(["cp", "-a", str(tmp_path / "seed"), str(tmp_path / "pkgs")], check=True)
    shutil.rmtree(tmp_path / "pkgs" / "archives", ignore_errors=True)
    hashed = _hash_spy(monkeypatch, tmp_path)
    before = len(channel.server.log)
    install.install(plan, tmp_path / "b", tmp_path / "pkgs", dict(os.environ), log=quiet)
    assert hashed() == ["hello-2.1-h1_3", "hello-data-0.3-pyh0_0", "libhello-1.0-h0_0"]
    install.install(plan, tmp_path / "c", tmp_path / "pkgs", dict(os.environ), log=quiet)
    assert len(hashed()) == 3  # not again
    assert len(channel.server.log) == before  # nothing downloaded


@pytest.mark.parametrize("damage", ["delete", "truncate", "record"])
def test_reused_only_when_the_files_match_their_records(channel, locks, tmp_path, damage):
    prefix, pkgs = tmp_path / "env", tmp_path / "pkgs"
    assert job(locks["small"], prefix, pkgs)[0] == 0
    target = prefix / "share" / "libhello" / "prefix.txt"
    if damage == "delete":
        target.unlink()
    elif damage == "truncate":
        target.write_text("")
    else:
        (prefix / "conda-meta" / "hello-2.1-h1_3.json").unlink()
    rc, out = job(locks["small"], prefix, pkgs)
    assert rc == 0 and "installing it again" in out and "created" in out, out
    assert_environment(prefix, SMALL)
    assert target.read_text() == f"installed at {prefix}\n"


def test_http_retry_typo_is_a_usage_error(setup, channel):
    result = setup(channel.explicit_lock(["libhello"]), env={"GPU_CI_HTTP_RETRIES": "3x"})
    assert result.returncode == 2
    assert "GPU_CI_HTTP_RETRIES='3x' is not a whole number" in result.errors[0]


# -- the options object ----------------------------------------------------------------------


def _options(**changes):
    from gpu_ci.conda import options

    base = dict(
        lock_file="lock.txt",
        platform="linux-64",
        categories=["main"],
        engine="rattler",
        miniforge=False,
        miniforge_version="26.3.2-3",
        installer_url="",
        installer_sha256="",
        activate=True,
        dry_run=True,
        root="",
        pkgs_dir="",
        prefix="",
        environment_name="ci",
        environ={"RUNNER_TOOL_CACHE": "/opt/tc"},
    )
    base.update(changes)
    environ = base.pop("environ")
    return options.build(options.RawOptions(**base), environ)


def test_options_lay_out_root_prefix_and_cache_once():
    opts = _options()
    root = Path("/opt/tc/miniforge3/26.3.2-3")
    assert (opts.root, opts.prefix, opts.pkgs_dir) == (root, root / "envs" / "ci", root / "pkgs")
    assert opts.categories == ("main",) and opts.retry.backoff == 1.0
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.prefix = Path("/elsewhere")  # frozen: read everywhere, changed nowhere


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"prefix": "envs/ci"}, "input 'prefix' must be an absolute path"),
        ({"pkgs_dir": "pkgs"}, "input 'pkgs-dir' must be an absolute path"),
        ({"environment_name": "../x"}, "input 'environment-name' must be a plain name"),
        ({"engine": "mamba"}, "input 'engine' must be one of rattler, conda"),
        ({"engine": "conda"}, "engine: conda needs miniforge: true"),
        ({"environ": {"GPU_CI_HTTP_BACKOFF": "1s"}}, "GPU_CI_HTTP_BACKOFF='1s' is not a number"),
    ],
)
def test_options_refuse_unusable_inputs_with_a_usage_error(changes, message):
    from gpu_ci.errors import UsageError

    with pytest.raises(UsageError, match=message):
        _options(**changes)


def test_valid_cache_entry_is_trusted_without_its_archive(setup, channel):
    libhello = channel.archives[0]
    before = len(channel.server.requests(libhello.filename))
    first = setup(channel.explicit_lock(["libhello"]))  # md5-only lock
    assert first.returncode == 0, first.stdout
    pkgs = setup.default_prefix.parent.parent / "pkgs"
    shutil.rmtree(pkgs / "archives", ignore_errors=True)  # as restored by cache: true
    shutil.rmtree(setup.default_prefix)
    second = setup(channel.explicit_lock(["libhello"]))
    assert second.returncode == 0, second.stdout
    assert len(channel.server.requests(libhello.filename)) == before + 1  # once, then trusted
    assert "(1 archives from cache)" in second.summary
    meta = json.loads((setup.default_prefix / "conda-meta/libhello-1.0-h0_0.json").read_text())
    assert meta["url"] == channel.archive_url(libhello)


def test_a_trusted_entry_rattler_cannot_use_is_fetched_and_linked_again(
    setup, channel, tmp_path, monkeypatch
):
    """The fallback of the trust: rattler refusing a trusted entry (here: made to refuse once)
    costs a full fetch and verification, never a failed job or an unverified link."""
    from gpu_ci.conda import install, lockfile
    from gpu_ci.errors import GpuCiError

    libhello = channel.archives[0]
    text = channel.explicit_lock(["libhello"])
    assert setup(text).returncode == 0
    pkgs = setup.default_prefix.parent.parent / "pkgs"
    shutil.rmtree(pkgs / "archives", ignore_errors=True)
    plan = lockfile.plan(lockfile.parse(text), text, "linux-64", ["main"])
    real, calls = install.link_with_rattler, []

    def refuses_a_trusted_entry(plan, fetched, *args):
        calls.append([f.cached for f in fetched])
        if len(calls) == 1:
            raise GpuCiError("rattler: the cache entry cannot be used")
        return real(plan, fetched, *args)

    monkeypatch.setattr(install, "link_with_rattler", refuses_a_trusted_entry)
    before = len(channel.server.requests(libhello.filename))
    target = tmp_path / "other-env"
    report = install.install(plan, target, pkgs, dict(os.environ), log=lambda _: None)
    assert calls == [[True], [False]]  # trusted first, then fetched and verified
    assert len(channel.server.requests(libhello.filename)) == before + 1
    assert report.downloaded_bytes > 0 and not report.reused
    assert (target / "share/libhello/prefix.txt").read_text() == f"installed at {target}\n"
