"""A maintainer's approval of one commit, and every reading of it.

gpu-status writes an approval as a commit status on the pull request's head; the gate,
gpu-status, the budget, gpu-watchdog and the runner admission hook read it. Each feature
reads approvals only here, and one walk of the statuses (rules 1, 4, 5) finds the current
approval for all of them. What each then asks of it:

* :func:`current` (the runner admission hook, gpu-watchdog, the PR comment): the head's
  approval as one :class:`Approval` record (its pull request, approver, how, covered
  workflow files, the runs recorded above it, when); :func:`claimed_by` and :func:`starts`
  say whether a job's run is one it started.
* :func:`approved_run` (the budget): the run the head's current approval started, and
  still holds it (its record is the newest status).
* :func:`result_binding` (gpu-status's results): the same binding, and which retry record
  a retried attempt reports over.
* :func:`watchdog_hold` (gpu-watchdog's retry): a current approval whose approver started
  the run; the caller then checks that the pull request is still open at that head.
* :func:`approved_pull` (gpu-status's PR comment): the pull request the approval names.

The status rules, on the head commit:

1. **The approval** is the newest "Approved by @x for <sha>: GPU run queued." status of
   the head, written by a trusted creator, not ended (rule 4) nor replaced by a newer
   comment approval. Its ``target_url`` names the pull
   request; its ``created_at`` the time.
2. **A run is the approval's run** when its event is ``pull_request``, its file is one the
   approval covers (rule 6), its triggering actor is the approver (a re-run: its first
   actor is), it was created in ``[approval - APPROVAL_LAG, approval + CLOCK_SLACK]``, no
   older approval was posted after it was created, and, when GitHub lists its pull
   requests, the approved one is among them. A later attempt is a re-run of it (rule 7).
3. **The first bound run claims the approval**: its "in progress" record is written above
   the approval, so a second run holds nothing.
4. **An approval ends** with a newer "waiting" (a new push, a reopening) or "ended" status
   (gpu-status posts it when the approved pull request closes): another pull request at
   the same commit needs its own approval. For new runs it also ends once a run claimed it
   (rule 3): only that run, and re-runs of it, are the approval's.
5. **A comment approval** is the record "Approved by @x on #n for <sha> by comment: GPU
   run in progress.", linking the comment workflow's own run. It is also a newer approval:
   a ``pull_request`` run never binds to a label approval below it.
6. **What it covers.** A label approval's link names its pull request and, in its query
   (``?gpu-ci-covers=cuda-ci.yml``), the GPU workflow files it covers: gpu-status writes
   both from its own inputs, and only the trusted creators' statuses count, so a pull
   request's code can forge neither. A link without that list covers nothing.
7. **A re-run** (a later attempt of the approval's recorded run) is the approval's when
   gpu-watchdog's "retried" record of exactly that attempt lies above the approval and a
   trusted creator started it, or when someone with the re-run role pressed "Re-run" and
   the pull request is still open at the approved head (:func:`rerun_refusal`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol
from urllib.parse import parse_qs, quote, urlsplit

from gpu_ci.github.commit_status import (
    DEFAULT_CONTEXT,
    DEFAULT_CREATORS,
    latest_of,
    same_context,
    short,
)
from gpu_ci.github.jobs import parse_time

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
_WORKFLOW_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\.ya?ml")
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


def approval_link(pull_url: str, workflows: Sequence[str]) -> str:
    """The approval's link: its pull request's page, naming the files it covers (rule 6)."""
    names = [w[len(WORKFLOWS_DIR) :] if w.startswith(WORKFLOWS_DIR) else w for w in workflows]
    bad = [n for n in names if not _WORKFLOW_FILE.fullmatch(n)]
    if bad or not names:
        raise ValueError(f"not a GPU workflow file under {WORKFLOWS_DIR}: {bad or names}")
    return f"{pull_url}?{COVERS}={quote(','.join(names), safe=',')}"


def covered(status: Mapping[str, Any]) -> tuple[str, ...]:
    """The workflow files an approval's link names (rule 6); () when it names none."""
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
        comment[0] if comment else _approver(status),
        HOW_COMMENT if comment else HOW_LABEL,
        str(status.get("created_at") or ""),
        status,
        () if comment else covered(status),
        tuple(dict.fromkeys(k for k in keys if k is not None)),
    )


