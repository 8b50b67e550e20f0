"""Runner admission: only the run a label approval started reaches the GPU runner.

The hook admits a pull request job of a ``labeled`` run or of a trusted author's new head
(``opened``, ``reopened``, ``synchronize``, ``ready_for_review``). The attack: a fork's
copy of cuda-ci.yml (renamed, so that gpu-status records no run) listens to
``ready_for_review`` and holds its GPU job back with a sleeping job; the maintainer marks
the draft ready, then applies the label minutes later. gpu-status posts nothing on
``ready_for_review``, so the approval stands, and the maintainer's ``ready_for_review``
run must not pass for the label approval's run: a new-head run counts only when the
approver authored the pull request. Likewise a ``labeled`` run of another label (``bug``)
under the shipped runner values, which set ``GPU_CI_GATE_LABELS``. Driven as
tests/github/test_runner_admission.py drives the hook, against the test GitHub server.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from gpu_ci.commands.runner_admission import main
from testkit.github.approvals import checks_url, post
from testkit.github_server import FakeGitHub, PullRequest, WorkflowRun

REPO = "octo-org/gpu-project"
FORK = "fork-owner/gpu-project"
HEAD = "c0ffee" + "0" * 34
WORKFLOW = ".github/workflows/cuda-ci.yml"
APPROVED = "Approved by @maintainer for c0ffee000000: GPU run queued."


@pytest.fixture
def server() -> Any:
    with FakeGitHub() as gh:
        gh.add_repo(REPO)
        yield gh


def _env(server: FakeGitHub, tmp_path: Path, action: str, run: int, **extra: str) -> dict:
    payload = {
        "action": action,
        "number": 7,
        "pull_request": {
            "number": 7,
            "head": {"sha": HEAD, "ref": "feature"},
            "user": {"login": "contributor"},  # the author: not the approver
        },
        "sender": {"login": "maintainer"},
    }
    path = tmp_path / "event.json"
    path.write_text(json.dumps(payload))
    return {
        "GITHUB_ACTIONS": "true",
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_EVENT_PATH": str(path),
        "GITHUB_WORKFLOW_REF": f"{REPO}/{WORKFLOW}@refs/pull/7/merge",
        "GITHUB_RUN_ID": str(run),
        "GITHUB_RUN_ATTEMPT": "1",
        "GITHUB_TRIGGERING_ACTOR": "maintainer",
        "GITHUB_API_URL": server.url,
        "GPU_CI_ADMISSION_TOKEN": "admission-token-1234",
        "GPU_CI_ALLOWED_WORKFLOWS": WORKFLOW,
        "GPU_CI_HTTP_RETRIES": "0",
        **extra,
    }


def _approve(server: FakeGitHub, description: str = APPROVED) -> None:
    """The maintainer's label approval of fork PR #7 at HEAD."""
    server.add_pull(REPO, PullRequest(7, HEAD, head_repo=FORK))
    post(server, description, repo=REPO, sha=HEAD, url=checks_url(7, REPO))


@pytest.mark.parametrize("gate_labels", ["", "CUDA CI"])
def test_the_maintainers_ready_for_review_run_is_not_their_label_approvals_run(
    server, tmp_path, capsys, gate_labels
):
    """The maintainer marks the draft ready, then labels it: its ready_for_review run gets in."""
    _approve(server)
    earlier = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 600))
    server.add_run(
        REPO,
        WorkflowRun(
            5151, "x", WORKFLOW, HEAD, actor="maintainer", created_at=earlier, head_repo=FORK
        ),
    )
    extra = {"GPU_CI_GATE_LABELS": gate_labels} if gate_labels else {}
    code = main(_env(server, tmp_path, "ready_for_review", 5151, **extra))
    out = capsys.readouterr().out
    assert code == 1, out
    assert "rule 'approving activity'" in out


@pytest.mark.parametrize("action", ["opened", "synchronize", "reopened", "ready_for_review"])
def test_a_trusted_authors_own_new_head_run_is_still_admitted(server, tmp_path, capsys, action):
    """The gate approved the author's own head in the author's name: their run gets in."""
    _approve(server, "Approved by @contributor for c0ffee000000: GPU run queued.")
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    server.add_run(
        REPO,
        WorkflowRun(5353, "x", WORKFLOW, HEAD, actor="contributor", created_at=now, head_repo=FORK),
    )
    env = _env(server, tmp_path, action, 5353, GITHUB_TRIGGERING_ACTOR="contributor")
    code = main(env)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "approved for #7" in out


def _shipped_runner_env() -> dict[str, str]:
    """The admin's variables as the shipped ARC values set them."""
    import yaml

    root = Path(__file__).resolve().parents[2]
    values = yaml.safe_load((root / "deploy" / "arc" / "values-whole-gpu.yaml").read_text())
    runner = next(c for c in values["template"]["spec"]["containers"] if c["name"] == "runner")
    return {e["name"]: str(e["value"]) for e in runner.get("env") or [] if "value" in e}


def test_the_shipped_runner_values_refuse_the_run_of_another_label(server, tmp_path, capsys):
    """The maintainer adds ``bug`` minutes before the gate label: shipped values admit that run."""
    _approve(server)
    earlier = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 600))
    server.add_run(
        REPO,
        WorkflowRun(
            5252, "x", WORKFLOW, HEAD, actor="maintainer", created_at=earlier, head_repo=FORK
        ),
    )
    env = _env(server, tmp_path, "labeled", 5252)
    shipped = _shipped_runner_env()
    assert shipped["GPU_CI_ALLOWED_WORKFLOWS"] == WORKFLOW
    env.update(shipped)
    event = json.loads(Path(env["GITHUB_EVENT_PATH"]).read_text())
    Path(env["GITHUB_EVENT_PATH"]).write_text(json.dumps(dict(event, label={"name": "bug"})))
    code = main(env)
    out = capsys.readouterr().out
    assert code == 1, out
