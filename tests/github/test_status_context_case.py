"""Commit-status contexts compared as GitHub compares them, without regard to case (issue 25
item 5): a status in ``gpu ci`` is the ``GPU CI`` status (it replaces it in the combined
status and satisfies a required check of that name)."""

from __future__ import annotations

from gpu_ci.github import status as statuses

BOT = {"login": "github-actions[bot]"}
APPROVED = {
    "context": "GPU CI",
    "state": "pending",
    "description": "Approved by @alice for 0123456789ab: GPU run queued.",
    "creator": BOT,
}
REVOKED = {
    "context": "gpu ci",
    "state": "pending",
    "description": "Waiting for approval: apply the CUDA CI label",
    "creator": BOT,
}


def test_a_revocation_in_another_case_revokes_the_approval():
    newest_first = [REVOKED, APPROVED]
    assert statuses.approval_of(newest_first, "GPU CI") == ""
    assert statuses.approval_status(newest_first, "GPU CI") is None
    assert statuses.latest_of(newest_first, "GPU CI") is REVOKED


def test_an_approval_is_found_whatever_the_case_of_the_input():
    assert statuses.approval_of([APPROVED], "gpu CI") == "alice"
    config = statuses.make_config("Gpu Ci", "CUDA CI", "write", ["tests"], "cuda-ci.yml", [])
    assert statuses.trusted_statuses(config, [REVOKED, APPROVED]) == [REVOKED, APPROVED]


def test_same_context_is_casefolded_and_never_true_for_a_non_string():
    assert statuses.same_context("GPU CI", "gpu ci")
    assert not statuses.same_context(None, "")
    assert not statuses.same_context("GPU CI 2", "GPU CI")
