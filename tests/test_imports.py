"""Each command imports only what it needs (issue: cold start). Measured in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

from testkit.github.runs import labeled
from testkit.github_server import PullRequest
from testkit.shared import ROOT, lock_file

RUNNER = """
import atexit, json, sys
atexit.register(lambda: open(sys.argv[1], "w").write(json.dumps(sorted(sys.modules))))
from gpu_ci.cli import main
code = main(sys.argv[2:])
sys.exit(code)
"""


def loaded(tmp_path, args, env):
    out = tmp_path / "modules.json"
    full = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src"), **env}
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(out), *args], env=full, capture_output=True, text=True
    )
    modules = set(json.loads(out.read_text()))
    return proc, {m.split(".")[0] for m in modules}, modules


def test_verify_cuda_env_never_imports_github_or_conda_code(tmp_path):
    proc, top, modules = loaded(tmp_path, ["verify-cuda-env", "--require-gpu", "false"], {})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pynvml" in top  # it did read NVML
    assert not top & {"github", "conda_lock", "rattler", "yaml", "requests", "urllib3"}
    assert "gpu_ci.conda.lockfile" not in modules and "gpu_ci.github.client" not in modules


def test_gpu_gate_never_imports_nvml_or_conda_code(tmp_path, github):
    github.add_repo("Codertocat/Hello-World", roles={"Codertocat": "write"})
    github.add_pull(
        "Codertocat/Hello-World", PullRequest(2, "ec26c3e57ca3a959ca5aad62de7213c562f8c821")
    )
    event = labeled()
    path = tmp_path / "event.json"
    path.write_text(json.dumps(event))
    proc, top, modules = loaded(
        tmp_path,
        ["gpu-gate"],
        {
            "GITHUB_EVENT_NAME": "pull_request",
            "GITHUB_EVENT_PATH": str(path),
            "GITHUB_REPOSITORY": "Codertocat/Hello-World",
            "GITHUB_API_URL": github.url,
            "GITHUB_TOKEN": "t",
        },
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "run=true" in proc.stdout
    assert "github" in top  # it did call the API
    assert not top & {"pynvml", "rattler", "conda_lock", "yaml"}
    assert not {"gpu_ci.cuda.nvml", "gpu_ci.conda.lockfile", "gpu_ci.cuda.verify.checks"} & modules


def test_missing_extra_is_explained(tmp_path):
    # Hide PyYAML, as on `pip install gpu-ci-actions` without the 'conda' extra.
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "yaml.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'yaml'\", name='yaml')\n"
    )
    lock = lock_file("setup-micromamba.test.conda-lock.yml")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpu_ci",
            "setup-conda-from-lock",
            "--lock-file",
            str(lock),
            "--dry-run",
            "true",
        ],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{blocker}:{ROOT / 'src'}"},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "needs the 'conda' extra" in proc.stdout
    assert "pip install 'gpu-ci-actions[conda]'" in proc.stdout


WINGS = ("github", "conda", "cuda", "cloud")
#: root modules a wing must not import: only the command layer wires runtime and inputs
WIRING = ("gpu_ci.runtime", "gpu_ci.inputs", "gpu_ci.cli", "gpu_ci.commands")


def _imports(path):
    """Every gpu_ci module a file imports, top level or inside functions."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("gpu_ci")}
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and node.module.startswith("gpu_ci")
        ):
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def test_wings_never_import_each_other_nor_the_wiring():
    src = ROOT / "src" / "gpu_ci"
    problems = []
    for wing in WINGS:
        files = sorted((src / wing).rglob("*.py"))
        assert files, f"no modules in wing {wing}"
        for path in files:
            for name in _imports(path):
                parts = name.split(".")
                other = parts[1] if len(parts) > 1 else ""
                if other in WINGS and other != wing:
                    problems.append(f"{path.relative_to(src)} imports {name}")
                if any(name == w or name.startswith(w + ".") for w in WIRING):
                    problems.append(f"{path.relative_to(src)} imports {name}")
    assert not problems, "\n".join(problems)


def test_root_runtime_never_imports_a_wing():
    src = ROOT / "src" / "gpu_ci"
    problems = []
    for path in sorted(src.glob("*.py")):
        for name in _imports(path):
            parts = name.split(".")
            if len(parts) > 1 and parts[1] in WINGS:
                problems.append(f"{path.name} imports {name}")
    assert not problems, "\n".join(problems)


def test_the_import_rule_detects_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from gpu_ci.cuda import nvml\n    import gpu_ci.runtime\n")
    assert {"gpu_ci.cuda", "gpu_ci.cuda.nvml", "gpu_ci.runtime"} <= _imports(bad)


def test_only_the_client_imports_pygithub():
    """One GitHub seam: everything above ``github/client.py`` sees its ``ApiError``."""
    src = ROOT / "src" / "gpu_ci"
    import ast

    problems = []
    for path in sorted(src.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            if any(n == "github" or n.startswith("github.") for n in names):
                problems.append(str(path.relative_to(src)))
    assert sorted(set(problems)) == ["github/client.py"]
