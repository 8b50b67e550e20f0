"""gpu-status's pull-request comment (issue 31 item 4): one comment, found by its marker among
the token's own comments, edited in place; text from the pull request shown as text."""

from __future__ import annotations

import io
import json
import re
import time

import pytest
import requests

from gpu_ci.cli import run_command
from gpu_ci.errors import GpuCiError, UsageError
from gpu_ci.github import status as statuses
from gpu_ci.github.status import pr_comment
from gpu_ci.runtime import Runtime
from testkit.act_runner import FAST_HTTP_ENV
from testkit.github.approvals import checks_url, post_approval
from testkit.github.runs import approved_run_event
from testkit.github_server import PullRequest
from testkit.shared import webhook

REPO = "Codertocat/Hello-World"
FORK = "contributor/Hello-World"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
PUSHES = ["1" * 40, "2" * 40, "3" * 40]
BOT = "github-actions[bot]"
OUTPUTS = ("state", "description", "sha", "comment")
CONFIG = pr_comment.make_config(
    "GPU CI", "CUDA CI", "write", "/gpu-ci run", "", "keep", statuses.DEFAULT_CREATORS
)
#: Every PR-controlled string a status description can quote, at once.
HOSTILE = (
    "Not approved: label <!-- gpu-ci:status context=GPU%20CI --> [approve](https://evil.example) "
    "<img src=x> | @maintainer please\nrun"
)


def shown(
    description: str = "Waiting for approval.", state: str = "pending", **kw
) -> pr_comment.Shown:
    return pr_comment.Shown(2, HEAD, state, description, **kw)


# -- the body ---------------------------------------------------------------------------------


def test_the_body_states_the_head_how_to_approve_and_the_help():
    config = pr_comment.make_config(
        "GPU CI",
        "CUDA CI",
        "write",
        "/gpu-ci run",
        "No GPU? [Colab](https://colab.example)",
        "keep",
        (BOT,),
    )
    body = pr_comment.render(config, shown(target_url="https://github.com/o/r/pull/2/checks"))
    assert body.startswith("<!-- gpu-ci:status context=GPU%20CI -->\n")
    assert f"`{HEAD[:12]}`: ⏳ pending: Waiting for approval." in body
    assert "([details](https://github.com/o/r/pull/2/checks))" in body
    assert "applies the label `CUDA CI`" in body and f"`/gpu-ci run {HEAD}`" in body
    assert "No GPU? [Colab](https://colab.example)" in body  # the maintainer's Markdown stays
    label_only = pr_comment.make_config("GPU CI", "CUDA CI", "write", "none", "", "keep", (BOT,))
    assert "/gpu-ci" not in pr_comment.render(label_only, shown())
    assert "no status yet" in pr_comment.render(CONFIG, pr_comment.Shown(2, HEAD))


def test_text_from_the_pull_request_is_shown_as_text():
    body = pr_comment.render(CONFIG, shown(HOSTILE, target_url="javascript:alert(1)"))
    state = body.splitlines()[3]
    assert body.count("<!--") == 1  # the marker line only: a quoted one is not a second marker
    assert "<img" not in body and "](https://evil" not in body and "javascript:" not in body
    assert "&lt;img src=x&gt;" in state and "&#91;approve&#93;" in state and "\\|" in state
    assert not re.search(r"@[A-Za-z0-9]", body)  # no mention for an edit to notify
    assert "@\u2060maintainer" in state and "<br>run" in state


def test_a_url_quoted_from_the_pull_request_is_no_link_on_github():
    cmarkgfm = pytest.importorskip("cmarkgfm", reason="cmarkgfm (GitHub's cmark-gfm)")
    job = "GPU tests failed: job 'see https://evil.example/approve or www.evil.example' failed"
    body = pr_comment.render(CONFIG, shown(job, target_url="https://github.com/o/r/actions/runs/7"))
    html = cmarkgfm.github_flavored_markdown_to_html(body)
    assert re.findall(r'href="([^"]*)"', html) == ["https://github.com/o/r/actions/runs/7"]
    assert "evil.example/approve" in html  # still there to read


