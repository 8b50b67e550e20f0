"""Comment commands and trusted authors: gpu-gate's rules as pure functions (no server)."""

from __future__ import annotations

import pytest

from gpu_ci.errors import UsageError
from gpu_ci.github import comment, gate
from testkit.events import on_pull_request
from testkit.github.gate import gate_inputs
from testkit.shared import webhook

HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
OLD = "1" * 40


def config(**kw):
    commands = dict(
        comment_command="/gpu-ci run", tiers=["mini", "full"], relay_bot="gpu-ci-relay[bot]"
    )
    return gate.make_config(gate_inputs(**{**commands, **kw}))


def event(body, commenter="mai", action="created"):
    return on_pull_request(webhook(f"issue_comment.{action}"), body=body, commenter=commenter)


def pull(head=HEAD, state="open", draft=False, fork=False):
    repo = {"full_name": "Codertocat/Hello-World"}
    return {
        "state": state,
        "draft": draft,
        "head": {"sha": head, "repo": {"full_name": "fork/Hello-World"} if fork else repo},
        "base": {"repo": repo},
    }


ROLE = {"role_name": "maintain", "permission": "write"}


def decide(body, *, answer=ROLE, pr=None, cfg=None, files=None, commenter="mai"):
    cfg = cfg or config()
    step = gate.triage("issue_comment", event(body, commenter), cfg, "d" * 40)
    assert isinstance(step, gate.CommentCheck), step
    return gate.decide_comment(step, cfg, answer, pr or pull(), files)


def test_a_maintainers_command_with_the_head_runs_exactly_the_head():
    decision = decide(f"/gpu-ci run {HEAD}")
    assert decision.run and decision.sha == HEAD
    assert (decision.labeled_by, decision.permission, decision.approval) == (
        "mai",
        "maintain",
        "comment",
    )
    assert decision.comment_url.endswith("/pull/2#issuecomment-492700400")
    assert "mai (maintain) commented '/gpu-ci run' for #2" in decision.reason


def test_a_short_sha_of_seven_digits_is_matched_against_the_head_and_runs_the_full_head():
    assert decide(f"/gpu-ci run {HEAD[:7]}").sha == HEAD
    six = gate.triage("issue_comment", event(f"/gpu-ci run {HEAD[:6]}"), config(), "")
    assert isinstance(six, gate.Decision) and not six.run  # six digits are not a SHA
    assert "'ec26c3' is not a commit SHA" in six.reason


def test_a_stale_sha_is_refused_naming_the_head():
    decision = decide(f"/gpu-ci run {OLD[:12]}")
    assert not decision.run and decision.sha == ""
    assert f"names {OLD[:12]}, but the head of #2 is {HEAD[:12]}" in decision.reason


def test_a_missing_sha_is_refused_naming_the_full_head_and_keeping_the_tiers():
    for body, hint in (
        ("/gpu-ci run", ""),
        ("/gpu-ci run full", " full"),
        ("/gpu-ci run mini,full", " mini full"),
    ):
        decision = decide(body)
        assert not decision.run
        assert f"'/gpu-ci run {HEAD}{hint}'" in decision.reason, decision.reason


def test_tiers_are_separated_by_commas_or_spaces_in_the_command_and_the_input():
    cfg = config(tiers=["mini rocm", "full,cuda13"])
    assert cfg.tiers == ("mini", "rocm", "full", "cuda13")
    for body in (f"/gpu-ci run {HEAD} mini,rocm", f"/gpu-ci run {HEAD} mini rocm"):
        decision = decide(body, cfg=cfg)
        assert decision.run and decision.tiers == ("mini", "rocm"), decision.reason
    test = config(comment_command="/test", tiers=["mini", "rocm"])
    assert decide("/test mini,rocm", cfg=test).tiers == ("mini", "rocm")


def test_a_refused_commenter_is_told_only_what_the_gate_read():
    """The pull request is not read for a commenter below the role: whether it comes from a
    fork is unknown, so nothing says it does."""
    cfg = config()
    step = gate.triage("issue_comment", event(f"/gpu-ci run {HEAD}"), cfg, "d" * 40)
    assert isinstance(step, gate.CommentCheck)
    decision = gate.decide_comment(step, cfg, {"role_name": "read"}, {}, None)  # PR unread
    assert not decision.run and decision.fork is None
    assert "fork" not in decision.reason


def test_a_stranger_is_refused_before_the_pull_request_is_read():
    decision = decide(
        f"/gpu-ci run {HEAD}", answer={"role_name": "read", "permission": "read"}, pr={}
    )
    assert not decision.run
    assert (
        "stranger has the 'read' role; a '/gpu-ci run' comment needs 'write'"
        in (
            decide(f"/gpu-ci run {HEAD}", answer={"role_name": "read"}, pr={}, commenter="stranger")
        ).reason
    )


@pytest.mark.parametrize("action", ["edited", "deleted"])
def test_edited_and_deleted_comments_approve_nothing(action):
    decision = gate.triage(
        "issue_comment", event(f"/gpu-ci run {HEAD}", action=action), config(), ""
    )
    assert isinstance(decision, gate.Decision) and not decision.run
    assert f"the comment was {action}: only a new comment approves" in decision.reason


