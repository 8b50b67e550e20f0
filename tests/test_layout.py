"""The project's layout rules, each shown to fail on a planted tree.

Source: no wing imports another, no import cycle between files. Tests: by wing, named by
subject, fixtures in conftest.py files, no test module importing another; the demo,
benchmarks and kit import no test module. No copy of another project's file.
"""

from __future__ import annotations

import ast
import hashlib

import pytest

from testkit import layout
from testkit.marks import missing_marks
from testkit.shared import ROOT, shared_path

TESTS = ROOT / "tests"
SKIP = layout.NOT_OURS


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
    for path in layout.files(TESTS, "*.py"):
        for module in _imported_modules(path):
            if module.startswith("tests.") and module.rsplit(".", 1)[-1].startswith("test_"):
                offenders.append(f"{path.relative_to(ROOT)} imports {module}")
    assert offenders == []


def test_test_modules_sit_in_their_wing():
    flat = sorted(p.name for p in TESTS.glob("test_*.py"))
    wings = {"github", "conda", "cuda", "cloud", "e2e", "deploy"}
    assert {p.parent.name for p in layout.files(TESTS, "test_*.py")} <= wings | {"tests"}
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
    for path in layout.files(ROOT, skip=SKIP):
        if not path.is_file() or path in allowed:
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest in theirs:
            copies.append(f"{path.relative_to(ROOT)} = ../shared/{theirs[digest]}")
    assert copies == []


def test_commands_are_thin():
    """A command reads inputs, calls its wing, writes outputs and the summary; the
    rules live in the wing. No function of ``gpu_ci.commands`` runs past 50 lines."""
    long = []
    for path in sorted((ROOT / "src" / "gpu_ci" / "commands").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > 50:
                    long.append(f"{path.name}:{node.name} ({lines} lines)")
    assert long == []


SRC = ROOT / "src"


def test_no_wing_imports_another_wing():
    assert layout.wing_crossings(SRC, "gpu_ci") == []


def test_no_import_cycle_between_files():
    graph = layout.import_graph(SRC, "gpu_ci")
    assert len(graph) > 50 and sum(map(len, graph.values())) > 100  # the tree was read
    assert layout.cycles(graph) == []


def test_demo_benchmarks_and_kit_import_no_test_module():
    paths = [p for d in ("scripts", "benchmarks", "testkit") for p in (ROOT / d).rglob("*.py")]
    assert len(paths) > 20
    assert layout.tests_package_imports(sorted(paths), ROOT) == []


def test_no_test_module_is_named_after_a_process():
    names = [p.relative_to(ROOT) for p in layout.files(TESTS, "test_*.py")]
    assert layout.process_named(names) == []


def _plant(root, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_wing_importing_another_is_found(tmp_path):
    _plant(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/cuda/__init__.py": "",
            "pkg/cuda/lease/__init__.py": "",
            "pkg/cuda/lease/holder.py": "def f():\n    from ...github import client\n",
            "pkg/github/__init__.py": "",
            "pkg/github/client.py": "import pkg.conda.fetch\n",
            "pkg/conda/fetch.py": "from pkg import errors\n",
            "pkg/errors.py": "",
        },
    )
    assert layout.wing_crossings(tmp_path, "pkg") == [
        "pkg/cuda/lease/holder.py imports pkg.github",
        "pkg/cuda/lease/holder.py imports pkg.github.client",
        "pkg/github/client.py imports pkg.conda.fetch",
    ]


@pytest.mark.parametrize(
    ("files", "cycle"),
    [
        (  # relative, through a package's __init__
            {"pkg/a/__init__.py": "from .b import x\n", "pkg/a/b.py": "from pkg.a import y\n"},
            ["pkg.a", "pkg.a.b"],
        ),
        (  # absolute, inside a function, three files long
            {
                "pkg/x.py": "import pkg.y\n",
                "pkg/y.py": "def f():\n    from pkg import z\n",
                "pkg/z.py": "from . import x\n",
            },
            ["pkg.x", "pkg.y", "pkg.z"],
        ),
    ],
)
def test_an_import_cycle_is_found(tmp_path, files, cycle):
    _plant(tmp_path, {"pkg/__init__.py": "", "pkg/leaf.py": "from . import x\n", **files})
    assert layout.cycles(layout.import_graph(tmp_path, "pkg")) == [cycle]


def test_a_script_importing_a_test_module_is_found(tmp_path):
    _plant(tmp_path, {"scripts/demo.py": "from tests.test_cli import x\nimport testkit\n"})
    assert layout.tests_package_imports([tmp_path / "scripts" / "demo.py"], tmp_path) == [
        "scripts/demo.py imports tests.test_cli",
        "scripts/demo.py imports tests.test_cli.x",
    ]


def test_a_test_module_named_after_a_review_is_found():
    names = ["test_review_s4.py", "test_review3_s1.py", "test_budget_hardening.py"]
    names += ["test_cuda_leftovers_x.py", "test_issue25_limits.py", "test_gate_rules.py"]
    names += ["test_fetch_limits.py", "test_reviewers.py"]
    found = layout.process_named(TESTS / "conda" / name for name in names)
    assert sorted(p.rsplit("/", 1)[1] for p in found) == sorted(names[:5])


class _Item:
    def __init__(self, nodeid: str, fixtures: list[str], marks: set[str]) -> None:
        self.nodeid, self.fixturenames, self.marks = nodeid, fixtures, marks

    def get_closest_marker(self, name: str) -> object:
        return name if name in self.marks else None


def test_an_act_or_debian_test_without_its_mark_is_refused():
    items = [
        _Item("a", ["tmp_path", "act"], {"e2e"}),
        _Item("b", ["act"], set()),
        _Item("c", ["debian_job"], {"e2e"}),
        _Item("d", ["run_cli"], set()),
    ]
    assert missing_marks(items) == [
        "b: uses 'act', needs @pytest.mark.e2e",
        "c: uses 'debian_job', needs @pytest.mark.slow",
    ]
