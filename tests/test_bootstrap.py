"""The composite actions' bootstrap: hash-pinned venvs, verified before reuse, shared safely
by checkouts and concurrent jobs, never the vendor conda."""

from __future__ import annotations

import contextlib
import importlib.util
import marshal
import os
import py_compile
import re
import shutil
import subprocess
import sys
import venv
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from gpu_ci import __version__
from gpu_ci.specs import GROUPS
from testkit.cli import tree_digest
from testkit.shared import ROOT

BOOTSTRAP = ROOT / "scripts" / "bootstrap.sh"
LAUNCHER = ROOT / "scripts" / "run.py"


def run_bootstrap(
    tool_cache: Path, tmp_path: Path, action: str = "all", *, root: Path = ROOT, **env: str
):
    github_env = tmp_path / f"github_env-{os.getpid()}-{root.name}-{action}"
    github_env.write_text("")
    full = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GPU_CI_", "RUNNER_", "GITHUB_", "pythonLocation"))
    }
    full.update({"RUNNER_TOOL_CACHE": str(tool_cache), "GITHUB_ENV": str(github_env)})
    full.update(env)
    proc = subprocess.run(
        ["/bin/bash", str(root / "scripts" / "bootstrap.sh"), action],
        env=full,
        capture_output=True,
        text=True,
        timeout=600,
    )
    exported = dict(line.split("=", 1) for line in github_env.read_text().splitlines())
    return proc, exported


UV_BIN = ROOT / ".venv" / "bin"


def fast(**env: str) -> dict[str, str]:
    """Environment for bootstraps whose installer is not under test: uv when installed."""
    if (UV_BIN / "uv").exists():
        env.setdefault("PATH", f"{UV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}")
        env.setdefault("GPU_CI_BOOTSTRAP_PYTHON", sys.executable)
    return env


