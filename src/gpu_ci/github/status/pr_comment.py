"""The pull request comment that explains the GPU CI state.

There is one per pull request, edited in place.

A commit status is terse (140 characters) and hidden in the checks list; contributors without
a GPU ask "when does this run, and how do I test it myself?". So gpu-status (``comment:
true``) keeps one comment per pull request: the "GPU CI" state of the current head, how a
maintainer approves a run (the label, or ``/gpu-ci run <sha>``), and the maintainer's own help
text (e.g. a Colab link). It is written only by the inert privileged workflows, the ones that
already post the status.

Trust, and why each rule is here:

* **Which comment is ours.** The one whose body starts with our marker *and* whose author is
  one of the ``authors`` (gpu-status's ``trusted-creators``: the identity the inert workflows'
  token writes as, ``github-actions[bot]`` by default). Anyone can post a comment containing the
  marker; a write token may edit anyone's comment, so a marker alone would let a contributor
  have their comment rewritten (or deleted on close) by our token. Theirs is never touched.
* **All pages.** Comments are listed 100 a page up to :data:`MAX_COMMENTS`; a long discussion
  must not hide ours on page 2 and make us post a second one.
* **One comment.** Two events handled at once may both find none and both create one: after
  creating, the list is read again and every newer comment of ours is deleted (the oldest
  stays, edited to this body); both may delete the same duplicate, so a 404 there is fine.
* **Text from the pull request is text.** The state's description (it quotes the gate's reason,
  job names, logins) goes through :func:`gpu_ci.markdown.escape` (no link, image, HTML or
  marker), and an ``@`` in it is followed by a word joiner (U+2060), so that a login is not
  written as a mention that each edit could notify. The maintainer's help text is theirs
  (from the workflow file on the default branch) and stays Markdown.
* **At most 65,536 characters** (GitHub's 422 beyond): the help text is limited up front, and
  :func:`render` never returns a longer body.

On close (``comment-on-close``): ``keep`` leaves the comment, ``collapse`` edits it to one
short "closed" line (the marker stays, so a reopened pull request gets the same comment back),
``delete`` deletes it. REST only, on purpose: GraphQL's ``minimizeComment`` would fold the
comment too, but it needs a second API (and its own test server) for what one edit does, and a
folded comment stays folded when the pull request is reopened.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

from gpu_ci.errors import GpuCiError, UsageError
from gpu_ci.github.client import ApiError
from gpu_ci.github.comment import DEFAULT_COMMAND, parse_command_setting
from gpu_ci.markdown import escape, link, linkable

#: GitHub's limit of an issue comment's body (422 "body is too long (maximum is 65536
#: characters)").
BODY_LIMIT = 65536
#: The longest ``comment-help``: the rest of the body (state, approval, marker) fits in what
#: is left, whatever the event says.
HELP_LIMIT = 60000
COMMAND_LIMIT = 100
ON_CLOSE = ("keep", "collapse", "delete")
#: How many comments of a pull request are read to find ours (100 pages of 100).
MAX_COMMENTS = 10000
_STATE_WORDS = {
    "pending": "⏳ pending",
    "success": "✅ passed",
    "failure": "❌ failed",
    "error": "⚠️ error",
}


@dataclass(frozen=True)
class CommentConfig:
    """What every comment of one gpu-status configuration says and who writes it."""

    context: str
    label: str
    min_permission: str
    command: str
    """The comment command a maintainer writes before the SHA; empty: label only."""
    help: str
    on_close: str
    authors: tuple[str, ...]

    @property
    def marker(self) -> str:
        """The comment's hidden first line, which marks it as ours.

        The hidden first line; the context (percent-encoded, so never ``-->``) keeps the
        comments of two gpu-status configurations apart."""
        return f"<!-- gpu-ci:status context={quote(self.context, safe='')} -->"


@dataclass(frozen=True)
class Shown:
    """The state the comment shows: the latest status of the pull request's head."""

    number: int
    sha: str
    state: str = ""
    """pending, success, failure, error; empty when the head has no status yet."""
    description: str = ""
    target_url: str = ""


@dataclass(frozen=True)
class Result:
    """What :func:`sync` did: created, updated, unchanged, deleted, none."""

    action: str
    comment_id: int | None
    note: str


class CommentRest(Protocol):
    """The calls :func:`sync` makes (:class:`gpu_ci.github.client.RestClient`)."""

    def get_pages(self, path: str, *, key: str | None = None, limit: int = 3000) -> list[Any]: ...

    def post(self, path: str, body: dict[str, Any] | None = None) -> object: ...

    def patch(self, path: str, body: dict[str, Any]) -> object: ...

    def delete(self, path: str) -> object: ...


