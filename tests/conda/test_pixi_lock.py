"""pixi.lock: every shared lock planned, and locks of the local channel installed for real.

The shared locks (../shared/fixtures/lockfiles/pixi.*.pixi.lock, pixi's own examples, format
versions 5 to 7) are counted independently with PyYAML and compared with the plan. Locks
written here name the loopback channel's real packages and a real wheel served beside them
(a direct URL, as pixi locks an index's file), plus an editable package in the checkout
built by an in-tree PEP 660 backend: nothing is resolved from an index.
"""

from __future__ import annotations

import hashlib
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from gpu_ci.conda import cachekey, pixi, virtual
from gpu_ci.errors import GpuCiError
from testkit.cli import parse_output_file, tree_digest
from testkit.conda.jobs import assert_environment, job, our_temporaries, survivors
from testkit.shared import shared_params

pytest.importorskip("rattler", reason="py-rattler needs Python >= 3.10")

PIXI_LOCKS = shared_params("fixtures/lockfiles", "pixi.*.pixi.lock")


def _yaml_counts(path: Path) -> dict[tuple[str, str], tuple[int, int, int]]:
    """(environment, platform) → (conda, pypi, conda_source) entries, read by PyYAML."""
    doc = yaml.safe_load(path.read_text())
    counts = {}
    for env, body in doc["environments"].items():
        for platform, items in (body.get("packages") or {}).items():
            kinds = [next(iter(item)) for item in items]
            counts[(env, platform)] = (
                kinds.count("conda"),
                kinds.count("pypi"),
                kinds.count("conda_source"),
            )
    return counts


@pytest.mark.parametrize("path", PIXI_LOCKS, ids=lambda p: p.name)
def test_every_shared_pixi_lock_is_planned_for_every_environment_and_platform(path):
    text = path.read_text()
    counts = _yaml_counts(path)
    assert counts
    for (env, platform), (conda, pypi, source) in counts.items():
        plan = pixi.plan(text, str(path), env, platform)
        assert (len(plan.conda), len(plan.pip), len(plan.left_out)) == (conda, pypi, source)
        assert plan.kind == "pixi" and plan.environment == env and plan.platform == platform
        assert all(e.digest for e in plan.conda)
        assert all(p.sha256 or p.source for p in plan.pip)
        assert plan.channels


def _shared(name: str) -> tuple[Path, str]:
    from testkit.shared import lock_file

    path = lock_file(name)
    return path, path.read_text()


def test_sources_records_and_system_requirements_are_read():
    path, text = _shared("pixi.editable-with-extras.pixi.lock")
    plan = pixi.plan(text, str(path), "default", "linux-64")
    editable = [p for p in plan.pip if p.source == "editable"]
    assert [p.name for p in editable] == ["package-with-extras"]
    assert editable[0].path == str(path.parent / "package_with_extras")
    path, text = _shared("pixi.detectron2-from-source.pixi.lock")
    plan = pixi.plan(text, str(path), "default", "linux-64")
    assert [p.name for p in plan.pip if p.source == "git"] == ["detectron2"]
    with pytest.raises(GpuCiError, match="comes from git"):
        pixi.check_sources(plan, path.parent)
    path, text = _shared("pixi.conditional-dependencies.pixi.lock")
    plan = pixi.plan(text, str(path), "default", "linux-64")
    assert plan.left_out == ("cuda_probe @ .",)
    cuda = [r for r in plan.requirements if r.name == "__cuda"]
    assert cuda == [virtual.Requirement("__cuda", ">=12", "package cuda-version", False)]


def test_sources_must_be_in_the_checkout_and_present(tmp_path):
    path, text = _shared("pixi.editable-with-extras.pixi.lock")
    plan = pixi.plan(text, str(path), "default", "linux-64")
    with pytest.raises(GpuCiError, match="package_with_extras does not exist"):
        pixi.check_sources(plan, path.parent)  # the shared folder holds the lock only
    with pytest.raises(GpuCiError, match="outside the checkout"):
        pixi.check_sources(plan, tmp_path)
    lock = tmp_path / "pixi.lock"
    lock.write_text(text)
    (tmp_path / "package_with_extras").mkdir()
    pixi.check_sources(pixi.plan(text, str(lock), "default", "linux-64"), tmp_path)


