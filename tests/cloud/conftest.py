"""Fixtures of the cloud wing's tests: moto's server, a network in it, the test GitHub."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

moto = pytest.importorskip("moto", reason="moto[server] (the test extra) is not installed")

from tests.cloud.moto_ec2 import FakeAws  # noqa: E402

REPO = "octo-org/octo-repo"
RUN_ID = 8812345678
TYPES = "g5.xlarge, g4dn.xlarge, g6.xlarge"


@dataclass
class Cloud:
    aws: FakeAws
    subnets: list[str]
    group: str
    image: str


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


def job_env(cloud: Cloud, github: Any, attempt: int = 1, **inputs: str) -> dict[str, str]:
    """A CPU job's environment for the three actions: moto, the test GitHub, the inputs."""
    env = {
        **cloud.aws.env(),
        "GITHUB_API_URL": github.url,
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_RUN_ID": str(RUN_ID),
        "GITHUB_RUN_ATTEMPT": str(attempt),
        "INPUT_GITHUB_TOKEN": "ghs_app_installation_token",
        "INPUT_REGION": "us-east-1",
        "INPUT_INSTANCE_TYPES": TYPES,
        "INPUT_SUBNETS": ",".join(cloud.subnets),
        "INPUT_SECURITY_GROUP": cloud.group,
        "INPUT_IMAGE": cloud.image,
        "INPUT_WAIT_SECONDS": "0",
    }
    env.update({"INPUT_" + k.upper(): v for k, v in inputs.items()})
    return env
