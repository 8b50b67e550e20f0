"""The start action's own overhead: from its process start to ``RunInstances``, and calls.

The VM's boot is the cloud's; what the action adds before the launch is ours: the
interpreter, boto3's import, the inputs and the budget, the runner registration (one
GitHub call), the image and the subnets (one call each), then the walk.

    python benchmarks/gpu_cloud_runner.py [--runs 7] [--failures 2]

Measured against moto's server behind the test wrapper (testkit/cloud/moto_ec2.py) and the test
GitHub server, both on 127.0.0.1. Printed side by side with the yardstick: a bare
``python -c`` that imports boto3 and calls ``run_instances`` with the same image and subnet,
the least any boto3 launcher can do. ``--failures`` makes that many candidates fail with
InsufficientInstanceCapacity first, to show the calls a walk adds.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testkit.cloud.jobs import REPO, Cloud, job_env  # noqa: E402
from testkit.cloud.moto_ec2 import FakeAws  # noqa: E402
from testkit.github_server import FakeGitHub  # noqa: E402

YARDSTICK = (
    "import boto3, sys; boto3.client('ec2', region_name='us-east-1').run_instances("
    "ImageId=sys.argv[1], InstanceType='g5.xlarge', MinCount=1, MaxCount=1, SubnetId=sys.argv[2])"
)


def _environ(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INPUT_", "GITHUB_"))}
    quiet = {"GITHUB_OUTPUT": os.devnull, "GITHUB_STEP_SUMMARY": os.devnull}
    return {**env, **extra, **quiet, "PYTHONPATH": str(ROOT / "src")}


def _to_launch(aws: FakeAws, cmd: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Seconds from the process start to its first and to its last (launching)
    RunInstances, and the AWS calls it made."""
    aws.requests.clear()
    begun = time.monotonic()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    launches = aws.calls("RunInstances")
    return launches[0].at - begun, launches[-1].at - begun, len(aws.calls())


def _fresh(aws: FakeAws, failures: int) -> Cloud:
    aws.reset()
    subnets, group = aws.network(zones=1)
    cloud = Cloud(aws, subnets, group, aws.image())
    for instance_type in ("g5.xlarge", "g4dn.xlarge")[:failures]:
        aws.inject("InsufficientInstanceCapacity", instance_type=instance_type, market="spot")
    return cloud


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--failures", type=int, default=2, choices=(0, 1, 2))
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    ours, last, bare, calls, gh_calls = [], [], [], [], []
    with FakeAws() as aws, FakeGitHub() as github:
        github.add_repo(REPO)
        for _ in range(args.runs):
            cloud = _fresh(aws, args.failures)
            before = len(github.log)
            env = _environ(job_env(cloud, github))
            cmd = [sys.executable, "-m", "gpu_ci", "gpu-cloud-runner"]
            took, launched, n = _to_launch(aws, cmd, env)
            ours.append(took)
            last.append(launched)
            calls.append(n)
            gh_calls.append(len(github.log) - before)
            github.runners[REPO].clear()  # the stop's part: a run's job key starts once
            cloud = _fresh(aws, 0)
            cmd = [sys.executable, "-c", YARDSTICK, cloud.image, cloud.subnets[0]]
            bare.append(_to_launch(aws, cmd, _environ(cloud.aws.env()))[1])
    mine, yard = statistics.median(ours), statistics.median(bare)
    print(f"runs: {args.runs}; candidates failing with no capacity first: {args.failures}")
    print(f"{'':34}{'median':>10}{'min':>10}")
    print(f"{'gpu-cloud-runner: to RunInstances':34}{mine:>9.3f}s{min(ours):>9.3f}s")
    print(f"{'  ... to the launching one':34}{statistics.median(last):>9.3f}s{min(last):>9.3f}s")
    print(f"{'bare boto3 run_instances':34}{yard:>9.3f}s{min(bare):>9.3f}s")
    print(f"ratio (ours to the first RunInstances / bare): {mine / yard:.2f}")
    print(
        f"AWS calls per launch: {statistics.median(calls):.0f} "
        f"({args.failures + 1} RunInstances); GitHub calls: {statistics.median(gh_calls):.0f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
