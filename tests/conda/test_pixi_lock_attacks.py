"""pixi.lock written by a fork's author: what it may point at, and what is checked.

The author of a pull request controls the lock and the checkout, hashes included: a hash
proves only that a file is the one the author chose. What the action still owes everyone
else on a shared runner is that nothing outside the checkout is read as a source, that a
lock's ``__cuda`` need is checked however it is spelt, and that a malformed one is an
error, not a traceback.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_ci.conda import pixi, virtual
from gpu_ci.errors import GpuCiError
from testkit.conda.jobs import job, our_temporaries

pytest.importorskip("rattler", reason="py-rattler needs Python >= 3.10")

SHA = "ab" * 32
PYTHON = "https://conda.anaconda.org/conda-forge/linux-64/python-3.12.0-hab00c5b_0_cpython.conda"
FULL = ["libhello", "hello", "python"]


def lock_text(
    pypi: list[dict[str, Any]] = (),  # type: ignore[assignment]
    *,
    conda: str = PYTHON,
    depends: list[str] = (),  # type: ignore[assignment]
    constrains: list[str] = (),  # type: ignore[assignment]
    virtual_packages: list[str] | None = None,
) -> str:
    """A format-7 lock of one conda record (and ``pypi`` entries) for linux-64."""
    env = {
        "channels": [{"url": "https://conda.anaconda.org/conda-forge/"}],
        "indexes": ["https://pypi.org/simple"],
        "packages": {"linux-64": [{"conda": conda}, *({"pypi": p["pypi"]} for p in pypi)]},
    }
    record = {
        "conda": conda,
        "sha256": SHA,
        "md5": "cd" * 16,
        "depends": list(depends),
        "constrains": list(constrains),
    }
    platform: dict[str, Any] = {"name": "linux-64"}
    if virtual_packages is not None:
        platform["virtual-packages"] = virtual_packages
    doc = {
        "version": 7,
        "platforms": [platform],
        "environments": {"default": env},
        "packages": [record, *pypi],
    }
    return yaml.safe_dump(doc, sort_keys=False)


def planned(checkout: Path, text: str) -> Any:
    lock = checkout / "pixi.lock"
    checkout.mkdir(exist_ok=True)
    lock.write_text(text)
    return pixi.plan(text, str(lock), "default", "linux-64")


# -- PyPI entries that point outside the checkout ----------------------------------------


@pytest.mark.parametrize("where", ["absolute", "parent", "symlink"])
def test_a_hashed_wheel_outside_the_checkout_is_refused(tmp_path, where):
    outside = tmp_path / "other-job" / "x-1.0-py3-none-any.whl"
    outside.parent.mkdir()
    outside.write_bytes(b"another job's wheel")
    checkout = tmp_path / "checkout"
    (checkout / "links").mkdir(parents=True)
    location = {
        "absolute": str(outside),
        "parent": "../other-job/x-1.0-py3-none-any.whl",
        "symlink": "./links/x-1.0-py3-none-any.whl",
    }[where]
    if where == "symlink":
        (checkout / "links" / outside.name).symlink_to(outside)
    sha = hashlib.sha256(outside.read_bytes()).hexdigest()
    entry = {"pypi": location, "name": "x", "version": "1.0", "sha256": sha}
    plan = planned(checkout, lock_text([entry]))
    assert [p.sha256 for p in plan.pip] == [sha]  # a hashed file, not a source entry
    with pytest.raises(GpuCiError, match="outside the checkout"):
        pixi.check_sources(plan, checkout)


def test_a_hashed_wheel_in_the_checkout_passes_the_check(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "links").mkdir(parents=True)
    wheel = checkout / "links" / "x-1.0-py3-none-any.whl"
    wheel.write_bytes(b"wheel")
    entry = {"pypi": "./links/" + wheel.name, "name": "x", "version": "1.0", "sha256": SHA}
    pixi.check_sources(planned(checkout, lock_text([entry])), checkout)


def test_a_job_never_installs_a_wheel_from_outside_the_checkout(channel, tmp_path):
    """The wheel is real and its hash right: only its place is wrong."""
    channel.server.faults.clear()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    wheel = elsewhere / channel.wheel.name
    shutil.copyfile(channel.wheel, wheel)
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    entry = {"pypi": f"../elsewhere/{wheel.name}", "name": "gpuci-demo", "version": "1.0"}
    (checkout / "pixi.lock").write_text(
        channel.pixi_lock({"default": FULL}, pypi=[{**entry, "sha256": sha}])
    )
    rc, out = job(
        checkout / "pixi.lock",
        tmp_path / "env",
        tmp_path / "pkgs",
        env={"GITHUB_WORKSPACE": str(checkout)},
    )
    assert rc == 1 and "outside the checkout" in out, out
    assert "Traceback" not in out
    assert not (tmp_path / "env").exists()
    assert not (tmp_path / "pkgs").exists() or not any((tmp_path / "pkgs").iterdir())
    assert our_temporaries(tmp_path) == []


@pytest.mark.parametrize("form", ["file:///{path}", "file://localhost/{path}"])
def test_a_wheel_locked_by_file_url_keeps_its_hash(tmp_path, form):
    checkout = tmp_path / "checkout"
    (checkout / "links").mkdir(parents=True)
    wheel = checkout / "links" / "x-1.0-py3-none-any.whl"
    location = form.format(path=str(wheel).lstrip("/"))
    entry = {"pypi": location, "name": "x", "version": "1.0", "sha256": SHA}
    (pip,) = planned(checkout, lock_text([entry])).pip
    assert (pip.sha256, pip.source, pip.path) == (SHA, "", str(wheel))


@pytest.mark.slow
def test_a_changed_wheel_locked_by_file_url_is_refused(channel, tmp_path):
    channel.server.faults.clear()
    checkout = tmp_path / "checkout"
    (checkout / "links").mkdir(parents=True)
    wheel = checkout / "links" / channel.wheel.name
    shutil.copyfile(channel.wheel, wheel)
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    entry = {"pypi": wheel.as_uri(), "name": "gpuci-demo", "version": "1.0", "sha256": sha}
    (checkout / "pixi.lock").write_text(channel.pixi_lock({"default": FULL}, pypi=[entry]))
    env = {"GITHUB_WORKSPACE": str(checkout)}
    wheel.write_bytes(wheel.read_bytes() + b"\0")  # changed after it was locked
    rc, out = job(checkout / "pixi.lock", tmp_path / "env", tmp_path / "pkgs", env=env)
    assert rc == 1 and "hash" in out.lower(), out
    assert not (tmp_path / "env").exists()
    shutil.copyfile(channel.wheel, wheel)
    rc, out = job(checkout / "pixi.lock", tmp_path / "env", tmp_path / "pkgs", env=env)
    assert rc == 0, out


@pytest.mark.parametrize("scheme", ["git", "hg", "svn", "bzr"])
def test_a_version_control_entry_is_refused_even_with_a_hash(tmp_path, scheme):
    """pip fetches these schemes; a hash cannot vouch for a repository."""
    location = f"{scheme}+https://example.org/repo@0123abcd"
    entry = {"pypi": location, "name": "x", "version": "1.0", "sha256": SHA}
    plan = planned(tmp_path, lock_text([entry]))
    assert [p.source for p in plan.pip] == [scheme]
    with pytest.raises(GpuCiError, match=f"comes from {scheme} "):
        pixi.check_sources(plan, tmp_path)


@pytest.mark.parametrize(
    "url",
    [
        "https://Files.PythonHosted.org/packages/ab/x-1.0-py3-none-any.whl",
        "https://files.pythonhosted.org:443/packages/ab/x-1.0-py3-none-any.whl",
        "https://files.pythonhosted.org/packages/cd/../ab/x-1.0-py3-none-any.whl",
    ],
)
def test_an_index_wheel_written_unlike_rattler_keeps_its_hash(tmp_path, url):
    """rattler gives such a URL normalised; the entry's sha256 is still found."""
    entry = {"pypi": url, "name": "x", "version": "1.0", "sha256": SHA}
    (pip,) = planned(tmp_path, lock_text([entry])).pip
    assert pip.sha256 == SHA
    assert pip.url == "https://files.pythonhosted.org/packages/ab/x-1.0-py3-none-any.whl"