def command_text(value: str) -> str:
    """``comment-command``: gpu-gate's rule first (``comment.parse_command_setting``: empty
    or ``none`` means label only, else a ``/`` word), so gpu-status never advertises a
    command the gate refuses; then what the comment can show (one line, no backticks)."""
    text = parse_command_setting(value)
    if not text:
        return ""
    if len(text) > COMMAND_LIMIT or "`" in text or "\n" in value.strip() or "\r" in value:
        raise UsageError(
            f"input 'comment-command' is '{text[:40]}': give one line of at most "
            f"{COMMAND_LIMIT} characters without backticks (e.g. '{DEFAULT_COMMAND}'), or "
            "'none' for label approvals only."
        )
    return text


def on_close_choice(value: str) -> str:
    choice = value.strip().casefold() or "keep"
    if choice not in ON_CLOSE:
        raise UsageError(
            f"input 'comment-on-close' is '{value}': give keep (leave the comment), collapse "
            "(edit it to one 'closed' line) or delete."
        )
    return choice


def make_config(
    context: str,
    label: str,
    min_permission: str,
    command: str,
    help_text: str,
    on_close: str,
    authors: Sequence[str],
) -> CommentConfig:
    if len(help_text) > HELP_LIMIT:
        raise UsageError(
            f"input 'comment-help' is {len(help_text)} characters long; at most {HELP_LIMIT} "
            f"fit in a comment (GitHub refuses bodies over {BODY_LIMIT}): link to a longer "
            "text instead."
        )
    return CommentConfig(
        context,
        label,
        min_permission,
        command_text(command),
        help_text.strip(),
        on_close_choice(on_close),
        tuple(authors),
    )


#: Where GitHub links an issue reference after rendering: ``#1``, ``GH-1``, ``org/repo#1``.
_REFERENCE = re.compile(r"(?i)(?:(?<!&)#|\bgh-)(?=\d)")  # not an entity's &#91;
#: A run of hex digits GitHub may link as a commit (7 or more), whatever stands around it.
_HEX_RUN = re.compile(r"[0-9a-f]{7,}", re.IGNORECASE)


def _text(value: object) -> str:
    """Quoted text as text: :func:`escape`, no mention, issue or commit reference.

    GitHub links ``@login``, ``#1``, ``GH-1``, ``org/repo#1`` and a commit's SHA in a
    comment after rendering; a word joiner after ``@``, ``#``, ``GH-`` and every 6th hex
    digit of a run keeps the text and the link out."""
    text = escape(value).replace("@", "@\u2060")
    text = _REFERENCE.sub(lambda m: m.group(0) + "\u2060", text)
    return _HEX_RUN.sub(lambda m: _every_six(m.group(0)), text)


def _every_six(run: str) -> str:
    """``run`` with a word joiner after every 6th digit: no 7 in a row are left."""
    return "\u2060".join(run[i : i + 6] for i in range(0, len(run), 6))


def _code(value: str) -> str:
    """``value`` as a code span, fenced past its own backticks.

    The fence is longer than any backtick run in it."""
    run = max((len(m) for m in re.findall(r"`+", value)), default=0)
    fence = "`" * (run + 1)
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def _state_line(config: CommentConfig, shown: Shown) -> str:
    head = f"`{shown.sha[:12]}`" if len(shown.sha) >= 12 else "the head"
    if not shown.state:
        return f"**{_text(config.context)}** on {head}: no status yet."
    word = _STATE_WORDS.get(shown.state, _text(shown.state))
    line = f"**{_text(config.context)}** on {head}: {word}: {_text(shown.description)}"
    if linkable(shown.target_url):
        line += f" ({link('details', shown.target_url)})"
    return line


def _approval(config: CommentConfig, shown: Shown) -> str:
    who = f"someone with {_text(config.min_permission)} access or higher"
    how = f"applies the label {_code(config.label)}"
    if config.command:
        how += (
            f", or comments {_code(f'{config.command} {shown.sha}')} (the full SHA of "
            "the commit they reviewed)"
        )
    return (
        f"**To run the GPU tests** {who} {how}. An approval is for one commit: every push "
        "needs a new one."
    )


