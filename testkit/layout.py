"""The project's layout rules, read from the source with ``ast``.

tests/test_layout.py holds them on this tree, and on small planted trees to show each
rule can fail. Every import counts: absolute or relative, at the top or inside a function.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

#: The package's wings: each a core of its own that no other wing imports.
WINGS = ("github", "conda", "cuda")

#: Words that name a process (a review, a round of findings) rather than a subject.
PROCESS_WORDS = re.compile(
    r"(?:^|_)(review\d*|hardening|leftovers|findings|followups?|fixes|round\d*|s\d+|issue\d+)(?:_|$)"
)


#: Folders no project rule reads: tools' caches, builds, npm's packages.
NOT_OURS = frozenset(
    {
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
)


def files(root: Path, pattern: str = "*", skip: Iterable[str] = NOT_OURS) -> list[Path]:
    """The files under ``root`` whose name matches ``pattern``, sorted.

    Folders named in ``skip`` are not entered (``rglob`` walks all of node_modules first,
    seconds on every call)."""
    import fnmatch
    import os

    skipped = set(skip)
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in skipped]
        found.extend(Path(folder, n) for n in names if fnmatch.fnmatchcase(n, pattern))
    return sorted(found)


@dataclass(frozen=True)
class Module:
    """One file of a package: its dotted name and where it is."""

    name: str
    path: Path
    is_package: bool


def modules(src: Path, package: str) -> dict[str, Module]:
    """Every module below ``src/package``; a package's ``__init__`` is the package itself."""
    found = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = Module(".".join(parts), path, is_package)
    return found


def imports(path: Path, name: str, is_package: bool) -> Iterator[tuple[str, list[str]]]:
    """(module, names) of each import in a file, relative ones resolved.

    Relative imports are resolved against the module ``name``.

    ``import a.b`` is ``("a.b", [])``; ``from .c import d, e`` in ``a.b`` is
    ``("a.c", ["d", "e"])``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    base = name.split(".") if is_package else name.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                module = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            yield module, [alias.name for alias in node.names]


def imported_names(path: Path, name: str, is_package: bool) -> Iterator[str]:
    """The dotted names a file imports: ``from a import b`` gives ``a`` and ``a.b``."""
    for module, names in imports(path, name, is_package):
        yield module
        yield from (f"{module}.{alias}" for alias in names)


def import_graph(src: Path, package: str) -> dict[str, set[str]]:
    """Each module -> the modules of its package it imports.

    ``from pkg import sub`` is an edge to the module ``pkg.sub`` alone; ``from pkg import
    name`` of anything else is an edge to ``pkg`` (its ``__init__``)."""
    known = modules(src, package)
    graph: dict[str, set[str]] = {name: set() for name in known}
    for module in known.values():
        for target, names in imports(module.path, module.name, module.is_package):
            subs = {f"{target}.{alias}" for alias in names} & known.keys()
            targets = subs if names and len(subs) == len(names) else {target, *subs}
            graph[module.name] |= {t for t in targets if t in known and t != module.name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                part.append(top)
                if top == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def wing_crossings(src: Path, package: str, wings: Iterable[str] = WINGS) -> list[str]:
    """``file imports name`` for each import between two wings."""
    wings = tuple(wings)
    crossings = []
    for module in modules(src, package).values():
        parts = module.name.split(".")
        wing = parts[1] if len(parts) > 1 and parts[1] in wings else None
        if wing is None:
            continue
        for target in sorted(set(imported_names(module.path, module.name, module.is_package))):
            other = target.split(".")
            if len(other) > 1 and other[0] == package and other[1] in wings and other[1] != wing:
                crossings.append(f"{module.path.relative_to(src)} imports {target}")
    return crossings


def tests_package_imports(paths: Iterable[Path], root: Path) -> list[str]:
    """``file imports name`` for each import of the ``tests`` package."""
    found = []
    for path in paths:
        for target in sorted(set(imported_names(path, path.stem, False))):
            if target == "tests" or target.startswith("tests."):
                found.append(f"{path.relative_to(root)} imports {target}")
    return found


def process_named(paths: Iterable[Path]) -> list[str]:
    """The test modules named after a process, not a subject.

    A process: a review, a round of findings, an issue."""
    return sorted(
        str(path)
        for path in paths
        if path.name.startswith("test_") and PROCESS_WORDS.search(path.stem[len("test_") :])
    )
