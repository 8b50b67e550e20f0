"""A local conda channel of real packages, served over loopback HTTP.

Faults can be injected. Packages are assembled with py-rattler-build and indexed with
py-rattler, so that what the action installs is exactly what conda-forge ships in form:
``.conda`` archives with ``info/index.json``, ``paths.json``, prefix placeholders and
activation scripts."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import sys
import threading
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SUBDIR = "linux-64"


@dataclass
class Archive:
    name: str
    version: str
    build: str
    subdir: str
    path: Path
    depends: list[str]

    @property
    def filename(self) -> str:
        return self.path.name

    @property
    def data(self) -> bytes:
        return self.path.read_bytes()

    @property
    def md5(self) -> str:
        return hashlib.md5(self.data).hexdigest()

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass
class Channel:
    root: Path
    archives: list[Archive]
    wheel: Path
    server: ChannelServer | None = None

    def url(self, rel: str = "") -> str:
        assert self.server is not None
        return f"{self.server.url}/{rel}"

    def archive_url(self, archive: Archive) -> str:
        return self.url(f"channel/{archive.subdir}/{archive.filename}")

    def explicit_lock(
        self, names: list[str] | None = None, *, pip: bool = False, platform: str = SUBDIR
    ) -> str:
        lines = [f"# platform: {platform}", "@EXPLICIT"]
        for a in self.archives:
            if names is None or a.name in names:
                lines.append(f"{self.archive_url(a)}#{a.md5}")
        if pip:
            sha = hashlib.sha256(self.wheel.read_bytes()).hexdigest()
            lines.append(f"# pip gpuci-demo @ {self.url('wheels/' + self.wheel.name)}#sha256={sha}")
        return "\n".join(lines) + "\n"

    def unified_lock(
        self, names: list[str] | None = None, *, pip: bool = False, dev: list[str] = ()
    ) -> str:
        import yaml

        packages: list[dict[str, Any]] = []
        for a in self.archives:
            if names is not None and a.name not in names and a.name not in dev:
                continue
            deps = {}
            for dep in a.depends:
                dep_name, _, spec = dep.partition(" ")
                deps[dep_name] = spec
            packages.append(
                {
                    "name": a.name,
                    "version": a.version,
                    "manager": "conda",
                    "platform": SUBDIR,
                    "dependencies": deps,
                    "url": self.archive_url(a),
                    "hash": {"md5": a.md5, "sha256": a.sha256},
                    "category": "dev" if a.name in dev else "main",
                    "optional": a.name in dev,
                }
            )
        packages.append(
            {
                "name": "__glibc",
                "version": "2.17",
                "manager": "conda",
                "platform": SUBDIR,
                "dependencies": {},
                "url": "",
                "hash": {"md5": "0" * 32},
                "category": "main",
                "optional": False,
            }
        )
        if pip:
            packages.append(
                {
                    "name": "gpuci-demo",
                    "version": "1.0",
                    "manager": "pip",
                    "platform": SUBDIR,
                    "dependencies": {},
                    "url": self.url("wheels/" + self.wheel.name),
                    "hash": {"sha256": hashlib.sha256(self.wheel.read_bytes()).hexdigest()},
                    "category": "main",
                    "optional": False,
                }
            )
        doc = {
            "version": 1,
            "metadata": {
                "content_hash": {SUBDIR: "0" * 64},
                "channels": [{"url": self.url("channel"), "used_env_vars": []}],
                "platforms": [SUBDIR, "osx-arm64"],
                "sources": ["environment.yml"],
            },
            "package": packages,
        }
        return yaml.safe_dump(doc, sort_keys=False)

    def pixi_lock(
        self,
        environments: dict[str, list[str]] | None = None,
        *,
        pypi: Sequence[dict[str, Any]] = (),
    ) -> str:
        """A pixi.lock (format 6) of these archives for linux-64.

        ``environments``: each environment's package names (default: every archive in
        ``default``). ``pypi``: entries of its ``packages`` list (``pypi``: the location,
        ``name``, ``version``, ``sha256`` or ``editable``), all in ``default``."""
        import yaml

        wanted = environments or {"default": [a.name for a in self.archives]}
        by_name = {a.name: a for a in self.archives}
        envs = {}
        for env, names in wanted.items():
            items = [{"conda": self.archive_url(by_name[n])} for n in names]
            if env == "default":
                items += [{"pypi": str(entry["pypi"])} for entry in pypi]
            envs[env] = {
                "channels": [{"url": self.url("channel/")}],
                "indexes": [self.url("simple")],
                "packages": {SUBDIR: items},
            }
        packages: list[dict[str, Any]] = [
            {"conda": self.archive_url(a), "md5": a.md5, "sha256": a.sha256, "depends": a.depends}
            for a in self.archives
        ]
        doc = {"version": 6, "environments": envs, "packages": packages + list(pypi)}
        return yaml.safe_dump(doc, sort_keys=False)


def _record_placeholder(archive: Path, placeholder: str) -> None:
    """Record ``placeholder`` in a .tar.bz2 archive's info files.

    It goes into info/paths.json and info/has_prefix, as conda-build does for files that embed
    the build prefix."""
    import io
    import tarfile

    with tarfile.open(archive, "r:bz2") as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()]
    contents = dict((m.name, data) for m, data in members)
    paths = json.loads(contents["info/paths.json"])
    has_prefix = []
    for entry in paths["paths"]:
        data = contents.get(entry["_path"])
        if data is not None and placeholder.encode() in data:
            entry["prefix_placeholder"] = placeholder
            entry["file_mode"] = "text"
            has_prefix.append(f"{placeholder} text {entry['_path']}")
    new = {
        "info/paths.json": json.dumps(paths).encode(),
        "info/has_prefix": ("\n".join(has_prefix) + "\n").encode(),
    }
    with tarfile.open(archive, "w:bz2") as tar:
        for member, data in members:
            if member.name in new:
                continue
            tar.addfile(member, io.BytesIO(data) if data is not None else None)
        for name, data in new.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _assemble(
    out: Path,
    work: Path,
    name: str,
    version: str,
    build: str,
    subdir: str,
    files: dict[str, str | tuple[str, str]],
    depends: list[str] = (),
    noarch: str | None = None,
    tar_bz2: bool = False,
) -> Archive:
    import rattler_build

    files_dir = work / f"{name}-files"
    files_dir.mkdir(parents=True)
    for rel, content in files.items():
        path = files_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, tuple) and content[0] == "symlink":
            os.symlink(content[1], path)
        else:
            path.write_text(str(content).replace("@PREFIX@", str(files_dir)))
            if rel.startswith("bin/"):
                path.chmod(0o755)
    target = subdir if noarch is None else "noarch"
    kind = rattler_build.ArchiveType.TarBz2 if tar_bz2 else rattler_build.ArchiveType.Conda
    output = rattler_build.assemble_package(
        name,
        version,
        target,
        build,
        out / target,
        files_dir=files_dir,
        depends=list(depends),
        noarch=noarch,
        archive_type=kind,
    )
    if tar_bz2 and any("@PREFIX@" in str(c) for c in files.values()):
        _record_placeholder(Path(output.path), str(files_dir))
    return Archive(name, version, build, target, Path(output.path), list(depends))


def build_wheel(out: Path) -> Path:
    """A tiny real wheel with a console script, for pip entries.

    pip writes the script's shebang with the interpreter that installs it."""
    wheel = out / "gpuci_demo-1.0-py3-none-any.whl"
    files = {
        "gpuci_demo/__init__.py": "VALUE = 42\n\n\ndef main():\n    print(VALUE)\n",
        "gpuci_demo-1.0.dist-info/entry_points.txt": (
            "[console_scripts]\ngpuci-demo = gpuci_demo:main\n"
        ),
        "gpuci_demo-1.0.dist-info/METADATA": (
            "Metadata-Version: 2.1\nName: gpuci-demo\nVersion: 1.0\n"
        ),
        "gpuci_demo-1.0.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in files.items():
            data = text.encode()
            zf.writestr(name, data)
            import base64

            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{name},sha256={digest.decode()},{len(data)}")
        record.append("gpuci_demo-1.0.dist-info/RECORD,,")
        zf.writestr("gpuci_demo-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel


def build_channel(root: Path, *, with_python: bool = True) -> Channel:
    """libhello <- hello (activate.d), noarch data, and a python wrapping this interpreter."""
    import rattler.index

    channel_dir = root / "channel"
    work = root / "work"
    archives = [
        _assemble(
            channel_dir,
            work,
            "libhello",
            "1.0",
            "h0_0",
            SUBDIR,
            {"share/libhello/prefix.txt": "installed at @PREFIX@\n"},
            tar_bz2=True,
        ),
        _assemble(
            channel_dir,
            work,
            "hello",
            "2.1",
            "h1_3",
            SUBDIR,
            {
                "bin/hello": '#!/bin/sh\necho "hello from @PREFIX@"\n',
                "etc/conda/activate.d/hello.sh": 'export HELLO_HOME="${CONDA_PREFIX}/share/hello"\n'
                "export HELLO_ACTIVATED=yes\n",
            },
            depends=["libhello >=1.0"],
            tar_bz2=True,
        ),
        _assemble(
            channel_dir,
            work,
            "hello-data",
            "0.3",
            "pyh0_0",
            SUBDIR,
            {"share/hello/data.txt": "data\n"},
            noarch="generic",
        ),
    ]
    if with_python:
        exe = Path(sys.executable).resolve()
        version = ".".join(map(str, sys.version_info[:3]))
        archives.append(
            _assemble(
                channel_dir,
                work,
                "python",
                version,
                "h0_0_cpython",
                SUBDIR,
                {
                    # A venv-style wrapper of the interpreter running the tests: real enough
                    # for pip.
                    "bin/python": ("symlink", str(exe)),
                    "bin/python3": ("symlink", "python"),
                    "pyvenv.cfg": f"home = {exe.parent}\ninclude-system-site-packages = true\n"
                    f"version = {version}\n",
                    f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages/"
                    "gpuci-site.txt": "site-packages of the wrapped interpreter\n",
                },
            )
        )
    asyncio.run(rattler.index.index_fs(channel_dir))
    wheels = root / "wheels"
    wheels.mkdir()
    return Channel(channel_dir, archives, build_wheel(wheels))


class _Served:
    """What ChannelServer and ForwardProxy share: a threaded HTTP server on a free loopback
    port, its URL, and its stop."""

    _server: ThreadingHTTPServer | None

    def _serve(self, handler: type[BaseHTTPRequestHandler], backlog: int = 5) -> None:
        server = type("Server", (ThreadingHTTPServer,), {"request_queue_size": backlog})
        self._server = server(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()


@dataclass
class ChannelServer(_Served):
    """Serves ``root`` over HTTP on 127.0.0.1; ``faults[path]`` lists actions to take."""

    root: Path
    faults: dict[str, list[str]] = field(default_factory=dict)
    log: list[tuple[str, int]] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    authorization: str = ""
    """When set, every request without exactly this Authorization header gets 401."""
    protocol: str = "HTTP/1.1"
    """'HTTP/1.0' closes every connection after one response (as some proxies do)."""
    seen: list[dict[str, str]] = field(default_factory=list)
    """Each request's path and headers, for checks on what was (not) sent."""
    backlog: int = 5
    """The listen queue: http.server's 5 (some proxies' too), where many connections at
    once are dropped and retried a second later."""
    heads: list[dict[str, str]] = field(default_factory=list)
    """Each HEAD request's path and headers."""
    most_at_once: int = 0
    """The most GET requests it answered at the same time."""
    peers: set[int] = field(default_factory=set)
    """The client ports of the connections GET requests came on."""
    _at_once: int = 0
    _count_lock: threading.Lock = field(default_factory=threading.Lock)
    latency: float = 0.0
    """Seconds each request waits before its answer, in its own thread: a distant server
    (a CDN's round trip), where how many downloads run at once decides the time."""
    head_latency: float | None = None
    """Seconds a HEAD waits instead (None: ``latency``): 0 for a server whose GETs are slow
    and whose HEADs are not, as a latency probe would be misled by."""
    nagle: bool = False
    """Leave Nagle's algorithm on (Python's ``http.server`` default): the body's first
    segment then waits for the ACK of the headers' (a delayed ACK, about 40 ms) on every
    response after the first on a kept-alive connection."""
    connections: int = 0
    """How many connections it accepted."""
    gather: int = 0
    """When set, every GET after the first ``gather`` waits (at most 2 s) until more than
    ``gather`` are in flight: a client that widens past ``gather`` is seen to, however busy
    the host (no timing decides what ``most_at_once`` shows)."""
    _gets: int = 0

    def fail(self, rel: str, *actions: str) -> None:
        """Actions: '500', '503', '404', 'truncate', 'corrupt', 'redirect:<url>', 'slow:<s>'
        (one per request); 'trickle:<s>': the body in 40 pieces spread over <s> seconds."""
        self.faults.setdefault("/" + rel.lstrip("/"), []).extend(actions)

    def requests(self, contains: str = "") -> list[tuple[str, int]]:
        return [r for r in self.log if contains in r[0]]

    def start(self) -> ChannelServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = owner.protocol
            # off as production servers do (nginx tcp_nodelay), unless ``nagle``
            disable_nagle_algorithm = not owner.nagle

            def setup(self) -> None:
                with owner._count_lock:
                    owner.connections += 1
                super().setup()

            def log_message(self, *args: Any) -> None:
                pass

            def do_HEAD(self) -> None:
                """What a client asks before it sizes its downloads.

                Logged in ``heads`` only (``log`` and ``seen`` count the downloads)."""
                wait = owner.latency if owner.head_latency is None else owner.head_latency
                if wait:
                    time.sleep(wait)
                owner.heads.append({"path": self.path, **dict(self.headers.items())})
                file = (owner.root / self.path.split("?")[0].lstrip("/")).resolve()
                denied = (
                    bool(owner.authorization)
                    and self.headers.get("Authorization") != owner.authorization
                )
                found = not denied and file.is_file() and owner.root.resolve() in file.parents
                self.send_response(401 if denied else 200 if found else 404)
                self.send_header("Content-Length", str(file.stat().st_size if found else 0))
                self.end_headers()

            def do_GET(self) -> None:
                self._in_flight = True
                with owner._count_lock:
                    owner.peers.add(self.client_address[1])
                    owner._at_once += 1
                    owner._gets += 1
                    owner.most_at_once = max(owner.most_at_once, owner._at_once)
                    held = owner.gather and owner._gets > owner.gather
                deadline = time.monotonic() + 2.0
                while held and owner.most_at_once <= owner.gather:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.005)
                try:
                    self._get()
                finally:
                    self._answered()

            def _answered(self) -> None:
                """This GET no longer counts as in flight: called just before its body's last
                write, since the client may start its next download as soon as that write
                lands, before this thread (under load, waiting for the GIL) runs again."""
                if self._in_flight:
                    self._in_flight = False
                    with owner._count_lock:
                        owner._at_once -= 1

            def _get(self) -> None:
                if owner.latency:
                    time.sleep(owner.latency)
                path = self.path.split("?")[0]
                owner.seen.append({"path": self.path, **dict(self.headers.items())})
                if owner.authorization and self.headers.get("Authorization") != owner.authorization:
                    owner.log.append((path, 401))
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Bearer realm="channel"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                queue = owner.faults.get(path) or []
                action = queue.pop(0) if queue else ""
                if action.startswith("redirect:"):  # 302 to another URL
                    owner.log.append((path, 302))
                    self.send_response(302)
                    self.send_header("Location", action[len("redirect:") :])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                file = (owner.root / path.lstrip("/")).resolve()
                if (
                    action in ("500", "503", "404")
                    or not file.is_file()
                    or owner.root.resolve() not in file.parents
                ):
                    status = int(action) if action else 404
                    owner.log.append((path, status))
                    body = b'{"error": "nope"}'
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(body)))
                    if status == 503:
                        self.send_header("Retry-After", "0")
                    self.end_headers()
                    self.wfile.write(body)
                    return
                data = file.read_bytes()
                if action.startswith("slow:"):  # a long download: wait before the body
                    time.sleep(float(action[len("slow:") :]))
                if action == "corrupt":
                    data = data[:-1] + bytes([data[-1] ^ 0xFF])
                ranged = self.headers.get("Range", "")
                start = (
                    int(ranged[len("bytes=") :].split("-")[0]) if ranged.startswith("bytes=") else 0
                )
                owner.log.append((path, 206 if start else 200))
                self.send_response(206 if start else 200)
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                    data = data[start:]
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if action == "truncate":
                    self.wfile.write(data[: len(data) // 2])
                    self.close_connection = True
                    return
                if action.startswith("trickle:"):  # a long download making steady progress
                    step = max(1, len(data) // 40)
                    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                        for at in range(0, len(data), step):
                            self.wfile.write(data[at : at + step])
                            self.wfile.flush()
                            time.sleep(float(action[len("trickle:") :]) / 40)
                    return
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self._answered()
                    self.wfile.write(data)

        self._serve(Handler, self.backlog)
        return self


def hostile_archive(
    directory: Path,
    name: str,
    paths: list[dict[str, Any]] | None,
    members: dict[str, bytes] | None = None,
    links: dict[str, str] | None = None,
) -> Path:
    """``directory/<name>-1.0-0.tar.bz2``: a conda package in the real layout
    (info/index.json, info/paths.json, the files) whose contents an attacker chose.

    Written by hand with :mod:`tarfile`, because rattler-build refuses to assemble what the
    attack tests need: ``paths`` is paths.json's list as given (``None``: no paths.json at
    all), ``members`` the files, and ``links`` symbolic links (member name -> target, e.g.
    into the user's home or /dev/zero), added last and listed in paths.json only where
    ``paths`` lists them."""
    import io
    import tarfile

    index = {
        "name": name,
        "version": "1.0",
        "build": "0",
        "build_number": 0,
        "subdir": SUBDIR,
        "depends": [],
        "license": "MIT",
    }
    files = {"info/index.json": json.dumps(index).encode()}
    if paths is not None:
        files["info/paths.json"] = json.dumps({"paths": paths, "paths_version": 1}).encode()
    files.update(members or {})
    out = directory / f"{name}-1.0-0.tar.bz2"
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:bz2") as tar:
        for member, data in files.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for member, target in (links or {}).items():
            link = tarfile.TarInfo(member)
            link.type = tarfile.SYMTYPE
            link.linkname = target
            tar.addfile(link)
    return out


def explicit_lock_of(channel: Channel, archive: Path, pin: str = "sha256") -> str:
    """An explicit lock of the one ``archive``, pinned by md5 or sha256.

    The archive is a file under ``channel.root.parent``, which the channel's server serves.
    ``md5`` pins as ``#<hex>``, ``sha256`` as ``#sha256:<hex>``: the two forms a lock from a
    pull request can take."""
    data = archive.read_bytes()
    digest = (
        hashlib.md5(data).hexdigest()
        if pin == "md5"
        else f"sha256:{hashlib.sha256(data).hexdigest()}"
    )
    rel = archive.relative_to(channel.root.parent)
    return f"# platform: {SUBDIR}\n@EXPLICIT\n{channel.url(str(rel))}#{digest}\n"


@dataclass
class ForwardProxy(_Served):
    """An HTTP forward proxy on 127.0.0.1.

    It is what ``HTTP_PROXY``/``ALL_PROXY`` point at in a corporate network: it is sent absolute
    URLs, fetches each from its origin without any proxy, and relays status, length and body.
    ``seen``: each URL asked for."""

    seen: list[str] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    def start(self) -> ForwardProxy:
        import urllib.error
        import urllib.request

        owner = self
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _relay(self, method: str) -> None:
                owner.seen.append(self.path)
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() in ("authorization", "range", "user-agent")
                }
                request = urllib.request.Request(self.path, headers=headers, method=method)
                try:
                    with direct.open(request, timeout=30) as answer:
                        status, body = answer.status, answer.read()
                        kept = [
                            (k, v)
                            for k, v in answer.headers.items()
                            if k.lower() in ("content-range", "accept-ranges")
                        ]
                except urllib.error.HTTPError as exc:
                    status, body, kept = exc.code, exc.read(), []
                self.send_response(status)
                for key, value in kept:
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if method == "GET":
                    self.wfile.write(body)

            def do_GET(self) -> None:
                self._relay("GET")

            def do_HEAD(self) -> None:
                self._relay("HEAD")

        self._serve(Handler)
        return self