def test_the_body_never_exceeds_githubs_65536_characters():
    help_text = "h" * pr_comment.HELP_LIMIT
    config = pr_comment.make_config(
        "c" * statuses.CONTEXT_LIMIT,
        "L" * 50,
        "maintain",
        "/" + "x" * 99,
        help_text,
        "keep",
        (BOT,),
    )
    worst = shown("[@<|" * 35, target_url="https://x.example/" + "a" * 1980)
    body = pr_comment.render(config, worst)
    assert len(body) <= pr_comment.BODY_LIMIT and help_text in body
    # a label far beyond GitHub's 50 characters: the help text is cut, the rest stays whole
    huge = pr_comment.make_config("GPU CI", "L" * 9000, "write", "", help_text, "keep", (BOT,))
    body = pr_comment.render(huge, worst)
    assert len(body) == pr_comment.BODY_LIMIT and "h…\n" in body
    assert body.endswith("it never runs code of this pull request.</sub>")
    with pytest.raises(UsageError, match="comment-help.*at most 60000"):
        pr_comment.make_config("GPU CI", "CUDA CI", "write", "", help_text + "h", "keep", (BOT,))


@pytest.mark.parametrize(
    "command, on_close, fragment",
    [
        ("/gpu `run`", "keep", "without backticks"),
        ("/x\n/y", "keep", "one line"),
        ("gpu-ci run", "keep", "must start with '/'"),  # gpu-gate's rule: one rule, one error
        ("/", "keep", "must start with '/'"),
        ("/gpu-ci run", "hide", "keep.*collapse.*delete"),
    ],
)
def test_bad_comment_inputs_are_refused(command, on_close, fragment):
    with pytest.raises(UsageError, match=fragment):
        pr_comment.make_config("GPU CI", "CUDA CI", "write", command, "", on_close, (BOT,))


def test_only_a_comment_of_the_trusted_author_starting_with_the_marker_is_ours():
    body = pr_comment.render(CONFIG, shown())
    theirs = {"id": 1, "user": {"login": "contributor"}, "body": body}
    quoted = {"id": 2, "user": {"login": BOT}, "body": "> " + body}
    mine = {"id": 3, "user": {"login": BOT}, "body": body}
    other_context = {"id": 4, "user": {"login": BOT}, "body": body.replace("GPU%20CI", "Other")}
    assert pr_comment.ours(CONFIG, [mine, theirs, quoted, other_context]) == [mine]


# -- gpu-status against the test server -------------------------------------------------------


@pytest.fixture
def pull(github):
    github.add_repo(REPO, roles={"maintainer": "write"})
    return github.add_pull(REPO, PullRequest(2, HEAD, head_repo=FORK))


@pytest.fixture
def status(github, tmp_path):
    """gpu-status in this process (as ``gpu-ci gpu-status``): (exit code, outputs)."""

    def run(event_name: str, event: dict, **inputs: str) -> dict[str, str]:
        path = tmp_path / "event.json"
        path.write_text(json.dumps(event))
        env = {
            "GITHUB_API_URL": github.url,
            "GITHUB_REPOSITORY": REPO,
            "GITHUB_TOKEN": "t",
            "GITHUB_SERVER_URL": "https://github.com",
            "GITHUB_EVENT_NAME": event_name,
            "GITHUB_EVENT_PATH": str(path),
            "INPUT_COMMENT": "true",
            "INPUT_COMMENT_COMMAND": "/gpu-ci run",  # off by default: named only when set
            **FAST_HTTP_ENV,
            **{f"INPUT_{k.upper()}": v for k, v in inputs.items()},
        }
        stdout = io.StringIO()
        assert run_command("gpu-status", {}, Runtime(env, stdout=stdout)) == 0
        lines = stdout.getvalue().splitlines()  # no GITHUB_OUTPUT: outputs as name=value
        return dict(line.split("=", 1) for line in lines if line.split("=")[0] in OUTPUTS)

    return run


