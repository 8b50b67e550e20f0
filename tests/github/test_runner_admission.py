"""The GPU runner's job-started hook (issue 26, item 4): a pull request that edits the GPU
workflow cannot reach a GPU runner unless a maintainer approved its head.

Driven as the runner drives a hook: the default variables of the job
(``GITHUB_REPOSITORY``, ``GITHUB_EVENT_NAME``, ``GITHUB_EVENT_PATH``,
``GITHUB_WORKFLOW_REF``, ``GITHUB_API_URL``) and the admin's variables, against the test
GitHub server; the end-to-end test runs ``deploy/runner-hooks/gpu-admission.sh`` with bash as
the runner does (``bash -e <file>``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpu_ci.commands.runner_admission import main
from gpu_ci.github import status as status_events
from testkit.github.approvals import checks_url
from testkit.github_server import FakeGitHub, PullRequest, WorkflowRun

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "deploy" / "runner-hooks" / "gpu-admission.sh"
REPO = "octo-org/gpu-project"
HEAD = "c0ffee" + "0" * 34
WORKFLOW = ".github/workflows/cuda-ci.yml"


FORK = "fork-owner/gpu-project"
RUN_ID = 4242
PULL_URL = checks_url(7, REPO)
APPROVED = "Approved by @maintainer for c0ffee000000: GPU run queued."


def _payload(tmp_path: Path, head: str | None = HEAD, number: int = 7) -> Path:
    """The fields the hook reads of a pull_request payload (GitHub's schema: head.sha)."""
    body: dict[str, Any] = {"action": "labeled", "number": number}
    if head is not None:
        body["pull_request"] = {"number": number, "head": {"sha": head, "ref": "feature"}}
    path = tmp_path / "event.json"
    path.write_text(json.dumps(body))
    return path


def _env(
    server: FakeGitHub,
    tmp_path: Path,
    *,
    event: str = "pull_request",
    ref: str = "refs/pull/7/merge",
    head: str | None = HEAD,
    number: int = 7,
    run: int = RUN_ID,
    attempt: int = 1,
    actor: str = "maintainer",
    workflow: str = WORKFLOW,
    **extra: str,
) -> dict[str, str]:
    env = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_EVENT_NAME": event,
        "GITHUB_EVENT_PATH": str(_payload(tmp_path, head, number)),
        "GITHUB_WORKFLOW_REF": f"{REPO}/{workflow}@{ref}",
        "GITHUB_RUN_ID": str(run),
        "GITHUB_RUN_ATTEMPT": str(attempt),
        "GITHUB_TRIGGERING_ACTOR": actor,
        "GITHUB_API_URL": server.url,
        "GPU_CI_ADMISSION_TOKEN": "admission-token-1234",
        "GPU_CI_ALLOWED_WORKFLOWS": WORKFLOW,
        "GPU_CI_HTTP_RETRIES": "0",
    }
    env.update(extra)
    return env


def _status(
    server: FakeGitHub,
    description: str,
    *,
    state: str = "pending",
    context: str = "GPU CI",
    creator: str = "github-actions[bot]",
    sha: str = HEAD,
    url: str = PULL_URL,
) -> dict[str, Any]:
    repo = server.repos[REPO]
    body = {"state": state, "description": description, "context": context, "target_url": url}
    status = server.status_json(repo, sha, body, creator)
    repo.statuses.setdefault(sha, []).insert(0, status)
    return status


def _run_link(run: int = RUN_ID, attempt: int = 1) -> str:
    return f"https://github.com/{REPO}/actions/runs/{run}/attempts/{attempt}"


def _pull(server: FakeGitHub, number: int = 7, state: str = "open") -> None:
    server.add_pull(REPO, PullRequest(number, HEAD, head_repo=FORK, state=state))


def _workflow_run(
    server: FakeGitHub, run: int = RUN_ID, path: str = WORKFLOW, actor: str = "maintainer"
) -> None:
    """GitHub's record of the job's run, created now (with the approval)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    server.add_run(
        REPO,
        WorkflowRun(run, "CUDA CI", path, HEAD, actor=actor, created_at=now, head_repo=FORK),
    )


def _approve(server: FakeGitHub, *, record: bool = False) -> None:
    """The maintainer's label approval of #7 at HEAD, and its open pull request and run."""
    _pull(server)
    _workflow_run(server)
    _status(server, APPROVED)
    if record:
        _status(server, "Approved by @maintainer: GPU run in progress.", url=_run_link())


