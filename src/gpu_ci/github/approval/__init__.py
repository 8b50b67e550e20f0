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

from gpu_ci.github.approval.record import (
    APPROVAL_LAG,
    CLOCK_SLACK,
    COVERS,
    ENDED_PREFIX,
    HOW_COMMENT,
    HOW_LABEL,
    HOW_TRUSTED_AUTHOR,
    IN_PROGRESS,
    RETRIED_PREFIX,
    REVOKED,
    WORKFLOWS_DIR,
    Approval,
    Reads,
    Source,
    approval_config,
    approval_link,
    approval_of,
    approval_status,
    approved_pull,
    approver_of,
    attempt_of,
    claimed_by,
    comment_pull,
    comment_record,
    comment_text,
    covered,
    current,
    ended_text,
    is_approval,
    is_workflow_file,
    key_of,
    not_covered,
    open_at_head,
    pull_of,
    queued_text,
    retried_text,
    run_key,
    run_link,
    trusted_statuses,
)
from gpu_ci.github.approval.runs import (
    Binding,
    above,
    approved_run,
    rerun_refusal,
    result_binding,
    retry_recorded,
    starts,
    watchdog_hold,
)

__all__ = [
    "APPROVAL_LAG",
    "Approval",
    "Binding",
    "CLOCK_SLACK",
    "COVERS",
    "ENDED_PREFIX",
    "HOW_COMMENT",
    "HOW_LABEL",
    "HOW_TRUSTED_AUTHOR",
    "IN_PROGRESS",
    "RETRIED_PREFIX",
    "REVOKED",
    "Reads",
    "Source",
    "WORKFLOWS_DIR",
    "above",
    "approval_config",
    "approval_link",
    "approval_of",
    "approval_status",
    "approver_of",
    "approved_pull",
    "approved_run",
    "attempt_of",
    "claimed_by",
    "comment_pull",
    "comment_record",
    "comment_text",
    "covered",
    "current",
    "ended_text",
    "is_approval",
    "is_workflow_file",
    "key_of",
    "not_covered",
    "open_at_head",
    "pull_of",
    "queued_text",
    "rerun_refusal",
    "result_binding",
    "retried_text",
    "retry_recorded",
    "run_key",
    "run_link",
    "starts",
    "trusted_statuses",
    "watchdog_hold",
]
