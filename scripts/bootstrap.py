"""Create or reuse the virtual environment that runs gpu-ci (standard library only).

Usage: ``bootstrap.py <action>``. Each action installs only the dependency groups it needs
(``requirements/<group>.txt``, hash-pinned): the GPU-side actions never install the GitHub
client, and the gate never installs NVML or conda code.

The venv holds third-party dependencies only. The package itself is never installed into
it: ``scripts/run.py`` of the action's own checkout puts that checkout's ``src/`` first on
``sys.path``, so ``@v2``, ``@v1.2.3``, ``@<sha>`` and two checkouts of one version each run
exactly the code they name, in sequence or at the same time.

Safe on persistent, shared runners:

* **Immutable venvs.** A venv is keyed by Python version, the hash of every group lock and
  the set of groups it holds. It is built aside (``<key>.tmp-<pid>``) and renamed into place
  only when complete and verified, and never modified afterwards; a job that needs another
  group gets another venv. A half-built venv (``kill -9``) is never used.
* **Verified, not trusted.** Before a venv is reused, every file in it is checked against the
  manifest written when it was built (sha256 of each file; no file missing, changed or
  added: a planted ``.pth``, ``sitecustomize`` or ``.pyc`` means a rebuild, with a notice).
  A file whose size, inode, mtime and ctime are those recorded is not read again: the
  kernel moves ctime on every change and no unprivileged process can set it back.
  When built, each distribution's ``RECORD`` hashes are checked and no ``.pth``/
  ``sitecustomize``/``usercustomize`` outside a ``RECORD`` is accepted.
* **One builder at a time** per key: an exclusive ``flock`` on ``<key>.lock``.
* **Per job on self-hosted runners**: with ``RUNNER_ENVIRONMENT=self-hosted`` and no
  ``GPU_CI_CACHE_DIR``, the venv lives in ``RUNNER_TEMP`` (deleted after the job); setting
  ``GPU_CI_CACHE_DIR`` is the runner admin's opt-in to share one across jobs.
* **uv** (when on PATH) gets a private cache beside the venvs (never the user's shared one),
  reads no configuration file (the job's directory holds a pull request's files) and
  copies files (no hard links into its cache), and the RECORD check above runs after it;
  pip verifies every wheel against the lock's hashes and reads no user configuration
  (an earlier job's ``~/.config/pip/pip.conf``).
* **Compiled once, after the checks.** Neither installer compiles: the bootstrap removes
  any ``.pyc`` an installer copied, compiles the verified sources itself (a process per core; not
  those no run imports, ``NEVER_IMPORTED``), then takes the manifest; runs write no ``.pyc``.

Cold start (issue 30): one uv run for all the groups (pip: two runs side by side, each
package in one), no ``pip --version`` probe, no pip in the venv (the host's, else the wheel
shipped with this Python), the venv created in this process, its site-packages found without
starting its interpreter, each file read once for its RECORD check and the manifest, this
checkout's ``src/`` compiled beside the rest; ``benchmarks/cold_start.py`` measures it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCKS = ROOT / "requirements"
MANIFEST = ".gpu-ci-manifest.json"
#: Hash algorithms a RECORD may not use (the wheel spec: sha256 or stronger).
WEAK = frozenset({"md5", "sha1", "sha224"})
#: Files in site-packages that run code at start-up without being imported.
#: (An extension's suffix is ``.so`` or ``.pyd`` alone too, or with a tag before it.)
STARTUP_HOOKS = re.compile(
    r"(^[^/]+\.pth$|^(sitecustomize|usercustomize)(\.py|/|(\.[^/]*)?\.(so|pyd)$))"
)
#: Sources in site-packages that no run of gpu-ci imports, paths relative to it: left
#: uncompiled (a quarter of the gate's ``base`` + ``github`` source; compiling is most of a
#: cold start's CPU). Should one be imported after all, Python compiles it in memory, each
#: time: slower, never wrong. tests/test_bootstrap.py checks that the commands and what they
#: import load none of them, and that each rule still matches a file.
NEVER_IMPORTED_RULES = (
    r"cffi/",  # PyNaCl's build-time compiler: at run time nacl._sodium needs _cffi_backend
    r"idna/(?:uts46data|codec|compat|cli)\.py$",  # UTS 46 maps non-ASCII host names only
    r"packaging/(?!(?:__init__|version)\.py$)",  # the cuda wing uses packaging.version alone
    r"urllib3/contrib/emscripten/",  # Pyodide's fetch API
    r"urllib3/http2/connection\.py$",  # HTTP/2, opt-in (urllib3.http2.inject_into_urllib3)
    r"[^/]+/(?:tests?|cli)/",  # test suites, command-line front ends
    r"[^/]+/__main__\.py$",
)
NEVER_IMPORTED = re.compile(f"^(?:{'|'.join(NEVER_IMPORTED_RULES)})")
#: Lock options that each of two pip runs needs and reads as it does from the lock itself.
OPTIONS_FOR_BOTH = (
    r"(?:-i|--index-url|--extra-index-url|--no-index|--trusted-host|--pre|--prefer-binary"
    r"|--only-binary|--no-binary)(?:[\s=]|$)"
)

# The action -> groups table lives in the specs (standard library only, so importable
# before any dependency is installed), loaded from this checkout's own src/.
# No .pyc from this import: the job's umask may be laxer than ours, and the compile child
# writes the checkout's byte code under ours (022).
sys.path.insert(0, str(ROOT / "src"))
_WRITES_BYTECODE, sys.dont_write_bytecode = sys.dont_write_bytecode, True
from gpu_ci.specs import GROUPS as ALL  # noqa: E402
from gpu_ci.specs import groups_for  # noqa: E402

sys.dont_write_bytecode = _WRITES_BYTECODE
del sys.path[0]


def usable_cores() -> int:
    """The cores this process may run on (its affinity: a runner pinned to a few cores of a
    large host), as ``gpu_ci.cpus.usable`` says; this script runs before gpu_ci is
    installed, so it cannot import it."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def fail(message: str) -> SystemExit:
    return SystemExit(f"::error title=gpu-ci bootstrap::{message}")


