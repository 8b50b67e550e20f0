"""The approval record: its wordings, and its reading from a head's statuses.

The rules are in :mod:`gpu_ci.github.approval`; how runs bind to the record is in
:mod:`gpu_ci.github.approval.runs`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol
from urllib.parse import parse_qs, quote, urlsplit

from gpu_ci.github.commit_status import (
    DEFAULT_CONTEXT,
    DEFAULT_CREATORS,
    same_context,
    short,
)

#: How long before the approval status its run may have been created: the label event
#: creates the run, then the privileged job (queued, bootstrapped) posts the approval.
APPROVAL_LAG = timedelta(minutes=30)
#: Tolerance for a run created just after the approval status (one GitHub event, two clocks).
CLOCK_SLACK = timedelta(seconds=60)
IN_PROGRESS = "GPU run in progress"
#: How gpu-watchdog's status for a run it re-ran begins (:func:`retried_text` writes it).
RETRIED_PREFIX = "GPU run retried after the "
#: How an approval came about (gpu-gate's ``approval`` output says the same words). In
#: the commit status a trusted author's own head reads as a label's.
HOW_LABEL = "label"
HOW_COMMENT = "comment"
HOW_TRUSTED_AUTHOR = "trusted-author"

_LOGIN = r"[A-Za-z0-9][A-Za-z0-9-]*(?:\[bot\])?"
_APPROVER = re.compile(rf"[Aa]pproved by @({_LOGIN})")
#: The approval itself, as :func:`queued_text` writes it.
_APPROVAL = re.compile(rf"Approved by @({_LOGIN}) for [0-9a-f]{{12}}: GPU run queued\.")
#: A comment approval's record, as :func:`comment_text` writes it.
_COMMENT_RECORD = re.compile(
    rf"Approved by @({_LOGIN}) on #(\d+) for ([0-9a-f]{{12}}) by comment: GPU run in progress\."
)
_RUN_URL = re.compile(r"/actions/runs/(\d+)(?:/attempts/(\d+))?/?$")
_PULL_URL = re.compile(r"/pull/(\d+)(?:/|$)")
#: How gpu-status's status begins when the approved pull request closes (:func:`ended_text`).
ENDED_PREFIX = "Approval ended: "
#: The query parameter of an approval's link that names the workflow files it covers.
COVERS = "gpu-ci-covers"
WORKFLOWS_DIR = ".github/workflows/"
#: A workflow file's name in a covered list: GitHub reads no folders below WORKFLOWS_DIR,
#: and the list is comma-separated.
_WORKFLOW_FILE = re.compile(r"[^/\\,]+\.ya?ml")
#: The wordings that end older approvals: gpu-status's "waiting" (a push, a reopening) and
#: its "ended" (the approved pull request closed).
REVOKED = ("Waiting for approval", "New push (was ", ENDED_PREFIX)


class Reads(Protocol):
    """Where approvals are read: a status context and its trusted writers."""

    @property
    def context(self) -> str: ...

    @property
    def creators(self) -> tuple[str, ...]: ...

    @property
    def relays(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class Source:
    """The context and trusted creators a feature reads approvals from."""

    context: str = DEFAULT_CONTEXT
    creators: tuple[str, ...] = DEFAULT_CREATORS
    relays: tuple[str, ...] = ()
    """Accounts whose label relays a comment approval: the run they start is the approver's."""


def approval_config(
    context: str = DEFAULT_CONTEXT,
    creators: Sequence[str] = DEFAULT_CREATORS,
    relays: Sequence[str] = (),
) -> Source:
    """Where the budget and the watchdog read approvals (gpu-status's defaults)."""
    return Source(context, tuple(creators) or DEFAULT_CREATORS, tuple(r for r in relays if r))


@dataclass(frozen=True)
class Approval:
    """One maintainer's approval of one commit of one pull request."""

    repository: str
    number: int | None
    """The pull request it names; None when its status links to none."""
    head_sha: str
    approver: str
    how: str
    """:data:`HOW_LABEL` (a label, or a trusted author's own head) or :data:`HOW_COMMENT`."""
    created_at: str
    status: Mapping[str, Any] = field(compare=False, repr=False)
    """The commit status it was read from."""
    workflows: tuple[str, ...] = ()
    """The GPU workflow files it covers, from its own link (rule 6); () for a comment's."""
    runs: tuple[tuple[int, int], ...] = ()
    """The runs it started, oldest first, as (run id, attempt) from the records above it.

    The first one claimed it; a comment approval's own record names its run."""


# -- writing the wordings ----------------------------------------------------------------


def queued_text(approver: str, sha: str) -> str:
    """The approval's description, as gpu-status posts it after the gate."""
    return f"Approved by @{approver} for {short(sha)}: GPU run queued."


