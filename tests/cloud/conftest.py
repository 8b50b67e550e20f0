"""Fixtures of the cloud wing's tests: moto's server, a network in it, the test GitHub."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

moto = pytest.importorskip("moto", reason="moto[server] (the test extra) is not installed")

from testkit.cloud.jobs import REPO, Cloud  # noqa: E402
from testkit.cloud.moto_ec2 import FakeAws  # noqa: E402


@pytest.fixture(scope="session")
def aws_server() -> Iterator[FakeAws]:
    """One moto server per test process, reset per test (a start costs seconds)."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with FakeAws() as aws:
        yield aws


@pytest.fixture
def cloud(aws_server: FakeAws) -> Cloud:
    aws_server.reset()
    subnets, group = aws_server.network(zones=1)
    image = aws_server.image()
    aws_server.requests.clear()  # the set-up's calls are not the action's
    return Cloud(aws_server, subnets, group, image)


@pytest.fixture
def repo(github: Any) -> Any:
    github.add_repo(REPO)
    return github
