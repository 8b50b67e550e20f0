"""gpu-gate end to end through the CLI, PyGithub and the loopback GitHub server."""

from __future__ import annotations

import pytest

from testkit.github.runs import gate_env
from testkit.github_server import PullRequest
from testkit.shared import webhook

REPO = "Codertocat/Hello-World"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"


@pytest.fixture
def server(github):
    github.add_repo(
        REPO,
        roles={
            "Codertocat": "write",
            "tri": "triage",
            "mai": "maintain",
            "legacy": "maintain",
            "reader": "read",
        },
        legacy_only={"legacy"},
    )
    github.add_pull(
        REPO,
        PullRequest(
            2,
            HEAD,
            labels=["CUDA CI"],
            files=[f"docs/p{i}.md" for i in range(230)] + ["kernels/gemm.cu"],
        ),
    )
    return github


def gate(
    run_cli,
    server,
    *,
    sender="Codertocat",
    label="CUDA CI",
    args=(),
    payload=None,
    event_name="pull_request",
    env=None,
):
    event = payload or webhook("pull_request.labeled")
    if payload is None:
        event["label"]["name"] = label
        event["sender"]["login"] = sender
    full_env = {**gate_env(server, REPO), **(env or {})}
    return run_cli(["gpu-gate", *args], full_env, event=event, event_name=event_name)


def test_maintainer_label_runs_exactly_the_labelled_commit(run_cli, server):
    result = gate(run_cli, server, env={"INPUT_GPU_RUNS_ON": '["self-hosted", "gpu"]'})
    assert result.returncode == 0, result.stdout
    out = result.outputs
    assert out["run"] == "true"
    assert out["sha"] == HEAD
    assert out["pr-number"] == "2"
    assert out["labeled-by"] == "Codertocat"
    assert out["permission"] == "write"
    assert out["runs-on"] == '["self-hosted","gpu"]'
    # at most two REST calls without paths
    assert [r.path for r in server.log] == [
        f"/repos/{REPO}/collaborators/Codertocat/permission",
        f"/repos/{REPO}/pulls/2",
    ]
    assert server.log[0].headers["Authorization"] == "token ghs_secret"
    assert "::add-mask::ghs_secret" in result.stdout
    assert "| decision | **run** |" in result.summary
    assert f"| head SHA at label time | {HEAD} |" in result.summary


@pytest.mark.parametrize(
    ("sender", "minimum", "runs", "role"),
    [
        ("tri", "triage", "true", "triage"),
        ("tri", "write", "false", "triage"),
        ("mai", "maintain", "true", "maintain"),
        ("legacy", "maintain", "false", "write"),  # legacy field maps maintain -> write
        ("reader", "triage", "false", "read"),
        ("stranger", "write", "false", "read"),  # public repo: non-collaborators read
    ],
)
def test_roles_through_the_api(run_cli, server, sender, minimum, runs, role):
    result = gate(run_cli, server, sender=sender, args=["--min-permission", minimum])
    assert result.returncode == 0, result.stdout
    assert (result.outputs["run"], result.outputs["permission"]) == (runs, role)
    if runs == "false":
        assert result.outputs["runs-on"] == '"ubuntu-latest"'
        assert [r.path.rsplit("/", 1)[-1] for r in server.log] == ["permission"]  # one call


def test_bot_labeller_without_permission_record_does_not_run(run_cli, server):
    server.inject("GET", r"/collaborators/.*/permission$", 404)
    result = gate(run_cli, server, sender="some-app[bot]")
    assert result.returncode == 0
    assert result.outputs["run"] == "false" and result.outputs["permission"] == "none"


def test_stale_head(run_cli, server):
    server.repos[REPO].pulls[2].head_sha = "9" * 40
    result = gate(run_cli, server)
    assert result.outputs["run"] == "false"
    assert "apply the label again" in result.outputs["reason"]
    assert result.outputs["sha"] == HEAD