@pytest.fixture
def server() -> Any:
    with FakeGitHub() as gh:
        gh.add_repo(REPO)
        yield gh


def _run(env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(env)
    return code, capsys.readouterr().out


def test_a_pull_request_job_whose_head_nobody_approved_is_refused(server, tmp_path, capsys):
    """The fork edited cuda-ci.yml (no gate, a job on the GPU runner): refused."""
    code, out = _run(_env(server, tmp_path), capsys)
    assert code == 1
    assert "::error title=GPU runner admission::" in out
    assert "rule 'approved head': c0ffee000000 carries no current approval in 'GPU CI'" in out
    assert "A maintainer approves #7 at this head" in out


def test_the_approved_run_is_admitted_before_gpu_status_recorded_it(server, tmp_path, capsys):
    """No record yet: the run is read and binds as gpu-status binds it (rule 2)."""
    _approve(server)
    code, out = _run(_env(server, tmp_path), capsys)
    assert code == 0, out
    assert f"admitted: run {RUN_ID} attempt 1 of {WORKFLOW} is the run @maintainer approved" in out
    assert [r.path.split("?")[0].rsplit("/", 2)[-2:] for r in server.requests("GET")] == [
        ["c0ffee" + "0" * 34, "statuses"],
        ["pulls", "7"],
        ["runs", str(RUN_ID)],
    ]


def test_the_recorded_run_is_admitted_without_reading_the_run(server, tmp_path, capsys):
    _approve(server, record=True)
    code, out = _run(_env(server, tmp_path), capsys)
    assert code == 0, out
    assert len(server.requests("GET")) == 2


def test_an_approval_written_by_anyone_but_the_trusted_creator_is_not_one(server, tmp_path, capsys):
    _approve(server)
    server.repos[REPO].statuses[HEAD][0]["creator"] = server.user_json("contributor")
    code, out = _run(_env(server, tmp_path), capsys)
    assert code == 1 and "carries no current approval" in out


def test_a_refusal_quoting_an_approval_is_not_one(server, tmp_path, capsys):
    _pull(server)
    _workflow_run(server)
    _status(server, "Not approved: approved by @maintainer is what they said")
    code, out = _run(_env(server, tmp_path), capsys)
    assert code == 1 and "carries no current approval" in out


def test_a_revocation_after_the_approval_refuses(server, tmp_path, capsys):
    _approve(server)
    _status(server, "Waiting for approval: a maintainer applies the label")  # newer
    code, out = _run(_env(server, tmp_path), capsys)
    assert code == 1 and "carries no current approval" in out


def test_a_later_refused_label_does_not_void_the_approval_of_the_commit(server, tmp_path, capsys):
    """A triage user's refused label (issue 26: "a refused label from someone without the
    role does not reset" the head) leaves the maintainer's approval of this commit standing."""
    _approve(server)
    _status(server, "Not approved: @triager has triage, the label needs write")
    code, out = _run(_env(server, tmp_path), capsys)
    assert code == 0 and "@maintainer approved" in out


def test_the_approval_context_is_compared_as_github_does_case_insensitively(
    server, tmp_path, capsys
):
    _approve(server)
    server.repos[REPO].statuses[HEAD][0]["context"] = "gpu ci"
    code, out = _run(_env(server, tmp_path), capsys)
    assert code == 0, out


def test_an_approval_of_another_commit_does_not_admit(server, tmp_path, capsys):
    _pull(server)
    _workflow_run(server)
    _status(server, "Approved by @maintainer for aaaaaaaaaaaa: GPU run queued.", sha="a" * 40)
    code, out = _run(_env(server, tmp_path), capsys)
    assert code == 1 and "rule 'approved head'" in out


@pytest.mark.parametrize(
    ("event", "ref", "admitted"),
    [
        ("push", "refs/heads/main", True),
        ("schedule", "refs/heads/main", True),
        ("workflow_dispatch", "refs/heads/main", True),
        ("push", "refs/heads/feature", False),  # a branch's own definition
        ("workflow_dispatch", "refs/heads/edited", False),
        ("pull_request_target", "refs/heads/main", False),  # no approved head in the payload
    ],
)
def test_trusted_events_of_the_allowed_file_on_the_default_branch(
    server, tmp_path, capsys, event, ref, admitted
):
    code, out = _run(_env(server, tmp_path, event=event, ref=ref, head=None), capsys)
    assert code == (0 if admitted else 1), out
    assert len(server.requests("GET")) <= 2
    if admitted:
        assert "from the default branch (main)" in out


def test_the_default_branch_comes_from_the_api_not_the_payload(server, tmp_path, capsys):
    server.repos[REPO].default_branch = "trunk"
    code, _ = _run(_env(server, tmp_path, event="push", ref="refs/heads/main", head=None), capsys)
    assert code == 1
    code, _ = _run(_env(server, tmp_path, event="push", ref="refs/heads/trunk", head=None), capsys)
    assert code == 0


def test_another_workflow_file_on_the_default_branch_is_not_admitted(server, tmp_path, capsys):
    env = _env(server, tmp_path, event="push", ref="refs/heads/main", head=None)
    env["GITHUB_WORKFLOW_REF"] = f"{REPO}/.github/workflows/new-gpu.yml@refs/heads/main"
    code, out = _run(env, capsys)
    assert code == 1 and "allowed workflows (.github/workflows/cuda-ci.yml)" in out


def test_a_workflow_of_another_repository_is_refused(server, tmp_path, capsys):
    env = _env(server, tmp_path)
    env["GITHUB_WORKFLOW_REF"] = f"fork-owner/gpu-project/{WORKFLOW}@refs/heads/main"
    code, out = _run(env, capsys)
    assert code == 1 and "is not a workflow of octo-org/gpu-project" in out
    assert server.requests() == []


@pytest.mark.parametrize("status", [401, 404, 500])
def test_api_errors_fail_closed(server, tmp_path, capsys, status):
    _approve(server)
    server.inject("GET", r"/statuses", status, times=10)
    code, out = _run(_env(server, tmp_path), capsys)
    assert code == 1
    assert "this GPU runner refused the job" in out


def test_no_token_refuses_and_the_jobs_token_is_not_used(server, tmp_path, capsys):
    _approve(server)
    env = _env(server, tmp_path, GITHUB_TOKEN="job-token-abcdef")
    del env["GPU_CI_ADMISSION_TOKEN"]
    code, out = _run(env, capsys)
    assert code == 1 and "GPU_CI_ADMISSION_TOKEN is not set" in out
    assert server.requests() == []


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("GPU_CI_ALLOWED_WORKFLOWS", "cuda-ci.yml", "give workflow files as"),
        ("GPU_CI_TRUSTED_EVENTS", "push,pull_request_target", "only push, schedule"),
    ],
)
def test_unusable_admin_settings_refuse_with_what_to_fix(
    server, tmp_path, capsys, variable, value, message
):
    code, out = _run(_env(server, tmp_path, **{variable: value}), capsys)
    assert code == 1 and message in out