def test_a_comment_on_an_issue_is_ignored():
    payload = webhook("issue_comment.created")  # GitHub's example: a comment on an issue
    payload["comment"]["body"] = f"/gpu-ci run {HEAD}"
    decision = gate.triage("issue_comment", payload, config(), "")
    assert isinstance(decision, gate.Decision) and not decision.run
    assert "is an issue, not a pull request" in decision.reason


@pytest.mark.parametrize(
    "body",
    [
        "LGTM",
        f"> /gpu-ci run {HEAD}\n\nquoting the maintainer",  # a quoted reply
        f"thanks! next: /gpu-ci run {HEAD}",  # mentioned in prose
        f"/gpu-ci running {HEAD}",
    ],
)
def test_only_a_first_line_command_counts(body):
    decision = gate.triage("issue_comment", event(body), config(), "")
    assert isinstance(decision, gate.Decision) and not decision.run
    assert "first line is not a '/gpu-ci run' command" in decision.reason


def test_the_command_is_compared_without_case_and_extra_spaces():
    assert decide(f"  /GPU-CI   Run {HEAD.upper()}\nfine by me").run


def test_tier_words_after_the_sha_become_the_tiers_and_unknown_ones_refuse():
    assert decide(f"/gpu-ci run {HEAD} full").tiers == ("full",)
    assert decide(f"/gpu-ci run {HEAD} FULL mini full").tiers == ("full", "mini")
    assert decide(f"/gpu-ci run {HEAD}").tiers == ()
    step = gate.triage("issue_comment", event(f"/gpu-ci run {HEAD} huge"), config(), "")
    assert isinstance(step, gate.Decision) and not step.run
    assert "unknown tier 'huge' in the command: the tiers are mini, full" in step.reason
    no_tiers = config(tiers=[])
    step = gate.triage("issue_comment", event(f"/gpu-ci run {HEAD} full"), no_tiers, "")
    assert isinstance(step, gate.Decision) and "none are configured" in step.reason


def test_role_paths_draft_and_state_apply_as_for_labels():
    triage = {"role_name": "triage", "permission": "read"}
    assert not decide(f"/gpu-ci run {HEAD}", answer=triage).run
    assert decide(f"/gpu-ci run {HEAD}", answer=triage, cfg=config(min_permission="triage")).run
    paths = config(paths=["kernels/**"])
    assert not decide(f"/gpu-ci run {HEAD}", cfg=paths, files=["docs/a.md"]).run
    assert decide(f"/gpu-ci run {HEAD}", cfg=paths, files=["kernels/a.cu"]).run
    assert "is closed" in decide(f"/gpu-ci run {HEAD}", pr=pull(state="closed")).reason
    drafts = config(skip_draft=True)
    assert "is a draft" in decide(f"/gpu-ci run {HEAD}", cfg=drafts, pr=pull(draft=True)).reason
    assert decide(f"/gpu-ci run {HEAD}", pr=pull(fork=True)).fork is True


def test_comment_commands_can_be_turned_off_and_then_refuse_as_before():
    for value in ("", "none", "NONE"):
        off = config(comment_command=value)
        decision = gate.triage("issue_comment", event(f"/gpu-ci run {HEAD}"), off, "")
        assert isinstance(decision, gate.Decision) and not decision.run
        assert "neither a labelled pull request nor listed in run-on" in decision.reason


def test_bad_settings_are_usage_errors():
    with pytest.raises(UsageError, match="must start with '/'"):
        config(comment_command="gpu-ci run")
    with pytest.raises(UsageError, match="does not look like a commit SHA"):
        config(tiers=["abcdef0"])
    with pytest.raises(UsageError, match="one word"):
        config(tiers=["two/words"])
    with pytest.raises(UsageError, match="write exactly one 'file:<path>'"):
        config(tiers=["file:a.txt", "mini"])
    assert config(tiers=["file: .github/t.txt"]).tiers_file == ".github/t.txt"
    with pytest.raises(UsageError, match="input .approvers. lists"):
        config(approvers=["a/b"])
    with pytest.raises(UsageError, match="needs 'relay-bot'"):
        config(relay_bot="")
    with pytest.raises(UsageError, match="comment approvals need a 'relay-label'"):
        config(label="none")
    off = config(label="none", relay_label="gpu-ci: comment")
    assert (off.label, off.relay_label_name) == ("", "gpu-ci: comment")
    assert off.ways() == "comments '/gpu-ci run <sha>'."
    assert config(relay_label="cuda ci").relay_label == ""  # the gate label itself
    with pytest.raises(UsageError, match="input 'trusted-authors' must be one of"):
        config(trusted_authors="read")
    assert config(trusted_authors="off").trusted_authors == ""


# -- trusted authors ----------------------------------------------------------------------


def synchronize(author="alice", head=HEAD):
    payload = webhook("pull_request.synchronize")
    payload["pull_request"]["user"]["login"] = author
    payload["pull_request"]["head"]["sha"] = head
    return payload