def test_closed_pull_request(run_cli, server):
    server.repos[REPO].pulls[2].state = "closed"
    result = gate(run_cli, server)
    assert result.outputs["run"] == "false" and "closed" in result.outputs["reason"]


def test_draft_with_skip_draft(run_cli, server):
    server.repos[REPO].pulls[2].draft = True
    assert gate(run_cli, server).outputs["run"] == "true"
    assert gate(run_cli, server, args=["--skip-draft", "true"]).outputs["run"] == "false"


def test_paths_read_every_page_of_files(run_cli, server):
    result = gate(run_cli, server, env={"INPUT_PATHS": "**/*.cu\n!docs/**"})
    assert result.outputs["run"] == "true", result.stdout
    pages = [r.query.get("page", ["1"])[0] for r in server.requests("GET", "/files")]
    assert pages == ["1", "2", "3"]
    assert "| paths matched | kernels/gemm.cu |" in result.summary


def test_paths_without_a_match(run_cli, server):
    result = gate(run_cli, server, env={"INPUT_PATHS": "src/**"})
    assert result.outputs["run"] == "false"
    assert "none of the 231 changed files" in result.outputs["reason"]


def test_push_with_paths_uses_the_compare_api(run_cli, server):
    payload = webhook("push")
    payload["before"], payload["after"] = "1" * 40, "2" * 40
    server.repos[REPO].compares["1" * 40 + "..." + "2" * 40] = ["src/kernel.cu"]
    result = gate(
        run_cli,
        server,
        payload=payload,
        event_name="push",
        env={"INPUT_PATHS": "src/**", "GITHUB_SHA": "2" * 40},
    )
    assert result.outputs["run"] == "true", result.stdout
    assert result.outputs["sha"] == "2" * 40
    assert len(server.requests("GET", "/compare/")) == 1


def test_workflow_dispatch_runs_without_api_calls(run_cli, server):
    result = gate(
        run_cli, server, payload=webhook("workflow_dispatch"), event_name="workflow_dispatch"
    )
    assert result.outputs["run"] == "true" and result.outputs["sha"] == "d" * 40
    assert server.log == []


def test_fault_then_retry_succeeds(run_cli, server):
    server.inject("GET", r"/pulls/2$", 502, times=2)
    server.inject("GET", r"/permission$", 403, retry_after=0)
    result = gate(run_cli, server)
    assert result.returncode == 0, result.stdout
    assert result.outputs["run"] == "true"
    assert [r.status for r in server.requests("GET", "/pulls/2")] == [502, 502, 200]
    assert [r.status for r in server.requests("GET", "/permission")] == [403, 200]


def test_persistent_fault_fails_closed(run_cli, server):
    server.inject("GET", r"/pulls/2$", 500, times=100)
    result = gate(run_cli, server)
    assert result.returncode == 1
    assert result.outputs["run"] == "false"
    assert "sha" not in result.outputs and "runs-on" not in result.outputs
    assert len(result.errors) == 1
    assert "did not answer pull request #2 after retries" in result.errors[0]
    assert "Traceback" not in result.stdout + result.stderr


def test_bad_credentials_fail_closed(run_cli, server):
    server.valid_tokens = {"the-right-one"}
    result = gate(run_cli, server)
    assert result.returncode == 1
    assert "HTTP 401: Bad credentials" in result.errors[0]


def test_missing_event_path_names_the_variable(run_cli, server):
    result = run_cli(["gpu-gate"], {"GITHUB_EVENT_NAME": "pull_request"})
    assert result.returncode == 1
    assert "GITHUB_EVENT_PATH is not set" in result.errors[0]


def test_malformed_event_names_the_variable(run_cli, server, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    result = run_cli(
        ["gpu-gate"], {"GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": str(bad)}
    )
    assert result.returncode == 1
    assert f"GITHUB_EVENT_PATH={bad} is not valid JSON" in result.errors[0]


def test_unusable_input_is_exit_2(run_cli, server):
    result = gate(run_cli, server, args=["--min-permission", "owner"])
    assert result.returncode == 2
    assert "min-permission" in result.errors[0]
    assert server.log == []