def notice(message: str) -> None:
    print(f"::notice title=gpu-ci bootstrap::{message}", flush=True)


def package_version() -> str:
    text = (ROOT / "src" / "gpu_ci" / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__\s*=\s*"([^"]+)"', text, re.MULTILINE)
    if not match:
        raise fail("no __version__ in src/gpu_ci/__init__.py")
    return match.group(1)


def cache_base(environ: dict[str, str] | None = None) -> Path:
    """Where venvs live: GPU_CI_CACHE_DIR (an explicit, shared home), else per job on a
    self-hosted runner (its tool cache is shared by every runner process and repository on
    the host), else the tool cache (a fresh VM per job on GitHub-hosted runners)."""
    env = os.environ if environ is None else environ
    names = ["GPU_CI_CACHE_DIR"]
    if env.get("RUNNER_ENVIRONMENT") == "self-hosted":
        names += ["RUNNER_TEMP"]
    names += ["RUNNER_TOOL_CACHE", "RUNNER_TEMP"]
    for name in names:
        value = env.get(name)
        if value:
            return Path(value)
    return Path.home() / ".cache"


def locks_hash() -> str:
    digest = hashlib.sha256()
    for group in ALL:
        digest.update((LOCKS / f"{group}.txt").read_bytes())
    return digest.hexdigest()[:12]


def venv_dir(groups: list[str]) -> Path:
    py = f"py{sys.version_info[0]}{sys.version_info[1]}"
    key = f"{py}-{locks_hash()}-{'+'.join(groups)}"
    return cache_base() / "gpu-ci-actions" / package_version() / key


def venv_python(venv: Path) -> Path:
    if os.name == "nt":
        return venv / "Scripts" / "python.exe"
    return venv / "bin" / "python"


def run(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def check(proc: subprocess.CompletedProcess, what: str) -> None:
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout + proc.stderr)
        raise fail(f"{what} failed with exit code {proc.returncode} (output above).")


def host_pip() -> list[str]:
    """How to run a pip that is not in the venv, as ``[<venv python>, *this, "install", ...]``
    ([] when there is none): the host pip's script for another interpreter (what ``pip
    --python`` runs, pip >= 22.3; run directly, it saves a second interpreter and import of
    pip), else the pip wheel that ships with this Python (ensurepip's, or the distribution's,
    e.g. Debian's python3-pip-whl), run from the wheel. Either way no pip is installed into
    the venv (``ensurepip`` costs ~6 CPU seconds). Found without running pip."""
    import importlib.util
    import sysconfig

    spec = importlib.util.find_spec("pip")
    if spec is not None and spec.origin:
        runner = Path(spec.origin).parent / "__pip-runner__.py"
        if runner.is_file():
            return [str(runner)]
    dirs = [Path("/usr/share/python-wheels")]
    wheel_dir = sysconfig.get_config_var("WHEEL_PKG_DIR")
    if wheel_dir:
        dirs.insert(0, Path(wheel_dir))
    spec = importlib.util.find_spec("ensurepip")
    if spec is not None and spec.origin:
        dirs.insert(0, Path(spec.origin).parent / "_bundled")
    wheels = []
    for directory in dirs:
        for wheel in directory.glob("pip-*-py3-none-any.whl"):
            match = re.match(r"pip-(\d+)\.(\d+)", wheel.name)
            if match and (int(match.group(1)), int(match.group(2))) >= (22, 3):
                wheels.append(((int(match.group(1)), int(match.group(2))), wheel))
    if wheels:
        return [str(max(wheels)[1] / "pip")]
    return []