def launch(python: str, root: Path, *args: str) -> subprocess.CompletedProcess:
    """What an action's run step does: the venv's python, the checkout's own launcher."""
    return subprocess.run(
        [python, str(root / "scripts" / "run.py"), *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
    )


def site_packages(python: str) -> Path:
    out = subprocess.run(
        [python, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def checkout(tmp_path: Path, name: str) -> Path:
    """A second copy of this checkout, same version and locks, whose --version says ``name``."""
    root = tmp_path / name
    ignore = shutil.ignore_patterns("__pycache__")
    for part in ("src", "scripts", "requirements"):
        shutil.copytree(ROOT / part, root / part, ignore=ignore)
    cli = root / "src" / "gpu_ci" / "cli.py"
    text = cli.read_text()
    assert 'version=f"gpu-ci {__version__}"' in text
    cli.write_text(
        text.replace(
            'version=f"gpu-ci {__version__}"', f'version=f"gpu-ci {{__version__}} from {name}"'
        )
    )
    return root


def assert_compiled_from_sources(site: Path, scratch: Path) -> None:
    """Every source under ``site`` that a run may import has a ``.pyc`` whose header names
    its current mtime and size and whose code is what ``py_compile`` makes of it now (code
    objects compare by their code, not their file name: the venv was compiled before its
    rename); one that no run imports (``NEVER_IMPORTED``) has none at all."""
    never = bootstrap_module().NEVER_IMPORTED
    sources = [p for p in site.rglob("*.py") if "__pycache__" not in p.parts]
    assert sources
    for source in sources:
        pyc = Path(importlib.util.cache_from_source(str(source)))
        if never.match(source.relative_to(site).as_posix()):
            assert not list(pyc.parent.glob(f"{source.stem}.*.pyc")), source
            continue
        with contextlib.suppress(py_compile.PyCompileError):  # left as pip leaves it
            py_compile.compile(str(source), cfile=str(scratch), doraise=True)
            want, got = scratch.read_bytes(), pyc.read_bytes()
            assert got[:16] == want[:16], source
            assert marshal.loads(got[16:]) == marshal.loads(want[16:]), source


def bootstrap_module():
    spec = importlib.util.spec_from_file_location(
        "gpu_ci_bootstrap", ROOT / "scripts" / "bootstrap.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def bootstrapped(tool_cache: Path, tmp_path_factory) -> dict[str, str]:
    proc, exported = run_bootstrap(tool_cache, tmp_path_factory.mktemp("boot"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return exported


@pytest.mark.slow
def test_bootstrap_installs_the_checkout_version_from_the_lock(bootstrapped, tool_cache):
    python = bootstrapped["GPU_CI_PYTHON"]
    assert python.startswith(str(tool_cache / "gpu-ci-actions" / __version__))
    assert bootstrapped["GPU_CI_ROOT"] == str(ROOT)
    out = launch(python, ROOT, "--version")
    assert out.stdout.strip() == f"gpu-ci {__version__}", out.stderr
    # the venv holds dependencies only: the package comes from the action's own checkout
    where = subprocess.run(
        [python, "-c", "import gpu_ci"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        cwd="/",
    )
    assert "No module named 'gpu_ci'" in where.stderr
    assert not list(site_packages(python).glob("*.pth"))
    # exactly the pinned versions from the lock
    listing = (
        "import importlib.metadata as m\n"
        "for d in m.distributions(): print(d.metadata['Name'] + '==' + d.version)"
    )
    frozen = subprocess.run(
        [python, "-c", listing], capture_output=True, text=True, check=True
    ).stdout.lower()
    lock_text = "".join((ROOT / "requirements" / f"{g}.txt").read_text() for g in GROUPS)
    pins = {
        (canonicalize_name(m[0]), m[1])
        for m in re.findall(r"^([A-Za-z0-9_.-]+)==([^\s;]+)", lock_text, re.MULTILINE)
    }
    installed = {
        (canonicalize_name(n), v) for n, v in (line.split("==") for line in frozen.splitlines())
    }
    installed -= {i for i in installed if i[0] in ("pip", "setuptools", "gpu-ci-actions")}
    assert ("pygithub", "2.10.0") in installed or ("pygithub", "2.9.1") in installed
    assert installed <= pins, installed - pins


@pytest.mark.slow
def test_actions_install_only_their_groups_and_never_modify_a_venv(tmp_path):
    cache = tmp_path / "cache"
    proc, exported = run_bootstrap(cache, tmp_path, "verify-cuda-env", **fast())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "installed base, nvml" in proc.stdout
    python = exported["GPU_CI_PYTHON"]
    probe = (
        "import importlib.util as u; print([m for m in ('pynvml', 'github', 'rattler', "
        "'cryptography') if u.find_spec(m)])"
    )
    have = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True)
    assert have.stdout.strip() == "['pynvml']"
    before = tree_digest(Path(python).parent.parent)
    # the gate, later in the same job, gets a venv with both groups; the first is untouched
    # (a concurrent job may be running from it)
    proc, again = run_bootstrap(cache, tmp_path, "gpu-gate", **fast(**exported))
    assert proc.returncode == 0 and "installed base, github, nvml" in proc.stdout
    assert again["GPU_CI_PYTHON"] != python
    assert tree_digest(Path(python).parent.parent) == before
    have = subprocess.run(
        [again["GPU_CI_PYTHON"], "-c", probe], capture_output=True, text=True, check=True
    )
    assert have.stdout.strip() == "['pynvml', 'github']"  # never cryptography
    exported = again
    # and a third action whose groups are all there skips the work in bash
    proc, _ = run_bootstrap(cache, tmp_path, "remove-label", **fast(**exported))
    assert "bootstrapped earlier in this job" in proc.stdout


@pytest.mark.slow
def test_cache_dir_override_wins_over_the_tool_cache(bootstrapped, tool_cache, tmp_path):
    proc, exported = run_bootstrap(
        tmp_path / "elsewhere", tmp_path, GPU_CI_CACHE_DIR=str(tool_cache)
    )
    assert proc.returncode == 0 and ": reused: " in proc.stdout
    assert exported["GPU_CI_PYTHON"] == bootstrapped["GPU_CI_PYTHON"]


@pytest.mark.slow
def test_second_bootstrap_reuses_the_venv(bootstrapped, tool_cache, tmp_path):
    proc, exported = run_bootstrap(tool_cache, tmp_path)
    assert proc.returncode == 0
    assert ": reused: " in proc.stdout
    assert exported["GPU_CI_PYTHON"] == bootstrapped["GPU_CI_PYTHON"]


@pytest.mark.slow
def test_later_action_in_the_same_job_skips_the_bootstrap(bootstrapped, tool_cache, tmp_path):
    proc, exported = run_bootstrap(tool_cache, tmp_path, **bootstrapped)
    assert proc.returncode == 0
    assert "bootstrapped earlier in this job" in proc.stdout
    assert exported == {}


def read_only_conda(tmp_path: Path) -> tuple[Path, str]:
    """A vendor's conda installation nobody may write, and the digest of its tree."""
    vendor = tmp_path / "vendor-conda"
    venv.create(vendor, with_pip=False, symlinks=True)
    (vendor / "conda-meta").mkdir()
    (vendor / "conda-meta" / "history").write_text("# vendor\n")
    subprocess.run(["chmod", "-R", "a-w", str(vendor)], check=True)
    return vendor, tree_digest(vendor)


@pytest.mark.slow
def test_read_only_vendor_conda_first_on_path_is_skipped(bootstrapped, tool_cache, tmp_path):
    vendor, before = read_only_conda(tmp_path)
    path = f"{vendor / 'bin'}:{Path(sys.executable).parent}:/usr/bin:/bin"
    proc, exported = run_bootstrap(tool_cache, tmp_path, PATH=path, CONDA=str(vendor))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not exported["GPU_CI_PYTHON"].startswith(str(vendor))
    assert tree_digest(vendor) == before
    subprocess.run(["chmod", "-R", "u+w", str(vendor)], check=True)


@pytest.mark.slow
def test_a_conda_python_alone_makes_the_venv_and_no_second_python(tmp_path):
    """RAPIDS' images have conda's Python and no other: it creates the bootstrap's own venv
    (each matrix leg used to install a second Python), and the conda stays untouched."""
    vendor, before = read_only_conda(tmp_path)
    tools = tmp_path / "tools"  # no other Python on PATH, no fallbacks
    tools.mkdir()
    os.symlink("/usr/bin/dirname", tools / "dirname")
    if (UV_BIN / "uv").exists():
        os.symlink(UV_BIN / "uv", tools / "uv")
    try:
        proc, exported = run_bootstrap(
            tmp_path / "cache",
            tmp_path,
            "gpu-gate",
            PATH=f"{vendor / 'bin'}:{tools}",
            GPU_CI_BOOTSTRAP_FALLBACKS="",
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"{vendor / 'bin' / 'python3'} creates the bootstrap's own venv" in proc.stdout
        assert "No Python >= 3.9 in this job" not in proc.stdout  # nothing provisioned
        python = exported["GPU_CI_PYTHON"]
        assert python.startswith(str(tmp_path / "cache" / "gpu-ci-actions"))
        assert launch(python, ROOT, "--version").stdout.startswith(f"gpu-ci {__version__}")
        assert tree_digest(vendor) == before
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(vendor)], check=True)


def test_no_usable_python_names_setup_python(tmp_path, tool_cache):
    empty = tmp_path / "bin"
    empty.mkdir()
    for tool in ("dirname",):
        os.symlink(f"/usr/bin/{tool}", empty / tool)
    proc, _ = run_bootstrap(tool_cache, tmp_path, PATH=str(empty), GPU_CI_BOOTSTRAP_FALLBACKS="")
    assert proc.returncode == 1
    assert "::error title=gpu-ci bootstrap::No Python >= 3.9" in proc.stdout
    assert "actions/setup-python" in proc.stdout


# -- persistent, shared runners (issue 11) --------------------------------------------------


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory) -> Path:
    """One GPU_CI_CACHE_DIR for the tests that tamper with a venv and watch it be rebuilt."""
    return tmp_path_factory.mktemp("shared-cache")


@pytest.mark.slow
def test_two_checkouts_in_sequence_each_run_their_own_code(tmp_path):
    cache = tmp_path / "cache"
    a, b = checkout(tmp_path, "A"), checkout(tmp_path, "B")
    proc, env_a = run_bootstrap(cache, tmp_path, "gpu-gate", root=a, **fast())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc, env_b = run_bootstrap(cache, tmp_path, "gpu-gate", root=b, **fast())
    assert proc.returncode == 0 and ": reused: " in proc.stdout
    assert env_a["GPU_CI_PYTHON"] == env_b["GPU_CI_PYTHON"]  # one venv, shared
    # A's next step, after B bootstrapped last (1.0.0 ran B's code here, with A's token)
    assert launch(env_a["GPU_CI_PYTHON"], a, "--version").stdout.strip().endswith("from A")
    assert launch(env_b["GPU_CI_PYTHON"], b, "--version").stdout.strip().endswith("from B")
    # and A's later action in the same job takes the fast path, still its own code
    proc, _ = run_bootstrap(cache, tmp_path, "remove-label", root=a, **fast(**env_a))
    assert "bootstrapped earlier in this job" in proc.stdout
    assert launch(env_a["GPU_CI_PYTHON"], a, "--version").stdout.strip().endswith("from A")


@pytest.mark.slow
def test_two_checkouts_bootstrapping_at_once_share_one_complete_venv(tmp_path):
    cache = tmp_path / "cache"
    roots = [checkout(tmp_path, name) for name in ("A", "B", "C")]
    with ThreadPoolExecutor(3) as pool:
        results = list(
            pool.map(lambda r: run_bootstrap(cache, tmp_path, "gpu-gate", root=r, **fast()), roots)
        )
    for proc, _ in results:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    outs = [proc.stdout for proc, _ in results]
    assert sum("installed base, github" in out for out in outs) == 1  # one builder, by lock
    assert sum(": reused: " in out for out in outs) == 2
    pythons = {env["GPU_CI_PYTHON"] for _, env in results}
    assert len(pythons) == 1
    versions = list(
        ThreadPoolExecutor(3).map(
            lambda r: launch(pythons.copy().pop(), r, "--version").stdout.strip(), roots
        )
    )
    assert versions == [f"gpu-ci {__version__} from {n}" for n in ("A", "B", "C")]
    leftovers = [
        p.name
        for p in Path(next(iter(pythons))).parents[2].iterdir()
        if ".tmp-" in p.name or ".trash-" in p.name
    ]
    assert leftovers == []


@pytest.mark.parametrize(
    "plant", ["pth", "sitecustomize", "pyc", "changed", "same-size-mtime", "extra-dist"]
)
@pytest.mark.slow
def test_a_planted_file_in_a_reused_venv_never_runs(shared_cache, tmp_path, plant):
    cache = shared_cache
    proc, env = run_bootstrap(cache, tmp_path, "gpu-gate", **fast())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    python = env["GPU_CI_PYTHON"]
    site = site_packages(python)
    ran = tmp_path / "ran"
    payload = f"import pathlib; pathlib.Path({str(ran)!r}).write_text('pwned')\n"
    if plant == "pth":
        (site / "zz-evil.pth").write_text("import os; " + payload.replace("\n", "; ") + "\n")
    elif plant == "sitecustomize":
        (site / "sitecustomize.py").write_text(payload)
    elif plant == "pyc":  # a .pyc that Python would load instead of its source
        init = site / "github" / "__init__.py"
        evil = tmp_path / "evil" / "github" / "__init__.py"
        evil.parent.mkdir(parents=True)
        evil.write_text(payload + init.read_text())
        shutil.copystat(init, evil)
        subprocess.run([python, "-m", "py_compile", str(evil)], check=True)
        pyc = next((evil.parent / "__pycache__").glob("__init__.*.pyc"))
        shutil.copy(pyc, next((site / "github" / "__pycache__").glob("__init__.*.pyc")))
    elif plant == "same-size-mtime":  # same size, mtime set back: only ctime tells
        target = site / "github" / "__init__.py"
        before = target.stat()
        text = target.read_text()
        evil = payload.replace("\n", ";")
        target.write_text(evil + text[len(evil) :])
        os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert target.stat().st_size == before.st_size
    elif plant == "changed":
        target = site / "github" / "__init__.py"
        target.write_text(payload + target.read_text())
        for pyc in (site / "github" / "__pycache__").glob("__init__.*.pyc"):
            pyc.unlink()
    else:
        dist = site / "evil-1.0.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n")
        (site / "evil.py").write_text(payload)
    # a later job on the same runner
    proc, again = run_bootstrap(cache, tmp_path, "gpu-gate", **fast())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "::notice title=gpu-ci bootstrap::not reusing" in proc.stdout
    if plant == "same-size-mtime":  # found by its content, not by a missing .pyc
        assert "changed files:" in proc.stdout and "github/__init__.py" in proc.stdout
    assert again["GPU_CI_PYTHON"] == python
    out = subprocess.run(
        [python, str(LAUNCHER), "gpu-gate", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0
    subprocess.run([python, "-c", "import github, pynvml"], capture_output=True)
    assert not ran.exists()
    # and the rebuilt venv is reused again without a notice
    proc, _ = run_bootstrap(cache, tmp_path, "gpu-gate", **fast())
    assert ": reused: " in proc.stdout and "not reusing" not in proc.stdout


@pytest.mark.slow
def test_running_the_actions_leaves_the_venv_verifiable(bootstrapped, tool_cache, tmp_path):
    python = bootstrapped["GPU_CI_PYTHON"]
    for args in (["--version"], ["verify-cuda-env", "--require-gpu", "false"]):
        launch(python, ROOT, *args)
    proc, _ = run_bootstrap(tool_cache, tmp_path)
    assert ": reused: " in proc.stdout and "not reusing" not in proc.stdout


@pytest.mark.slow
def test_a_half_built_venv_is_never_used(shared_cache, tmp_path):
    boot = bootstrap_module()
    cache = shared_cache
    proc, env = run_bootstrap(cache, tmp_path, "gpu-gate", **fast())
    venv_path = Path(env["GPU_CI_PYTHON"]).parents[1]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # kill -9 during a rebuild: the aside copy is left; during 1.0.0's in-place build: a venv
    # without its manifest
    stale = venv_path.with_name(venv_path.name + ".tmp-999999")
    shutil.copytree(venv_path, stale, symlinks=True)
    (venv_path / boot.MANIFEST).unlink()
    proc, again = run_bootstrap(cache, tmp_path, "gpu-gate", **fast())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "not reusing" in proc.stdout and "no readable manifest" in proc.stdout
    assert not stale.exists()
    assert boot.verify(venv_path) == ""


@pytest.mark.slow
def test_a_tampered_uv_cache_cannot_install_into_a_fresh_venv(tmp_path):
    uv = ROOT / ".venv" / "bin" / "uv"
    if not uv.exists():
        pytest.skip("uv is not installed in .venv")
    path = f"{uv.parent}:/usr/bin:/bin"
    cache = tmp_path / "cache"
    proc, env = run_bootstrap(
        cache, tmp_path, "gpu-gate", PATH=path, GPU_CI_BOOTSTRAP_PYTHON=sys.executable
    )
    assert proc.returncode == 0 and "with uv" in proc.stdout, proc.stdout + proc.stderr
    uv_cache = cache / "gpu-ci-actions" / "uv-cache"
    assert uv_cache.is_dir()
    venv_path = Path(env["GPU_CI_PYTHON"]).parents[1]
    site = site_packages(env["GPU_CI_PYTHON"])
    assert (site / "github" / "__init__.py").stat().st_nlink == 1  # copies, not cache links
    # every module compiled, each from its installed (RECORD-checked) source
    assert_compiled_from_sources(site, tmp_path / "ref.pyc")
    cached = [p for p in uv_cache.rglob("github/__init__.py") if "dist-info" not in str(p)]
    assert cached
    for target in cached:
        target.write_text("raise SystemExit('pwned')\n" + target.read_text())
    shutil.rmtree(venv_path)  # a later job needs a fresh venv (e.g. another key)
    proc, _ = run_bootstrap(
        cache, tmp_path, "gpu-gate", PATH=path, GPU_CI_BOOTSTRAP_PYTHON=sys.executable
    )
    assert proc.returncode == 1
    assert "failed verification" in proc.stderr and "github/__init__.py" in proc.stderr
    assert not venv_path.exists()


def test_self_hosted_runners_keep_the_venv_per_job_unless_the_admin_opts_in(tmp_path):
    boot = bootstrap_module()
    env = {
        "RUNNER_ENVIRONMENT": "self-hosted",
        "RUNNER_TOOL_CACHE": "/opt/hostedtoolcache",
        "RUNNER_TEMP": "/runner/_work/_temp",
    }
    assert boot.cache_base(env) == Path("/runner/_work/_temp")
    assert boot.cache_base({**env, "GPU_CI_CACHE_DIR": "/srv/gpu-ci"}) == Path("/srv/gpu-ci")
    hosted = {**env, "RUNNER_ENVIRONMENT": "github-hosted"}
    assert boot.cache_base(hosted) == Path("/opt/hostedtoolcache")


def test_startup_hooks_outside_any_record_are_reported(tmp_path):
    boot = bootstrap_module()
    site = tmp_path / "site"
    (site / "pkg-1.0.dist-info").mkdir(parents=True)
    (site / "pkg.pth").write_text("/somewhere\n")
    (site / "pkg-1.0.dist-info" / "RECORD").write_text("pkg.pth,,\npkg-1.0.dist-info/RECORD,,\n")
    assert boot.record_problems(site) == []
    (site / "usercustomize.py").write_text("")
    (site / "other.pth").write_text("")
    assert boot.record_problems(site) == [
        "other.pth runs at start-up and belongs to no distribution",
        "usercustomize.py runs at start-up and belongs to no distribution",
    ]
    # a package or an extension, and what is under it; deeper names are no hooks
    (site / "other.pth").unlink()
    (site / "usercustomize.py").unlink()
    (site / "sitecustomize" / "sub").mkdir(parents=True)
    (site / "sitecustomize" / "sub" / "__init__.py").write_text("")
    (site / "usercustomize.cpython-311-x86_64-linux-gnu.so").write_text("")
    (site / "pkg" / "deeper").mkdir(parents=True)
    (site / "pkg" / "deeper" / "x.pth").write_text("")
    (site / "pkg" / "sitecustomize.py").write_text("")
    assert boot.record_problems(site) == [
        "sitecustomize/sub runs at start-up and belongs to no distribution",
        "sitecustomize/sub/__init__.py runs at start-up and belongs to no distribution",
        "usercustomize.cpython-311-x86_64-linux-gnu.so runs at start-up and belongs to no "
        "distribution",
    ]


def test_a_failed_build_leaves_nothing_behind(tmp_path):
    root = checkout(tmp_path, "A")
    lock = root / "requirements" / "github.txt"
    text = lock.read_text()
    first = re.search(r"--hash=sha256:([0-9a-f]{64})", text).group(1)
    lock.write_text(text.replace(first, "0" * 64))  # a lock the index cannot satisfy
    cache = tmp_path / "cache"
    proc, exported = run_bootstrap(cache, tmp_path, "gpu-gate", root=root, **fast())
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "::error title=gpu-ci bootstrap::" in proc.stdout + proc.stderr
    assert exported == {}
    venvs = [p.name for p in (cache / "gpu-ci-actions").glob("*/py*") if p.is_dir()]
    assert venvs == []  # neither a venv nor a half-built one


# -- review: a venv or cache directory that another user can write ---------------------------


@pytest.mark.parametrize("how", ["other-writable", "other-owner"])
@pytest.mark.slow
def test_a_venv_another_user_could_write_is_never_reused(shared_cache, tmp_path, how):
    """The manifest lives in the venv: it vouches only for files no one else could write (a
    user sharing GPU_CI_CACHE_DIR could plant files and a matching manifest)."""
    if how == "other-owner" and os.getuid() != 0:
        pytest.skip("chown to another uid needs root")
    proc, env = run_bootstrap(shared_cache, tmp_path, "gpu-gate", **fast())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    venv_path = Path(env["GPU_CI_PYTHON"]).parents[1]
    boot = bootstrap_module()
    assert boot.verify(venv_path) == ""
    target = site_packages(env["GPU_CI_PYTHON"]) / "github" / "__init__.py"
    if how == "other-writable":
        target.chmod(0o666)
        why = "writable by group or others"
    else:
        os.chown(target, 4242, -1)
        why = "owned by uid 4242"
    assert why in boot.verify(venv_path)
    proc, again = run_bootstrap(shared_cache, tmp_path, "gpu-gate", **fast())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "not reusing" in proc.stdout and why in proc.stdout
    assert again["GPU_CI_PYTHON"] == env["GPU_CI_PYTHON"]
    assert boot.verify(venv_path) == ""


def test_a_cache_directory_another_user_can_write_is_refused(tmp_path):
    cache = tmp_path / "cache"
    shared = cache / "gpu-ci-actions" / __version__
    shared.mkdir(parents=True)
    shared.chmod(0o777)
    proc, env = run_bootstrap(cache, tmp_path, "gpu-gate", **fast())
    assert proc.returncode != 0 and "GPU_CI_PYTHON" not in env
    assert "writable by group or others" in proc.stdout + proc.stderr
    assert "own GPU_CI_CACHE_DIR" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert [p.name for p in shared.iterdir()] == []  # nothing built where others can swap it


# -- cold start (issue 30): no pip in the venv, compiled once after the checks ---------------


@pytest.mark.slow
def test_the_checkout_is_compiled_under_the_bootstraps_umask(tool_cache, tmp_path):
    """The compile child starts under the bootstrap's umask (022), as the venv is built: a
    job's laxer one (000, or a user-private group's 002) left this checkout's
    ``__pycache__`` writable by others, for another account on the host to plant a ``.pyc``
    that every later run of this checkout loads."""
    root = checkout(tmp_path, "umask")
    old = os.umask(0)
    try:
        proc, _ = run_bootstrap(tool_cache, tmp_path, root=root, **fast())
    finally:
        os.umask(old)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    written = [*(root / "src").rglob("__pycache__"), *(root / "src").rglob("*.pyc")]
    assert any(p.name.startswith("cli.") for p in written)
    assert [p for p in written if p.stat().st_mode & 0o022] == []


def test_the_compile_child_runs_no_module_of_the_jobs_directory(tmp_path, monkeypatch):
    """The child that compiles the checkout is isolated (``-I``): ``python -m`` puts the
    working directory (the job's workspace: a pull request's files, even in a privileged
    job that checked them out) first on ``sys.path``, and ``PYTHONPATH`` after it, so a
    ``compileall.py`` there ran in place of the standard library's."""
    boot = bootstrap_module()
    package = tmp_path / "src" / "gpu_ci"
    package.mkdir(parents=True)
    (package / "cli.py").write_text("X = 1\n")
    monkeypatch.setattr(boot, "ROOT", tmp_path)
    workspace = tmp_path / "workspace"
    (workspace / "lib").mkdir(parents=True)
    for planted in (workspace / "compileall.py", workspace / "lib" / "compileall.py"):
        planted.write_text(f"open({str(planted) + '.ran'!r}, 'w')\n")
    monkeypatch.chdir(workspace)
    monkeypatch.setenv("PYTHONPATH", str(workspace / "lib"))
    child = boot.compile_source()
    assert child is not None and child.wait() == 0
    assert sorted(p.name for p in workspace.rglob("*.ran")) == []
    assert boot.compiled(package)


@pytest.mark.parametrize("pip", [[], ["/host/pip/__pip-runner__.py"]])
def test_the_pip_fallbacks_start_their_python_isolated(tmp_path, monkeypatch, pip):
    """Without uv, ``python -m venv`` (no pip outside the venv) and the venv's pip run with
    ``-I``: ``-m`` (and a script's PYTHONPATH) would put the job's working directory, a pull
    request's files, ahead of the standard library and of pip."""
    boot = bootstrap_module()
    ran: list[list[str]] = []

    def run(cmd, env=None):
        ran.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    def side_by_side(jobs, env=None):
        return [run(cmd) for cmd, _ in jobs]

    monkeypatch.setattr(boot, "run", run)
    monkeypatch.setattr(boot, "run_side_by_side", side_by_side)
    installer = boot.Installer(tmp_path / "uv-cache")
    installer.uv, installer.pip = None, pip
    if not pip:
        installer.create(tmp_path / "venv")
    locks = [ROOT / "requirements" / "base.txt", ROOT / "requirements" / "nvml.txt"]
    installer.install(tmp_path / "venv", locks)
    assert ran and all(cmd[1] == "-I" for cmd in ran), ran


def test_the_venvs_site_packages_is_found_without_starting_its_python(tmp_path, monkeypatch):
    """``site_packages`` answers in this process (the venv's interpreter is this one) what
    the venv's own Python says its ``purelib`` is: no interpreter is started for it."""
    boot = bootstrap_module()
    target = tmp_path / "venv"
    venv.create(target, with_pip=False, symlinks=True)
    want = subprocess.run(
        [
            str(target / "bin" / "python"),
            "-I",
            "-c",
            "import site; print(site.getsitepackages()[0])",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()

    def started(*args, **kwargs):
        raise AssertionError(f"an interpreter was started: {args}")

    monkeypatch.setattr(boot.subprocess, "run", started)
    assert boot.site_packages(target) == Path(want)


@pytest.mark.parametrize("pyc", ["timestamp", "checked-hash"])
def test_the_checkout_is_compiled_again_unless_every_module_is_fresh(tmp_path, monkeypatch, pyc):
    """The bootstrap skips the checkout's compile only when every module has this Python's
    fresh ``.pyc``: ``cli``'s alone (what it looked for) is left by a compile killed part way
    (``cli`` comes early), by another Python, or beside a module edited since. With
    ``SOURCE_DATE_EPOCH`` set, compileall writes hash-checked ``.pyc`` files."""
    boot = bootstrap_module()
    if pyc == "checked-hash":
        monkeypatch.setenv("SOURCE_DATE_EPOCH", "1")
    else:
        monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    package = tmp_path / "src" / "gpu_ci"
    (package / "wing").mkdir(parents=True)
    for name in ("__init__.py", "cli.py", "wing/__init__.py", "wing/rules.py"):
        (package / name).write_text("X = 1\n")
    monkeypatch.setattr(boot, "ROOT", tmp_path)

    def compiles() -> bool:
        child = boot.compile_source()
        if child is None:
            return False
        assert child.wait() == 0
        return True

    rules = package / "wing" / "rules.py"
    other = "cpython-313" if sys.implementation.cache_tag != "cpython-313" else "cpython-39"
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / f"cli.{other}.pyc").write_bytes(b"another Python's")
    assert compiles()  # only another Python's cli .pyc
    assert not compiles()  # every module fresh: no child
    flags = int.from_bytes(
        Path(importlib.util.cache_from_source(str(rules))).read_bytes()[4:8], "little"
    )
    assert flags == (3 if pyc == "checked-hash" else 0)
    Path(importlib.util.cache_from_source(str(rules))).unlink()
    assert compiles()  # a compile killed after cli
    assert not compiles()
    rules.write_text("X = 22\n")
    assert compiles()  # an edited module
    assert not compiles()
    # a checkout the job cannot write (an admin's read-only copy): no child that can only fail,
    # every job (the tests run as root, so the answer to "may I write here" is stubbed)
    rules.write_text("X = 333\n")
    writable = boot.os.access
    monkeypatch.setattr(
        boot.os, "access", lambda path, mode: False if mode == os.W_OK else writable(path, mode)
    )
    assert not compiles()


@pytest.mark.slow
def test_a_python_without_pip_runs_the_pip_wheel_it_ships_with(tmp_path):
    """A Python with no pip of its own (a distribution's python3 with python3-venv, whose pip
    is only the wheel that ensurepip would install): the bootstrap runs pip from that wheel
    instead of installing pip into the venv, and compiles every module once, after the
    RECORD check, so that runs compile nothing and leave the venv verifiable."""
    bare = tmp_path / "bare-python"
    venv.create(bare, with_pip=False, symlinks=True)
    python = str(bare / "bin" / "python")
    probe = (
        "import ensurepip, pathlib; "
        "print(*pathlib.Path(ensurepip.__file__).parent.glob('_bundled/pip-*.whl'))"
    )
    wheel = subprocess.run([python, "-c", probe], capture_output=True, text=True).stdout.strip()
    if not wheel:
        pytest.skip("this Python ships no pip wheel with ensurepip")
    cache = tmp_path / "cache"
    env = {"PATH": "/usr/bin:/bin", "GPU_CI_BOOTSTRAP_PYTHON": python}
    proc, exported = run_bootstrap(cache, tmp_path, "verify-cuda-env", **env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "installed base, nvml with pip" in proc.stdout
    venv_python = exported["GPU_CI_PYTHON"]
    have = subprocess.run(
        [venv_python, "-c", "import importlib.util as u; print(u.find_spec('pip'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert have.stdout.strip() == "None"  # pip ran from the wheel, it is not in the venv
    site = site_packages(venv_python)
    sources = [p for p in site.rglob("*.py") if "__pycache__" not in p.parts]
    assert any(p.name == "pynvml.py" for p in sources)
    uncompiled = [
        p for p in sources if not list((p.parent / "__pycache__").glob(f"{p.stem}.*.pyc"))
    ]
    never = bootstrap_module().NEVER_IMPORTED
    assert uncompiled == [p for p in sources if never.match(p.relative_to(site).as_posix())]
    assert any(p.parts[-2] == "packaging" for p in uncompiled)  # packaging.version alone
    assert launch(venv_python, ROOT, "verify-cuda-env", "--require-gpu", "false").returncode == 0
    proc, _ = run_bootstrap(cache, tmp_path, "verify-cuda-env", **env)
    assert ": reused: " in proc.stdout and "not reusing" not in proc.stdout


@pytest.mark.slow
def test_a_pyc_planted_in_the_uv_cache_is_replaced_by_the_checked_source(tmp_path):
    """uv copies whatever its cache holds, ``__pycache__`` too, and no RECORD lists a .pyc:
    an unchecked-hash .pyc (loaded without looking at its source) planted in the cache would
    run in every job. The bootstrap compiles every checked source itself, over it."""
    uv = ROOT / ".venv" / "bin" / "uv"
    if not uv.exists():
        pytest.skip("uv is not installed in .venv")
    env = {"PATH": f"{uv.parent}:/usr/bin:/bin", "GPU_CI_BOOTSTRAP_PYTHON": sys.executable}
    cache = tmp_path / "cache"
    proc, exported = run_bootstrap(cache, tmp_path, "gpu-gate", **env)
    assert proc.returncode == 0 and "with uv" in proc.stdout, proc.stdout + proc.stderr
    uv_cache = cache / "gpu-ci-actions" / "uv-cache"
    cached = [p for p in uv_cache.rglob("github/__init__.py") if "dist-info" not in str(p)]
    assert cached
    ran = tmp_path / "ran"
    evil = tmp_path / "evil" / "github" / "__init__.py"
    evil.parent.mkdir(parents=True)
    evil.write_text(f"import pathlib; pathlib.Path({str(ran)!r}).write_text('pwned')\n")
    compiled = subprocess.run(
        [
            sys.executable,
            "-c",
            "import py_compile, sys; print(py_compile.compile(sys.argv[1], "
            "invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH))",
            str(evil),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    pyc = Path(compiled.stdout.strip())
    for target in cached:
        (target.parent / "__pycache__").mkdir(exist_ok=True)
        shutil.copy(pyc, target.parent / "__pycache__" / pyc.name)
    shutil.rmtree(Path(exported["GPU_CI_PYTHON"]).parents[1])  # a later job builds afresh
    proc, again = run_bootstrap(cache, tmp_path, "gpu-gate", **env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    installed = site_packages(again["GPU_CI_PYTHON"]) / "github" / "__pycache__" / pyc.name
    assert installed.read_bytes() != pyc.read_bytes()
    subprocess.run([again["GPU_CI_PYTHON"], "-c", "import github"], capture_output=True)
    assert not ran.exists()


# -- cold start: what is compiled, pip side by side, digests read once -------------------------


def _third_party_imports() -> list[str]:
    """Every module that src/gpu_ci imports from outside the standard library and itself,
    at module level or inside a function (the lazy imports are most of them)."""
    import ast

    names: set[str] = set()
    for path in (ROOT / "src" / "gpu_ci").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return sorted(n for n in names if n.split(".")[0] not in (*sys.stdlib_module_names, "gpu_ci"))


@pytest.mark.slow
def test_no_run_imports_a_source_the_bootstrap_leaves_uncompiled():
    """``NEVER_IMPORTED`` sources get no ``.pyc`` (a run would compile them in memory, each
    time): every command and every third-party module our code imports (or a name in it)
    loads none of them, and each rule of the pattern still matches a file of this venv (a
    rule for a file that moved away would hide nothing, silently)."""
    from gpu_ci.specs import ACTIONS

    boot = bootstrap_module()
    imports = _third_party_imports()
    assert {"github", "rattler", "pynvml", "packaging.version", "yaml"} <= set(imports)
    code = (
        "import importlib, json, sys, sysconfig\n"
        "sys.path.insert(0, 'src')\n"
        f"for name in {[s.command_module for s in ACTIONS.values()] + imports!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ImportError:\n"  # 'from a import b' of a name that is no module
        "        pass\n"
        "files = [getattr(m, '__file__', None) or '' for m in list(sys.modules.values())]\n"
        "print(json.dumps(files))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    site = Path(sysconfig_purelib())
    loaded = [
        Path(f).relative_to(site).as_posix()
        for f in __import__("json").loads(proc.stdout.splitlines()[-1])
        if f and Path(f).is_relative_to(site)
    ]
    assert len(loaded) > 300
    assert [f for f in loaded if boot.NEVER_IMPORTED.match(f)] == []
    files = [p.relative_to(site).as_posix() for p in site.rglob("*.py")]
    for rule in boot.NEVER_IMPORTED_RULES:
        assert any(re.match(rule, f) for f in files), rule


def sysconfig_purelib() -> str:
    import sysconfig

    return sysconfig.get_paths()["purelib"]


def test_a_pyc_in_a_fresh_site_is_never_kept_even_beside_a_source_left_uncompiled(tmp_path):
    """An installer copies whatever its cache holds, ``__pycache__`` included: before
    compiling, the bootstrap removes every ``.pyc`` and ``__pycache__`` (a link too, which
    compiling would write through); a source it leaves uncompiled keeps none."""
    boot = bootstrap_module()
    site = tmp_path / "site"
    for rel in ("cffi/api.py", "mod/core.py"):
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text("X = 1\n")
        (site / rel).parent.joinpath("__pycache__").mkdir()
    tag = sys.implementation.cache_tag
    planted = [
        site / "cffi" / "__pycache__" / f"api.{tag}.pyc",
        site / "mod" / "__pycache__" / "x.pyc",
    ]
    for pyc in planted:
        pyc.write_bytes(b"planted")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (site / "link").mkdir()
    (site / "link" / "m.py").write_text("Y = 2\n")
    (site / "link" / "__pycache__").symlink_to(elsewhere)
    boot.compile_site(site)
    assert not any(p.exists() for p in planted)
    assert not (site / "link" / "__pycache__").is_symlink() and list(elsewhere.iterdir()) == []
    assert not (site / "cffi" / "__pycache__").exists()  # left uncompiled: no .pyc at all
    assert (site / "mod" / "__pycache__" / f"core.{tag}.pyc").read_bytes() != b"planted"
    assert (site / "link" / "__pycache__" / f"m.{tag}.pyc").is_file()


def test_pip_installs_in_two_runs_side_by_side_each_package_once(tmp_path, monkeypatch):
    """Without uv, two pip runs (pip installs one wheel after another, on one core), each
    with half of the locks' entries on its stdin: every entry once, a package's entries
    (one per environment marker) in one run, hashes kept; both isolated (``-I``)."""
    boot = bootstrap_module()
    locks = [ROOT / "requirements" / f"{g}.txt" for g in ("base", "github", "nvml")]
    halves = boot.pip_halves(locks)
    assert len(halves) == 2
    pins = [re.findall(r"^([A-Za-z0-9_.-]+)==\S+", h, re.MULTILINE) for h in halves]
    want = [
        m for lock in locks for m in re.findall(r"^([A-Za-z0-9_.-]+)==", lock.read_text(), re.M)
    ]
    assert sorted(pins[0] + pins[1]) == sorted(want)
    assert not set(pins[0]) & set(pins[1])
    for half in halves:
        assert "# via" not in half
        for entry in re.split(r"\n(?=\S)", half.strip()):
            assert "--hash=sha256:" in entry and entry.splitlines()[-1].rstrip()[-1] != "\\"
    ran: list[tuple[list[str], str]] = []

    def side_by_side(jobs, env=None):
        ran.extend(jobs)
        return [subprocess.CompletedProcess(cmd, 0, "", "") for cmd, _ in jobs]

    monkeypatch.setattr(boot, "run_side_by_side", side_by_side)
    monkeypatch.setattr(boot.os, "cpu_count", lambda: 2)
    installer = boot.Installer(tmp_path / "uv-cache")
    installer.uv, installer.pip = None, ["/host/pip/__pip-runner__.py"]
    installer.install(tmp_path / "venv", locks)
    assert [text for _, text in ran] == halves
    assert all(cmd[1] == "-I" and cmd[-2:] == ["-r", "/dev/stdin"] for cmd, _ in ran)


def test_run_side_by_side_runs_at_once_and_feeds_each_its_text(tmp_path):
    script = (
        "import sys, time, pathlib; d = pathlib.Path(sys.argv[1]); "
        "(d / sys.argv[2]).write_text(''); "
        "deadline = time.monotonic() + 30\n"
        "while len(list(d.iterdir())) < 2 and time.monotonic() < deadline: time.sleep(0.01)\n"
        "print(len(list(d.iterdir())), sys.stdin.read())"
    )
    jobs = [([sys.executable, "-c", script, str(tmp_path), n], f"text {n}") for n in "ab"]
    done = bootstrap_module().run_side_by_side(jobs)
    assert [p.stdout.split(maxsplit=1) for p in done] == [["2", "text a\n"], ["2", "text b\n"]]


def test_the_manifest_reads_each_file_once_yet_records_what_the_venv_holds(tmp_path, monkeypatch):
    """The RECORD check's sha256 of each file is reused for the manifest while the file's
    stat key is unchanged: a file changed between the check and the manifest (here, by the
    compile step) is read again, and every digest is that of the content in the venv."""
    boot = bootstrap_module()
    reads: list[str] = []
    digest = boot._digest
    monkeypatch.setattr(boot, "_digest", lambda path: reads.append(str(path)) or digest(path))
    compile_site = boot.compile_site

    def compile_and_touch(site):
        compile_site(site)
        target = site / "pynvml.py"
        target.write_text(target.read_text() + "\n# changed after the check\n")

    monkeypatch.setattr(boot, "compile_site", compile_and_touch)
    monkeypatch.setattr(boot, "LOCKS", ROOT / "requirements")
    env = fast()
    monkeypatch.setenv("PATH", env.get("PATH", os.environ["PATH"]))
    venv_path = tmp_path / "v" / "key"
    venv_path.parent.mkdir()
    boot.build(venv_path, ["base", "nvml"])
    read = {Path(r).name for r in reads}
    manifest = __import__("json").loads((venv_path / boot.MANIFEST).read_text())
    fresh, _ = boot.tree(venv_path)
    assert manifest["files"] == fresh
    assert "pynvml.py" in read  # changed after the check: read again
    assert "version.py" not in read  # packaging's, checked against RECORD: read once
    assert boot.verify(venv_path) == ""


def test_pip_halves_parse_a_lock_as_pip_does(tmp_path):
    """Each half is parsed by pip as the locks are: an entry is the lines pip joins (a line
    ending in a backslash continues, indented or not; an indented line after one that does
    not is an entry of its own), index options reach both runs, and a line naming another
    file (read relative to the lock, not to /dev/stdin) means one run of the locks as they
    are. Blank lines, comments and CRLF are no entries."""
    boot = bootstrap_module()
    h = "    --hash=sha256:" + "a" * 64
    lock = tmp_path / "odd.txt"
    lock.write_bytes(
        "\r\n".join(
            [
                "# a comment",
                "--index-url https://mirror.example/simple",
                "",
                "alpha==1.0 \\",  # a continuation at column 0
                "--hash=sha256:" + "b" * 64,
                "beta==2.0 \\",
                h,
                "    # via alpha",
                "    gamma==3.0 --hash=sha256:" + "c" * 64,  # indented, yet its own entry
                "Delta_Pkg==4.0 ; python_version >= '3.9' \\",
                h,
                "delta-pkg==4.1 ; python_version < '3.9' \\",
                h,
                "",
            ]
        ).encode()
    )
    halves = boot.pip_halves([lock])
    assert len(halves) == 2
    for half in halves:
        assert half.startswith("--index-url https://mirror.example/simple\n")
    pins = [re.findall(r"^\s*([A-Za-z][\w.-]*)==", half, re.MULTILINE) for half in halves]
    assert sorted(pins[0] + pins[1]) == ["Delta_Pkg", "alpha", "beta", "delta-pkg", "gamma"]
    assert {"Delta_Pkg", "delta-pkg"} <= set(pins[0]) or {"Delta_Pkg", "delta-pkg"} <= set(pins[1])
    both = "".join(halves)
    assert "alpha==1.0 \\\n--hash=sha256:" + "b" * 64 + "\n" in both
    assert "\r" not in both and "# via" not in both
    for included in ("-r other.txt", "--constraint c.txt", "-e ./pkg", "--find-links ./wheels"):
        other = tmp_path / "with-include.txt"
        other.write_text(f"{included}\nalpha==1.0 \\\n{h}\nbeta==2.0 \\\n{h}\n")
        assert boot.pip_halves([other]) == [], included


def _eight_modules(tmp_path: Path) -> Path:
    """A fresh site of eight packages ``m0`` ... ``m7`` for ``compile_site``."""
    site = tmp_path / "site"
    for i in range(8):
        (site / f"m{i}").mkdir(parents=True)
        (site / f"m{i}" / "__init__.py").write_text(f"X = {i}\n")
    return site


def test_a_compile_child_that_dies_leaves_no_module_uncompiled(tmp_path, monkeypatch):
    """A forked compile child killed part way (the OOM killer on a busy runner) or failing:
    its share is compiled by the parent, not left to be compiled in memory by every run of
    a venv that is never modified again."""
    boot = bootstrap_module()
    site = _eight_modules(tmp_path)
    parent = os.getpid()
    real = py_compile.compile

    def dies_in_a_child(source, *args, **kwargs):
        if os.getpid() != parent:
            if source.endswith("m3/__init__.py"):
                raise MemoryError  # not an error py_compile reports for a bad source
            os.kill(os.getpid(), 9)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(py_compile, "compile", dies_in_a_child)
    monkeypatch.setattr(boot.os, "cpu_count", lambda: 4)
    boot.compile_site(site)
    tag = sys.implementation.cache_tag
    missing = [
        i
        for i in range(8)
        if not (site / f"m{i}" / "__pycache__" / f"__init__.{tag}.pyc").is_file()
    ]
    assert missing == []


@pytest.mark.parametrize("where", ["parent", "child"])
def test_a_full_disk_while_compiling_fails_the_build(tmp_path, monkeypatch, where):
    """No space for a ``.pyc`` (or the quota spent), in this process or a compile child: the
    build fails (``build`` names it and removes the half-built venv:
    ``test_a_full_disk_during_a_build_is_an_error_line_and_leaves_nothing``) rather than
    keeping a venv that every later run would compile in memory, and no compile child is
    left writing into it. A source that cannot be read is still only left uncompiled."""
    import errno

    boot = bootstrap_module()
    site = _eight_modules(tmp_path)
    parent = os.getpid()
    real = py_compile.compile

    def full(source, *args, **kwargs):
        if source.endswith("m1/__init__.py"):
            raise OSError(errno.EACCES, os.strerror(errno.EACCES), source)
        # two compile processes: the parent takes m0, m2, ..., the child m1, m3, ...
        if source.endswith("m0/__init__.py" if where == "parent" else "m3/__init__.py"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), source)
        return real(source, *args, **kwargs)

    forked = []
    real_fork = os.fork

    def fork():
        pid = real_fork()
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(py_compile, "compile", full)
    monkeypatch.setattr(boot, "usable_cores", lambda: 2)
    monkeypatch.setattr(boot.os, "fork", fork)
    with pytest.raises(OSError) as raised:
        boot.compile_site(site)
    assert raised.value.errno == errno.ENOSPC
    assert os.getpid() == parent
    # every compile child reaped (none still writing into a venv the build removes)
    assert len(forked) == 1
    for pid in forked:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def test_uv_reads_no_configuration_of_the_jobs_directory(tmp_path, monkeypatch):
    """The job's working directory (a pull request's files) and the user's configuration
    (an earlier job's) may hold a ``uv.toml``: uv reads none (``UV_NO_CONFIG``). Otherwise
    ``[pip] target`` sends every package elsewhere and leaves a venv that passes its checks
    empty, kept for later jobs; ``python-platform`` installs another system's wheels."""
    if not (UV_BIN / "uv").exists():
        pytest.skip("uv is not installed in .venv")
    boot = bootstrap_module()
    work = tmp_path / "workspace"
    work.mkdir()
    elsewhere = tmp_path / "elsewhere"
    (work / "uv.toml").write_text(f'[pip]\ntarget = "{elsewhere}"\n')
    monkeypatch.chdir(work)
    monkeypatch.setenv("PATH", f"{UV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    venv_path = tmp_path / "v" / "key"
    venv_path.parent.mkdir()
    assert boot.build(venv_path, ["base"]).name == "uv"
    assert not elsewhere.exists()
    site = boot.site_packages(venv_path)
    assert (site / "actions_toolkit" / "__init__.py").is_file()


@pytest.mark.slow
def test_pip_reads_no_configuration_of_the_users(tmp_path, monkeypatch):
    """An earlier job on a persistent runner (same user, same home) may leave a
    ``~/.config/pip/pip.conf``: pip reads none of the user's, whose ``requirement`` would add
    any package (with its own hashes and start-up hooks, in a RECORD) to a fresh venv and
    whose ``target`` would leave the venv empty. The environment's ``PIP_*`` and the
    machine's configuration (root's) still apply."""
    boot = bootstrap_module()
    home = tmp_path / "home"
    elsewhere = tmp_path / "elsewhere"
    (home / ".config" / "pip").mkdir(parents=True)
    (home / ".config" / "pip" / "pip.conf").write_text(f"[install]\ntarget = {elsewhere}\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("PIP_CONFIG_FILE", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    venv_path = tmp_path / "v" / "key"
    venv_path.parent.mkdir()
    monkeypatch.setattr(boot.os, "cpu_count", lambda: 2)  # two runs side by side
    assert len(boot.pip_halves([boot.LOCKS / "base.txt", boot.LOCKS / "nvml.txt"])) == 2
    assert boot.build(venv_path, ["base", "nvml"]).name == "pip"
    assert not elsewhere.exists()
    site = boot.site_packages(venv_path)
    assert (site / "actions_toolkit" / "__init__.py").is_file() and (site / "pynvml.py").is_file()
    assert not (venv_path / "pip.conf").exists()


def test_every_file_the_import_system_loads_as_a_startup_hook_is_one(tmp_path):
    """``sitecustomize``/``usercustomize`` under every suffix this Python imports a module
    from (``.so`` alone is an extension suffix too), outside any RECORD, is reported."""
    import importlib.machinery as machinery

    boot = bootstrap_module()
    site = tmp_path / "site"
    site.mkdir()
    suffixes = [
        *machinery.EXTENSION_SUFFIXES,
        *machinery.SOURCE_SUFFIXES,
        *machinery.BYTECODE_SUFFIXES,
        ".pyd",  # Windows' extension suffix, for a bootstrap there
        ".cp311-win_amd64.pyd",
    ]
    names = sorted(
        {f"{hook}{suffix}" for hook in ("sitecustomize", "usercustomize") for suffix in suffixes}
    )
    for name in names:
        (site / name).write_text("")
    reported = [p.split(" ")[0] for p in boot.record_problems(site)]
    assert reported == names


def test_a_full_disk_during_a_build_is_an_error_line_and_leaves_nothing(tmp_path, monkeypatch):
    """The disk filling up after the install (the manifest, a marker file: each needs a
    block or an inode) is reported as the bootstrap's error, not a traceback, and the
    half-built venv is removed."""
    import errno

    boot = bootstrap_module()
    cache = tmp_path / "cache"
    github_env = tmp_path / "github_env"
    github_env.write_text("")
    for name in [k for k in os.environ if k.startswith(("GPU_CI_", "RUNNER_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("RUNNER_TOOL_CACHE", str(cache))
    monkeypatch.setenv("GITHUB_ENV", str(github_env))
    monkeypatch.setattr(boot.Installer, "install", lambda self, venv, locks: None)

    def full(site):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(site / "x.pyc"))

    monkeypatch.setattr(boot, "compile_site", full)
    with pytest.raises(SystemExit) as exited:
        boot.main(["gpu-gate"])
    message = str(exited.value.code)
    assert message.startswith("::error title=gpu-ci bootstrap::"), message
    assert "No space left on device" in message
    assert [p.name for p in (cache / "gpu-ci-actions").glob("*/py*") if p.is_dir()] == []
    assert github_env.read_text() == ""


def test_no_second_install_into_a_venv_a_killed_pip_may_have_touched(tmp_path, monkeypatch, capsys):
    """The second pip cannot start (EAGAIN: the runner's process limit) after the first
    did: the first is killed, and its venv is not installed into again by one run (a pip
    killed part way leaves a package's files and METADATA without a RECORD: the next pip
    calls it satisfied and the RECORD check never sees it). The build fails instead."""
    import errno

    boot = bootstrap_module()
    started: list[subprocess.Popen] = []
    real = subprocess.Popen

    def popen(cmd, **kwargs):
        if started:
            raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))
        started.append(real([sys.executable, "-c", "import time; time.sleep(60)"], **kwargs))
        return started[-1]

    fallback: list[list[str]] = []
    monkeypatch.setattr(boot.subprocess, "Popen", popen)
    monkeypatch.setattr(boot, "run", lambda cmd, env=None: fallback.append(cmd))
    monkeypatch.setattr(boot.os, "cpu_count", lambda: 2)
    installer = boot.Installer(tmp_path / "uv-cache")
    installer.uv, installer.pip = None, ["/host/pip/__pip-runner__.py"]
    (tmp_path / "venv").mkdir()
    locks = [ROOT / "requirements" / "base.txt", ROOT / "requirements" / "nvml.txt"]
    with pytest.raises(SystemExit) as exited:
        installer.install(tmp_path / "venv", locks)
    assert "::error title=gpu-ci bootstrap::pip install" in str(exited.value.code)
    assert "could not start" in capsys.readouterr().out
    assert fallback == []
    assert started and started[0].poll() is not None  # killed, not left running


@pytest.mark.parametrize("algorithm", ["nosuch", "md5", "sha1"])
def test_a_record_hashed_with_an_unknown_or_weak_algorithm_is_a_problem(tmp_path, algorithm):
    """The wheel spec allows sha256 or stronger in a RECORD; a name hashlib does not know was
    a traceback, md5 and sha1 were accepted."""
    boot = bootstrap_module()
    site = tmp_path / "site"
    (site / "pkg-1.0.dist-info").mkdir(parents=True)
    (site / "pkg.py").write_text("X = 1\n")
    (site / "pkg-1.0.dist-info" / "RECORD").write_text(
        f"pkg.py,{algorithm}=AAAA,6\npkg-1.0.dist-info/RECORD,,\n"
    )
    assert boot.record_problems(site) == [
        f"pkg.py is hashed with {algorithm!r} in pkg-1.0.dist-info/RECORD, which a RECORD "
        "may not use"
    ]