def test_a_custom_platform_is_used_only_when_named():
    path, text = _shared("pixi.multi-machine.pixi.lock")
    plan = pixi.plan(text, str(path), "default", "p2")
    assert plan.platform == "p2" and plan.conda
    assert virtual.Requirement("__cuda", ">=12", "platform p2") in plan.requirements
    assert not any(
        r.name == "__cuda" for r in pixi.plan(text, str(path), "default", "linux-64").requirements
    )
    with pytest.raises(GpuCiError) as caught:
        pixi.plan(text, str(path), "default", "linux-aarch64")
    assert "p2 (custom, subdir linux-64)" in caught.value.message
    assert "linux-64, p1 (custom, subdir win-64)" in caught.value.message


def test_an_unknown_environment_lists_the_locks_environments():
    path, text = _shared("pixi.multi_env.pixi.lock")
    with pytest.raises(GpuCiError) as caught:
        pixi.plan(text, str(path), "cuda", "linux-64")
    assert "no environment 'cuda'" in caught.value.message
    for name in ("default", "py312", "py313"):
        assert name in caught.value.message


def test_an_old_format_names_the_pixi_that_rewrites_it(tmp_path):
    path, text = _shared("pixi.editable-with-extras.pixi.lock")
    old = tmp_path / "pixi.lock"
    old.write_text(text.replace("version: 5", "version: 4", 1))
    with pytest.raises(GpuCiError) as caught:
        pixi.plan(old.read_text(), str(old), "default", "linux-64")
    assert "format version 4" in caught.value.message
    assert "pixi 0.68 or later" in caught.value.message


def test_yaml_aliases_that_explode_are_refused(tmp_path):
    lines = ["version: 6", "environments: {}", "a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for n in range(1, 8):
        lines.append(
            f"{'abcdefgh'[n]}: &{'abcdefgh'[n]} [{', '.join(['*' + 'abcdefgh'[n - 1]] * 10)}]"
        )
    lock = tmp_path / "pixi.lock"
    lock.write_text("\n".join(lines) + "\n")
    with pytest.raises(GpuCiError, match="repetition limit exceeded"):  # rattler's
        pixi.plan(lock.read_text(), str(lock), "default", "linux-64")
    with pytest.raises(GpuCiError, match="billion laughs"):  # ours, for the PyPI details
        pixi._document(lock.read_text(), str(lock))


def test_an_index_package_without_a_hash_is_refused(tmp_path):
    path, text = _shared("pixi.editable-with-extras.pixi.lock")
    line = "  sha256: ae74fb96c20a0277a1d615f1e4d73c8414f5a98db8b799a7931d1582f3390c28\n"
    assert line in text
    lock = tmp_path / "pixi.lock"
    lock.write_text(text.replace(line, ""))
    with pytest.raises(GpuCiError, match="click .* has no sha256"):
        pixi.plan(lock.read_text(), str(lock), "default", "linux-64")


def test_glibc_is_read_from_the_c_library():
    import os

    try:
        value = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, ValueError, OSError):
        value = ""
    if not value.startswith("glibc "):
        assert virtual.glibc_version() == ""
        return
    assert virtual.glibc_version() == value.split()[1]
    assert virtual.glibc_version().count(".") >= 1


def test_virtual_packages_compare_versions_and_constraints_bind_only_when_present():
    needs = [
        virtual.Requirement("__cuda", ">=12", "platform p2"),
        virtual.Requirement("__glibc", ">=2.17,<3.0.a0", "package libgcc"),
    ]
    assert virtual.problems(needs, virtual.Machine("12.4", "2.36")) == []
    assert virtual.problems(needs, virtual.Machine("11.8", "2.36")) == [
        "__cuda >=12 (platform p2): the driver offers 11.8"
    ]
    assert virtual.problems(needs, virtual.Machine("", "2.36")) == [
        "__cuda >=12 (platform p2): the driver offers none"
    ]
    optional = [virtual.Requirement("__cuda", ">=12", "package cuda-version", False)]
    assert virtual.problems(optional, virtual.Machine("", "2.36")) == []
    assert virtual.problems(optional, virtual.Machine("11.2", "2.36"))