def _approver(status: Mapping[str, Any]) -> str:
    match = _APPROVAL.fullmatch(str(status.get("description") or ""))
    return match.group(1) if match else ""


# -- the readings each feature uses --------------------------------------------------------


def approved_pull(config: Reads, statuses: Sequence[Mapping[str, Any]]) -> int | None:
    """gpu-status's PR comment: the pull request the current label approval names."""
    found = current(config, statuses, "")
    return found.number if found is not None and found.how == HOW_LABEL else None


def _binds(
    run: Mapping[str, Any],
    approval: Mapping[str, Any],
    approver: str,
    earlier: Sequence[Mapping[str, Any]] = (),
    retried: bool = False,
    retriers: Sequence[str] = (),
    starters: Sequence[str] = (),
) -> str:
    """Why ``run`` is not the run ``approval`` started, or "".

    Empty when ``run`` is the run ``approval`` started (rule 2), else why not.

    ``earlier``: the commit's older approvals; a run belongs to the first approval posted
    after it was created (a label applied twice: the first run is not the second's).
    ``retried``: gpu-watchdog's retry record of this very attempt is above the approval;
    ``retriers``: the accounts whose re-run that can be. ``starters``: accounts whose run
    counts as the approver's (the relay bot whose label carries a comment approval). A
    re-run by anyone else binds here; its starter's role is :func:`rerun_refusal`'s."""
    attempt = attempt_of(run)
    trigger = str((run.get("triggering_actor") or run.get("actor") or {}).get("login") or "")
    # a re-run keeps the run's first actor; the approver must have started the run itself
    first = str((run.get("actor") or {}).get("login") or "")
    actor = first if attempt != 1 else trigger
    if run.get("event") != "pull_request":
        return f"a '{run.get('event')}' run of a pull request is not the approval's run."
    if not approver or actor not in (approver, *starters):
        return f"run triggered by @{actor}, not by the approver @{approver}."
    if attempt != 1 and retried and trigger not in retriers:
        return (
            f"attempt {attempt} was started by @{trigger}, not by gpu-watchdog's account "
            f"({', '.join(retriers)}), although its retry record names it."
        )
    if attempt != 1 and not retried and trigger in retriers:
        return (
            f"attempt {attempt} was started by @{trigger}, and no re-run gpu-watchdog "
            "recorded on the head names it: a bot's re-run reuses the gate's old decision "
            "(head, budget): approve again to run the GPU tests again."
        )
    return _binds_in_time(run, approval, earlier)


def _binds_in_time(
    run: Mapping[str, Any], approval: Mapping[str, Any], earlier: Sequence[Mapping[str, Any]]
) -> str:
    """Why the run was not created by ``approval`` for its pull request.

    Empty when it was (and by no earlier approval)."""
    created = parse_time(run.get("created_at"))
    approved = parse_time(approval.get("created_at"))
    if created is None or approved is None:
        return "the run or the approval has no creation time: cannot bind them."
    if not approved - APPROVAL_LAG <= created <= approved + CLOCK_SLACK:
        return (
            f"run created at {run.get('created_at')}, not by the approval posted at "
            f"{approval.get('created_at')}."
        )
    for older in earlier:
        at = parse_time(older.get("created_at"))
        if at is None or created <= at + CLOCK_SLACK:
            return (
                f"run created at {run.get('created_at')} belongs to the earlier approval "
                f"posted at {older.get('created_at')}, not to the newest one."
            )
    number = pull_of(approval)
    listed = [p.get("number") for p in run.get("pull_requests") or [] if isinstance(p, dict)]
    if number is not None and listed and number not in listed:
        return f"the run is for pull request {listed}, the approval for #{number}."
    return ""


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


