"""The pytest plugin loads in the job's own Python, with pytest alone.

Its files parse as Python 3.9, import only the standard library, pytest and each other,
and the copy ``scripts/pytest_plugin_path.py`` makes holds every one of them: a fresh venv
with nothing but pytest runs a suite with it, loaded by ``-p`` and by ``PYTEST_PLUGINS``.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from testkit.cuda import plugin_standins
from testkit.cuda_env import build_fake_nvml, gpu_config, nvml_config, write_config

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "pytest_plugin_path.py"
PYTEST_OWN = {"pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py"}


def plugin_files() -> tuple[str, ...]:
    """The script's FILES, read from its source."""
    for node in ast.parse(SCRIPT.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "FILES":
            files = ast.literal_eval(node.value)
            assert isinstance(files, tuple)
            return files
    raise AssertionError("scripts/pytest_plugin_path.py has no FILES")


def _imports(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def test_every_file_parses_as_python_39_and_imports_only_the_stdlib_and_pytest() -> None:
    files = plugin_files()
    modules = {f[: -len("/__init__.py")] if f.endswith("__init__.py") else f[:-3] for f in files}
    modules = {m.replace("/", ".") for m in modules}
    for rel in files:
        tree = ast.parse((ROOT / "src" / rel).read_text(), rel, feature_version=(3, 9))
        for name in _imports(tree):
            top = name.split(".")[0]
            if top == "gpu_ci":
                # a module of the package (or a name in one): it must be in the copy
                assert name in modules or name.rsplit(".", 1)[0] in modules, (rel, name)
            else:
                assert top in sys.stdlib_module_names or top in PYTEST_OWN, (rel, name)
    # the package's every plugin module is in the copy
    on_disk = {
        f"gpu_ci/pytest_plugin/{p.name}" for p in (ROOT / "src/gpu_ci/pytest_plugin").glob("*.py")
    }
    assert on_disk <= set(files)


@pytest.mark.parametrize("module", ["gpu_ci.cuda.nvml_codes", "gpu_ci.cuda.pytest_link"])
def test_the_cuda_modules_it_imports_pull_nothing_else_of_the_package(module: str) -> None:
    code = f"import sys, {module}\nprint(sorted(m for m in sys.modules if m.startswith('gpu_ci')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(["gpu_ci", "gpu_ci.cuda", module])


def pytest_only_venv(root: Path) -> Path:
    """A fresh venv holding pytest and its dependencies, copied as this one installed them."""
    venv.create(root, with_pip=False, symlinks=True)
    site = next((root / "lib").glob("python3*/site-packages"))
    todo, done = ["pytest"], set()
    while todo:
        dist = importlib.metadata.distribution(todo.pop())
        if dist.metadata["Name"].lower() in done:
            continue
        done.add(dist.metadata["Name"].lower())
        for f in dist.files or ():
            source = Path(str(dist.locate_file(f)))
            if ".." in f.parts or not source.is_file() or "__pycache__" in f.parts:
                continue
            (site / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, site / f)
        for req in map(Requirement, dist.requires or ()):
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return root / "bin" / "python"


@pytest.mark.slow
def test_a_fresh_venv_with_only_pytest_runs_it(tmp_path: Path) -> None:
    python = pytest_only_venv(tmp_path / "venv")
    env = {"PATH": "/usr/bin:/bin", "RUNNER_TEMP": str(tmp_path)}
    copy = subprocess.run(
        [str(python), str(SCRIPT)], capture_output=True, text=True, env=env, check=True
    ).stdout.strip()
    assert sorted(str(p.relative_to(copy)) for p in Path(copy).rglob("*.py")) == sorted(
        plugin_files()
    )
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "errors.py").write_text(plugin_standins.FRAMEWORK_ERRORS)
    (suite / "test_s.py").write_text(
        "import gpu_ci.pytest_plugin\nfrom errors import CUPY\n\nruns = []\n\n"
        "def test_where():\n"
        "    # the copy under RUNNER_TEMP, not this checkout's src\n"
        f"    assert gpu_ci.pytest_plugin.__file__.startswith({str(tmp_path)!r})\n\n"
        "def test_flaky_oom():\n    runs.append(1)\n    if len(runs) == 1:\n        raise CUPY\n"
    )
    lib = build_fake_nvml(tmp_path / "nvml", with_libcuda=False)
    write_config(tmp_path / "nvml.cfg", nvml_config(gpu_config(0)))
    env.update(
        PYTHONPATH=copy,
        LD_LIBRARY_PATH=str(lib),
        FAKE_NVML_CONFIG=str(tmp_path / "nvml.cfg"),
        PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
    )
    readme_line = next(
        line.split("- run: ", 1)[1]
        for line in (ROOT / "README.md").read_text().splitlines()
        if "scripts/pytest_plugin_path.py" in line and "- run: " in line
    )
    env["PATH"] = f"{python.parent}:/usr/bin:/bin"  # the job's python first
    env["GPU_CI_ROOT"] = str(ROOT)
    for how in ("README", "PYTEST_PLUGINS"):
        reports = tmp_path / f"reports-{how}"
        run_env = {**env, "GPU_CI_PYTEST_REPORT_DIR": str(reports)}
        if how == "README":  # the README's one line, as the step's bash runs it
            cmd = ["bash", "-c", readme_line]
            run_env.pop("PYTHONPATH")
        else:
            cmd = [str(python), "-m", "pytest"]
            run_env["PYTEST_PLUGINS"] = "gpu_ci.pytest_plugin"
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=suite, env=run_env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "2 passed, 1 rerun" in done.stdout, done.stdout
        (report,) = reports.glob("pytest-gpu-*.json")
        record = json.loads(report.read_text())
        assert record["workers"]["main"]["devices"][0]["index"] == 0