# -- the cache key ----------------------------------------------------------------------


class _Inputs(dict):  # the action's inputs by name
    pass


INPUTS = _Inputs(
    platform="",
    engine="rattler",
    miniforge="auto",
    categories="main",
    **{"miniforge-version": "26.3.2-3", "lock-file": "", "pixi-environment": "default"},
)
RUNNER = {"RUNNER_OS": "Linux", "RUNNER_ARCH": "X64"}


def test_the_cache_key_of_a_conda_lock_keeps_its_value():
    """The value the action's bash step computed before the key moved into Python."""
    sha = hashlib.sha256(b"@EXPLICIT\n").hexdigest()
    k = cachekey.KeyInputs.of(INPUTS, RUNNER, sha, "")
    assert (
        cachekey.packages_key(k) == f"gpu-ci-conda-v1-Linux-X64-auto-rattler-mf26.3.2-3-main-{sha}"
    )
    assert cachekey.restore_prefix(k) == "gpu-ci-conda-v1-Linux-X64-auto-rattler-mf26.3.2-3-"
    conda = cachekey.KeyInputs.of(
        _Inputs(INPUTS, engine="conda", categories="main,dev"), RUNNER, sha, ""
    )
    assert cachekey.packages_key(conda) == (
        f"gpu-ci-conda-v1-Linux-X64-auto-conda-mf26.3.2-3+installer-main+dev-{sha}"
    )
    path = "/opt/envs/ci"
    where = hashlib.sha256(path.encode()).hexdigest()[:16]
    assert cachekey.environment_key(conda, path) == (
        f"gpu-ci-conda-env-v1-Linux-X64-auto-conda-mf26.3.2-3-main+dev-{where}-{sha}"
    )


def test_a_pixi_cache_key_holds_the_environment_and_the_platform():
    data = "cd" * 32
    keys = {
        cachekey.packages_key(
            cachekey.KeyInputs.of(_Inputs(INPUTS, platform=platform), RUNNER, data, env)
        )
        for env in ("default", "cuda")
        for platform in ("", "p2")
    }
    assert len(keys) == 4
    assert any("-p2-" in k and "-pixi+cuda-" in k for k in keys)


# -- installs from the local channel -----------------------------------------------------

BACKEND = '''\
"""A PEP 660 build backend in the project itself: an editable wheel of a .pth file."""
import base64, hashlib, os, zipfile

NAME, VERSION = "ed_demo", "0.1"
INFO = f"{NAME}-{VERSION}.dist-info"


def _wheel(directory, files):
    path = os.path.join(directory, f"{NAME}-{VERSION}-py3-none-any.whl")
    record = []
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            data = text.encode()
            zf.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{name},sha256={digest.decode()},{len(data)}")
        record.append(f"{INFO}/RECORD,,")
        zf.writestr(f"{INFO}/RECORD", "\\n".join(record) + "\\n")
    return os.path.basename(path)


def _meta():
    return {
        f"{INFO}/METADATA": f"Metadata-Version: 2.1\\nName: ed-demo\\nVersion: {VERSION}\\n",
        f"{INFO}/WHEEL": "Wheel-Version: 1.0\\nGenerator: t\\nRoot-Is-Purelib: true\\n"
        "Tag: py3-none-any\\n",
    }


def get_requires_for_build_editable(config_settings=None):
    return []


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    here = os.path.dirname(os.path.abspath(__file__))
    return _wheel(wheel_directory, {"ed_demo.pth": here + "\\n", **_meta()})


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    here = os.path.dirname(os.path.abspath(__file__))
    source = open(os.path.join(here, "ed_demo", "__init__.py")).read()
    return _wheel(wheel_directory, {"ed_demo/__init__.py": source, **_meta()})
'''