def starts(
    approval: Approval,
    run: Mapping[str, Any],
    trusted: Sequence[Mapping[str, Any]],
    starters: Sequence[str] = (),
) -> str:
    """Why ``run`` is not the approval's run, or "" (none recorded yet).

    ``run``: GitHub's record of it; ``trusted``: the head's trusted statuses, newest first;
    ``starters``: the accounts besides the approver whose label starts it (a relay bot).
    Rule 2, with the first actor of the run in place of the approver's own login."""
    first = str((run.get("actor") or {}).get("login") or "")
    if run.get("event") != "pull_request":
        return f"a '{run.get('event')}' run is not the approval's run."
    if not first or first not in (approval.approver, *starters):
        return f"run started by @{first}, not by the approver @{approval.approver}."
    context = str(approval.status.get("context") or "")
    earlier = _earlier_approvals(trusted, context, approval.status)
    return _binds_in_time(run, approval.status, earlier)


def retry_recorded(
    config: Reads, statuses: Sequence[Mapping[str, Any]], approval: Approval, key: tuple[int, int]
) -> bool:
    """Whether gpu-watchdog recorded its re-run of attempt ``key`` above ``approval``."""
    trusted = trusted_statuses(config, statuses)
    return _retry_record(trusted, config.context, approval.status, key, key[1]) is not None


def _earlier_approvals(
    statuses: Sequence[Mapping[str, Any]], context: str, approval: Mapping[str, Any]
) -> list[Mapping[str, Any]]:
    """The approvals of ``context`` listed below ``approval`` (revoked ones included)."""
    ours = [s for s in statuses if same_context(s.get("context"), context)]
    below = ours[next((i for i, s in enumerate(ours) if s is approval), len(ours)) + 1 :]
    return [s for s in below if is_approval(s)]


def above(
    statuses: Sequence[Mapping[str, Any]], context: str, approval: Mapping[str, Any]
) -> Iterator[Mapping[str, Any]]:
    """The statuses of ``context`` newer than ``approval``, newest first."""
    for status in statuses:
        if not same_context(status.get("context"), context):
            continue
        if status is approval:
            return
        yield status


def _retry_record(
    statuses: Sequence[Mapping[str, Any]],
    context: str,
    approval: Mapping[str, Any],
    key: tuple[int, int] | None,
    attempt: int,
) -> Mapping[str, Any] | None:
    """gpu-watchdog's "retried" status of run attempt ``key`` written above ``approval``.

    Above it means after it, so the watchdog checked that it was current. None otherwise."""
    if attempt == 1 or key is None:
        return None
    for status in above(statuses, context, approval):
        text = str(status.get("description") or "")
        url = str(status.get("target_url") or "")
        if (
            status.get("state") == "pending"
            and text.startswith(RETRIED_PREFIX)
            and run_key(url) == key
        ):
            return status
    return None


@dataclass(frozen=True)
class Binding:
    """gpu-status's reading of a run against the head's current label approval."""

    approver: str
    retry: Mapping[str, Any] | None
    """gpu-watchdog's record of this attempt above the approval, or None."""
    why: str
    """Why the run does not bind (rule 2); empty when it does."""
    by_hand: str = ""
    """Who pressed "Re-run" (rule 7): :func:`rerun_refusal` decides; "" for no re-run by hand."""


def result_binding(
    config: Reads,
    statuses: Sequence[Mapping[str, Any]],
    run: Mapping[str, Any],
    approval: Mapping[str, Any],
    mine: Any,
) -> Binding:
    """gpu-status's reading: whether ``run`` binds to ``approval``, and how.

    The budget's :func:`approved_run` reads the same binding."""
    match = _APPROVAL.fullmatch(str(approval.get("description") or ""))
    approver = match.group(1) if match else ""
    retry = _retry_record(statuses, config.context, approval, mine, attempt_of(run))
    why = _binds(
        run,
        approval,
        approver,
        _earlier_approvals(statuses, config.context, approval),
        retry is not None,
        config.creators,
        config.relays,
    )
    trigger = str((run.get("triggering_actor") or run.get("actor") or {}).get("login") or "")
    by_hand = trigger if attempt_of(run) != 1 and retry is None and not why else ""
    return Binding(approver, retry, why, by_hand)


