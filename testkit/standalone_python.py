"""This host's Python packed as a standalone, relocatable Python.

uv installs python-build-standalone's archives from GitHub, which this machine cannot
reach; the cold-start benchmark and the container tests use this host's own Python in
that layout instead, served on 127.0.0.1, or unpacked as a conda-like prefix.
"""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
import sys
import tempfile
from pathlib import Path

#: Directories of the host's standard library left out of the standalone archive.
STDLIB_LEFT_OUT = ("site-packages", "dist-packages", "test", "idlelib", "tkinter", "turtledemo")


def standalone_archive(dest: Path) -> tuple[Path | None, str]:
    """This host's Python as a python-build-standalone archive, with uv's list.

    uv installs Python from python-build-standalone's GitHub releases, which a machine
    that reaches only the package registries cannot download. What it downloads can be
    named instead (``UV_PYTHON_DOWNLOADS_JSON_URL``: a JSON of the form of uv's own
    download list, each entry an archive's URL and sha256), so the uv paths are measured
    with this host's own Python packed in python-build-standalone's ``install_only``
    layout (``python/bin/python3.X``, ``python/lib/``), built here, served on 127.0.0.1.
    Python finds its prefix from its executable's place; what must move is the
    interpreter's ELF ``RUNPATH`` to its ``libpython`` (an absolute path into this
    host's install), rewritten in place to ``$ORIGIN/../lib`` as python-build-standalone
    sets it. (archive, '') or (None, why it cannot be built)."""
    import tarfile

    base = Path(sys.base_prefix)
    short = f"{sys.version_info[0]}.{sys.version_info[1]}"
    exe = base / "bin" / f"python{short}"
    libdir = base / "lib"
    if not exe.is_file() or not (libdir / f"python{short}" / "os.py").is_file():
        return None, f"this host's Python is not laid out as <prefix>/bin, <prefix>/lib ({base})"
    binary = exe.read_bytes()
    old = str(libdir).encode() + b"\0"
    new = b"$ORIGIN/../lib"
    shared = list(libdir.glob(f"libpython{short}*.so*"))
    if shared:
        if binary.count(old) != 1 or len(new) >= len(old):
            return None, (
                f"this host's Python links {shared[0].name} without a RUNPATH of {libdir} "
                "to make relative: it cannot be packed as a standalone Python"
            )
        binary = binary.replace(old, new + b"\0" * (len(old) - len(new)))
    version = ".".join(str(part) for part in sys.version_info[:3])
    machine = platform.machine()
    name = f"cpython-{version}-linux-{machine}-gnu"
    archive = dest / f"{name}-install_only.tar.gz"

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = Path(info.name).parts
        if "__pycache__" in parts or (len(parts) > 3 and parts[3] in STDLIB_LEFT_OUT):
            return None
        if info.issym() and info.linkname.startswith("/"):  # uv refuses absolute links
            return None
        return info

    staged = dest / "bin"
    staged.mkdir(parents=True, exist_ok=True)
    (staged / exe.name).write_bytes(binary)
    (staged / exe.name).chmod(0o755)
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
        tar.add(staged / exe.name, f"python/bin/{exe.name}")
        for alias in ("python3", "python"):
            link = tarfile.TarInfo(f"python/bin/{alias}")
            link.type, link.linkname = tarfile.SYMTYPE, exe.name
            tar.addfile(link)
        for lib in shared:
            tar.add(lib, f"python/lib/{lib.name}", filter=keep)
        tar.add(libdir / f"python{short}", f"python/lib/python{short}", filter=keep)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    entry = {
        "name": "cpython",
        "arch": {"family": machine, "variant": None},
        "os": "linux",
        "libc": "gnu",
        "major": sys.version_info[0],
        "minor": sys.version_info[1],
        "patch": sys.version_info[2],
        "prerelease": "",
        "url": archive.name,  # made absolute once the server's port is known
        "sha256": digest,
        "variant": None,
    }
    (dest / "downloads.json").write_text(json.dumps({name: entry}))
    return archive, ""


class StandalonePython:
    """The standalone archive and its download list, served on 127.0.0.1 (a thread)."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="standalone-"))
        self.archive, self.why = standalone_archive(self.dir)
        self.server: object = None
        self.url = ""
        if self.archive is not None:
            import functools
            import http.server
            import threading

            class Quiet(http.server.SimpleHTTPRequestHandler):
                def log_message(self, format: str, *args: object) -> None:
                    pass

            handler = functools.partial(Quiet, directory=str(self.dir))
            server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.server = server
            self.url = f"http://127.0.0.1:{server.server_address[1]}"
            listing = json.loads((self.dir / "downloads.json").read_text())
            for entry in listing.values():
                entry["url"] = f"{self.url}/{entry['url']}"
            (self.dir / "downloads.json").write_text(json.dumps(listing))

    def env(self) -> str:
        """The job's environment lines: uv's download list, the Python version it has."""
        short = f"{sys.version_info[0]}.{sys.version_info[1]}"
        return f"UV_PYTHON_DOWNLOADS_JSON_URL={self.url}/downloads.json\nGPU_CI_UV_PYTHON={short}\n"

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()  # type: ignore[attr-defined]
        shutil.rmtree(self.dir, ignore_errors=True)


#: Shell lines, run as root in the Debian root before a job: conda's Python at /opt/conda,
#: first on PATH and the only one, as in RAPIDS' ci-conda images. The stand-in prefix is
#: this host's Python, which links the system's OpenSSL (conda's ships its own), and its
#: standard library is compiled, as conda's package ships it. Read-only, as a vendor's.
CONDA_PREFIX_SETUP = r"""
cp /job/libs/* "/usr/lib/$(uname -m)-linux-gnu/" && /sbin/ldconfig
tar -xzf /job/conda.tar.gz -C /opt && mv /opt/python /opt/conda
mkdir /opt/conda/conda-meta && echo "# conda" > /opt/conda/conda-meta/history
/opt/conda/bin/python3 -I -m compileall -q /opt/conda/lib >/dev/null
chmod -R a-w /opt/conda
export PATH="/opt/conda/bin:$PATH"
"""


def conda_prefix_into(job: Path, archive: Path) -> str:
    """Put what :data:`CONDA_PREFIX_SETUP` needs into ``job``; '' or why it cannot."""
    shutil.copy2(archive, job / "conda.tar.gz")
    (job / "libs").mkdir()
    for name in ("libssl.so.3", "libcrypto.so.3"):
        found = [p for p in Path("/usr/lib").rglob(name) if p.is_file()]
        if not found:
            return f"{name} is not on this machine"
        shutil.copy2(found[0], job / "libs" / name)
    return ""