def editable_project(checkout: Path) -> Path:
    """``checkout/ed``: a project whose in-tree backend builds an editable wheel."""
    project = checkout / "ed"
    (project / "ed_demo").mkdir(parents=True)
    (project / "ed_demo" / "__init__.py").write_text("VALUE = 7\n")
    (project / "backend.py").write_text(BACKEND)
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n\n'
        '[project]\nname = "ed-demo"\nversion = "0.1"\n'
    )
    return project


def pixi_lock(channel, environments: dict[str, list[str]], *, wheel: bool, editable: bool) -> str:
    """The channel's pixi.lock; ``default`` gets the served wheel and ``./ed`` if asked."""
    pypi: list[dict[str, object]] = []
    if wheel:
        sha = hashlib.sha256(channel.wheel.read_bytes()).hexdigest()
        url = channel.url("wheels/" + channel.wheel.name)
        pypi.append({"pypi": url, "name": "gpuci-demo", "version": "1.0", "sha256": sha})
    if editable:
        pypi.append({"pypi": "./ed", "name": "ed-demo", "version": "0.1", "editable": True})
    return channel.pixi_lock(environments, pypi=pypi)


FULL = ["libhello", "hello", "python"]


@pytest.fixture
def checkout(tmp_path, channel):
    """A checkout holding pixi.lock (two environments) and the editable project."""
    channel.server.faults.clear()
    root = tmp_path / "checkout"
    editable_project(root)
    lock = root / "pixi.lock"
    lock.write_text(
        pixi_lock(channel, {"default": FULL, "small": ["libhello"]}, wheel=True, editable=True)
    )
    return root


def _job(checkout: Path, prefix: Path, pkgs: Path, env: str = "default", **extra: str):
    return job(
        checkout / "pixi.lock",
        prefix,
        pkgs,
        env={"GITHUB_WORKSPACE": str(checkout), "INPUT_PIXI_ENVIRONMENT": env, **extra},
    )


def _python(prefix: Path, code: str) -> str:
    run = subprocess.run(
        [str(prefix / "bin" / "python"), "-c", code], capture_output=True, text=True
    )
    return run.stdout.strip() + run.stderr.strip()


@pytest.mark.slow
def test_two_environments_of_one_lock_with_a_hashed_wheel_and_an_editable(checkout, tmp_path):
    pkgs = tmp_path / "pkgs"
    rc, out = _job(checkout, tmp_path / "small", pkgs, "small")
    assert rc == 0, out
    assert_environment(tmp_path / "small", ["libhello"])
    rc, out = _job(checkout, tmp_path / "full", pkgs)
    assert rc == 0, out
    assert_environment(tmp_path / "full", FULL)
    code = "import gpuci_demo, ed_demo; print(gpuci_demo.VALUE, ed_demo.VALUE)"
    assert _python(tmp_path / "full", code) == "42 7"
    (checkout / "ed" / "ed_demo" / "__init__.py").write_text("VALUE = 8\n")
    assert _python(tmp_path / "full", "import ed_demo; print(ed_demo.VALUE)") == "8"
    assert our_temporaries(tmp_path) == []
    rc, out = _job(checkout, tmp_path / "small", pkgs, "small")
    assert rc == 0 and "reused" in out, out


@pytest.mark.slow
def test_uv_or_pip_installs_the_same_environment(checkout, channel, tmp_path):
    from testkit.conda.jobs import uv_alone

    bare = uv_alone(tmp_path)
    pkgs = tmp_path / "pkgs"
    for name, path in (("uv", f"{bare}:/usr/bin:/bin"), ("pip", "/usr/bin:/bin")):
        prefix = tmp_path / name
        summary = tmp_path / f"{name}.md"
        rc, out = _job(checkout, prefix, pkgs, PATH=path, GITHUB_STEP_SUMMARY=str(summary))
        assert rc == 0, out
        text = summary.read_text()
        assert f"| pip packages installed by | {name} |" in text
        assert f"| channels | `{channel.url('channel/')}` |" in text
        assert f"| PyPI indexes | `{channel.url('simple')}` |" in text
        assert "| pixi environment | default |" in text
        assert _python(prefix, "import gpuci_demo, ed_demo; print(ed_demo.VALUE)") == "7"


