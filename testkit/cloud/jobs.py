"""The cloud tests' shared facts: the repository, the run, a job's environment."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Any

from testkit.cloud.moto_ec2 import FakeAws

REPO = "octo-org/octo-repo"
RUN_ID = 8812345678
TYPES = "g5.xlarge, g4dn.xlarge, g6.xlarge"


@dataclass
class Cloud:
    aws: FakeAws
    subnets: list[str]
    group: str
    image: str


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
        "INPUT_ONLINE_TIMEOUT": "0",  # no runner boots here; the tests that wait say so
        "RUNNER_TEMP": tempfile.mkdtemp(prefix="gpu-ci-cloud-"),  # the stop's report
    }
    env.update({"INPUT_" + k.upper(): v for k, v in inputs.items()})
    return env