def comment_text(approver: str, number: int, sha: str) -> str:
    """A comment approval's record, as the comment workflow's status job posts it."""
    return f"Approved by @{approver} on #{number} for {short(sha)} by comment: {IN_PROGRESS}."


def is_workflow_file(name: str) -> bool:
    """Whether ``name`` can be named in an approval's covered list."""
    return _WORKFLOW_FILE.fullmatch(name) is not None


def approval_link(pull_url: str, workflows: Sequence[str]) -> str:
    """The approval's link: its pull request's page, naming the files it covers (rule 6)."""
    names = [w[len(WORKFLOWS_DIR) :] if w.startswith(WORKFLOWS_DIR) else w for w in workflows]
    bad = [n for n in names if not _WORKFLOW_FILE.fullmatch(n)]
    if bad or not names:
        raise ValueError(f"not a GPU workflow file under {WORKFLOWS_DIR}: {bad or names}")
    return f"{pull_url}?{COVERS}={quote(','.join(names), safe=',')}"


def covered(status: Mapping[str, Any]) -> tuple[str, ...]:
    """The workflow files an approval's link names (rule 6).

    () when it names none."""
    query = parse_qs(urlsplit(str(status.get("target_url") or "")).query)
    values = query.get(COVERS) or []
    if len(values) != 1:
        return ()  # none, or two lists: which one counts is anyone's guess
    names = values[0].split(",")
    if not all(_WORKFLOW_FILE.fullmatch(n) for n in names):
        return ()
    return tuple(WORKFLOWS_DIR + n for n in names)


def ended_text(number: int) -> str:
    """gpu-status's status when pull request ``number``, the approved one, closes."""
    return (
        f"{ENDED_PREFIX}#{number} was closed. A pull request at this commit needs its own approval."
    )


def retried_text(what: str, attempt: int, reason: str) -> str:
    """gpu-watchdog's record of its re-run of ``attempt``.

    The new attempt is ``attempt + 1``."""
    return f"{RETRIED_PREFIX}{what} was lost (attempt {attempt + 1}); attempt {attempt}: {reason}"


# -- reading the statuses ----------------------------------------------------------------