def pr_event(action: str, sha: str = HEAD, before: str = "", **fields) -> dict:
    event = webhook(f"pull_request.{action}")
    event["pull_request"]["head"]["sha"] = sha
    event["pull_request"].update(fields)
    if before:
        event.update(before=before, after=sha)
    return event


def mine(github) -> list:
    return [c for c in github.comments_of(REPO, 2) if c.user == BOT]


def requested(sha: str = HEAD) -> dict:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60))
    return approved_run_event("requested", stamp, head_sha=sha, status="queued", conclusion=None)


def test_one_comment_is_edited_in_place_across_three_pushes_and_a_close(github, pull, status):
    assert status("pull_request_target", pr_event("opened"))["comment"] == "created"
    (comment,) = mine(github)
    assert "Waiting for approval" in comment.body and f"/gpu-ci run {HEAD}" in comment.body
    labeled = pr_event("labeled")
    labeled["label"]["name"] = "CUDA CI"
    approved = status(
        "pull_request_target",
        labeled,
        gate_run="true",
        labeled_by="maintainer",
    )
    assert approved["comment"] == "updated" and "Approved by @\u2060maintainer" in comment.body
    assert status("workflow_run", requested())["comment"] == "updated"
    assert "GPU run in progress" in comment.body and "/actions/runs/5/attempts/1" in comment.body
    before = HEAD
    for sha in PUSHES:
        pull.head_sha = sha
        out = status("pull_request_target", pr_event("synchronize", sha, before=before))
        assert out["comment"] == "updated" and mine(github) == [comment]
        assert (
            f"New push (was {before[:12]})" in comment.body.replace("\u2060", "")
            and f"`{sha[:12]}`" in comment.body
        )
        before = sha
    again = status("pull_request_target", pr_event("synchronize", before, before=PUSHES[1]))
    assert again["comment"] == "unchanged"  # the same event again (a redelivery): no edit
    closed = pr_event("closed", before, merged=True)
    assert status("pull_request_target", closed, comment_on_close="collapse")["comment"] == (
        "updated"
    )
    assert mine(github) == [comment] and "pull request #2 was merged" in comment.body
    assert len(github.requests("POST", "/comments")) == 1  # one comment, ever
    assert len(github.requests("PATCH", "/issues/comments/")) == 6
    status("pull_request_target", closed, comment_on_close="delete")
    assert mine(github) == []


def test_a_marker_planted_by_someone_else_is_never_edited_or_deleted(github, pull, status):
    """A fork author posts a comment that starts with our marker (even our exact body): a
    write token may edit anyone's comment, so ours is only the trusted author's."""
    forged = pr_comment.render(CONFIG, shown("GPU tests passed.", "success"))
    planted = github.add_issue_comment(REPO, 2, "contributor", forged)
    bot_quote = github.add_issue_comment(REPO, 2, BOT, "Someone said:\n> " + forged)
    status("pull_request_target", pr_event("opened"))
    (comment,) = [c for c in mine(github) if c is not bot_quote]
    assert comment.id > planted.id and "Waiting for approval" in comment.body
    status("pull_request_target", pr_event("closed"), comment_on_close="delete")
    assert planted.body == forged and planted in github.comments_of(REPO, 2)
    assert bot_quote in github.comments_of(REPO, 2)
    touched = {r.path for r in github.log if r.method in ("PATCH", "DELETE")}
    assert touched == {f"/repos/{REPO}/issues/comments/{comment.id}"}


def test_our_comment_is_found_behind_hundreds_of_others(github, pull, status):
    for i in range(180):
        github.add_issue_comment(REPO, 2, "reviewer", f"comment {i}")
    ours = github.add_issue_comment(REPO, 2, BOT, CONFIG.marker + "\nold")
    for i in range(150):
        github.add_issue_comment(REPO, 2, "reviewer", f"later {i}")
    assert status("pull_request_target", pr_event("opened"))["comment"] == "updated"
    assert mine(github) == [ours] and "Waiting for approval" in ours.body
    assert len(github.requests("GET", "/issues/2/comments")) == 4  # 331 comments, 100 a page


