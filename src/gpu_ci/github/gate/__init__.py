"""gpu-gate: whether this event may run the GPU job, from pure functions.

The shell (``commands/gpu_gate.py``) calls :func:`triage` on the event; a final
:class:`Decision` needs no API call. Otherwise it fetches exactly what the returned check
asks for (the labeller's role and the pull request: two REST calls; changed files only
when ``paths`` is set) and calls :func:`decide_pull` or :func:`decide_push`. A comment
command (:class:`CommentCheck`) needs the same two calls and :func:`decide_comment`; a
trusted author's push (:class:`TrustedCheck`) those plus the head commit, and
:func:`decide_trusted`. In an ``issue_comment`` event a valid command is never run: the
shell relays it as a label applied with ``relay-token``; the relay bot's label
(:class:`RelayCheck`) then runs only when :func:`decide_relay` re-reads a valid command for
the head by someone with the role.

:mod:`.config` checks the inputs, :mod:`.checks` triages the event, :mod:`.decide`
decides, :mod:`.paths` matches ``paths``;
:mod:`.merge` swaps in the merge commit (``test-merge``); :mod:`.labels` is remove-label's.
This package re-exports the names ``commands/gpu_gate.py`` uses.
"""

from gpu_ci.github.comment import Tier, parse_tier_specs, parse_tiers
from gpu_ci.github.event import PR_EVENTS
from gpu_ci.github.gate.checks import (
    NULL_SHA,
    TRUSTED_ACTIONS,
    CommentCheck,
    Decision,
    PullCheck,
    PushCheck,
    RelayCheck,
    Triage,
    TrustedCheck,
    triage,
    triage_comment,
)
from gpu_ci.github.gate.config import (
    MIN_PERMISSIONS,
    ROLE_RANK,
    RUN_ON_EVENTS,
    GateConfig,
    GateInputs,
    make_config,
    parse_run_on,
    unknown_tier_kinds,
)
from gpu_ci.github.gate.decide import (
    ALLOWED_BY,
    Candidate,
    approvers_of,
    decide_comment,
    decide_pull,
    decide_push,
    decide_relay,
    decide_review,
    decide_trusted,
    qualifies,
    refuse_role,
    refuse_trusted,
    refuse_unreadable,
    relay_candidates,
    relay_unset,
    relayed,
    role_of,
)
from gpu_ci.github.gate.merge import decide_merge, merge_sha_of
from gpu_ci.github.kinds import RunnerKind, kinds_json, kinds_matrix, parse_kinds, runs_on_json

__all__ = [
    "ALLOWED_BY",
    "MIN_PERMISSIONS",
    "NULL_SHA",
    "PR_EVENTS",
    "ROLE_RANK",
    "RUN_ON_EVENTS",
    "TRUSTED_ACTIONS",
    "Candidate",
    "CommentCheck",
    "Decision",
    "GateConfig",
    "GateInputs",
    "RunnerKind",
    "Tier",
    "PullCheck",
    "PushCheck",
    "RelayCheck",
    "Triage",
    "TrustedCheck",
    "approvers_of",
    "decide_comment",
    "decide_merge",
    "decide_pull",
    "decide_push",
    "decide_relay",
    "decide_review",
    "decide_trusted",
    "kinds_json",
    "kinds_matrix",
    "make_config",
    "merge_sha_of",
    "parse_kinds",
    "qualifies",
    "parse_run_on",
    "parse_tier_specs",
    "parse_tiers",
    "refuse_role",
    "refuse_trusted",
    "refuse_unreadable",
    "relay_candidates",
    "relay_unset",
    "relayed",
    "role_of",
    "runs_on_json",
    "triage",
    "triage_comment",
    "unknown_tier_kinds",
]
