"""Comment commands and trusted authors, as pure rules.

Comment commands (``/gpu-ci run <sha> [tier ...]``) and trusted authors, as pure rules.

A comment approves like a label: someone with ``min-permission`` states, in a comment on a
pull request, exactly the commit they reviewed. Three rules keep it as strict as a label:

* only a comment's ``created`` event approves: the text of an edited comment was not what
  its author wrote when they approved (and anyone who can edit it, can post a new one);
* the command is the comment's first line, so a quoted reply (``> /gpu-ci run ...``) or a
  command mentioned in prose approves nothing;
* the SHA is required and must be the pull request's head when the gate handles it; a
  short SHA (at least 7 hex digits) is matched as a prefix of the head, but only for a
  pull request from this repository: a fork's needs the full 40 digits, since its author
  could grind a commit with the same short prefix (about 2^28 tries for 7 digits).

Trusted authors run without an approval, but only for commits that are theirs: the head
commit's GitHub ``author`` and ``committer`` (the accounts GitHub links to the commit) must
both be the pull request's author, or ``web-flow`` as the committer (GitHub's own committer
for edits in its web interface), and the head branch must be in this repository or in a
fork the author owns (anyone may open a pull request from someone else's fork, whose owner
pushes to it). Anything else is an *untrusted push* and needs a label or a
comment. Git identities are only email addresses, which anyone may write into a commit, so
``trusted-authors-verified`` also requires GitHub's signature verification of that commit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_ci.errors import UsageError

DEFAULT_COMMAND = "/gpu-ci run"
#: GitHub's committer for commits made in its web interface (and signed by GitHub).
WEB_FLOW = "web-flow"
_SHA = re.compile(r"[0-9a-f]{7,40}")
_TIER = re.compile(r"[a-z0-9][a-z0-9_.-]*")


def parse_command_setting(value: str) -> str:
    """``comment-command``: empty or ``none`` turns comments off; otherwise a ``/`` word."""
    text = " ".join(value.split())
    if not text or text.casefold() == "none":
        return ""
    if not text.startswith("/") or len(text) < 2:
        raise UsageError(
            f"input 'comment-command' must start with '/' (e.g. '{DEFAULT_COMMAND}'), or be "
            f"empty or 'none' to turn comment commands off; got {value!r}."
        )
    return text


@dataclass(frozen=True)
class Tier:
    """A tier a command may name, and the runner kinds it selects."""

    name: str
    kinds: tuple[str, ...] = ()
    """Names of ``gpu-runner-kinds``; empty: the tier selects no kind of its own."""


def parse_tiers(items: Sequence[str]) -> tuple[str, ...]:
    """``tiers``: the words a command may name (lower case), without their kinds."""
    return tuple(tier.name for tier in parse_tier_specs(items))


def parse_tier_specs(items: Sequence[str]) -> tuple[Tier, ...]:
    """``tiers``: each entry a tier or ``tier: kind kind``.

    Entries are separated by commas or lines; words without a colon are tiers each. A tier
    named twice takes the kinds of both entries."""
    found: dict[str, list[str]] = {}
    for item in items:
        name, colon, rest = item.partition(":")
        words = [name.strip()] if colon else name.replace(",", " ").split()
        for word in (w.casefold() for w in words):
            if not _TIER.fullmatch(word) or _SHA.fullmatch(word):
                raise UsageError(
                    f"input 'tiers' lists {word!r}: a tier is one word of letters, digits, "
                    "'.', '_' or '-' that does not look like a commit SHA (e.g. mini, full), "
                    "optionally followed by ':' and the runner kinds it selects (mini: b200)."
                )
            kinds = found.setdefault(word, [])
            kinds += [k for k in rest.split() if k not in kinds] if colon else []
    return tuple(Tier(name, tuple(kinds)) for name, kinds in found.items())


@dataclass(frozen=True)
class Command:
    """A parsed command: ``sha`` empty when none was given; ``problem`` a refusal that needs
    no API call (an unknown tier, a word that is not a SHA)."""

    sha: str
    tiers: tuple[str, ...] = ()
    problem: str = ""


def parse_command(body: str, command: str, tiers: Sequence[str]) -> Command | None:
    """The command on the comment's first line, or None."""
    lines = [line.strip() for line in body.strip().splitlines()]
    first = lines[0] if lines else ""
    words = first.split()
    head = command.split()
    if [w.casefold() for w in words[: len(head)]] != [w.casefold() for w in head]:
        return None
    # tiers may be separated by commas as well as spaces: '/test mini,rocm'
    rest = " ".join(words[len(head) :]).replace(",", " ").split()
    words = words[: len(head)] + rest
    args = [w.casefold() for w in rest]
    shas = [i for i, w in enumerate(args) if w not in tiers and _SHA.fullmatch(w)]
    if not shas and (not args or args[0] in tiers):
        return Command(sha="", tiers=_known(args, tiers))
    if not shas:
        return Command(
            sha="",
            problem=(
                f"'{words[len(head)]}' is not a commit SHA: write '{command} <sha>' with the "
                "head commit you reviewed (at least 7 hex digits)."
            ),
        )
    # the SHA may come before the tiers or after them: '/test mini,rocm <sha>'
    sha = args[shas[0]]
    others = [w for i, w in enumerate(args) if i != shas[0]]
    unknown = [w for w in others if w not in tiers]
    if unknown:
        allowed = ", ".join(tiers) if tiers else "none are configured (input 'tiers')"
        what = "a second SHA" if _SHA.fullmatch(unknown[0]) else "unknown tier"
        return Command(
            sha=sha,
            problem=f"{what} '{unknown[0]}' in the command: the tiers are {allowed}.",
        )
    return Command(sha=sha, tiers=_known(others, tiers))


