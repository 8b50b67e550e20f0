"""The one escaping rule for the Markdown of job summaries and tables.

Text that comes from an API answer or an event (a job or runner name, a label, a process
name, GitHub's own error message, the gate's reason) is chosen by whoever wrote the
workflow file or the code the job ran, a fork's included, and it lands in summaries that a
maintainer reads in the base repository. So it is shown as text, never as markup: no link
or image (``[`` and ``]`` as entities), no HTML (``<`` and ``>`` as entities), no
character reference (``&`` as ``&amp;``: cmark-gfm decodes ``&#64;`` to ``@`` before its
autolinks and GitHub's mentions look), no table syntax (``|`` escaped, line breaks as
``<br>``). What this package writes as Markdown on
purpose (a link to a run, bold) is a :class:`Markdown` value, which the table leaves alone.

A root module rather than part of :mod:`gpu_ci.runtime`, because the wings (gpu-monitor's
report, in :mod:`gpu_ci.cuda`) build tables too and must not import the runner's edge;
:mod:`gpu_ci.runtime` re-exports :func:`markdown_table`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

_BREAK = re.compile(r"\r\n|[\r\n\u2028\u2029]")
_SPECIAL = {
    "&": "&amp;",
    "\\": "\\\\",
    "|": "\\|",
    "<": "&lt;",
    ">": "&gt;",
    "[": "&#91;",
    "]": "&#93;",
}
_SPECIAL_RE = re.compile("|".join(re.escape(c) for c in _SPECIAL))
#: Where GitHub's Markdown (cmark-gfm's autolink extension) would start a link in plain
#: text: a scheme before ``:``, ``www.``, an e-mail's ``@``. A word joiner (U+2060) there
#: keeps the text as it reads and makes no link. No word boundary is asked for: cmark-gfm
#: starts a scheme after any non-letter (``1https://``, ``_https://``) and ``www.`` after
#: ``_``.
_AUTOLINK = re.compile(r"(?i)(?:https?|ftp|mailto|xmpp)(?=:)|www(?=\.)|(?<=[\w.+-])@(?=[\w-])")


class Markdown(str):
    """Markdown this package wrote on purpose.

    Text quoted inside it went through :func:`escape`. :func:`markdown_table` puts it into a
    cell as it is."""


def escape(value: object) -> str:
    """``value`` as text in Markdown: links, images, HTML and table syntax shown as written.

    Backslash, pipe, angle brackets and square brackets are escaped (brackets and angle
    brackets as entities, which CommonMark never reads as structure); ``&`` is ``&amp;``, so
    that no character reference in the text (``&#64;``, ``&commat;``) is decoded into an
    ``@`` or a scheme that then links or mentions; a line break becomes
    ``<br>`` (the line, or the table row, stays one). A bare URL, ``www.`` name or e-mail
    address is no autolink (a word joiner after its scheme, ``www`` or ``@``). Emphasis and
    code spans are left: they cannot point anywhere.
    """
    text = "" if value is None else str(value)
    if isinstance(value, Markdown):
        return text
    text = _AUTOLINK.sub(lambda m: m.group(0) + "\u2060", text)
    text = _SPECIAL_RE.sub(lambda m: _SPECIAL[m.group(0)], text)
    return _BREAK.sub("<br>", text)


def code(value: object) -> Markdown:
    """``value`` as a code span, safe in a table cell.

    A code span shows its text as written, so no entity and no word joiner goes in: a URL
    in it copies whole and links nowhere. The fence outruns any backtick run inside; a
    pipe is escaped (GitHub's tables split cells on it even in code); line breaks become
    spaces.
    """
    text = _BREAK.sub(" ", "" if value is None else str(value)).replace("|", "\\|")
    run = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (run + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return Markdown(f"{fence}{pad}{text}{pad}{fence}")


#: A URL that may be a link's target: http(s), no space and nothing Markdown reads.
_LINKABLE = re.compile(r"https?://[^\s<>()\[\]`]{1,2000}")


def linkable(url: str) -> bool:
    """Whether ``url`` may be a link's target."""
    return _LINKABLE.fullmatch(url) is not None


def link(text: str, url: str) -> Markdown:
    """A link to ``url`` labelled ``text``.

    Plain text where ``url`` is not linkable."""
    if linkable(url):
        return Markdown(f"[{escape(text)}]({url})")
    return Markdown(f"{escape(text)} {escape(url)}".strip())


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub-flavoured Markdown table, every cell escaped.

    Each cell goes through :func:`escape`; a :class:`Markdown` cell goes as it is."""
    lines = [
        "| " + " | ".join(escape(h) for h in headers) + " |",
        "|" + "|".join("---" for _ in headers) + "|",
    ]
    lines.extend("| " + " | ".join(escape(c) for c in row) + " |" for row in rows)
    return "\n".join(lines) + "\n"