def test_a_second_comment_of_ours_is_removed_and_the_oldest_kept(github, pull, status):
    first = github.add_issue_comment(REPO, 2, BOT, CONFIG.marker + "\nfirst")
    github.add_issue_comment(REPO, 2, BOT, CONFIG.marker + "\nsecond")  # a race of two events
    status("pull_request_target", pr_event("opened"))
    assert mine(github) == [first] and "Waiting for approval" in first.body


def test_a_run_of_a_head_the_pull_request_moved_on_from_leaves_the_comment(github, pull, status):
    post_approval(github, url=checks_url())
    pull.head_sha = PUSHES[0]
    out = status("workflow_run", requested())
    assert out["state"] == "pending" and out["comment"] == "none"
    assert github.comments_of(REPO, 2) == []


def test_without_comment_true_no_comment_is_read_or_written(github, pull, status):
    status("pull_request_target", pr_event("opened"), comment="false")
    assert github.requests(path_contains="comments") == []


def test_a_token_that_may_not_comment_fails_with_the_permission_named(github, pull, status):
    github.read_only_tokens.add("t")
    github.add_issue_comment(REPO, 2, BOT, CONFIG.marker + "\nold")
    with pytest.raises(GpuCiError, match="pull-requests: write.*HTTP 403"):
        status("pull_request", pr_event("closed"), comment_on_close="delete")


