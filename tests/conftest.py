"""Shared fixtures and pytest hooks; the helpers they use live in ``testkit``.

The fixtures: the loopback GitHub server, the CLI in a subprocess, tmpfs mounts and the act
runner. The hooks: bytecode compiled once, and how pytest-xdist spreads the suite.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import testkit.cli
from testkit.act_runner import ActResult, run_act
from testkit.cli import CliResult
from testkit.github_server import FakeGitHub
from testkit.marks import missing_marks
from testkit.shared import ROOT
from testkit.tmpfs import Tmpfs, tmpfs_mounts

# -- run-wide set-up -------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    """Compile the package's bytecode once, before any test (and, under xdist, in the
    controller before the workers start).

    Hundreds of tests start ``python -m gpu_ci`` (or a bootstrapped venv's python) on this
    checkout's ``src``. Where the environment sets ``PYTHONDONTWRITEBYTECODE`` no child
    writes a ``.pyc``, so each recompiled every module it imports (about a quarter of a
    second of CPU per process); Python still reads ``.pyc`` files that exist, and checks
    each against its source's mtime and size, so an edited module is recompiled as usual.
    ``__pycache__`` is ignored by git and by the copies the tests make of the tree."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller did it
        return
    import compileall

    compileall.compile_dir(str(ROOT / "src" / "gpu_ci"), quiet=2)


# -- pytest-xdist ---------------------------------------------------------------------------


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """How many workers ``-n auto`` (pyproject's addopts) starts: twice the usable cores.

    Most of the suite's time is spent waiting on child processes (act runs, bootstraps,
    servers, pip), not computing, so two workers per core keep the cores busy; on CI's two
    cores that is four. ``PYTEST_XDIST_AUTO_NUM_WORKERS`` overrides it (as for xdist's own
    default), and ``-n0`` runs the suite in this one process."""
    forced = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    if forced:
        return int(forced)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return min(8, 2 * cores)


#: Where the workers write which tests share a module-scoped fixture, for the controller's
#: scheduler (the controller collects nothing itself).
GROUPS = pytest.StashKey[Path]()


def _groups_file(config: pytest.Config) -> Path:
    if GROUPS not in config.stash:
        import tempfile

        config.stash[GROUPS] = Path(tempfile.mkdtemp(prefix="gpu-ci-xdist-")) / "groups.json"
    return config.stash[GROUPS]


def pytest_unconfigure(config: pytest.Config) -> None:
    if GROUPS in config.stash:
        import shutil

        shutil.rmtree(config.stash[GROUPS].parent, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """(controller) Tell each worker where to write the groups."""
    node.workerinput["gpu_ci_groups"] = str(_groups_file(node.config))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a long test without its mark (testkit.marks); then (xdist worker) keep a
    module's tests that share a module-scoped fixture on one worker.

    A session-scoped fixture is built once per worker (each in its own temporary directory);
    a module-scoped one would be built by every worker that runs one of its tests, and some
    are the suite's most expensive set-ups (a job in the Debian root, a shared bootstrap
    cache). Grouped, it is built once, as in a serial run; the scheduler starts the largest
    groups first and spreads every other test one by one. (pytest-xdist's own
    ``xdist_group`` marks are not used: on pytest 9.2 ``--dist loadgroup`` silently ignores
    them, pytest-dev/pytest-xdist#1386.)"""
    missing = missing_marks(items)
    if missing:
        raise pytest.UsageError("tests without the mark their set-up needs:\n" + "\n".join(missing))
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None or "gpu_ci_groups" not in workerinput:
        return
    groups = {}
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is not None and any(
            defs[-1].scope in ("module", "class")
            for name in info.names_closure
            if (defs := info.name2fixturedefs.get(name))
        ):
            groups[item.nodeid] = item.nodeid.split("::", 1)[0]
    # every worker collects the same tests: each writes the same file, atomically
    target = Path(workerinput["gpu_ci_groups"])
    part = target.with_name(f"{target.name}.{workerinput['workerid']}")
    part.write_text(json.dumps(groups))
    os.replace(part, target)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """(controller) ``--dist loadgroup`` with the groups the workers found: a grouped test's
    scope is its module, any other test is a scope of its own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    path = _groups_file(config)

    class SharedFixtureScheduling(LoadScopeScheduling):  # type: ignore[misc]
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            # called once the workers' collections are in, so the file is written
            if self.groups is None:
                self.groups = json.loads(path.read_text()) if path.is_file() else {}
            return self.groups.get(nodeid, nodeid)

    return SharedFixtureScheduling(config, log)


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server


@pytest.fixture
def run_cli(tmp_path: Path) -> Callable[..., CliResult]:
    """Run ``python -m gpu_ci`` in a subprocess as a runner would, reading its outputs."""
    return functools.partial(testkit.cli.run_cli, tmp_path)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Tmpfs]:
    """Mounts small tmpfs folders under ``tmp_path`` (``tmpfs("name", "ro,size=1m")``),
    unmounted after the test; the test is skipped where mounting needs root it lacks."""
    with tmpfs_mounts(tmp_path) as mounts:
        yield mounts


# -- act -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def tool_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One RUNNER_TOOL_CACHE for the run: the first bootstrap creates the venv. Under xdist
    the workers share it (beside their own temporary directories), as jobs on one runner
    share the tool cache: the bootstrap's lock lets one of them build each venv while the
    others wait and then reuse it, instead of every worker building its own."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return tmp_path_factory.mktemp("toolcache")
    shared = tmp_path_factory.getbasetemp().parent / "toolcache"
    shared.mkdir(mode=0o700, exist_ok=True)
    return shared


@pytest.fixture
def act(tmp_path: Path, tool_cache: Path):
    """Run a workflow under the real act runner (see testkit/act_runner.py)."""

    def run(workflow: Path, event_name: str, event: dict[str, Any], **kwargs: Any) -> ActResult:
        return run_act(tmp_path, workflow, event_name, event, tool_cache=tool_cache, **kwargs)

    return run
