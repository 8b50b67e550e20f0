"""The comment relay under act against the local server, one event at a time.

act does not chain events, so each test runs what GitHub would: the comment workflow
(examples/cuda-ci-comment.yml) on ``issue_comment``; the server records the label and the
token's account that applied it; then the GPU workflow (examples/cuda-ci.yml, its relay
lines on) on the ``pull_request`` ``labeled`` event that label makes. A maintainer's
``/gpu-ci run <sha>`` ends in a ``pull_request`` GPU run at that SHA, named for the
commenter; other comments relay nothing. The rules' other cases: tests/github/.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from testkit.act_runner import run_act
from testkit.events import on_pull_request, pull_request_labeled
from testkit.github_server import PullRequest
from testkit.shared import ROOT, webhook

pytestmark = pytest.mark.e2e

REPO = "Codertocat/Hello-World"
FORK = "contributor/Hello-World"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
RELAY = ROOT / "examples" / "cuda-ci-comment.yml"
GPU = ROOT / "examples" / "cuda-ci.yml"
APP_TOKEN = "ghs_e2e_relay_app"
APP = "gpu-ci-relay"
BOT = f"{APP}[bot]"


@pytest.fixture
def server(github):
    # a fork's pull request (its head repository is another one)
    github.add_repo(REPO, roles={"maint": "maintain"})
    github.add_pull(REPO, PullRequest(2, HEAD, head_repo=FORK))
    github.token_users[APP_TOKEN] = BOT
    return github


def comment(body: str, commenter: str, action: str = "created") -> dict:
    return on_pull_request(webhook(f"issue_comment.{action}"), body=body, commenter=commenter)


def load(path: Path) -> dict:
    workflow = yaml.safe_load(path.read_text(encoding="utf-8"))
    workflow["on"] = workflow.pop(True)  # YAML 1.1 reads the key `on` as true
    return workflow


def write(workflow: dict, tmp_path: Path, name: str) -> Path:
    path = tmp_path / "wf" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(workflow, sort_keys=False), encoding="utf-8")
    return path


def relay_workflow(tmp_path: Path) -> Path:
    """The relay example with the App token step played by a step that prints a token the
    server knows as the App's (act cannot reach GitHub to mint one)."""
    workflow = load(RELAY)
    job = workflow["jobs"]["relay"]
    job.pop("environment")  # act has no deployment environments
    app = job["steps"][0]
    assert app["id"] == "app" and app["uses"].startswith("actions/create-github-app-token@")
    job["steps"][0] = {
        "id": "app",
        "run": f'echo "token={APP_TOKEN}" >> "$GITHUB_OUTPUT"; '
        f'echo "app-slug={APP}" >> "$GITHUB_OUTPUT"',
    }
    return write(workflow, tmp_path, RELAY.name)


def gpu_workflow(tmp_path: Path) -> Path:
    """cuda-ci.yml with its commented relay lines on, the GPU job's steps replaced by a
    probe (act has no GPU, no conda); its needs, condition and runs-on stay the example's."""
    text = GPU.read_text(encoding="utf-8")
    for line in ("comment-command: /gpu-ci run", "tiers: mini, full", "relay-bot: "):
        assert f"# {line}" in text, line
        text = text.replace(f"# {line}", line)
    text = text.replace("my-gpu-ci-relay[bot]", BOT)
    workflow = yaml.safe_load(text)
    workflow["on"] = workflow.pop(True)
    gate = workflow["jobs"]["gate"]
    gate["steps"][0]["with"]["gpu-runs-on"] = '["self-hosted", "gpu"]'
    for name in ("labeled-by", "approval", "tiers"):
        gate["outputs"][name] = "${{ steps.gate.outputs." + name + " }}"
    probe = (
        'python3 -c "import json, os; print(json.dumps({k.lower(): os.environ[k] for k in '
        "('SHA', 'TIERS', 'APPROVER', 'HOW', 'EVENT')}))\" >> \"$E2E_OUT\""
    )
    workflow["jobs"]["tests"]["steps"] = [
        {
            "name": "probe",
            "env": {
                "SHA": "${{ needs.gate.outputs.sha }}",
                "TIERS": "${{ needs.gate.outputs.tiers }}",
                "APPROVER": "${{ needs.gate.outputs.labeled-by }}",
                "HOW": "${{ needs.gate.outputs.approval }}",
                "EVENT": "${{ github.event_name }}",
            },
            "run": probe,
        }
    ]
    return write(workflow, tmp_path, GPU.name)