class Installer:
    """uv when on PATH, else pip: the same hash-pinned files either way, every group's lock in
    one run (one start-up of the installer, one resolution, downloads side by side in uv).
    Neither compiles: :func:`compile_site` does, once the files are verified."""

    def __init__(self, uv_cache: Path) -> None:
        self.uv = shutil.which("uv")
        self.pip = [] if self.uv else host_pip()
        self.name = "uv" if self.uv else "pip"
        self.uv_cache = uv_cache
        # No configuration file either: uv reads a uv.toml or pyproject.toml of the working
        # directory (the job's: a pull request's files) and the user's, whose ``[pip]``
        # target, prefix or python-platform would fill the venv elsewhere or wrongly
        # (UV_NO_CONFIG, not --no-config: an older uv ignores it rather than failing).
        self.uv_env = {**os.environ, "UV_CACHE_DIR": str(uv_cache), "UV_NO_CONFIG": "1"}

    def create(self, venv: Path) -> None:
        if self.uv or self.pip:  # no pip inside: uv, or a pip from outside, installs into it
            import venv as venv_module  # in this process: no interpreter to start

            try:
                venv_module.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(venv)
            except (OSError, subprocess.CalledProcessError) as exc:
                raise fail(f"creating the virtual environment {venv} failed: {exc}") from None
        else:
            # -I, as every Python this starts: -m puts the working directory (the job's
            # workspace) first on sys.path, and a venv.py or pip/ there would run instead
            check(run([sys.executable, "-I", "-m", "venv", str(venv)]), "python -m venv")

    def install(self, venv: Path, locks: list[Path]) -> None:
        python = str(venv_python(venv))
        requirements = [arg for lock in locks for arg in ("-r", str(lock))]
        names = " ".join(f"-r {lock.name}" for lock in locks)
        if self.uv:
            # A private cache (UV_CACHE_DIR) and copies, not links: a shared or tampered uv
            # cache cannot put files into the venv.
            base = [
                self.uv,
                "pip",
                "install",
                "--quiet",
                "--python",
                python,
                "--require-hashes",
                "--no-deps",
                "--only-binary",
                ":all:",
                "--link-mode",
                "copy",
                *requirements,
            ]
            # Offline first when the cache may have everything (it is empty on a cold start).
            cached = self.uv_cache.is_dir()
            if cached and run(base + ["--offline"], self.uv_env).returncode == 0:
                return
            check(run(base, self.uv_env), f"uv pip install {names}")
            return
        pip = [python, "-I", *(self.pip or ["-m", "pip"])]
        pip += ["--disable-pip-version-check", "--no-input", "-q", "install", "--require-hashes"]
        pip += ["--no-deps", "--only-binary", ":all:", "--no-compile"]
        # Not the user's configuration (an earlier job's ~/.config/pip/pip.conf: its
        # ``requirement`` adds any package, hooks and all, its ``target`` empties the
        # venv): pip skips it for an existing PIP_CONFIG_FILE, and still reads the
        # machine's (root's) and the environment's PIP_*.
        env = dict(os.environ)
        empty = venv / ".gpu-ci-pip.conf"
        if not (env.get("PIP_CONFIG_FILE") and os.path.exists(env["PIP_CONFIG_FILE"])):
            try:
                empty.write_text("")
                env["PIP_CONFIG_FILE"] = str(empty)
            except OSError:
                env["PIP_CONFIG_FILE"] = os.devnull  # no configuration file at all
        try:
            halves = pip_halves(locks) if os.path.exists("/dev/stdin") else []
            done = None
            if len(halves) == 2 and usable_cores() > 1:
                # pip installs one wheel after another on one core: two runs side by side,
                # each reading its half of the entries from its stdin (nothing to clean up
                # after kill -9)
                jobs = [(pip + ["-r", "/dev/stdin"], half) for half in halves]
                with contextlib.suppress(OSError):  # none started (no writable temp dir)
                    done = run_side_by_side(jobs, env)
            if done is None:
                done = [run(pip + requirements, env)]
        finally:
            with contextlib.suppress(FileNotFoundError):
                empty.unlink()
        for proc in done:
            check(proc, f"pip install {names}")


