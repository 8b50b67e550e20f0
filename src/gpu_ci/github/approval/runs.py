"""Whether a run is the one an approval started.

gpu-status (:func:`result_binding`), the budget (:func:`approved_run`), gpu-watchdog
(:func:`watchdog_hold`) and the runner admission hook (:func:`starts`,
:func:`rerun_refusal`) read the rules of :mod:`gpu_ci.github.approval` here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_ci.github.approval.record import (
    APPROVAL_LAG,
    CLOCK_SLACK,
    HOW_LABEL,
    RETRIED_PREFIX,
    Approval,
    Reads,
    approval_status,
    approver_of,
    attempt_of,
    claimed_by,
    current,
    is_approval,
    key_of,
    not_covered,
    open_at_head,
    pull_of,
    run_key,
    trusted_statuses,
)
from gpu_ci.github.commit_status import latest_of, same_context, short
from gpu_ci.github.jobs import parse_time
from gpu_ci.github.roles import ROLE_RANK, role_of


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
    approver = approver_of(approval)
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
    """Why a re-run by hand of ``run_id`` is not the approval's run.

    Rule 7.

    Empty when it is. ``by`` pressed "Re-run"; ``facts``: GitHub's answers for the
    approved pull request and for ``by``'s permission. The runner admission hook and
    gpu-status both decide here."""
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

    The head's current label approval, whose approver started the run of a file it
    covers. Returns it, or
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
    why = not_covered(found, str(run.get("path") or ""))
    if why:
        return None, f"run {run.get('id')}: {why.rstrip('.')}: only the approval's run is re-run"
    return found, ""