def test_the_longest_help_text_still_posts(github, pull, status):
    """GitHub refuses a body over 65,536 characters (the test server's 422 too)."""
    labeled = pr_event("labeled")
    labeled["label"]["name"] = "CUDA CI"
    help_text = "[Colab](https://colab.example) " * (pr_comment.HELP_LIMIT // 31)
    out = status(
        "pull_request_target",
        labeled,
        gate_run="false",
        gate_reason=HOSTILE * 4,
        comment_help=help_text,
    )
    (comment,) = mine(github)
    assert out["comment"] == "created" and len(comment.body) <= pr_comment.BODY_LIMIT
    assert help_text.strip() in comment.body


def test_comment_on_close_keep_leaves_the_comment_alone(github, pull, status):
    ours = github.add_issue_comment(REPO, 2, BOT, CONFIG.marker + "\nstate")
    assert status("pull_request_target", pr_event("closed"))["comment"] == "none"
    assert mine(github) == [ours] and ours.body == CONFIG.marker + "\nstate"
    assert github.requests(path_contains="comments") == []


def test_a_token_writing_as_someone_untrusted_takes_its_comment_back(github, pull, status):
    """An App token without its bot in trusted-creators: the comment would never be found
    again, and every event would post one more."""
    github.token_users["t"] = "my-app[bot]"
    with pytest.raises(GpuCiError, match=r"@my-app\[bot\].*trusted-creators"):
        status("pull_request_target", pr_event("opened"))
    assert github.comments_of(REPO, 2) == []
    assert (
        status("pull_request_target", pr_event("opened"), trusted_creators="my-app[bot]")["comment"]
        == "created"
    )


def test_the_servers_comment_endpoints_answer_as_github_documents(github, pull):
    """issues/create-, get-, update-, list- and delete-comment, checked against GitHub's
    OpenAPI description by the server itself (a violation fails at stop())."""
    api, auth = f"{github.url}/repos/{REPO}/issues", {"Authorization": "token t"}
    made = requests.post(f"{api}/2/comments", json={"body": "hi"}, headers=auth, timeout=10)
    assert made.status_code == 201 and made.json()["user"]["login"] == BOT
    one = f"{api}/comments/{made.json()['id']}"
    assert requests.get(one, headers=auth, timeout=10).json()["body"] == "hi"
    edited = requests.patch(one, json={"body": "ho"}, headers=auth, timeout=10)
    assert edited.status_code == 200 and edited.json()["body"] == "ho"
    too_long = requests.patch(one, json={"body": "x" * 65537}, headers=auth, timeout=10)
    assert too_long.status_code == 422
    assert [
        c["body"] for c in requests.get(f"{api}/2/comments", headers=auth, timeout=10).json()
    ] == ["ho"]
    assert requests.delete(one, headers=auth, timeout=10).status_code == 204
    assert requests.get(one, headers=auth, timeout=10).status_code == 404
    assert github.contract_violations == []


class _RacingRest:
    """Two gpu-status events at once: both created a comment, and the other event has already
    deleted the newer one when this one deletes it too (GitHub answers 404)."""

    def __init__(self) -> None:
        body = CONFIG.marker + "\nolder"
        self.comments = [
            {"id": 11, "user": {"login": BOT}, "body": body},
            {"id": 12, "user": {"login": BOT}, "body": body},
        ]
        self.calls: list[tuple[str, str]] = []

    def get_pages(self, path, *, key=None, limit=3000):
        return list(self.comments)

    def post(self, path, body=None):  # pragma: no cover - there is a comment of ours
        raise AssertionError("nothing is created when ours exists")

    def patch(self, path, body):
        self.calls.append(("PATCH", path))
        return {}

    def delete(self, path):
        from gpu_ci.github.client import ApiError

        self.calls.append(("DELETE", path))
        raise ApiError(f"DELETE {path}", 404, "Not Found")


def test_a_duplicate_the_other_event_already_deleted_is_not_an_error():
    """Attack (two events at once): each removes the newer duplicate; the second DELETE of it
    answers 404, which must not fail the status job (the duplicate is gone, as wanted)."""
    rest = _RacingRest()
    out = pr_comment.sync(rest, CONFIG, REPO, 2, "new body")
    assert out.action == "updated" and out.comment_id == 11
    assert rest.calls == [
        ("DELETE", f"/repos/{REPO}/issues/comments/12"),
        ("PATCH", f"/repos/{REPO}/issues/comments/11"),
    ]


def _approved(github, number: int) -> None:
    github.repos[REPO].statuses[HEAD] = [
        github.status_json(
            github.repos[REPO],
            HEAD,
            {
                "state": "pending",
                "context": "GPU CI",
                "description": f"Approved by @maintainer for {HEAD[:12]}: GPU run queued.",
                "target_url": checks_url(number, REPO),
            },
            BOT,
        )
    ]


def test_closing_the_approved_pull_request_ends_its_approval(github, pull, status):
    """A later pull request at the same commit then waits for its own approval."""
    _approved(github, 2)
    out = status("pull_request_target", pr_event("closed", state="closed"))
    assert out["state"] == "pending"  # no result: a later pull request waits for approval
    assert out["description"] == (
        "Approval ended: #2 was closed. A pull request at this commit needs its own approval."
    )
    newest = github.repos[REPO].statuses[HEAD][0]
    assert newest["description"] == out["description"] and newest["creator"]["login"] == BOT
    assert not statuses.approval_status(github.repos[REPO].statuses[HEAD], "GPU CI")
    github.add_pull(REPO, PullRequest(9, HEAD, head_repo=FORK))
    reopened = status("pull_request_target", pr_event("opened", number=9))
    assert reopened["description"].startswith("Waiting for approval")


def test_closing_another_pull_request_or_after_the_result_leaves_the_status(github, pull, status):
    _approved(github, 5)
    assert status("pull_request_target", pr_event("closed", state="closed"))["state"] == ""
    github.repos[REPO].statuses[HEAD].insert(
        0,
        github.status_json(
            github.repos[REPO],
            HEAD,
            {"state": "failure", "context": "GPU CI", "description": "GPU tests failed."},
            BOT,
        ),
    )
    _before = list(github.repos[REPO].statuses[HEAD])
    assert status("pull_request_target", pr_event("closed", state="closed"))["state"] == ""
    assert github.repos[REPO].statuses[HEAD] == _before