def pip_halves(locks: list[Path]) -> list[str]:
    """The entries of ``locks`` as two requirement texts (one when there is one package),
    for two pip runs into one venv. A package's entries (one per environment marker) stay
    in one text, once: no distribution is installed by both runs. An entry is what pip
    reads as one line (lines ending in a backslash continue it, indented or not); an index
    option goes in both texts; [] (one run, of the locks as they are) for a line naming
    another file, which pip reads relative to the lock and not to ``/dev/stdin``."""
    by_name: dict[str, list[str]] = {"": []}  # "": the options both runs need
    for lock in locks:
        lines = iter(lock.read_text(encoding="utf-8").splitlines())
        for line in lines:
            first = line.strip()
            if not first or first.startswith("#"):
                continue
            entry = [line]
            while entry[-1].endswith("\\") and not entry[-1].lstrip().startswith("#"):
                more = next(lines, None)
                if more is None:  # a backslash at the end of the file: pip's own way
                    return []
                entry.append(more)
            if first.startswith("-"):
                if not re.match(OPTIONS_FOR_BOTH, first):
                    return []
                name = ""
            else:
                name = re.sub(r"[-_.]+", "-", re.split(r"[\s=<>!~;\[@\\(]", first)[0]).lower()
            text = "\n".join(entry)
            if text not in by_name.setdefault(name, []):
                by_name[name].append(text)
    both = "".join(t + "\n" for t in by_name.pop(""))
    names = list(by_name)
    halves = ["".join(t + "\n" for n in names[i::2] for t in by_name[n]) for i in (0, 1)]
    return [both + half for half in halves if half]


def run_side_by_side(
    jobs: list[tuple[list[str], str]], env: dict[str, str] | None = None
) -> list[subprocess.CompletedProcess]:
    """Each ``(command, stdin text)`` started at once, then each waited for. The texts come
    from unlinked temporary files, all written before any command starts: nothing is left
    behind, whenever this is killed. An OSError means none started (the caller may install
    another way); a command that cannot start after another did is a failed one (the
    other killed: it may have written part of a package, which a second install would
    take for installed)."""
    import tempfile

    with contextlib.ExitStack() as stack:
        inputs = []
        for _, text in jobs:
            stdin = stack.enter_context(tempfile.TemporaryFile("w+", encoding="utf-8"))
            stdin.write(text)
            stdin.flush()
            stdin.seek(0)
            inputs.append(stdin)
        procs: list[subprocess.Popen] = []
        try:
            for (cmd, _), stdin in zip(jobs, inputs):
                procs.append(
                    subprocess.Popen(
                        cmd,
                        stdin=stdin,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        text=True,
                        env=env,
                    )
                )
        except OSError as exc:
            if not procs:
                raise
            for proc in procs:  # none keeps running
                proc.kill()
            why = f"stopped: the run beside it could not start ({exc})\n"
            done = []
            for proc in procs:
                out, err = proc.communicate()
                done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err + why))
            return done + [subprocess.CompletedProcess(jobs[len(procs)][0], 1, "", f"{exc}\n")]
    done = []
    for proc, (cmd, _) in zip(procs, jobs):
        out, err = proc.communicate()
        done.append(subprocess.CompletedProcess(cmd, proc.returncode, out, err))
    return done


#: The errors of a disk that cannot take the byte code: ``compile_site`` fails the build.
FULL_DISK = (errno.ENOSPC, errno.EDQUOT)


