"""The AWS provider: EC2 and SSM through boto3, one request per call, never retried by boto3.

boto3 reads credentials and the endpoint the usual way (OIDC role in the environment,
``AWS_ENDPOINT_URL`` for an emulator). The client's own retries are off: the launch walk
decides what a failed ``RunInstances`` means, and the other calls wait out throttling here.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from gpu_ci.cloud import naming
from gpu_ci.cloud.provider import (
    MANAGED,
    Candidate,
    CloudError,
    Failure,
    Instance,
    LaunchFailure,
    LaunchSpec,
    Market,
)

CAPACITY = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientHostCapacity",
        "InsufficientCapacity",
        "InsufficientReservedInstanceCapacity",
        "InsufficientFreeAddressesInSubnet",
        "SpotMaxPriceTooLow",
        "Unsupported",
    }
)
QUOTA = frozenset({"VcpuLimitExceeded", "InstanceLimitExceeded", "MaxSpotInstanceCountExceeded"})
THROTTLED = frozenset(
    {
        "RequestLimitExceeded",
        "Throttling",
        "ThrottlingException",
        "RequestThrottled",
        "InternalError",
        "ServiceUnavailable",
        "Unavailable",
    }
)
CREDENTIALS = (
    ". Give the job AWS credentials: aws-actions/configure-aws-credentials with the OIDC "
    "role (see actions/gpu-cloud-runner/README.md)."
)
#: Every state a VM we launched can be listed in (terminated ones for about an hour).
STATES = ("pending", "running", "stopping", "stopped", "shutting-down", "terminated")


def classify(code: str) -> Failure:
    if code in CAPACITY:
        return Failure.CAPACITY
    if code in QUOTA:
        return Failure.QUOTA
    if code in THROTTLED:
        return Failure.THROTTLED
    return Failure.CONFIGURATION


def tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def launch_request(spec: LaunchSpec, candidate: Candidate, token: str) -> dict[str, Any]:
    """RunInstances' arguments: tags at creation on the VM, its volumes and its interface;
    IMDSv2 only, one hop (containers cannot reach it); no instance profile; shutdown from
    inside terminates."""
    tags = tag_list(
        {
            **spec.tags,
            naming.MARKET: candidate.market.value,
            naming.PRICE: str(candidate.usd_per_hour),
        }
    )
    request: dict[str, Any] = {
        "ImageId": spec.image,
        "InstanceType": candidate.instance_type,
        "MinCount": 1,
        "MaxCount": 1,
        "SubnetId": candidate.subnet,
        "SecurityGroupIds": [spec.security_group],
        "UserData": spec.user_data,
        "ClientToken": token,
        "InstanceInitiatedShutdownBehavior": "terminate",
        "MetadataOptions": {
            "HttpTokens": "required",
            "HttpEndpoint": "enabled",
            "HttpPutResponseHopLimit": 1,
        },
        "TagSpecifications": [
            {"ResourceType": kind, "Tags": tags}
            for kind in ("instance", "volume", "network-interface")
        ],
    }
    if candidate.market is Market.SPOT:
        request["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {
                "SpotInstanceType": "one-time",
                "InstanceInterruptionBehavior": "terminate",
            },
        }
    return request


def _instance(data: Mapping[str, Any]) -> Instance:
    tags = {t["Key"]: t["Value"] for t in data.get("Tags") or ()}
    launched = data.get("LaunchTime") or datetime.now(timezone.utc)
    if launched.tzinfo is None:
        launched = launched.replace(tzinfo=timezone.utc)
    return Instance(
        instance_id=str(data["InstanceId"]),
        instance_type=str(data.get("InstanceType", "")),
        zone=str((data.get("Placement") or {}).get("AvailabilityZone", "")),
        state=str((data.get("State") or {}).get("Name", "")),
        launched_at=launched,
        tags=tags,
        market=Market.SPOT if data.get("InstanceLifecycle") == "spot" else Market.ON_DEMAND,
        state_reason=str((data.get("StateReason") or {}).get("Code", "")),
    )


#: botocore's exceptions for a request that got no answer: asking again is safe (the launch
#: carries its idempotency token), so they are waited out like throttling.
NO_ANSWER = frozenset(
    {
        "EndpointConnectionError",
        "ConnectionClosedError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "ConnectionError",
    }
)


def _kind(exc: BaseException) -> Failure:
    code, _message = _code(exc)
    if getattr(exc, "response", None) is None:
        return Failure.THROTTLED if type(exc).__name__ in NO_ANSWER else Failure.CONFIGURATION
    return classify(code)


def _code(exc: BaseException) -> tuple[str, str]:
    """The cloud's error code and message. No answer: the exception's type."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        error = response.get("Error") or {}
        return str(error.get("Code", "")), str(error.get("Message", ""))
    return type(exc).__name__, str(exc)


