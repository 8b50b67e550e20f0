"""The runner-facing edge: outputs, annotations, masks, environment and the job summary.

actions-toolkit speaks GitHub's workflow commands and file commands. We call the two
modules its ``core`` is built on (``command`` and ``file_command``) rather than ``core``
itself, which imports ``requests`` for OIDC: 120 ms of start-up that every action paid and
none used. This module adds what a CLI that also runs outside Actions needs: outputs as
``name=value`` lines when ``$GITHUB_OUTPUT`` is unset, masks only where a runner will
honour them (printing ``::add-mask::<token>`` on a developer's terminal would reveal the
token it means to hide), and a Markdown job summary.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol, TextIO

from actions_toolkit.command import issue_command
from actions_toolkit.utils import to_command_value

from gpu_ci.atomic import write_atomic
from gpu_ci.errors import GpuCiError, UsageError

# the one escaping rule for summaries (a root module: the wings build tables too)
from gpu_ci.markdown import Markdown as Markdown
from gpu_ci.markdown import escape as escape
from gpu_ci.markdown import markdown_table as markdown_table


def escape_line(text: str) -> str:
    """``text`` as a log line no runner reads as a workflow command.

    The runner treats a line whose trimmed text starts with ``::`` (or the legacy ``##[``) as
    a command. Text from an event or an API answer (a label name, a login, an error
    message) can hold line breaks and such prefixes, so CR and LF are shown as ``%0D`` and
    ``%0A`` (the line stays one line) and a leading ``::`` or ``##[`` is encoded. A plain
    line is never decoded by the runner, so ``%`` itself stays as written ("50 % idle").
    """
    out = text.replace("\r", "%0D").replace("\n", "%0A")
    stripped = out.lstrip()
    if stripped.startswith(("::", "##[")):
        lead = len(out) - len(stripped)
        out = out[:lead] + stripped[:2].replace(":", "%3A").replace("#", "%23") + stripped[2:]
    return out


#: Shorter "secrets" are no credential (a test's "t"): redacting them would garble every
#: message while protecting nothing.
MIN_SECRET = 4


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret replaced by ``***``.

    Longest first, so no piece survives."""
    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= MIN_SECRET:
            text = text.replace(secret, "***")
    return text


def issue_file_command(path: str, command: str, message: str) -> None:
    """``actions_toolkit.file_command.issue_file_command``, as it does it: one line appended
    to the file the runner gave for ``GITHUB_<command>`` (``path``, from the environment the
    Runtime reads, not the process's: the toolkit read ``os.environ`` after we had looked in
    ours). Written here because that module imports ``uuid`` for its delimiters, and
    ``uuid`` imports ``platform``: ~5 ms of every run of every action, for 16 random bytes
    (``key_value_message``)."""
    if not Path(path).exists():  # the runner creates it for each step: never appended blindly
        raise GpuCiError(
            f"GITHUB_{command} names {path}, which does not exist: the runner creates that "
            f"file for each step; outside a workflow, unset GITHUB_{command}."
        )
    with open(path, "a", encoding="utf8", newline="") as out:
        out.write(f"{to_command_value(message)}{os.linesep}")


def key_value_message(key: str, value: str) -> str:
    """``actions_toolkit.file_command.prepare_key_value_message``: ``key<<delimiter``, the
    value, the delimiter, with a delimiter of 128 random bits (the toolkit's is a uuid4, 122)
    that neither the key nor the value holds."""
    delimiter = f"ghadelimiter_{os.urandom(16).hex()}"
    text = to_command_value(value)
    if delimiter in key or delimiter in text:  # 2**-128: never, but never trusted either
        raise GpuCiError(f"the value of {key} contains the delimiter {delimiter}")
    return f"{key}<<{delimiter}{os.linesep}{text}{os.linesep}{delimiter}"


class Runtime:
    """Everything a command does to the world besides its own work."""

    def __init__(
        self, environ: Mapping[str, str] | None = None, stdout: TextIO | None = None
    ) -> None:
        self.environ = os.environ if environ is None else environ
        self.stdout = stdout or sys.stdout
        self._summary: list[str] = []
        self._secrets: list[str] = []

    @property
    def in_actions(self) -> bool:
        return self.environ.get("GITHUB_ACTIONS") == "true"

    # -- outputs ----------------------------------------------------------------------
    def set_output(self, name: str, value: object) -> None:
        text = self.redact(value if isinstance(value, str) else str(value))
        if file := self.environ.get("GITHUB_OUTPUT"):
            issue_file_command(file, "OUTPUT", key_value_message(name, text))
        else:
            self.stdout.write(f"{name}={escape_line(text)}\n")
            self.stdout.flush()

    def export_variable(self, name: str, value: str) -> None:
        if file := self.environ.get("GITHUB_ENV"):
            issue_file_command(file, "ENV", key_value_message(name, value))
        else:
            self.stdout.write(f"export {name}={value}\n")

    def add_path(self, path: str) -> None:
        if file := self.environ.get("GITHUB_PATH"):
            issue_file_command(file, "PATH", path)
        else:
            self.stdout.write(f"path {path}\n")

    # -- logging ----------------------------------------------------------------------
    def mask(self, secret: str) -> None:
        """Hide ``secret`` in the runner's log; redact it from all we write."""
        if not secret:
            return
        self._secrets.append(secret)
        if self.in_actions:
            issue_command("add-mask", {}, secret)

    def redact(self, text: str) -> str:
        return redact(text, self._secrets)

    def info(self, message: str) -> None:
        """One log line, redacted and escaped.

        It may quote an event or an API answer."""
        self.stdout.write(escape_line(self.redact(message)) + "\n")
        self.stdout.flush()

    def _annotate(self, kind: str, message: str, title: str | None) -> None:
        # core.error() always emits empty file=/line= properties; issue the same workflow
        # command with only the properties we have (escaping is the toolkit's).
        sys.stdout.flush()
        title = self.redact(title) if title else title
        issue_command(kind, {"title": title} if title else {}, self.redact(message))
        sys.stdout.flush()

    def error(self, message: str, title: str | None = None) -> None:
        self._annotate("error", message, title)

    def warning(self, message: str, title: str | None = None) -> None:
        self._annotate("warning", message, title)

    def notice(self, message: str, title: str | None = None) -> None:
        self._annotate("notice", message, title)

    # -- job summary ------------------------------------------------------------------
    def summary(self, markdown: str) -> None:
        """Queue Markdown for the job summary; written once by :meth:`flush_summary`."""
        self._summary.append(self.redact(markdown).rstrip("\n") + "\n")

    def flush_summary(self) -> None:
        if not self._summary:
            return
        text = "\n".join(self._summary)
        self._summary.clear()
        path = self.environ.get("GITHUB_STEP_SUMMARY")
        if path:
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(text + "\n")
        if not path or self.environ.get("GPU_CI_PRINT_SUMMARY") == "1":
            # Outside Actions (or when asked, e.g. by the local demo) show it in the log.
            sys.stderr.write(text + "\n")


def write_report(path: str | os.PathLike[str], text: str, *, what: str = "report-file") -> Path:
    """Write ``text`` to ``path`` atomically, never through a link planted at ``path``.

    Every command's report (JSON, CSV, Markdown) goes through here. The text goes to a fresh
    temporary name in the same directory (``mkstemp``: ``O_EXCL``, so no link planted at a
    predictable name is followed), then one ``rename`` puts it in place: a reader (the upload
    step) never sees half a file, and a link planted at ``path`` itself is replaced, not written
    through (rename acts on the name, not on what a link points to). A full or read-only disk
    leaves no temporary file and raises a :class:`GpuCiError` naming the input and the file.
    """
    target = Path(path)
    try:
        write_atomic(target, text)
    except OSError as exc:
        raise GpuCiError(
            f"cannot write {what} {target} ({exc.strerror or exc}): choose a "
            f"writable path for '{what}', e.g. under ${{{{ runner.temp }}}}.",
            title=what,
        ) from None
    return target


class Finding(Protocol):
    """What :func:`annotate_findings` needs of a wing's finding (cuda's and the monitor's)."""

    @property
    def level(self) -> str: ...
    @property
    def code(self) -> str: ...
    @property
    def message(self) -> str: ...


def annotate_findings(rt: Runtime, action: str, findings: Iterable[Finding]) -> None:
    """One annotation per finding: ``error``/``warning`` as such, anything else a notice.

    The message is ``[code] message`` (and `` Fix: ...`` where the finding has a ``fix``);
    the title is ``<action>: <code>``, so a reader of the checks page sees which action and
    which rule spoke.
    """
    for f in findings:
        fix = getattr(f, "fix", "")
        text = f"[{f.code}] {f.message}" + (f" Fix: {fix}" if fix else "")
        kind = f.level if f.level in ("error", "warning") else "notice"
        rt._annotate(kind, text, f"{action}: {f.code}")


def repository(
    value: str, environ: Mapping[str, str], *, input_name: str | None = "repository"
) -> str:
    """``owner/name`` from an input, else from ``GITHUB_REPOSITORY``.

    One rule for every action; ``input_name=None`` for an action that has no such input.

    Surrounding blanks are ignored; anything that is not exactly one ``/`` between two
    non-empty parts is a :class:`UsageError` naming where the value came from.
    """
    text = value.strip()
    source = f"input '{input_name}'"
    if not text:
        text, source = environ.get("GITHUB_REPOSITORY", "").strip(), "GITHUB_REPOSITORY"
    owner, _, name = text.partition("/")
    if not owner or not name or "/" in name:
        where = "is empty" if not text else f"is {text!r}"
        fix = (
            f"pass '{input_name}' as owner/name or set GITHUB_REPOSITORY"
            if input_name
            else "set GITHUB_REPOSITORY to owner/name (the runner does)"
        )
        raise UsageError(f"no repository: {source} {where}; {fix}.")
    return text