def test_the_hook_script_end_to_end_as_the_runner_runs_it(server, tmp_path):
    """``bash -e <file>`` with the job's variables: refused, then admitted after approval."""
    env = dict(os.environ, **_env(server, tmp_path), GPU_CI_PYTHON=sys.executable)
    env.pop("GITHUB_TOKEN", None)
    refused = subprocess.run(
        ["bash", "-e", str(HOOK)], env=env, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "::error title=GPU runner admission::" in refused.stdout
    _approve(server)
    admitted = subprocess.run(
        ["bash", "-e", str(HOOK)], env=env, capture_output=True, text=True, timeout=60
    )
    assert admitted.returncode == 0, admitted.stdout + admitted.stderr
    assert "admitted" in admitted.stdout


def test_the_hook_script_refuses_without_its_python(tmp_path):
    env = dict(os.environ, GPU_CI_PYTHON=str(tmp_path / "missing" / "python"))
    out = subprocess.run(
        ["bash", "-e", str(HOOK)], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 1 and "refusing the job" in out.stdout


def test_an_allowed_workflow_written_with_a_leading_dot_slash_is_that_file(
    server, tmp_path, capsys
):
    """`./.github/workflows/cuda-ci.yml` names the same file: `lstrip("./")` ate the dot of
    `.github` and refused the runner's whole configuration."""
    env = _env(
        server,
        tmp_path,
        event="push",
        ref="refs/heads/main",
        head=None,
        GPU_CI_ALLOWED_WORKFLOWS=f"./{WORKFLOW}",
    )
    code, out = _run(env, capsys)
    assert code == 0 and "admitted" in out


# -- what was approved, and nothing else: a hostile fork author's attempts, through the
# shipped hook script as the runner runs it ---------------------------------------------------


def _hook(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ, **env, GPU_CI_PYTHON=sys.executable)
    full.pop("GITHUB_TOKEN", None)
    return subprocess.run(["bash", "-e", str(HOOK)], env=full, capture_output=True, text=True)


def _close(server: FakeGitHub, number: int) -> None:
    """gpu-status on ``pull_request_target: closed`` of ``number``, as the example runs it."""
    pr = server.repos[REPO].pulls[number]
    pr.state = "closed"
    payload = {
        "action": "closed",
        "number": number,
        "pull_request": {"number": number, "state": "closed", "head": {"sha": pr.head_sha}},
    }
    outcome = status_events.for_pull_event(
        status_events.make_config("GPU CI", "CUDA CI", "write", ["tests"]),
        "closed",
        payload,
        status_events.GateOutputs(),
        "https://github.com",
        REPO,
        server.repos[REPO].statuses.get(pr.head_sha, []),
    )
    assert outcome.status is not None, outcome.note
    body = outcome.status.body("GPU CI")
    _status(server, body["description"], state=body["state"], url=body["target_url"])


def test_an_approval_of_a_closed_pull_request_admits_no_other_at_that_commit(server, tmp_path):
    """Approve commit X of #1, close #1, open #7 at X: #7's jobs are refused, before and
    after gpu-status ends #1's approval."""
    _pull(server, number=1)
    _workflow_run(server)
    _status(server, APPROVED, url=checks_url(1, REPO))
    _pull(server, number=7)
    before = _hook(_env(server, tmp_path, number=7))
    assert before.returncode == 1
    assert "rule 'its own pull request': c0ffee000000 was approved for #1, not for #7" in (
        before.stdout
    )
    assert "a maintainer approves #7" in before.stdout
    _close(server, 1)
    assert server.repos[REPO].statuses[HEAD][0]["description"].startswith("Approval ended: #1")
    after = _hook(_env(server, tmp_path, number=7))
    assert after.returncode == 1 and "rule 'approved head'" in after.stdout
    again = _hook(_env(server, tmp_path, number=1, ref="refs/pull/1/merge"))
    assert again.returncode == 1 and "rule 'approved head'" in again.stdout


def test_a_closed_pull_request_admits_nothing_even_before_its_approval_ends(server, tmp_path):
    _approve(server, record=True)
    server.repos[REPO].pulls[7].state = "closed"
    out = _hook(_env(server, tmp_path))
    assert out.returncode == 1 and "rule 'open at that head': #7 is closed" in out.stdout


@pytest.mark.parametrize(
    ("event", "workflow", "actor", "rule"),
    [
        # the author's comment review fires their own workflow file at the approved head
        ("pull_request_review", ".github/workflows/miner.yml", "contributor", "pull_request only"),
        ("pull_request_review", WORKFLOW, "contributor", "pull_request only"),
        # the maintainer's label fires every `pull_request: labeled` file of the merge commit
        ("pull_request", ".github/workflows/miner.yml", "maintainer", "covered workflow"),
    ],
)
def test_another_event_or_workflow_file_at_an_approved_head_is_refused(
    server, tmp_path, event, workflow, actor, rule
):
    _approve(server)
    _workflow_run(server, run=5151, path=workflow, actor=actor)
    out = _hook(_env(server, tmp_path, event=event, workflow=workflow, actor=actor, run=5151))
    assert out.returncode == 1, out.stdout
    assert f"rule '{rule}'" in out.stdout


def test_a_run_of_the_approved_file_not_started_by_the_approval_is_refused(server, tmp_path):
    """The author's own ``pull_request`` run of cuda-ci.yml (a push of an empty commit is a
    new head; a ``synchronize`` re-trigger of this one): not the approver's."""
    _approve(server)
    _workflow_run(server, run=5151, actor="contributor")
    out = _hook(_env(server, tmp_path, run=5151, actor="contributor"))
    assert out.returncode == 1
    assert "rule 'the approval's run': run started by @contributor" in out.stdout


@pytest.mark.parametrize("result", ["failure", "success"])
def test_after_the_approved_run_finished_further_runs_are_refused(server, tmp_path, result):
    _approve(server, record=True)
    _status(server, f"GPU tests {result} (approved by @maintainer).", state=result, url=_run_link())
    _workflow_run(server, run=5151)
    out = _hook(_env(server, tmp_path, run=5151))
    assert out.returncode == 1
    assert f"the approval started run {RUN_ID}" in out.stdout
    assert "a maintainer re-runs it or approves again" in out.stdout


@pytest.mark.parametrize(
    ("who", "role", "admitted"), [("maint2", "write", True), ("contributor", "read", False)]
)
def test_a_re_run_of_the_approved_run_needs_the_role(server, tmp_path, who, role, admitted):
    """A maintainer presses "Re-run" after the run failed: that approval's run again."""
    server.repos[REPO].roles[who] = role
    _approve(server, record=True)
    _status(server, "GPU tests failed (approved by @maintainer).", state="failure", url=_run_link())
    out = _hook(_env(server, tmp_path, attempt=2, actor=who))
    assert out.returncode == (0 if admitted else 1), out.stdout
    if admitted:
        assert f"a re-run by @{who} (write)" in out.stdout
    else:
        assert f"attempt 2: the re-run was started by @{who} (read); a re-run needs write" in (
            out.stdout
        )


def test_the_watchdogs_retry_of_the_approved_run_is_admitted(server, tmp_path):
    _approve(server, record=True)
    _status(
        server,
        "GPU run retried after the runner was lost (attempt 2); attempt 1: lost",
        url=_run_link(attempt=2),
    )
    out = _hook(_env(server, tmp_path, attempt=2, actor="github-actions[bot]"))
    assert out.returncode == 0, out.stdout
    assert "gpu-watchdog's retry (@github-actions[bot])" in out.stdout
    assert not server.requests("GET", "/permission")


def test_attempt_one_started_by_someone_else_is_refused(server, tmp_path, capsys):
    _approve(server, record=True)
    code, out = _run(_env(server, tmp_path, actor="contributor"), capsys)
    assert code == 1 and "rule 'who started it': attempt 1 was started by @contributor" in out


def test_a_relay_bot_starts_the_approved_run_for_the_commenter(server, tmp_path, capsys):
    _pull(server)
    _workflow_run(server, actor="gpu-relay[bot]")
    _status(server, APPROVED)
    env = _env(server, tmp_path, actor="gpu-relay[bot]")
    code, out = _run(env, capsys)
    assert code == 1 and "not by the approver @maintainer" in out
    code, out = _run(dict(env, GPU_CI_RELAY_LOGINS="gpu-relay[bot]"), capsys)
    assert code == 0, out


def test_the_run_github_records_must_be_of_the_jobs_file_and_head(server, tmp_path, capsys):
    """Before any record, the run is read: GitHub's record, not the job's variables, decides."""
    _pull(server)
    _workflow_run(server, path=".github/workflows/miner.yml")
    _status(server, APPROVED)
    code, out = _run(_env(server, tmp_path), capsys)
    assert code == 1
    assert "rule 'the approval's run': the run is of .github/workflows/miner.yml" in out


@pytest.mark.parametrize("action", ["assigned", "review_requested", "edited", "unlabeled"])
def test_an_approvers_other_pull_request_event_is_not_the_approved_run(server, tmp_path, action):
    """Red team (issue 44): the fork's cuda-ci.yml listens to every ``pull_request``
    activity and is renamed so that gpu-status's ``workflow_run`` never records a run. The
    maintainer assigns themself (or edits, requests a review) ten minutes before the label:
    that run's GPU job, held back by a sleeping job, starts after the approval. Only the
    run the label (or a trusted author's push) started is the approval's."""
    _approve(server)
    earlier = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 600))
    server.add_run(
        REPO,
        WorkflowRun(
            5151, "x", WORKFLOW, HEAD, actor="maintainer", created_at=earlier, head_repo=FORK
        ),
    )
    env = _env(server, tmp_path, run=5151)
    event = json.loads(Path(env["GITHUB_EVENT_PATH"]).read_text())
    Path(env["GITHUB_EVENT_PATH"]).write_text(json.dumps(dict(event, action=action)))
    out = _hook(env)
    assert out.returncode == 1, out.stdout
    assert f"rule 'approving activity': a '{action}' event of the pull request" in out.stdout