def head_commit(author="alice", committer="alice", verified=False, sha=HEAD):
    return {
        "sha": sha,
        "author": {"login": author} if author else None,
        "committer": {"login": committer} if committer else None,
        "commit": {
            "verification": {"verified": verified, "reason": "valid" if verified else "unsigned"}
        },
    }


TRUSTED = config(trusted_authors="write")


def trusted(commit, *, answer=ROLE, cfg=TRUSTED, pr=None):
    step = gate.triage("pull_request", synchronize(), cfg, "")
    assert isinstance(step, gate.TrustedCheck), step
    return gate.decide_trusted(step, cfg, answer, pr or pull(), commit, None)


def test_a_trusted_authors_own_push_runs_its_head_without_an_approval():
    decision = trusted(head_commit())
    assert decision.run and decision.sha == HEAD and decision.approval == "trusted-author"
    assert decision.labeled_by == "alice"
    # a commit made in GitHub's web interface: committer web-flow
    assert trusted(head_commit(committer=comment.WEB_FLOW)).run


@pytest.mark.parametrize(
    ("commit", "why"),
    [
        (head_commit(author="mallory", committer="mallory"), "authored by mallory"),
        (head_commit(committer="mallory"), "committed by mallory"),
        (head_commit(author=None), "an email linked to no GitHub account"),
    ],
)
def test_an_untrusted_push_on_a_trusted_authors_pull_request_needs_an_approval(commit, why):
    decision = trusted(commit)
    assert not decision.run
    assert why in decision.reason and "an untrusted push needs an approval" in decision.reason
    assert "a maintainer applies 'CUDA CI' or comments '/gpu-ci run <sha>'" in decision.reason


def test_trusted_authors_verified_requires_a_verified_head():
    strict = config(trusted_authors="write", trusted_authors_verified=True)
    decision = trusted(head_commit(), cfg=strict)
    assert not decision.run and "is not verified (unsigned)" in decision.reason
    assert trusted(head_commit(verified=True), cfg=strict).run


def test_an_author_below_the_trusted_role_and_a_moved_head_do_not_run():
    triage = {"role_name": "triage", "permission": "read"}
    step = gate.triage("pull_request", synchronize(), TRUSTED, "")
    refused = gate.refuse_trusted(step, TRUSTED, triage)
    assert refused is not None and not refused.run
    assert "the author alice has the 'triage' role, below trusted-authors" in refused.reason
    moved = trusted(head_commit(), pr=pull(head=OLD))
    assert not moved.run and "the run of the newer push decides" in moved.reason


@pytest.mark.parametrize("action", ["opened", "synchronize", "reopened", "ready_for_review"])
def test_trusted_authors_apply_to_new_heads_and_never_to_other_actions(action):
    payload = synchronize()
    payload["action"] = action
    assert isinstance(gate.triage("pull_request", payload, TRUSTED, ""), gate.TrustedCheck)
    payload["action"] = "edited"
    assert isinstance(gate.triage("pull_request", payload, TRUSTED, ""), gate.Decision)


def test_without_trusted_authors_a_push_to_a_pull_request_still_needs_a_label():
    decision = gate.triage("pull_request", synchronize(), config(), "")
    assert isinstance(decision, gate.Decision) and not decision.run
    assert "'synchronize' events never run the GPU job" in decision.reason


def test_a_trusted_authors_pull_request_from_someone_elses_fork_needs_an_approval():
    """Attack: anyone may open a pull request whose head is a branch of *another* user's fork.
    A maintainer (trusted) opens one from mallory's fork; mallory pushes a commit with the
    maintainer's public email as author and committer, so GitHub links both to the
    maintainer. Only a head in the base repository or in the author's own fork is theirs."""
    forked = pull(fork=True)
    forked["head"]["repo"]["owner"] = {"login": "mallory"}
    decision = trusted(head_commit(), pr=forked)
    assert not decision.run
    assert "fork/Hello-World, owned by mallory, not by alice" in decision.reason
    assert "a maintainer applies 'CUDA CI'" in decision.reason
    gone = pull(fork=True)
    gone["head"]["repo"] = None  # the fork was deleted
    assert "head repository is gone" in trusted(head_commit(), pr=gone).reason
    own = pull(fork=True)
    own["head"]["repo"]["owner"] = {"login": "alice"}
    assert trusted(head_commit(), pr=own).run


def test_a_fork_pull_request_needs_the_full_sha_naming_the_head_to_paste():
    """A fork's author can grind a commit sharing a 7-digit prefix (~2^28 tries): refused."""
    for short in (HEAD[:7], HEAD[:12], HEAD[:39]):
        decision = decide(f"/gpu-ci run {short}", pr=pull(fork=True))
        assert not decision.run and decision.sha == "" and decision.fork
        assert "comes from a fork, so the comment must name the full 40-digit SHA" in (
            decision.reason
        )
        assert f"'/gpu-ci run {HEAD}'" in decision.reason
    full = decide(f"/gpu-ci run {HEAD}", pr=pull(fork=True))
    assert full.run and full.sha == HEAD
    assert decide(f"/gpu-ci run {HEAD[:7]}", pr=pull(fork=False)).run  # same repository