def _known(words: Sequence[str], tiers: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(w for w in words if w in tiers))


def matches_head(sha: str, head: str) -> bool:
    """Whether a stated SHA names the head.

    A stated SHA names the head when it is the head or a prefix of at least 7 digits."""
    return len(sha) >= 7 and len(head) == 40 and head.startswith(sha)


def foreign_head(pull: Mapping[str, Any], author: str) -> str:
    """Why the pull request's head branch (``GET /pulls/{n}``: ``head.repo``) is not one only
    its author (or this repository's writers) push to, or "" when it is: the base repository
    itself, or a fork the author owns. Anyone may open a pull request from a branch of
    *someone else's* fork, whose owner then pushes to it, and commit emails can be forged."""
    head = (pull.get("head") or {}).get("repo")
    base = ((pull.get("base") or {}).get("repo") or {}).get("full_name")
    if not isinstance(head, Mapping):
        return "the pull request's head repository is gone (a deleted fork): it needs an approval."
    name = str(head.get("full_name") or "")
    owner = str((head.get("owner") or {}).get("login") or "")
    if (name and name == base) or (owner and owner == author):
        return ""
    return (
        f"the head branch is in {name or 'a repository'}, owned by {owner or 'someone else'}, "
        f"not by {author}: whoever owns it can push there, so it needs an approval."
    )


def untrusted_push(commit: Mapping[str, Any], author: str, require_verified: bool) -> str:
    """Why the head commit is not the author's own push, or "".

    Why the head commit (``GET /repos/{o}/{r}/commits/{sha}``) is not the PR author's own,
    or "" when it is."""
    login = str((commit.get("author") or {}).get("login") or "")
    committer = str((commit.get("committer") or {}).get("login") or "")
    sha = str(commit.get("sha") or "")[:12]
    if login != author:
        return (
            f"the head {sha} is authored by {login or 'an email linked to no GitHub account'}, "
            f"not by the pull request's author {author}: an untrusted push needs an approval."
        )
    if committer not in (author, WEB_FLOW):
        return (
            f"the head {sha} was committed by {committer or 'an unlinked email'}, not by "
            f"{author}: an untrusted push needs an approval."
        )
    verification = (commit.get("commit") or {}).get("verification") or {}
    if require_verified and verification.get("verified") is not True:
        why = str(verification.get("reason") or "unsigned")
        return (
            f"trusted-authors-verified is true and the head {sha} is not verified ({why}): "
            "sign the commit, or have a maintainer approve it."
        )
    return ""
