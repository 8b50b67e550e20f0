"""Runner registrations through the REST client, against the test GitHub's runner routes.

Every answer is validated against GitHub's OpenAPI description (the runner, the JIT
configuration, the list), so the github wing reads what GitHub sends.
"""

from __future__ import annotations

import pytest

from gpu_ci.github.client import ApiError, ClientSettings, RestClient
from gpu_ci.github.runners import registration as runners
from testkit.github_server import add_runner

REPO = "octo-org/octo-repo"


@pytest.fixture
def rest(github):
    github.add_repo(REPO)
    return RestClient("ghs_app", ClientSettings(github.url, timeout=5, retries=0, backoff=0))


def test_a_jit_runner_is_registered_listed_got_and_deleted(github, rest):
    reg = runners.register_jit(rest, REPO, "gpu-ci-1-1-2-abc-gpu", ["gpu-ci-1-1-2-abc-gpu"])
    assert reg.jit_config and reg.runner.name == "gpu-ci-1-1-2-abc-gpu"
    assert "gpu-ci-1-1-2-abc-gpu" in reg.runner.labels and reg.runner.status == "offline"
    assert [r.id for r in runners.list_runners(rest, REPO)] == [reg.runner.id]
    got = runners.get_runner(rest, REPO, reg.runner.id)
    assert got is not None and got.name == reg.runner.name
    assert runners.delete_runner(rest, REPO, reg.runner.id) is True
    assert runners.delete_runner(rest, REPO, reg.runner.id) is False  # 404 is fine
    assert runners.get_runner(rest, REPO, reg.runner.id) is None
    assert github.contract_violations == []


def test_a_name_in_use_is_refused_with_409(rest):
    runners.register_jit(rest, REPO, "twice", ["twice"])
    with pytest.raises(ApiError) as caught:
        runners.register_jit(rest, REPO, "twice", ["twice"])
    assert caught.value.status == 409


def test_a_busy_runner_is_not_deleted(github, rest):
    busy = add_runner(github, REPO, "gpu-ci-busy", labels=["x"], status="online", busy=True)
    with pytest.raises(ApiError) as caught:
        runners.delete_runner(rest, REPO, busy.id)
    assert caught.value.status == 422


def test_the_list_follows_pages(github, rest):
    for n in range(105):
        add_runner(github, REPO, f"r{n}", labels=["x"])
    assert len(runners.list_runners(rest, REPO)) == 105
    assert github.contract_violations == []
