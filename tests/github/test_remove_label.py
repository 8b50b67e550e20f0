"""remove-label through the CLI and PyGithub against the loopback GitHub server."""

from __future__ import annotations

import json

import pytest

from gpu_ci.errors import UsageError
from gpu_ci.github.gate import labels
from testkit.github_server import PullRequest
from testkit.shared import webhook

REPO = "Codertocat/Hello-World"


@pytest.fixture
def server(github):
    github.add_repo(REPO)
    github.add_repo("octo-org/octo-repo")
    github.add_pull(
        REPO, PullRequest(2, "a" * 40, labels=["CUDA CI", "ciflow/cuda", "GPU ✓ tested", "bug"])
    )
    github.add_pull(REPO, PullRequest(1, "a" * 40, labels=["CUDA CI"]))
    github.add_pull("octo-org/octo-repo", PullRequest(2, "a" * 40, labels=["CUDA CI"]))
    return github


def remove(run_cli, server, *, args=(), env=None, event=None, event_name="pull_request_target"):
    full_env = {"GITHUB_API_URL": server.url, "GITHUB_TOKEN": "ghs_tok"}
    full_env.update(env or {})
    if event is None:
        event = webhook("pull_request.labeled")
    return run_cli(["remove-label", *args], full_env, event=event, event_name=event_name)


def labels_of(server, repo=REPO, number=2):
    return server.repos[repo].pulls[number].labels


def test_present_label_is_removed_with_one_delete(run_cli, server):
    result = remove(run_cli, server)
    assert result.returncode == 0, result.stdout
    assert json.loads(result.outputs["removed"]) == ["CUDA CI"]
    assert json.loads(result.outputs["absent"]) == []
    assert labels_of(server) == ["ciflow/cuda", "GPU ✓ tested", "bug"]
    assert [(r.method, r.path) for r in server.log] == [
        ("DELETE", f"/repos/{REPO}/issues/2/labels/CUDA%20CI")
    ]
    assert "| CUDA CI | removed |" in result.summary


def test_absent_label_is_success_with_a_notice(run_cli, server):
    labels_of(server).remove("CUDA CI")
    result = remove(run_cli, server)
    assert result.returncode == 0
    assert json.loads(result.outputs["absent"]) == ["CUDA CI"]
    assert "::notice title=remove-label::'CUDA CI' was not on #2." in result.stdout
    assert result.errors == []


def test_several_labels_mixed_results_and_encoding(run_cli, server):
    result = remove(
        run_cli, server, env={"INPUT_LABELS": "CUDA CI, ciflow/cuda\nGPU ✓ tested\nnot-there"}
    )
    assert result.returncode == 0, result.stdout
    assert json.loads(result.outputs["removed"]) == ["CUDA CI", "ciflow/cuda", "GPU ✓ tested"]
    assert json.loads(result.outputs["absent"]) == ["not-there"]
    assert labels_of(server) == ["bug"]
    paths = [r.path for r in server.requests("DELETE")]
    assert paths[1] == f"/repos/{REPO}/issues/2/labels/ciflow%2Fcuda"
    assert paths[2] == f"/repos/{REPO}/issues/2/labels/GPU%20%E2%9C%93%20tested"


def test_forbidden_explains_the_fix_and_changes_nothing(run_cli, server):
    server.read_only_tokens.add("ghs_tok")
    result = remove(run_cli, server, env={"INPUT_LABELS": "CUDA CI\nbug"})
    assert result.returncode == 1
    assert len(result.errors) == 1
    error = result.errors[0]
    assert "HTTP 403: Resource not accessible by integration" in error
    assert "pull-requests: write" in error and "pull_request_target" in error
    assert "workflow_run" in error
    assert labels_of(server) == ["CUDA CI", "ciflow/cuda", "GPU ✓ tested", "bug"]
    assert len(server.requests("DELETE")) == 1  # 'bug' not attempted after the 403
    assert "| bug | not attempted |" in result.summary


def test_transient_502_is_retried(run_cli, server):
    server.inject("DELETE", r"/labels/", 502)
    result = remove(run_cli, server)
    assert result.returncode == 0, result.stdout
    assert [r.status for r in server.requests("DELETE")] == [502, 200]
    assert json.loads(result.outputs["removed"]) == ["CUDA CI"]