def labeled_by_the_relay() -> dict:
    """The ``labeled`` event GitHub sends for the App's label on the fork's pull request."""
    event = pull_request_labeled("CUDA CI", BOT)
    event["sender"]["type"] = "Bot"
    owner, name = FORK.split("/")
    event["pull_request"]["head"]["repo"] = {
        **event["pull_request"]["head"]["repo"],
        "full_name": FORK,
        "owner": {"login": owner},
        "fork": True,
    }
    return event


def test_a_maintainers_command_is_relayed_and_runs_the_gpu_job_in_their_name(
    server, tool_cache, tmp_path
):
    body = f"/gpu-ci run {HEAD} full"  # a fork: the full SHA
    server.add_issue_comment(REPO, 2, "maint", body)  # GitHub holds the comment it sent
    relayed = run_act(
        tmp_path / "relay",
        relay_workflow(tmp_path),
        "issue_comment",
        comment(body, "maint"),
        tool_cache=tool_cache,
        repository=REPO,
        env={"GITHUB_API_URL": server.url},
    )
    assert relayed.returncode == 0, relayed.log
    # the label, applied by the App's account (its token), not by GITHUB_TOKEN's
    assert server.label_writes == [("POST", 2, "CUDA CI", BOT)]
    assert server.repos[REPO].pulls[2].labels == ["CUDA CI"]
    assert "relayed as 'CUDA CI' by gpu-ci-relay[bot]" in relayed.log
    assert "GPU tests" not in relayed.log  # no GPU job in the comment workflow
    server.log.clear()

    ran = run_act(
        tmp_path / "labeled",
        gpu_workflow(tmp_path),
        "pull_request",
        labeled_by_the_relay(),
        tool_cache=tool_cache,
        repository=REPO,
        env={"GITHUB_API_URL": server.url},
    )
    assert ran.returncode == 0, ran.log
    assert ran.outputs["sha"] == HEAD
    assert json.loads(ran.outputs["tiers"]) == ["full"]
    assert (ran.outputs["approver"], ran.outputs["how"], ran.outputs["event"]) == (
        "maint",
        "comment",
        "pull_request",
    )
    assert [(r.method, r.path) for r in server.log] == [
        ("GET", f"/repos/{REPO}/pulls/2"),
        ("GET", f"/repos/{REPO}/issues/2/comments"),
        ("GET", f"/repos/{REPO}/collaborators/maint/permission"),
    ]


@pytest.mark.parametrize(
    ("body", "commenter", "reason"),
    [
        (f"/gpu-ci run {HEAD}", "stranger", "stranger has the 'read' role"),
        ("/gpu-ci run 1111111", "maint", "the comment names 1111111, but the head"),
        ("/gpu-ci run full", "maint", f"state the head you reviewed, '/gpu-ci run {HEAD} full'"),
    ],
    ids=["stranger", "stale-sha", "missing-sha"],
)
def test_no_relay_without_a_command_of_the_head_by_a_maintainer(
    act, server, tmp_path, body, commenter, reason
):
    result = act(
        relay_workflow(tmp_path),
        "issue_comment",
        comment(body, commenter),
        repository=REPO,
        env={"GITHUB_API_URL": server.url, "GPU_CI_PRINT_SUMMARY": "1"},
    )
    assert result.returncode == 0, result.log
    assert reason.replace("'", "") in result.log.replace("'", "")  # the summary says it
    assert "| decision | skip |" in result.log
    assert server.label_writes == []