# -- __cuda and __glibc however the lock spells them ---------------------------------------


@pytest.mark.parametrize(
    "spec",
    ["__cuda>=12", "__cuda >=12", "__cuda[version='>=12']", "  __cuda>=12.0  "],
)
def test_a_cuda_dependency_is_read_however_it_is_spelt(tmp_path, spec):
    plan = planned(tmp_path, lock_text(depends=[spec]))
    cuda = [r for r in plan.requirements if r.name == "__cuda"]
    assert len(cuda) == 1 and cuda[0].required, plan.requirements
    assert virtual.problems(plan.requirements, virtual.Machine("11.8", "2.36"))
    assert virtual.problems(plan.requirements, virtual.Machine("12.4", "2.36")) == []


def test_a_glibc_constraint_without_a_space_still_binds(tmp_path):
    plan = planned(tmp_path, lock_text(constrains=["__glibc>=99"]))
    assert virtual.problems(plan.requirements, virtual.Machine("", "2.36")) == [
        "__glibc >=99 (package python): this machine's C library offers 2.36"
    ]


def test_packages_whose_names_only_start_like_a_virtual_package_are_not_checked(tmp_path):
    plan = planned(tmp_path, lock_text(depends=["__cuda_helpers >=1", "__glibcxx"]))
    assert plan.requirements == ()