def test_a_tampered_wheel_is_refused_and_nothing_is_published(checkout, channel, tmp_path):
    channel.server.fail("/wheels/" + channel.wheel.name, "corrupt")
    rc, out = _job(checkout, tmp_path / "env", tmp_path / "pkgs")
    assert rc == 1, out
    assert "hash" in out.lower()
    assert not (tmp_path / "env").exists()
    assert our_temporaries(tmp_path) == []


@pytest.mark.slow
def test_a_wheel_in_the_checkout_is_checked_against_its_hash(channel, tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "links").mkdir(parents=True)
    wheel = checkout / "links" / channel.wheel.name
    wheel.write_bytes(channel.wheel.read_bytes())
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    entry = {"pypi": f"./links/{wheel.name}", "name": "gpuci-demo", "version": "1.0"}
    (checkout / "pixi.lock").write_text(
        channel.pixi_lock({"default": FULL}, pypi=[{**entry, "sha256": sha}])
    )
    rc, out = _job(checkout, tmp_path / "env", tmp_path / "pkgs")
    assert rc == 0, out
    assert _python(tmp_path / "env", "import gpuci_demo; print(gpuci_demo.VALUE)") == "42"
    wheel.write_bytes(wheel.read_bytes() + b"\0")  # changed after it was locked
    rc, out = _job(checkout, tmp_path / "env2", tmp_path / "pkgs")
    assert rc == 1 and "hash" in out.lower(), out
    assert not (tmp_path / "env2").exists()


def test_an_editable_outside_the_checkout_is_refused_before_any_download(
    checkout, channel, tmp_path
):
    lock = checkout / "pixi.lock"
    lock.write_text(lock.read_text().replace("./ed", "../elsewhere"))
    rc, out = _job(checkout, tmp_path / "env", tmp_path / "pkgs")
    assert rc == 1 and "outside the checkout" in out, out
    assert not (tmp_path / "pkgs").exists() or not any((tmp_path / "pkgs").iterdir())


# slow: five real installs, each killed; test_setup_conda.py kills a conda-lock install
# in make check's fast loop.
@pytest.mark.slow
@pytest.mark.parametrize("phase", ["download", "extract", "link", "pip", "swap"])
def test_kill_9_in_each_phase_leaves_nothing_half_done(checkout, tmp_path, phase):
    prefix, pkgs = tmp_path / "env", tmp_path / "pkgs"
    rc, out = _job(checkout, prefix, pkgs, "small")
    assert rc == 0, out
    old = tree_digest(prefix)
    tag = uuid.uuid4().hex
    rc, out = job(
        checkout / "pixi.lock",
        prefix,
        pkgs,
        tag=tag,
        env={
            "GITHUB_WORKSPACE": str(checkout),
            "INPUT_PIXI_ENVIRONMENT": "default",
            "GPU_CI_TEST_KILL_AT": phase,
        },
    )
    assert rc == -signal.SIGKILL, out
    assert survivors(tag) == []
    if phase != "swap":
        assert tree_digest(prefix) == old
    rc, out = _job(checkout, prefix, pkgs, "small")
    assert rc == 0, out
    assert tree_digest(prefix) == old
    assert our_temporaries(tmp_path) == []
    rc, out = _job(checkout, prefix, pkgs)
    assert rc == 0, out
    assert _python(prefix, "import gpuci_demo, ed_demo; print(gpuci_demo.VALUE)") == "42"
    assert our_temporaries(tmp_path) == []


# -- __cuda against the driver (fake NVML) -------------------------------------------------


