"""What a VM cost: its minutes from launch to its end, at its price tag."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from gpu_ci.cloud import naming
from gpu_ci.cloud.provider import Instance


@dataclass(frozen=True)
class VmCost:
    instance: Instance
    minutes: int
    usd_per_hour: Decimal | None

    @property
    def usd(self) -> Decimal:
        if self.usd_per_hour is None:
            return Decimal(0)
        return (self.usd_per_hour * self.minutes / 60).quantize(Decimal("0.0001"))

    def to_json(self) -> dict[str, object]:
        i = self.instance
        return {
            "instance_id": i.instance_id,
            "instance_type": i.instance_type,
            "zone": i.zone,
            "market": i.market.value,
            "launched_at": naming.iso(i.launched_at),
            "minutes": self.minutes,
            "usd_per_hour": str(self.usd_per_hour) if self.usd_per_hour is not None else None,
            "cost_usd": str(self.usd),
            "state_reason": i.state_reason,
            "spot_interrupted": i.spot_interrupted,
        }


def vm_cost(instance: Instance, end: datetime) -> VmCost:
    """A VM's cost until ``end``. Whole minutes (rounded up), at its price tag."""
    seconds = max(0.0, (end - instance.launched_at).total_seconds())
    try:
        price: Decimal | None = Decimal(naming.tag(instance.tags, naming.PRICE))
    except ArithmeticError:
        price = None
    return VmCost(instance, math.ceil(seconds / 60), price)