@pytest.mark.parametrize("spec", ["__cuda >=abc!!", "__cuda >=12 foo bar"])
def test_a_malformed_virtual_spec_is_an_error_naming_it(tmp_path, spec):
    with pytest.raises(GpuCiError) as caught:
        planned(tmp_path, lock_text(depends=[spec]))
    assert repr(spec) in caught.value.message and "package python" in caught.value.message


def test_a_malformed_platform_virtual_package_is_an_error_naming_it(tmp_path):
    with pytest.raises(GpuCiError) as caught:
        planned(tmp_path, lock_text(virtual_packages=["__cuda=12!!"]))
    assert "'__cuda=12!!'" in caught.value.message
    assert "platform linux-64" in caught.value.message


def test_the_cli_reports_a_malformed_virtual_spec_without_a_traceback(run_cli, tmp_path):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "pixi.lock").write_text(lock_text(depends=["__cuda >=abc!!"]))
    result = run_cli(
        [
            "setup-conda-from-lock",
            "--lock-file",
            str(checkout / "pixi.lock"),
            "--dry-run",
            "true",
        ],
        {"RUNNER_TOOL_CACHE": str(tmp_path / "tc"), "GITHUB_WORKSPACE": str(checkout)},
    )
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "not a valid match spec" in out and "Traceback" not in out
    assert os.listdir(checkout) == ["pixi.lock"]


@pytest.mark.parametrize("name", ["__cuda", "__glibc", "__linux"])
def test_a_conda_package_named_as_a_virtual_package_is_refused(tmp_path, name):
    url = PYTHON.replace("python-3.12.0-hab00c5b_0_cpython", f"{name}-99.0-0")
    with pytest.raises(GpuCiError) as caught:
        planned(tmp_path, lock_text(conda=url))
    assert f"conda package named {name}" in caught.value.message


def test_a_double_underscore_name_that_is_no_virtual_package_is_installed(tmp_path):
    url = PYTHON.replace("python-3.12.0-hab00c5b_0_cpython", "__anaconda_core_depends-1-0")
    plan = planned(tmp_path, lock_text(conda=url))
    assert [e.name for e in plan.conda] == ["__anaconda_core_depends"]


# -- a full disk while the PyPI packages are installed ------------------------------------