def compile_site(site: Path) -> None:
    """Compile every module of the fresh venv, after its ``RECORD`` check (so only verified
    sources are compiled) and before its manifest is taken: no run writes a ``.pyc`` into
    the venv (runs set ``dont_write_bytecode``; a written one would fail the venv's
    verification), so a module left uncompiled here would be compiled again in memory by
    every run that imports it.

    In this process (the venv's interpreter is this one, so are its ``.pyc`` files), on
    one process per core, up to 4: each forked child takes every n-th file. Neither an
    installer's compiler nor ``compileall -j`` (a forkserver and a pickle per file) is
    as cheap. A file that does not compile is left as pip leaves it: Python reports it if
    it is ever imported; a disk that is full (``FULL_DISK``) fails the build, in the child
    that meets it (the parent compiles that child's share again, and meets it too).
    Sources no run imports (``NEVER_IMPORTED``) are not compiled."""
    import py_compile

    # No .pyc but ours: an installer copies whatever its cache holds (one a tampered uv cache
    # slipped in, ensurepip's pip), and no RECORD lists a .pyc. Those of the sources compiled
    # below would be replaced; those of the sources left uncompiled would stay.
    # (A __pycache__ that is a link is removed too: compiling into it would write elsewhere.)
    sources = []
    for dirpath, dirnames, filenames in os.walk(site):  # one walk (links are not followed)
        cache = os.path.join(dirpath, "__pycache__")
        if "__pycache__" in dirnames:
            dirnames.remove("__pycache__")
        if os.path.islink(cache) or "__pycache__" in filenames:
            os.unlink(cache)
        elif os.path.isdir(cache):
            shutil.rmtree(cache)
        rel = os.path.relpath(dirpath, site).replace(os.sep, "/")
        for name in filenames:
            if name.endswith(".py"):
                path = name if rel == "." else f"{rel}/{name}"
                if not NEVER_IMPORTED.match(path):
                    sources.append(os.path.join(dirpath, name))
    sources.sort()
    # One process per core, up to 4: a forked child takes every n-th file.
    count = min(usable_cores(), 4, len(sources)) if hasattr(os, "fork") else 1
    index, children = 0, []
    sys.stdout.flush()
    sys.stderr.flush()
    for i in range(1, count):
        pid = os.fork()
        if pid == 0:
            index = i
            children = []
            break
        children.append(pid)

    def share(i: int) -> None:
        for source in sources[i::count]:
            try:
                py_compile.compile(source, doraise=True, quiet=2)
            except OSError as exc:
                # a full disk (or quota) is the build's failure: a venv kept without its
                # byte code would be compiled in memory by every later run that uses it
                if exc.errno in FULL_DISK:
                    raise
            except (py_compile.PyCompileError, ValueError):
                pass

    if index:  # a forked child: its share, then out (never back into the caller's code)
        code = 1
        try:
            share(index)
            code = 0
        finally:
            os._exit(code)
    if count:
        try:
            share(0)
        except BaseException:
            # the build fails: no child may go on writing into the venv it removes
            for pid in children:
                with contextlib.suppress(OSError):
                    os.kill(pid, 9)  # SIGKILL (no signal import on the start-up path)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
            raise
    # A child killed part way (the OOM killer) or failing: the venv is never modified
    # again, so its share is compiled here rather than in memory by every run.
    for i, pid in enumerate(children, start=1):
        if os.waitpid(pid, 0)[1] != 0:
            share(i)