def rerun_refusal(
    found: Approval,
    run_id: int,
    by: str,
    facts: tuple[Mapping[str, Any], Mapping[str, Any]],
    least: str,
) -> str:
    """Why a re-run by hand of ``run_id`` is not the approval's run, or "" (rule 7).

    ``by`` pressed "Re-run"; ``facts``: GitHub's answers for the approved pull request and
    for ``by``'s permission. The runner admission hook and gpu-status both decide here."""
    from gpu_ci.github.gate.config import ROLE_RANK  # the gate imports this module
    from gpu_ci.github.gate.decide import role_of

    pull, permission = facts
    why = claimed_by(found, run_id) if found.runs else "the approval has recorded no run yet."
    if why:
        return why
    why = open_at_head(found, pull)
    if why:
        return why
    role, _exact = role_of(permission)
    if ROLE_RANK[role] < ROLE_RANK.get(least, ROLE_RANK["admin"]):
        return (
            f"the re-run was started by @{by} ({role}); a re-run needs {least} or "
            "gpu-watchdog's recorded retry."
        )
    return ""


def open_at_head(found: Approval, pull: Mapping[str, Any]) -> str:
    """Why the approved pull request is not open at the approved head, or "".

    ``pull``: GitHub's record of pull request ``found.number``."""
    head = str((pull.get("head") or {}).get("sha") or "")
    if (pull.get("number"), pull.get("state"), head) == (found.number, "open", found.head_sha):
        return ""
    return (
        f"#{found.number} is {pull.get('state')} at {short(head)}; the approval was of "
        f"{short(found.head_sha)} while it was open."
    )


def not_covered(found: Approval, path: str) -> str:
    """Why the approval does not cover workflow file ``path``, or "" (rule 6)."""
    if path in found.workflows:
        return ""
    return (
        f"{path or '(no file)'} is not a GPU workflow file the approval of "
        f"{short(found.head_sha)} covers ({', '.join(found.workflows) or 'none'})."
    )


def approved_run(
    config: Reads, run: Mapping[str, Any], statuses: Sequence[Mapping[str, Any]]
) -> str:
    """The budget's reading: empty when ``run`` holds its head's approval, else why not.

    Only then do a fork run's jobs waiting for a runner reserve. ``statuses``: the head's,
    newest first; only the trusted creators' count. The run must bind to the current
    approval (rule 2), and the head's newest status is the approval itself (its run not yet
    recorded) or a record of this very run and attempt (rule 3)."""
    trusted = trusted_statuses(config, statuses)
    approval = approval_status(trusted, config.context)
    if approval is None:
        return (
            f"{short(str(run.get('head_sha') or ''))} carries no current approval in "
            f"'{config.context}' from {', '.join(config.creators)}."
        )
    mine = key_of(run)
    binding = result_binding(config, trusted, run, approval, mine)
    if binding.why:
        return binding.why
    if binding.by_hand:
        return (
            f"attempt {attempt_of(run)} is a re-run by @{binding.by_hand}: whether their role "
            "allows it is asked of GitHub by gpu-status and the runner admission hook only."
        )
    latest = latest_of(trusted, config.context)
    if latest is approval or run_key(str((latest or {}).get("target_url") or "")) == mine:
        return ""
    return (
        f"the approval's newest status '{(latest or {}).get('description')}' is another "
        "run's: this run does not hold the approval."
    )


def watchdog_hold(
    config: Reads, run: Mapping[str, Any], statuses: Sequence[Mapping[str, Any]]
) -> tuple[Approval | None, str]:
    """gpu-watchdog's reading: the approval a pull request's run may be re-run under.

    The head's current label approval, whose approver started the run. Returns it, or
    None and why not. The caller then checks the pull request is open at that head."""
    sha = str(run.get("head_sha") or "")
    found = current(config, statuses, sha)
    if found is None or found.how != HOW_LABEL:
        return (
            None,
            f"the head {sha[:12]} has no current approval ('{config.context}'): approve again",
        )
    # The approval's own run only (gpu-status binds no other): any run of an approved
    # head may use GPU runners, a fork's own run of its edited workflow too.
    actor = str((run.get("actor") or {}).get("login") or "")
    if not found.approver or actor not in (found.approver, *config.relays):
        return None, (
            f"run {run.get('id')} was started by @{actor}, not by the approver "
            f"@{found.approver}: only the approval's run is re-run"
        )
    return found, ""