def trusted_statuses(config: Reads, statuses: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The statuses of ``context`` the trusted creators wrote (newest first).

    Another writer's status in our context is as if it were not there (a null creator too):
    a CI app a pull request can steer could plant an "Approved by" or a result."""
    return [
        s
        for s in statuses
        if same_context(s.get("context"), config.context)
        and str((s.get("creator") or {}).get("login") or "") in config.creators
    ]


def run_key(target_url: str) -> tuple[int, int] | None:
    """The run id and attempt a status's link names, or None."""
    match = _RUN_URL.search(target_url)
    return (int(match.group(1)), int(match.group(2) or 1)) if match else None


def run_link(run: Mapping[str, Any]) -> str:
    """The link every status written for a run carries: it records the run id and attempt."""
    url = str(run.get("html_url") or "").rstrip("/")
    return f"{url}/attempts/{attempt_of(run)}" if url else ""


def attempt_of(run: Mapping[str, Any]) -> int:
    """The run's attempt number (1 when GitHub's answer has none that reads)."""
    try:
        return int(run.get("run_attempt") or 1)
    except (TypeError, ValueError):
        return 1


def key_of(run: Mapping[str, Any]) -> tuple[int, int] | None:
    """The run id and attempt of a run, as links name them."""
    try:
        return int(run.get("id") or 0), attempt_of(run)
    except (TypeError, ValueError):
        return None


def pull_of(status: Mapping[str, Any]) -> int | None:
    """The pull request a status links to, or None.

    Approvals and "waiting" statuses link to theirs."""
    match = _PULL_URL.search(str(status.get("target_url") or ""))
    return int(match.group(1)) if match else None


def approval_of(statuses: Sequence[Mapping[str, Any]], context: str) -> str:
    """The newest approver among a commit's statuses, or "".

    The login of the newest "Approved by" among a commit's statuses (newest first).

    Results that name their approver count too. A newer "waiting" ends it. The match is
    anchored to our own wordings, so that a refusal quoting text cannot read as one."""
    for status in statuses:
        if not same_context(status.get("context"), context):
            continue
        text = str(status.get("description") or "")
        if text.startswith(REVOKED):
            return ""  # a newer push (or reopening) of this very commit asks again
        match = (
            _APPROVER.match(text)
            if text.startswith("Approved")
            else (_APPROVER.search(text) if text.startswith(("GPU tests ", "GPU run ")) else None)
        )
        if match:
            return match.group(1)
    return ""


def _newest(
    statuses: Sequence[Mapping[str, Any]], context: str
) -> tuple[int, Mapping[str, Any]] | None:
    """The one rule: the commit's current approval status of ``context``, and its index.

    ``statuses`` newest first. The newest label approval or comment record, unless a
    newer "waiting" or "ended" status ended it. None when there is none."""
    ours = [s for s in statuses if same_context(s.get("context"), context)]
    for index, status in enumerate(ours):
        text = str(status.get("description") or "")
        if text.startswith(REVOKED):
            return None
        if _APPROVAL.fullmatch(text) or _COMMENT_RECORD.fullmatch(text):
            return index, status
    return None


def approval_status(
    statuses: Sequence[Mapping[str, Any]], context: str
) -> Mapping[str, Any] | None:
    """The commit's current label approval status (newest first), or None.

    That is the current approval (:func:`_newest`) when it is a label's: a newer comment
    approval replaces it (its run, not a ``pull_request`` run, reports)."""
    found = _newest(statuses, context)
    return found[1] if found is not None and is_approval(found[1]) else None


def comment_pull(statuses: Sequence[Mapping[str, Any]], context: str) -> int | None:
    """The pull request of the commit's current comment approval, or None.

    ``statuses`` newest first; a newer "waiting", "ended" or label approval ends it."""
    found = _newest(statuses, context)
    record = comment_record(found[1]) if found is not None else None
    return record[1] if record is not None else None


def comment_record(status: Mapping[str, Any] | None) -> tuple[str, int, str] | None:
    """(approver, pull request, short sha) of a comment approval's record, else None."""
    match = _COMMENT_RECORD.fullmatch(str((status or {}).get("description") or ""))
    return (match.group(1), int(match.group(2)), match.group(3)) if match else None


def is_approval(status: Mapping[str, Any]) -> bool:
    """Whether ``status`` is a label approval's own wording."""
    return _APPROVAL.fullmatch(str(status.get("description") or "")) is not None


def current(
    config: Reads,
    statuses: Sequence[Mapping[str, Any]],
    head_sha: str,
    repository: str = "",
) -> Approval | None:
    """The head's current approval, by label or by comment, as an :class:`Approval`.

    A newer "waiting" or "ended" status ends it; the runs recorded above it are its runs."""
    trusted = trusted_statuses(config, statuses)
    found = _newest(trusted, config.context)
    if found is None:
        return None
    index, status = found
    comment = comment_record(status)
    records = trusted[: index + 1] if comment else trusted[:index]
    keys = [run_key(str(s.get("target_url") or "")) for s in reversed(records)]
    return Approval(
        repository,
        comment[1] if comment else pull_of(status),
        head_sha,
        comment[0] if comment else approver_of(status),
        HOW_COMMENT if comment else HOW_LABEL,
        str(status.get("created_at") or ""),
        status,
        () if comment else covered(status),
        tuple(dict.fromkeys(k for k in keys if k is not None)),
    )


def approver_of(status: Mapping[str, Any]) -> str:
    """The approver a label approval's own wording names, or ""."""
    match = _APPROVAL.fullmatch(str(status.get("description") or ""))
    return match.group(1) if match else ""


# -- the readings each feature uses --------------------------------------------------------


def approved_pull(config: Reads, statuses: Sequence[Mapping[str, Any]]) -> int | None:
    """gpu-status's PR comment: the pull request the current label approval names."""
    found = current(config, statuses, "")
    return found.number if found is not None and found.how == HOW_LABEL else None


def claimed_by(approval: Approval, run_id: int) -> str:
    """Why run ``run_id`` is not one of the approval's runs, or "".

    Only when runs are recorded above it (rule 3); the first one claimed it, and a
    re-run of it (any attempt) is still that run."""
    ids = [run for run, _attempt in approval.runs]
    if run_id in ids:
        return ""
    return (
        f"the approval started run {ids[0]} (its record on the head) and ends with that "
        f"run's results; run {run_id} is another run at this head."
    )


def open_at_head(found: Approval, pull: Mapping[str, Any]) -> str:
    """Why the approved pull request is not open at its approved head.

    Empty when it is. ``pull``: GitHub's record of pull request ``found.number``."""
    head = str((pull.get("head") or {}).get("sha") or "")
    if (pull.get("number"), pull.get("state"), head) == (found.number, "open", found.head_sha):
        return ""
    return (
        f"#{found.number} is {pull.get('state')} at {short(head)}; the approval was of "
        f"{short(found.head_sha)} while it was open."
    )


def not_covered(found: Approval, path: str) -> str:
    """Why the approval does not cover workflow file ``path`` (rule 6).

    Empty when it does."""
    if path in found.workflows:
        return ""
    return (
        f"{path or '(no file)'} is not a GPU workflow file the approval of "
        f"{short(found.head_sha)} covers ({', '.join(found.workflows) or 'none'})."
    )
