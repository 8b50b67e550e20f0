"""The comment workflow (examples/cuda-ci-comment.yml) under act against the local server:
a maintainer's ``/gpu-ci run <head>`` runs the GPU job at that commit, without a token or a
secret in it, and the status and result jobs post "GPU CI" on that commit; a stranger's
comment, an edited comment, a stale and a missing SHA do not run it, each with its reason in
the summary. One act run per scenario; the rules' other cases are covered in
tests/github/test_comment_*.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from testkit.events import on_pull_request
from testkit.github_server import PullRequest
from testkit.shared import ROOT, webhook

pytestmark = pytest.mark.e2e

REPO = "Codertocat/Hello-World"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
EXAMPLE = ROOT / "examples" / "cuda-ci-comment.yml"
SECRET = "e2e-token"


@pytest.fixture
def server(github):
    # a fork's pull request (its head repository is another one)
    github.add_repo(REPO, roles={"maint": "maintain"})
    github.add_pull(REPO, PullRequest(2, HEAD, head_repo="contributor/Hello-World"))
    return github


def comment(body: str, commenter: str, action: str = "created") -> dict:
    return on_pull_request(webhook(f"issue_comment.{action}"), body=body, commenter=commenter)


def probe_workflow(tmp_path: Path) -> Path:
    """The example with the GPU job's steps replaced by a probe (act has no GPU, no conda):
    its permissions, needs, condition and runs-on stay the example's; the gate's runner
    value names a label act maps to this host."""
    workflow = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    workflow["on"] = workflow.pop(True)  # YAML 1.1 reads the key `on` as true
    gate_step = workflow["jobs"]["gate"]["steps"][0]
    gate_step["with"]["gpu-runs-on"] = '["self-hosted", "gpu"]'
    tests = workflow["jobs"]["tests"]
    probe = (
        'python3 -c "import json, os; print(json.dumps({'
        "'tested_sha': os.environ['SHA'], 'tiers': os.environ['TIERS'], "
        "'env_holds_the_token': any(os.environ['SECRET_VALUE'] in v for k, v in "
        'os.environ.items() if k != \'SECRET_VALUE\')}))" >> "$E2E_OUT"'
    )
    tests["steps"] = [
        {
            "name": "probe",
            "env": {
                "SHA": "${{ needs.gate.outputs.sha }}",
                "TIERS": "${{ needs.gate.outputs.tiers }}",
                "SECRET_VALUE": SECRET,
            },
            "run": probe,
        }
    ]
    path = tmp_path / "wf" / EXAMPLE.name
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(workflow, sort_keys=False), encoding="utf-8")
    return path


def test_a_maintainers_command_runs_the_gpu_job_at_the_head_without_token_or_secrets(
    act, server, tmp_path
):
    result = act(
        probe_workflow(tmp_path),
        "issue_comment",
        comment(f"/gpu-ci run {HEAD} full", "maint"),  # a fork: the full SHA
        repository=REPO,
        env={"GITHUB_API_URL": server.url},
        secrets={"GITHUB_TOKEN": SECRET},
    )
    assert result.returncode == 0, result.log
    assert result.outputs["tested_sha"] == HEAD
    assert json.loads(result.outputs["tiers"]) == ["full"]
    assert result.outputs["env_holds_the_token"] is False
    assert "pull request #2 comes from a fork" in result.log
    # the status job (after the gate) and the result job (after the GPU job) post "GPU CI" on
    # the approved commit, both linking this run; only they call the API besides the gate
    posted = server.repos[REPO].statuses[HEAD]
    assert [(s["state"], s["context"]) for s in posted] == [
        ("success", "GPU CI"),
        ("pending", "GPU CI"),
    ]
    assert posted[1]["description"] == (
        f"Approved by @maint on #2 for {HEAD[:12]} by comment: GPU run in progress."
    )
    assert posted[0]["description"] == (
        f"GPU tests passed on {HEAD[:12]} (approved by @maint by comment)."
    )
    assert posted[0]["target_url"] == posted[1]["target_url"]
    assert re.fullmatch(
        rf"https?://[^/]+/{REPO}/actions/runs/\d+/attempts/\d+", posted[0]["target_url"]
    )
    assert [(r.method, r.path) for r in server.log] == [
        ("GET", f"/repos/{REPO}/collaborators/maint/permission"),
        ("GET", f"/repos/{REPO}/pulls/2"),
        ("POST", f"/repos/{REPO}/statuses/{HEAD}"),
        ("GET", f"/repos/{REPO}/commits/{HEAD}/statuses"),
        ("POST", f"/repos/{REPO}/statuses/{HEAD}"),
    ]


@pytest.mark.parametrize(
    ("body", "commenter", "action", "reason"),
    [
        (f"/gpu-ci run {HEAD}", "stranger", "created", "stranger has the 'read' role"),
        (f"/gpu-ci run {HEAD}", "maint", "edited", "the comment was edited"),
        ("/gpu-ci run 1111111", "maint", "created", "the comment names 1111111, but the head"),
        ("/gpu-ci run", "maint", "created", f"state the head you reviewed, '/gpu-ci run {HEAD}'"),
    ],
    ids=["stranger", "edited", "stale-sha", "missing-sha"],
)
def test_no_run_without_a_new_command_of_the_head_by_a_maintainer(
    act, server, body, commenter, action, reason
):
    result = act(
        EXAMPLE,
        "issue_comment",
        comment(body, commenter, action),
        job="gate",
        repository=REPO,
        env={"GITHUB_API_URL": server.url, "GPU_CI_PRINT_SUMMARY": "1"},
    )
    assert result.returncode == 0, result.log
    assert result.outputs["run"] == "false"
    assert reason in result.outputs["reason"]
    assert reason.replace("'", "") in result.log.replace("'", "")  # the summary says it too
    assert "| decision | skip |" in result.log
