"""Fixtures of the github wing's tests."""

from __future__ import annotations

import pytest

from testkit.github.runs import HEAD, REPO
from testkit.github_server import PullRequest


@pytest.fixture
def server(github):
    github.add_repo(REPO, roles={"Codertocat": "write"})
    github.add_pull(REPO, PullRequest(2, HEAD, labels=["CUDA CI"]))
    return github