@pytest.mark.parametrize(("label", "admitted"), [("bug", False), ("cuda ci", True)])
def test_with_gate_labels_only_an_approving_labels_run_is_admitted(
    server, tmp_path, label, admitted
):
    """Red team residue (issue 44): the approver adds another label (``bug``) minutes before
    the gate label, and a fork's renamed workflow keeps gpu-status from recording the run.
    With ``GPU_CI_GATE_LABELS`` the hook admits only a run a gate label started."""
    _approve(server)
    env = _env(server, tmp_path, GPU_CI_GATE_LABELS="CUDA CI, gpu-ci-relay")
    event = json.loads(Path(env["GITHUB_EVENT_PATH"]).read_text())
    Path(env["GITHUB_EVENT_PATH"]).write_text(json.dumps(dict(event, label={"name": label})))
    out = _hook(env)
    assert (out.returncode == 0) is admitted, out.stdout
    if not admitted:
        assert "rule 'approving label': the run was started by the label 'bug'" in out.stdout


# -- what the approval's own record covers --------------------------------------------------

MINER = ".github/workflows/miner.yml"


@pytest.mark.parametrize(
    ("link", "named"),
    [
        (
            checks_url(7, REPO, covers=(".github/workflows/other.yml",)),
            ".github/workflows/other.yml",
        ),
        (f"https://github.com/{REPO}/pull/7/checks", "none"),  # a link that names no file
    ],
)
def test_a_workflow_file_the_approval_does_not_cover_is_refused(server, tmp_path, link, named):
    """The runner admin allows cuda-ci.yml, but the approval's record covers another file
    (or none): its run is not one the maintainer approved."""
    _pull(server)
    _workflow_run(server)
    _status(server, APPROVED, url=link)
    out = _hook(_env(server, tmp_path))
    assert out.returncode == 1, out.stdout
    assert "rule 'covered workflow': .github/workflows/cuda-ci.yml is not a GPU workflow" in (
        out.stdout
    )
    assert f"covers ({named}" in out.stdout


