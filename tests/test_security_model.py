"""SECURITY-MODEL.md's table names tests that exist: the security claims stay tested."""

from __future__ import annotations

import re

from testkit.layout import files
from testkit.shared import ROOT

DOC = ROOT / "SECURITY-MODEL.md"


def referenced_tests() -> list[tuple[str, str]]:
    """(file, test name) for every ``file.py::name`` in the table; a bare ``::name`` in the
    same cell belongs to the file named before it."""
    out = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if not line.startswith("| ") or "tested by" in line:
            continue
        cell = line.rstrip(" |").rsplit(" | ", 1)[-1]
        current = ""
        for ref in re.findall(r"`([\w.]*::[\w]+)(?:\[[^\]]*\])?`|`(test_\w+\.py)`", cell):
            if ref[1]:
                current = ref[1]
                continue
            file, _, name = ref[0].partition("::")
            current = file or current
            out.append((current, name))
    return out


def test_every_test_in_the_security_table_exists():
    refs = referenced_tests()
    assert len(refs) >= 25
    tests = files(ROOT / "tests", "*.py")
    for file, name in refs:
        # the table names a test module by its file name; it sits in its wing's folder
        (path,) = [p for p in tests if p.name == file]
        source = path.read_text(encoding="utf-8")
        assert re.search(rf"^def {name}\(", source, re.MULTILINE), f"{file}::{name} is missing"


def test_the_readme_links_the_security_model():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "## Security model" in readme and "(SECURITY-MODEL.md)" in readme