def site_packages(venv: Path) -> Path:
    """The venv's ``purelib``: the venv's interpreter is this one, so its scheme answers in
    this process (no interpreter to start); asked of the venv's Python where it cannot."""
    import sysconfig

    scheme = "venv" if "venv" in sysconfig.get_scheme_names() else "posix_prefix"
    if os.name == "posix":
        base = str(venv)
        names = ("base", "platbase", "installed_base", "installed_platbase")
        site = Path(sysconfig.get_path("purelib", scheme, vars=dict.fromkeys(names, base)))
        if site.is_dir():
            return site
    out = subprocess.run(
        [
            str(venv_python(venv)),
            "-I",
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip())


# -- verification --------------------------------------------------------------------------


def _digest(path: Path) -> str:
    if path.is_symlink():
        return "link:" + os.readlink(path)
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def _stat_key(st: os.stat_result) -> list[int]:
    """What changes whenever a file's content or identity does. ``st_ctime_ns`` is set by
    the kernel on every change and cannot be set back by an unprivileged process (unlike
    the mtime), so an unchanged key means unchanged content."""
    return [st.st_size, st.st_ino, st.st_dev, st.st_mtime_ns, st.st_ctime_ns]


def tree(
    venv: Path, known: dict[str, str] | None = None, stats: dict[str, list[int]] | None = None
) -> tuple[dict[str, str], dict[str, list[int]]]:
    """Every file under ``venv``: (relative POSIX path -> sha256 or a symlink's target,
    path -> stat key). A file whose stat key equals ``stats[path]`` keeps ``known[path]``
    without being read again; any other file is hashed."""
    digests: dict[str, str] = {}
    keys: dict[str, list[int]] = {}
    for dirpath, dirnames, filenames in os.walk(venv):
        base = Path(dirpath)
        for name in filenames + [d for d in dirnames if (base / d).is_symlink()]:
            path = base / name
            rel = path.relative_to(venv).as_posix()
            if rel == MANIFEST:
                continue
            key = _stat_key(path.lstat())
            keys[rel] = key
            if known is not None and stats is not None and stats.get(rel) == key and rel in known:
                digests[rel] = known[rel]
            else:
                digests[rel] = _digest(path)
    return digests, keys


def record_problems(site: Path) -> list[str]:
    """Check each installed distribution's RECORD; list start-up hooks outside any RECORD."""
    return checked_records(site)[0]


def checked_records(site: Path) -> tuple[list[str], dict[str, tuple[list[int], str]]]:
    """:func:`record_problems`, and the sha256 of each regular file read for it with the
    file's stat key (by path relative to ``site``): the manifest reuses a digest whose file
    still has that key (as :func:`verify` does) instead of reading every file again."""
    import base64
    import csv

    problems: list[str] = []
    recorded: set[str] = set()
    hashed: dict[str, tuple[list[int], str]] = {}
    for record in sorted(site.glob("*.dist-info/RECORD")):
        with open(record, newline="", encoding="utf-8") as handle:
            for row in csv.reader(handle):
                if not row:
                    continue
                rel, spec = row[0], (row[1] if len(row) > 1 else "")
                normal = os.path.normpath(rel).replace(os.sep, "/")
                recorded.add(normal)
                if not spec or "=" not in spec:
                    continue
                algorithm, _, want = spec.partition("=")
                path = site / rel
                if not path.is_file():
                    problems.append(f"{rel} is in {record.parent.name}/RECORD but missing")
                    continue
                # the wheel spec's rule: a guaranteed algorithm, sha256 or stronger; anything
                # else (a name hashlib does not know: a traceback before) is refused
                if algorithm not in hashlib.algorithms_guaranteed or algorithm in WEAK:
                    problems.append(
                        f"{rel} is hashed with {algorithm!r} in {record.parent.name}/RECORD, "
                        "which a RECORD may not use"
                    )
                    continue
                st = path.lstat()  # before the read: a change during it moves the key
                digest = hashlib.new(algorithm, path.read_bytes()).digest()
                got = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
                if got != want:
                    problems.append(f"{rel} does not match its hash in {record.parent.name}/RECORD")
                elif algorithm == "sha256" and stat.S_ISREG(st.st_mode):
                    hashed[normal] = (_stat_key(st), digest.hex())
    # Start-up hooks live at the top of site-packages (a .pth; sitecustomize and
    # usercustomize as a module, an extension or a package, with what is under it)
    for name in sorted(os.listdir(site)):
        rels = [name]
        if os.path.isdir(site / name) and STARTUP_HOOKS.match(name + "/"):
            rels += sorted(p.relative_to(site).as_posix() for p in (site / name).rglob("*"))
        for rel in rels:
            if STARTUP_HOOKS.match(rel) and rel not in recorded:
                problems.append(f"{rel} runs at start-up and belongs to no distribution")
    return problems, hashed


def _foreign(st: os.stat_result) -> str:
    """Why another user could have written this entry ('' when only we or root could)."""
    if st.st_uid not in (os.getuid(), 0):
        return f"owned by uid {st.st_uid}"
    if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022:
        return "writable by group or others"
    return ""


def foreign_entries(venv: Path) -> str:
    """The first entry of ``venv`` that another user could have planted or changed: the
    manifest is stored in the venv, so it vouches only for a venv no one else can write."""
    for dirpath, dirnames, filenames in os.walk(venv):
        for name in ["", *dirnames, *filenames]:
            path = Path(dirpath) / name if name else Path(dirpath)
            why = _foreign(path.lstat())
            if why:
                return f"{path.relative_to(venv).as_posix() or '.'} is {why}"
    return ""


def shared_with_others(venv: Path) -> str:
    """Why a directory that holds the venvs lets another user swap them ('' when not)."""
    for directory in (venv.parent.parent, venv.parent):
        try:
            st = directory.lstat()
        except OSError:
            continue
        why = _foreign(st) if not stat.S_ISLNK(st.st_mode) else "a symbolic link"
        if why:
            return f"{directory} is {why}"
    return ""


def verify(venv: Path) -> str:
    """'' when ``venv`` holds exactly the files recorded when it was built, else why not."""
    try:
        foreign = foreign_entries(venv)
    except OSError as exc:
        return f"it cannot be read ({exc})"
    if foreign:
        return f"{foreign}: another user could have planted it"
    try:
        manifest = json.loads((venv / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "it has no readable manifest"
    files = manifest.get("files") if isinstance(manifest, dict) else None
    stats = manifest.get("stats") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not isinstance(stats, dict):
        return "its manifest is malformed"
    try:
        now, _ = tree(venv, files, stats)
    except OSError as exc:
        return f"it cannot be read ({exc})"
    added = sorted(set(now) - set(files))
    missing = sorted(set(files) - set(now))
    changed = sorted(p for p in set(now) & set(files) if now[p] != files[p])
    for what, paths in (("unexpected", added), ("missing", missing), ("changed", changed)):
        if paths:
            more = f" and {len(paths) - 3} more" if len(paths) > 3 else ""
            return f"{what} files: {', '.join(paths[:3])}{more}"
    return ""


# -- build ---------------------------------------------------------------------------------


def restrict(venv: Path) -> None:
    """Writable by us alone (uv creates its ``.lock`` with mode 0666 whatever the umask)."""
    for dirpath, dirnames, filenames in os.walk(venv):
        for name in ["", *dirnames, *filenames]:
            path = Path(dirpath) / name if name else Path(dirpath)
            st = path.lstat()
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022:
                path.chmod(stat.S_IMODE(st.st_mode) & ~0o022)


def build(venv: Path, groups: list[str]) -> Installer:
    """Build ``venv`` aside, verify it, write its manifest, then rename it into place."""
    installer = Installer(venv.parent.parent / "uv-cache")
    tmp = venv.with_name(f"{venv.name}.tmp-{os.getpid()}")
    try:
        installer.create(tmp)
        site = site_packages(tmp)
        installer.install(tmp, [LOCKS / f"{group}.txt" for group in groups])
        for group in groups:
            (tmp / f".gpu-ci-group-{group}").write_text("")
        problems, hashed = checked_records(site)
        if problems:
            raise fail(
                f"the freshly installed dependencies failed verification "
                f"({'; '.join(problems[:3])}): the installer's cache is corrupt or "
                f"tampered with; nothing was used. Delete "
                f"{installer.uv_env['UV_CACHE_DIR']} (uv) or the pip cache, then rerun."
            )
        compile_site(site)
        restrict(tmp)
        known, keys = {}, {}
        prefix = os.path.relpath(site, tmp)
        for rel, (key, digest) in hashed.items():
            path = os.path.normpath(os.path.join(prefix, rel)).replace(os.sep, "/")
            if not path.startswith("../"):
                known[path], keys[path] = digest, key
        files, stats = tree(tmp, known, keys)
        manifest = {"version": 1, "groups": groups, "files": files, "stats": stats}
        (tmp / MANIFEST).write_text(json.dumps(manifest, sort_keys=True), encoding="utf-8")
    except BaseException:  # a failed build (a full disk, a bad cache) leaves nothing behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if venv.exists():  # failed verification: move it aside (a running job may still use it)
        os.replace(venv, venv.with_name(f"{venv.name}.trash-{os.getpid()}"))
    os.replace(tmp, venv)
    return installer


def sweep(venv: Path) -> None:
    """Remove our own leftovers for this key: half-built (``.tmp-``) and replaced
    (``.trash-``) venvs of earlier, dead bootstraps. Called with the key's lock held."""
    for stale in venv.parent.glob(f"{venv.name}.*-*"):
        if stale.is_dir() and re.fullmatch(r"\.(tmp|trash)-\d+", stale.name[len(venv.name) :]):
            shutil.rmtree(stale, ignore_errors=True)


def compiled(package: Path) -> bool:
    """Whether every module under ``package`` has this Python's ``.pyc``, fresh for its
    source as the import system checks it (mtime and size, or the source's hash, in the
    header). One module's ``.pyc`` is no sign of the rest: a compile killed part way, another
    Python's ``.pyc`` or a module edited since leaves others missing or stale, and runs
    (which write no ``.pyc``) would compile those again, each time."""
    import importlib.util

    for source in package.rglob("*.py"):
        if "__pycache__" in source.parts:
            continue
        try:
            stat = source.stat()
            with open(importlib.util.cache_from_source(str(source)), "rb") as pyc:
                header = pyc.read(16)
            if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
                return False
            if int.from_bytes(header[4:8], "little") & 1:  # hash-based (SOURCE_DATE_EPOCH)
                if header[8:16] != importlib.util.source_hash(source.read_bytes()):
                    return False
            elif header[8:16] != (
                (int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
                + (stat.st_size & 0xFFFFFFFF).to_bytes(4, "little")
            ):
                return False
        except OSError:
            return False
    return True


def compile_source() -> subprocess.Popen | None:
    """Start compiling this checkout's ``src/`` once, so that no run recompiles it: beside
    the venv's check or build (on a cold start, while uv waits on the network); ``finish``
    waits for it. None when it is compiled already (every module's ``.pyc`` fresh), or
    when this user cannot write there (a read-only checkout: runs compile in memory)."""
    package = ROOT / "src" / "gpu_ci"
    if compiled(package) or not os.access(package, os.W_OK):
        return None
    # -I: ``-m`` puts the working directory (the job's workspace) first on sys.path, and
    # PYTHONPATH after it: a compileall.py there would run instead of the stdlib's.
    # -f: compileall's own check reads the mtime alone, and an edit within the second left
    # the stale .pyc (and a child every job).
    cmd = [sys.executable, "-I", "-m", "compileall", "-f", "-q", str(ROOT / "src" / "gpu_ci")]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def export(name: str, value: str) -> None:
    path = os.environ.get("GITHUB_ENV")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(f"{name}={value}\n")
    else:
        print(f"{name}={value}")


def wanted_groups(action: str) -> list[str]:
    """The action's groups plus those the job's current venv holds (``GPU_CI_GROUPS``), so
    that actions taking turns in one job do not switch venvs back and forth."""
    have = set(os.environ.get("GPU_CI_GROUPS", "").split()) & set(ALL)
    if os.environ.get("GPU_CI_ROOT") != str(ROOT):
        have = set()
    need = set(groups_for(action)) | have
    return [g for g in ALL if g in need]


def main(argv: list[str]) -> int:
    start = time.monotonic()
    groups = wanted_groups(argv[0] if argv else "")
    venv = venv_dir(groups)
    os.umask(0o022)  # our venvs must pass the check below: writable by us alone
    compiling = compile_source()  # under that umask too: its __pycache__ is ours alone
    try:
        venv.parent.mkdir(parents=True, exist_ok=True)
        shared = shared_with_others(venv)
        if shared:
            raise fail(
                f"{shared}: another user could swap the venvs kept there. Give each "
                "runner user its own GPU_CI_CACHE_DIR (a directory only that user can "
                "write)."
            )
        lock_handle = open(venv.parent / (venv.name + ".lock"), "w")  # noqa: SIM115 (with below)
    except OSError as exc:
        if venv.exists() and not verify(venv):  # a read-only cache prepared by the admin
            return finish(venv, groups, "reused (read-only cache)", start, compiling)
        raise fail(
            f"cannot create {venv.parent} ({exc.strerror}): set GPU_CI_CACHE_DIR to a "
            "writable directory."
        ) from None
    how = "reused"
    with lock_handle:
        try:  # serialise bootstraps of one key on this machine
            import fcntl

            fcntl.flock(lock_handle, fcntl.LOCK_EX)
        except ImportError:  # Windows: best effort
            pass
        sweep(venv)
        problem = verify(venv) if venv.exists() else "new"
        if problem:
            if problem != "new":
                notice(f"not reusing {venv}: {problem}. Rebuilding it.")
            try:
                installer = build(venv, groups)
            except OSError as exc:  # a full disk (blocks or inodes), a file we cannot write
                raise fail(
                    f"building {venv} failed ({exc}); nothing was kept. Free space there "
                    "or set GPU_CI_CACHE_DIR to another directory."
                ) from None
            how = f"installed {', '.join(groups)} with {installer.name}"
            sweep(venv)
    return finish(venv, groups, how, start, compiling)


def finish(
    venv: Path, groups: list[str], how: str, start: float, compiling: subprocess.Popen | None
) -> int:
    if compiling is not None:
        compiling.wait()
    export("GPU_CI_PYTHON", str(venv_python(venv)))
    export("GPU_CI_ROOT", str(ROOT))
    export("GPU_CI_GROUPS", " ".join(groups))
    print(f"gpu-ci {package_version()}: {how}: {venv} ({time.monotonic() - start:.1f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