def test_rate_limit_with_retry_after_is_honoured(run_cli, server):
    server.inject("DELETE", r"/labels/", 429, retry_after=1)
    result = remove(run_cli, server)
    assert result.returncode == 0
    first, second = server.requests("DELETE")
    assert second.at - first.at >= 0.95


def test_persistent_500_fails(run_cli, server):
    server.inject("DELETE", r"/labels/", 500, times=100)
    result = remove(run_cli, server)
    assert result.returncode == 1
    assert "failed after retries" in result.errors[0] or "did not answer" in result.errors[0]
    assert labels_of(server)[0] == "CUDA CI"
    assert len(server.requests("DELETE")) == 4


def test_persistent_500_is_a_warning_without_fail_on_error(run_cli, server):
    server.inject("DELETE", r"/labels/", 500, times=100)
    result = remove(run_cli, server, args=["--fail-on-error", "false"])
    assert result.returncode == 0
    assert result.errors == []
    assert any(
        line.startswith("::warning title=remove-label::") for line in result.stdout.splitlines()
    )


def test_unknown_pull_request_is_an_error_not_absent(run_cli, server):
    result = remove(run_cli, server, args=["--number", "99"])
    assert result.returncode == 1
    assert "#99 was not found in Codertocat/Hello-World" in result.errors[0]


@pytest.mark.parametrize(
    ("fixture", "event_name", "repo", "number"),
    [
        ("pull_request.labeled", "pull_request_target", REPO, 2),
        ("pull_request.closed", "pull_request", REPO, 2),
        ("issue_comment.created", "issue_comment", REPO, 1),
        ("workflow_run.completed.with-pull-requests", "workflow_run", "octo-org/octo-repo", 2),
    ],
)
def test_number_from_each_event_kind(run_cli, server, fixture, event_name, repo, number):
    result = remove(
        run_cli,
        server,
        event=webhook(fixture),
        event_name=event_name,
        env={"GITHUB_REPOSITORY": repo},
    )
    assert result.returncode == 0, result.stdout
    assert server.requests("DELETE")[0].path == f"/repos/{repo}/issues/{number}/labels/CUDA%20CI"


def test_no_number_anywhere_is_a_clear_error(run_cli, server):
    result = remove(
        run_cli, server, event=webhook("push"), event_name="push", env={"GITHUB_REPOSITORY": REPO}
    )
    assert result.returncode == 1
    assert "'push' event has no pull request or issue number" in result.errors[0]
    assert server.log == []


def test_number_and_repository_inputs_need_no_event(run_cli, server):
    result = run_cli(
        ["remove-label", "--number", "1", "--repository", REPO],
        {"GITHUB_API_URL": server.url, "GITHUB_TOKEN": "t"},
    )
    assert result.returncode == 0, result.stdout
    assert labels_of(server, number=1) == []


def test_ghes_api_url(run_cli, server):
    result = remove(run_cli, server, env={"GITHUB_API_URL": server.url + "/api/v3"})
    assert result.returncode == 0, result.stdout
    assert server.log[0].path == f"/api/v3/repos/{REPO}/issues/2/labels/CUDA%20CI"


@pytest.mark.parametrize(
    ("flag", "value", "match"),
    [
        ("--number", "abc", "'number' must be a positive integer"),
        ("--repository", "just-a-name", "pass 'repository' as owner/name"),
        ("--fail-on-error", "maybe", "'fail-on-error' of remove-label must be true or false"),
        ("--labels", " , ", "'labels' is empty"),
    ],
)
def test_unusable_inputs_exit_2(run_cli, server, flag, value, match):
    result = remove(run_cli, server, args=[flag, value])
    assert result.returncode == 2
    assert match in result.errors[0]
    assert server.log == []


def test_parse_labels_dedupes_case_insensitively():
    assert labels.parse_labels(["CUDA CI", "cuda ci", "x"]) == ["CUDA CI", "x"]
    with pytest.raises(UsageError):
        labels.parse_labels([])
