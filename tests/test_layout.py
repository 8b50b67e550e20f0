"""The test tree's rules (issue 24): tests by wing, fixtures in conftest.py files, no test
module importing another, and no copy of another project's file in the project."""

from __future__ import annotations

import ast
import hashlib

from testkit.shared import ROOT, shared_path

TESTS = ROOT / "tests"
SKIP = {
    ".git",
    ".venv",
    "node_modules",
    "__pycache__",
    "build",
    "dist",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
}


def _imported_modules(path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_no_test_module_imports_another():
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        if "node_modules" in path.parts:
            continue
        for module in _imported_modules(path):
            if module.startswith("tests.") and module.rsplit(".", 1)[-1].startswith("test_"):
                offenders.append(f"{path.relative_to(ROOT)} imports {module}")
    assert offenders == []


def test_test_modules_sit_in_their_wing():
    flat = sorted(p.name for p in TESTS.glob("test_*.py"))
    wings = {"github", "conda", "cuda", "e2e", "deploy"}
    assert {
        p.parent.name for p in TESTS.rglob("test_*.py") if "node_modules" not in p.parts
    } <= wings | {"tests"}
    for wing in wings:
        assert (TESTS / wing / "__init__.py").is_file(), wing
    assert not [
        name
        for name in flat
        if name.startswith(("test_e2e_", "test_setup_conda", "test_verify_", "test_gate_"))
    ]


def test_no_file_of_another_project_is_copied_into_the_project():
    shared = shared_path()
    theirs = {
        hashlib.sha256(p.read_bytes()).hexdigest(): p.relative_to(shared)
        for p in shared.rglob("*")
        if p.is_file() and p.stat().st_size > 64
    }
    # the one documented copy: the driver table the package reads (compared by a test)
    allowed = {ROOT / "src" / "gpu_ci" / "data" / "cuda-toolkit-driver-table.yaml"}
    copies = []
    for path in ROOT.rglob("*"):
        if SKIP & set(path.relative_to(ROOT).parts) or not path.is_file() or path in allowed:
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest in theirs:
            copies.append(f"{path.relative_to(ROOT)} = ../shared/{theirs[digest]}")
    assert copies == []


def test_commands_are_thin():
    """Issue 24: a command reads inputs, calls its wing, writes outputs and the summary; the
    rules live in the wing. No function of ``gpu_ci.commands`` runs past 50 lines."""
    long = []
    for path in sorted((ROOT / "src" / "gpu_ci" / "commands").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > 50:
                    long.append(f"{path.name}:{node.name} ({lines} lines)")
    assert long == []
