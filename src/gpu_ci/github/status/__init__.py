"""gpu-status: which "GPU CI" commit status the pull request's head shows next.

A skipped GPU job counts as success, so a label-gated GPU job cannot be a required check
on its own; a commit status can. The states, on the head commit::

    opened / reopened / synchronize         -> pending  "Waiting for approval: ..."
    labeled, the gate approves              -> pending  "Approved by @x for abc123: GPU run queued"
    labeled, the gate refuses               -> pending  "Not approved: <the gate's reason>"
    workflow_run requested (approval's run) -> pending  "Approved by @x: GPU run in progress",
                                               linking <run>/attempts/<n> (the record)
    workflow_run completed (that run)       -> success / failure / error, with the same link
    a maintainer re-ran that run            -> pending "... GPU run in progress", then the
                                               result, linking <run>/attempts/<n>
    gpu-watchdog cancelled the run          -> error    "No GPU runner picked this up in N min"
    gpu-watchdog re-ran a lost run          -> pending  "GPU run retried after the runner was
                                               lost (attempt 2)", linking <run>/attempts/2
    issue_comment, the gate approves        -> pending  "Approved by @x on #n for abc123 by
                                               comment: GPU run in progress", linking this run
    issue_comment, the GPU job ended        -> success / failure / error, with the same link

One module per event family: :mod:`.pull_request`, :mod:`.workflow_run`,
:mod:`.issue_comment`; :mod:`.config` holds the inputs and :mod:`.pr_comment` the pull
request comment. Approvals are read in :mod:`gpu_ci.github.approval`. This package
re-exports the names ``commands/gpu_status.py`` uses.
"""

from gpu_ci.github.approval import (
    APPROVAL_LAG,
    CLOCK_SLACK,
    IN_PROGRESS,
    RETRIED_PREFIX,
    approval_config,
    approval_of,
    approval_status,
    approved_pull,
    approved_run,
    comment_pull,
    pull_of,
    run_key,
    run_link,
    trusted_statuses,
)
from gpu_ci.github.commit_status import (
    CONTEXT_LIMIT,
    DEFAULT_CONTEXT,
    DEFAULT_CREATORS,
    DESCRIPTION_LIMIT,
    FINAL,
    WATCHDOG_PREFIX,
    Status,
    clip,
    latest_of,
    no_runner,
    same_context,
    short,
    validate_context,
)
from gpu_ci.github.event import NEW_HEAD, PR_EVENTS, TRUSTED_EVENTS
from gpu_ci.github.status.config import (
    DEFAULT_WORKFLOW,
    FAILED,
    JOB_RESULTS,
    Outcome,
    StatusConfig,
    make_config,
    workflow_path,
)
from gpu_ci.github.status.issue_comment import comment_approved, comment_result, comment_run_link
from gpu_ci.github.status.pull_request import GateOutputs, after_gate, for_pull_event, waiting
from gpu_ci.github.status.workflow_run import Asked, for_workflow_run, minutes, settle

__all__ = [
    "Asked",
    "APPROVAL_LAG",
    "CLOCK_SLACK",
    "CONTEXT_LIMIT",
    "DEFAULT_CONTEXT",
    "DEFAULT_CREATORS",
    "DEFAULT_WORKFLOW",
    "DESCRIPTION_LIMIT",
    "FAILED",
    "GateOutputs",
    "FINAL",
    "IN_PROGRESS",
    "JOB_RESULTS",
    "NEW_HEAD",
    "PR_EVENTS",
    "RETRIED_PREFIX",
    "TRUSTED_EVENTS",
    "WATCHDOG_PREFIX",
    "Outcome",
    "Status",
    "StatusConfig",
    "after_gate",
    "approval_config",
    "approval_of",
    "approval_status",
    "approved_pull",
    "approved_run",
    "clip",
    "comment_approved",
    "comment_pull",
    "comment_result",
    "comment_run_link",
    "for_pull_event",
    "for_workflow_run",
    "latest_of",
    "make_config",
    "minutes",
    "no_runner",
    "pull_of",
    "run_key",
    "run_link",
    "same_context",
    "settle",
    "short",
    "trusted_statuses",
    "validate_context",
    "waiting",
    "workflow_path",
]
