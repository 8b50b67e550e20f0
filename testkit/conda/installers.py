"""A mirror that serves Miniforge-shaped installers.

The tests of ``gpu_ci.conda.miniforge`` share it."""

from __future__ import annotations

import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

#: Takes ``-b -u -p PREFIX`` like the real installer; lays down ``bin/conda`` and
#: ``condabin/conda`` (what the action puts on PATH; it prints ``conda 26.3.2``) and records
#: the path it was run from (``$0``) in ``PREFIX/.ran-from``.
FAKE = b"""#!/bin/sh
while [ $# -gt 0 ]; do [ "$1" = -p ] && prefix="$2"; shift; done
mkdir -p "$prefix/bin" "$prefix/condabin"
printf '#!/bin/sh\\necho "conda 26.3.2"\\n' > "$prefix/bin/conda"
chmod +x "$prefix/bin/conda" && cp -p "$prefix/bin/conda" "$prefix/condabin/conda"
printf '%s\\n' "$0" > "$prefix/.ran-from"
"""


def evil(marker: Path) -> bytes:
    """An installer that must never run: it leaves ``marker`` (and a conda, so that a run of
    it would otherwise pass for a good install)."""
    return FAKE.replace(b"#!/bin/sh\n", f"#!/bin/sh\ntouch '{marker}'\n".encode(), 1)


class Mirror:
    """Serves ``folder`` over HTTP on loopback and records every path requested."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.seen: list[str] = []
        seen = self.seen

        class Handler(SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=str(folder), **kwargs)

            def log_message(self, *args):
                seen.append(self.path)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/{name}"

    def gets(self, name: str) -> int:
        return sum(1 for path in self.seen if path == "/" + name)

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