@pytest.mark.slow
def test_a_driver_too_old_is_refused_and_the_override_prepares_the_environment(channel, tmp_path):
    from testkit.cuda_env import build_fake_nvml, gpu_config, nvml_config, write_config

    lib = build_fake_nvml(tmp_path / "nvml")
    config = write_config(tmp_path / "nvml.cfg", nvml_config(gpu_config(0), cuda=11080))
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    text = pixi_lock(channel, {"default": ["libhello"]}, wheel=False, editable=False)
    doc = yaml.safe_load(text)
    doc["version"] = 7
    doc["platforms"] = [{"name": "linux-64", "virtual-packages": ["__cuda=12", "__glibc=2.17"]}]
    (checkout / "pixi.lock").write_text(yaml.safe_dump(doc, sort_keys=False))
    nvml = {"LD_LIBRARY_PATH": str(lib), "FAKE_NVML_CONFIG": str(config)}
    rc, out = _job(checkout, tmp_path / "env", tmp_path / "pkgs", **nvml)
    assert rc == 1, out
    assert "__cuda >=12 (platform linux-64): the NVIDIA driver offers 11.8" in out
    assert not (tmp_path / "env").exists()
    write_config(config, nvml_config(gpu_config(0), cuda=12040))
    rc, out = _job(checkout, tmp_path / "env", tmp_path / "pkgs", **nvml)
    assert rc == 0, out
    import shutil

    shutil.rmtree(tmp_path / "env")
    no_driver = {"LD_LIBRARY_PATH": str(tmp_path / "none")}
    rc, out = _job(checkout, tmp_path / "env", tmp_path / "pkgs", **no_driver)
    assert rc == 1 and "the NVIDIA driver offers none" in out, out
    output = tmp_path / "output"
    output.touch()
    rc, out = _job(
        checkout,
        tmp_path / "env",
        tmp_path / "pkgs",
        INPUT_CUDA_OVERRIDE="12.4",
        GITHUB_OUTPUT=str(output),
        **no_driver,
    )
    assert rc == 0, out
    outputs = parse_output_file(output.read_text())
    assert outputs["pixi-environment"] == "default"
    assert outputs["packages"] == "1" and outputs["pypi-packages"] == "0"


# -- through the CLI -----------------------------------------------------------------------


def test_a_dry_run_names_the_environment_and_what_is_left_out(run_cli, tmp_path):
    path, _ = _shared("pixi.conditional-dependencies.pixi.lock")
    result = run_cli(
        [
            "setup-conda-from-lock",
            "--lock-file",
            str(path),
            "--platform",
            "linux-64",
            "--dry-run",
            "true",
            "--miniforge",
            "false",
        ],
        {"RUNNER_TOOL_CACHE": str(tmp_path / "tc")},
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "::notice title=setup-conda-from-lock::" in out and "cuda_probe @ ." in out
    assert "needs __cuda >=12 (package cuda-version, if present)" in out
    assert result.outputs["pixi-environment"] == "default"
    assert result.outputs["packages"] == "40" and result.outputs["pypi-packages"] == "0"
    assert "-pixi+default-" in result.outputs["cache-key"]
    assert "| pixi environment | default |" in result.summary


def test_an_unknown_environment_through_the_cli_is_an_error_not_a_traceback(run_cli, tmp_path):
    path, _ = _shared("pixi.multi_env.pixi.lock")
    result = run_cli(
        ["setup-conda-from-lock", "--lock-file", str(path), "--dry-run", "true"],
        {"INPUT_PIXI_ENVIRONMENT": "cuda", "RUNNER_TOOL_CACHE": str(tmp_path / "tc")},
    )
    out = result.stdout + result.stderr
    assert result.returncode == 1
    assert "has no environment 'cuda'; it has default, py312, py313" in out
    assert "Traceback" not in out


def test_without_rattler_a_pixi_lock_says_it_needs_python_3_10(monkeypatch):
    path, text = _shared("pixi.multi_env.pixi.lock")
    monkeypatch.setitem(__import__("sys").modules, "rattler", None)  # as on Python 3.9
    with pytest.raises(GpuCiError, match=r"needs Python >= 3.10 \(this is Python 3\.\d+\)"):
        pixi.plan(text, str(path), "default", "linux-64")
