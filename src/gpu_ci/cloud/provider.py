"""What gpu-cloud-runner needs of a cloud: a small interface other clouds can implement.

Every call the interface offers is one request to the cloud (``calls`` counts them), so the
launch walk decides what to retry and when. Failures of a launch are values
(:class:`LaunchFailure`), classified by what the walk does next.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from enum import Enum
from typing import Protocol

#: The tag every resource we create carries; nothing without it is ever touched.
MANAGED = "gpu-ci:managed"
#: The prefix of every runner name and VM ``Name`` tag we create.
NAME_PREFIX = "gpu-ci-"


class Market(str, Enum):
    SPOT = "spot"
    ON_DEMAND = "on-demand"


@dataclass(frozen=True)
class Candidate:
    """One place to try: a market, an instance type and a subnet (one zone)."""

    market: Market
    instance_type: str
    subnet: str
    zone: str
    usd_per_hour: Decimal
    """The most it costs: the on-demand price (a spot VM's default ceiling)."""


@dataclass(frozen=True)
class LaunchSpec:
    """What every candidate launches: the same image, network, user data and tags."""

    image: str
    security_group: str
    user_data: str
    tags: Mapping[str, str]
    client_token: str
    """The idempotency token's stem: a retried request never starts a second VM."""


class Failure(str, Enum):
    CAPACITY = "capacity"
    """No capacity for this type in this zone and market: try the next candidate."""
    QUOTA = "quota"
    """The account's quota (vCPUs, spot requests) is spent: reported as quota, walk on."""
    THROTTLED = "throttled"
    """The cloud asks us to slow down: wait, then try the same candidate again."""
    CONFIGURATION = "configuration"
    """The request itself is wrong (image, subnet, permission): fail at once."""


@dataclass(frozen=True)
class LaunchFailure:
    kind: Failure
    code: str
    message: str


@dataclass(frozen=True)
class Instance:
    """A VM as the cloud describes it, tags included."""

    instance_id: str
    instance_type: str
    zone: str
    state: str
    launched_at: datetime
    tags: Mapping[str, str]
    market: Market
    state_reason: str = ""
    """The cloud's code for the last state change (e.g. ``Server.SpotInstanceTermination``)."""

    @property
    def live(self) -> bool:
        return self.state in ("pending", "running", "stopping", "stopped")

    @property
    def spot_interrupted(self) -> bool:
        return self.state_reason == "Server.SpotInstanceTermination"


class Provider(Protocol):
    """A cloud that can run gpu-cloud-runner's VMs."""

    name: str
    region: str
    calls: int

    def resolve_image(self, image: str) -> str:
        """An image id, or ``ssm:<parameter>`` resolved to the id it holds."""
        ...

    def zones(self, subnets: Sequence[str]) -> dict[str, str]:
        """Each subnet's zone, in one call. A missing subnet is left out."""
        ...

    def launch(
        self, spec: LaunchSpec, candidate: Candidate, token: str
    ) -> Instance | LaunchFailure:
        """One launch request for ``candidate``, never retried by the client itself."""
        ...

    def find(self, tags: Mapping[str, str]) -> list[Instance]:
        """Every VM (terminated ones too, while the cloud lists them) carrying ``tags``."""
        ...

    def terminate(self, instance_ids: Sequence[str]) -> None: ...

    def spot_price(self, instance_type: str, zone: str) -> Decimal | None:
        """The current spot price per hour, if the cloud says."""
        ...


class CloudError(Exception):
    """A cloud call that failed for good. The message says why."""