def render(config: CommentConfig, shown: Shown) -> str:
    """The comment's body; never over :data:`BODY_LIMIT` (the help text is cut first)."""
    head = [
        config.marker,
        "### GPU CI",
        "",
        _state_line(config, shown),
        "",
        _approval(config, shown),
    ]
    foot = [
        "",
        "<sub>Updated in place by gpu-status on every change of the state; it never runs "
        "code of this pull request.</sub>",
    ]
    fixed = "\n".join(head + foot)
    help_text = config.help
    room = BODY_LIMIT - len(fixed) - 2
    if help_text and len(help_text) > room:
        help_text = help_text[: max(room - 1, 0)] + "…"
    body = "\n".join(head + (["", help_text] if help_text else []) + foot)
    return body[:BODY_LIMIT]


def render_closed(config: CommentConfig, number: int, merged: bool) -> str:
    what = "merged" if merged else "closed"
    return (
        f"{config.marker}\n**{_text(config.context)}**: pull request #{number} was {what}; "
        "this comment is kept short (the commit statuses keep the history)."
    )


def is_ours(config: CommentConfig, comment: Mapping[str, Any]) -> bool:
    """Whether ``comment`` is the one this action keeps.

    Written by one of the authors and starting with the marker (a comment of anyone else
    that quotes the marker is not ours, whatever it says)."""
    login = str((comment.get("user") or {}).get("login") or "")
    return login in config.authors and str(comment.get("body") or "").startswith(config.marker)


def ours(config: CommentConfig, comments: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Our comments, oldest first (GitHub lists a thread's comments by ascending id)."""
    return sorted((c for c in comments if is_ours(config, c)), key=lambda c: int(c["id"]))


def _check_author(
    rest: CommentRest, config: CommentConfig, repository: str, created: Mapping[str, Any]
) -> None:
    """Check that the comment just created counts as ours.

    The comment just created must count as ours, or every event would create another:
    the token writes as someone not in ``trusted-creators``. Take it back and say so."""
    login = str((created.get("user") or {}).get("login") or "")
    if login in config.authors:
        return
    if created.get("id"):
        rest.delete(f"/repos/{repository}/issues/comments/{int(created['id'])}")
    raise GpuCiError(
        f"the token writes comments as @{login or '(unknown)'}, which is not among "
        f"trusted-creators ({', '.join(config.authors)}): gpu-status would not find its own "
        "comment again and post one per event. Name that login in 'trusted-creators' (its "
        "statuses count then too), or use the workflow's GITHUB_TOKEN.",
        title="comment author not trusted",
    )


def _delete(rest: CommentRest, repository: str, comment_id: int) -> None:
    """Delete one of ours; already gone (404: another event at once removed the same
    duplicate) is what was wanted, not an error."""
    try:
        rest.delete(f"/repos/{repository}/issues/comments/{comment_id}")
    except ApiError as exc:
        if exc.status != 404:
            raise


def _listed(rest: CommentRest, repository: str, number: int) -> list[Any]:
    return rest.get_pages(f"/repos/{repository}/issues/{number}/comments", limit=MAX_COMMENTS)


def sync(
    rest: CommentRest,
    config: CommentConfig,
    repository: str,
    number: int,
    body: str | None,
    *,
    create: bool = True,
) -> Result:
    """Make the pull request's one comment say ``body`` (None: delete it). Creates it when
    there is none (unless ``create`` is false: a "closed" line is only ever an edit), edits it
    when it says something else, and removes duplicates of ours."""
    mine = ours(config, _listed(rest, repository, number))
    if body is None:
        for comment in mine:
            _delete(rest, repository, int(comment["id"]))
        return Result("deleted" if mine else "none", None, f"{len(mine)} comment(s) deleted.")
    if not mine and not create:
        return Result("none", None, "no comment of ours to edit.")
    if not mine:
        created = rest.post(f"/repos/{repository}/issues/{number}/comments", {"body": body})
        made = created if isinstance(created, dict) else {}
        _check_author(rest, config, repository, made)
        mine = ours(config, _listed(rest, repository, number))  # another event's at once?
        if len(mine) <= 1:
            return Result("created", int(made.get("id") or 0) or None, "comment created.")
    keep, extra = mine[0], mine[1:]
    for comment in extra:
        _delete(rest, repository, int(comment["id"]))
    if str(keep.get("body") or "") == body:
        return Result("unchanged", int(keep["id"]), "comment already says this.")
    rest.patch(f"/repos/{repository}/issues/comments/{int(keep['id'])}", {"body": body})
    return Result("updated", int(keep["id"]), f"comment edited ({len(extra)} duplicate(s) gone).")