def big_wheel(folder: Path, size: int) -> Path:
    """A real wheel of ``size`` incompressible bytes, for filling a disk."""
    import base64
    import zipfile

    info = "big_blob-1.0.dist-info"
    files = {
        "big_blob/__init__.py": b"",
        "big_blob/blob.bin": os.urandom(size),
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: big-blob\nVersion: 1.0\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    wheel = folder / "big_blob-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return wheel


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_a_disk_that_fills_during_the_pypi_install_publishes_nothing(
    channel, tmp_path, tmpfs, installer
):
    from testkit.conda.jobs import uv_alone

    if installer == "uv":
        bare = uv_alone(tmp_path)
    else:
        bare = tmp_path / "bin"
        bare.mkdir()
    path = {"PATH": f"{bare}:/usr/bin:/bin"}
    channel.server.faults.clear()
    checkout = tmp_path / "checkout"
    (checkout / "links").mkdir(parents=True)
    wheel = big_wheel(checkout / "links", 3 << 20)
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    entry = {"pypi": f"./links/{wheel.name}", "name": "big-blob", "version": "1.0"}
    lock = checkout / "pixi.lock"
    lock.write_text(channel.pixi_lock({"default": FULL}, pypi=[{**entry, "sha256": sha}]))
    small = tmpfs("small", "size=64m")
    pkgs, env = tmp_path / "pkgs", {"GITHUB_WORKSPACE": str(checkout), **path}
    plain = checkout / "plain.lock"  # the same conda packages, no PyPI: what linking takes
    plain.write_text(channel.pixi_lock({"default": FULL}))
    free = shutil.disk_usage(small).free
    rc, out = job(plain, small / "probe", pkgs, env=env)
    assert rc == 0, out
    linked = free - shutil.disk_usage(small).free
    shutil.rmtree(small / "probe")
    with open(small / "filler", "wb") as filler:  # room to link, not for the 3 MB wheel
        filler.write(b"\0" * (shutil.disk_usage(small).free - linked - (1 << 20)))
    rc, out = job(lock, small / "env", pkgs, env=env)
    assert rc == 1, out
    assert "Traceback" not in out
    assert "installing the lock's pip entries" in out and "space" in out.lower(), out
    assert not (small / "env").exists()
    assert our_temporaries(small, tmp_path) == []
    assert [n for n in os.listdir(small) if not n.endswith(".gpu-ci.lock")] == ["filler"]


# -- two jobs at once ------------------------------------------------------------------------


@pytest.mark.slow
def test_two_jobs_install_one_pixi_environment_at_once_into_one_package_cache(channel, tmp_path):
    """Runners on one host share the package cache: both environments come out whole."""
    from testkit.conda.jobs import assert_environment, spawn, wheel_checkout

    checkout = wheel_checkout(channel, tmp_path, FULL)
    pkgs = tmp_path / "pkgs"
    env = {"GITHUB_WORKSPACE": str(checkout)}
    jobs = [spawn(checkout / "pixi.lock", tmp_path / f"env{i}", pkgs, env=env) for i in (1, 2)]
    for proc in jobs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out
    for i in (1, 2):
        prefix = tmp_path / f"env{i}"
        assert_environment(prefix, FULL)
        run = subprocess.run(
            [str(prefix / "bin" / "python"), "-c", "import gpuci_demo; print(gpuci_demo.VALUE)"],
            capture_output=True,
            text=True,
        )
        assert run.stdout.strip() == "42", run.stderr
    locked = {a.name: a for a in channel.archives}  # as channel.pixi_lock picks them
    for archive in (locked[name] for name in FULL):  # checked by sha256: the lock has it
        path = pkgs / "archives" / archive.filename
        if path.exists():  # a streamed archive is extracted, not kept
            assert hashlib.sha256(path.read_bytes()).hexdigest() == archive.sha256
        entry = pkgs / "rattler" / f"{archive.name}-{archive.version}-{archive.build}"
        assert (entry / ".gpu-ci-archive-sha256").read_text() == archive.sha256
    assert our_temporaries(tmp_path) == []


# -- an environment name chosen to reach the log, the summary and the cache key --------------


def test_a_hostile_environment_name_stays_text(run_cli, tmp_path):
    name = "a/../b\n::warning::pwned [x](https://evil.example)|<img>"
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    doc = yaml.safe_load(lock_text())
    doc["environments"] = {name: doc["environments"]["default"]}
    (checkout / "pixi.lock").write_text(yaml.safe_dump(doc))
    result = run_cli(
        ["setup-conda-from-lock", "--lock-file", str(checkout / "pixi.lock"), "--dry-run", "true"],
        {"INPUT_PIXI_ENVIRONMENT": name, "RUNNER_TOOL_CACHE": str(tmp_path / "tc")},
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert not [line for line in out.splitlines() if line.lstrip().startswith("::warning")]
    assert result.outputs["pixi-environment"] == name
    key = result.outputs["cache-key"]
    assert "-pixi+a+..+b+++warning++pwned+" in key
    assert all(c.isalnum() or c in "+-._" for c in key), key
    assert "](https://evil.example)" not in result.summary and "<img>" not in result.summary
    assert list(tmp_path.glob("**/b")) == []


# -- cuda-override does what it says, no more ---------------------------------------------


def test_cuda_override_stands_for_the_driver_and_leaves_glibc_checked(channel, tmp_path):
    channel.server.faults.clear()
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    doc = yaml.safe_load(channel.pixi_lock({"default": ["libhello"]}))
    doc["version"] = 7

    def run(needs: list[str], override: str) -> tuple[int, str]:
        doc["platforms"] = [{"name": "linux-64", "virtual-packages": needs}]
        (checkout / "pixi.lock").write_text(yaml.safe_dump(doc, sort_keys=False))
        env = {"GITHUB_WORKSPACE": str(checkout), "INPUT_CUDA_OVERRIDE": override}
        env["LD_LIBRARY_PATH"] = str(tmp_path / "no-driver")
        return job(checkout / "pixi.lock", tmp_path / "env", tmp_path / "pkgs", env=env)

    rc, out = run(["__cuda=12"], "11.8")  # a version, not a pass
    assert rc == 1 and "__cuda >=12 (platform linux-64): cuda-override offers 11.8" in out, out
    rc, out = run(["__cuda=12", "__glibc=99"], "12.4")
    assert rc == 1 and "__glibc >=99 (platform linux-64)" in out, out
    assert "__cuda" not in out.split("does not meet")[1].split("Run the job")[0], out
    assert not (tmp_path / "env").exists()
    rc, out = run(["__cuda=12"], "12.4")
    assert rc == 0, out


# -- kill -9 while uv installs ---------------------------------------------------------------


def test_kill_9_while_uv_installs_publishes_nothing_and_leaves_no_uv(channel, tmp_path):
    """uv dies with the job and keeps no cache to trust later."""
    import signal
    import uuid

    from testkit.conda.jobs import survivors, uv_alone, wheel_checkout

    bare = uv_alone(tmp_path)
    checkout = wheel_checkout(channel, tmp_path, FULL)
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {"GITHUB_WORKSPACE": str(checkout), "PATH": f"{bare}:/usr/bin:/bin", "TMPDIR": str(temp)}
    tag = uuid.uuid4().hex
    rc, out = job(
        checkout / "pixi.lock",
        tmp_path / "env",
        tmp_path / "pkgs",
        tag=tag,
        env={**env, "GPU_CI_TEST_KILL_AT": "pip"},
    )
    assert rc == -signal.SIGKILL, out
    assert survivors(tag) == []
    assert not (tmp_path / "env").exists()
    rc, out = job(checkout / "pixi.lock", tmp_path / "env", tmp_path / "pkgs", env=env)
    assert rc == 0 and "| pip packages installed by | uv |" in out, out
    assert our_temporaries(tmp_path) == []
    assert not list((tmp_path / "pkgs").rglob("*uv*")), "no uv cache beside the packages"