class AwsProvider:
    """EC2 (and SSM for ``ssm:`` images) in one region."""

    name = "aws"

    def __init__(
        self,
        region: str,
        *,
        retries: int = 4,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        import boto3
        from botocore.config import Config

        config = Config(
            region_name=region,
            retries={"total_max_attempts": 1},
            connect_timeout=10,
            read_timeout=30,
        )
        self.region = region
        self.calls = 0
        self._ec2 = boto3.client("ec2", config=config)
        self._ssm = boto3.client("ssm", config=config)
        self._retries = retries
        self._sleep = sleep

    def _call(self, what: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        """One call, throttling waited out. Waits double from 1 s; other errors raise."""
        from botocore.exceptions import BotoCoreError, ClientError

        for n in range(self._retries + 1):
            self.calls += 1
            try:
                return fn(**kwargs)
            except (ClientError, BotoCoreError) as exc:
                code, message = _code(exc)
                if _kind(exc) is not Failure.THROTTLED or n == self._retries:
                    hint = CREDENTIALS if code == "NoCredentialsError" else ""
                    raise CloudError(f"AWS refused {what}: {code}: {message}{hint}") from None
                self._sleep(min(20.0, 2.0**n))
        raise AssertionError("unreachable")  # pragma: no cover

    def resolve_image(self, image: str) -> str:
        if image.startswith("ssm:"):
            name = image[len("ssm:") :]
            answer = self._call(f"the image parameter {name}", self._ssm.get_parameter, Name=name)
            value = str(answer["Parameter"]["Value"])
        else:
            value = image
        if not re.fullmatch(r"ami-[0-9a-f]{8,17}", value):
            raise CloudError(
                f"image {image!r} is no AMI id (ami-...) nor names one through ssm:<parameter>."
            )
        return value

    def zones(self, subnets: Sequence[str]) -> dict[str, str]:
        answer = self._call("the subnets", self._ec2.describe_subnets, SubnetIds=list(subnets))
        found = {s["SubnetId"]: s["AvailabilityZone"] for s in answer["Subnets"]}
        return {s: found[s] for s in subnets if s in found}

    def launch(
        self, spec: LaunchSpec, candidate: Candidate, token: str
    ) -> Instance | LaunchFailure:
        from botocore.exceptions import BotoCoreError, ClientError

        self.calls += 1
        try:
            answer = self._ec2.run_instances(**launch_request(spec, candidate, token))
        except (ClientError, BotoCoreError) as exc:
            code, message = _code(exc)
            return LaunchFailure(_kind(exc), code, message)
        return _instance(answer["Instances"][0])

    def find(self, tags: Mapping[str, str]) -> list[Instance]:
        filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in tags.items()]
        if MANAGED not in tags:
            filters.append({"Name": f"tag:{MANAGED}", "Values": ["true"]})
        filters.append({"Name": "instance-state-name", "Values": list(STATES)})
        found: list[Instance] = []
        token = ""
        while True:
            extra = {"NextToken": token} if token else {}
            answer = self._call(
                "the VM listing", self._ec2.describe_instances, Filters=filters, **extra
            )
            for reservation in answer.get("Reservations", ()):
                found += [_instance(i) for i in reservation.get("Instances", ())]
            token = answer.get("NextToken") or ""
            if not token:
                return found

    def terminate(self, instance_ids: Sequence[str]) -> None:
        if instance_ids:
            self._call(
                "the termination", self._ec2.terminate_instances, InstanceIds=list(instance_ids)
            )

    def spot_price(self, instance_type: str, zone: str) -> Decimal | None:
        answer = self._call(
            "the spot price",
            self._ec2.describe_spot_price_history,
            InstanceTypes=[instance_type],
            AvailabilityZone=zone,
            ProductDescriptions=["Linux/UNIX"],
            StartTime=datetime.now(timezone.utc),
            MaxResults=1,
        )
        rows = answer.get("SpotPriceHistory") or []
        return Decimal(str(rows[0]["SpotPrice"])) if rows else None