def test_a_forged_record_widening_the_approval_is_refused(server, tmp_path):
    """A status from another writer (a CI app the pull request can steer) re-approving the
    head with its own link naming miner.yml, and a run of miner.yml at the approved head:
    only the trusted record counts, and it covers cuda-ci.yml alone, even where the admin's
    allow-list names miner.yml."""
    _approve(server)
    _status(server, APPROVED, url=checks_url(7, REPO, covers=(MINER,)), creator="ci-app[bot]")
    _workflow_run(server, run=5151, path=MINER)
    env = _env(
        server, tmp_path, workflow=MINER, run=5151, GPU_CI_ALLOWED_WORKFLOWS=f"{WORKFLOW},{MINER}"
    )
    out = _hook(env)
    assert out.returncode == 1, out.stdout
    assert f"rule 'covered workflow': {MINER} is not a GPU workflow file the approval" in (
        out.stdout
    )
    assert f"covers ({WORKFLOW})" in out.stdout


def test_a_maintainers_re_run_after_the_head_moved_is_refused(server, tmp_path):
    server.repos[REPO].roles["maint2"] = "write"
    _approve(server, record=True)
    _status(server, "GPU tests failed (approved by @maintainer).", state="failure", url=_run_link())
    server.repos[REPO].pulls[7].head_sha = "d" * 40
    out = _hook(_env(server, tmp_path, attempt=2, actor="maint2"))
    assert out.returncode == 1, out.stdout
    assert "rule 'open at that head': #7 is open at dddddddddddd" in out.stdout
