"""gpu-monitor's price by runner group or kind: one configuration for every matrix leg."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

import pytest

from gpu_ci.commands.gpu_monitor import pricing_inputs
from gpu_ci.errors import UsageError
from gpu_ci.inputs import Inputs
from gpu_ci.specs import GPU_MONITOR

DAY = datetime(2026, 11, 3, tzinfo=timezone.utc)
PRICES = '{"gpu-b200": "6.00", "h100x8": "24/h"}'


def inputs(**values: str) -> Inputs:
    env = {f"INPUT_{k.upper()}": v for k, v in values.items()}
    return Inputs(GPU_MONITOR, {}, {"INPUT_MODE": "report", **env})


@pytest.mark.parametrize(("key", "per_minute"), [("gpu-b200", "0.1"), ("h100x8", "0.4")])
def test_the_key_picks_its_runners_price(key, per_minute):
    pricing = pricing_inputs(inputs(price_per_hour=PRICES, price_key=key), DAY)
    assert pricing.usd_per_minute == Decimal(per_minute)


def test_a_price_per_gpu_can_be_keyed_too():
    pricing = pricing_inputs(inputs(price_per_gpu_hour=PRICES, price_key="h100x8"), DAY)
    assert pricing.per_gpu and pricing.usd_per_minute == Decimal("0.4")


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"price_per_hour": PRICES, "price_key": "a100"}, "prices gpu-b200, h100x8, but price-key"),
        ({"price_per_hour": PRICES}, "price-key is 'empty'"),
        ({"price_per_hour": "3.12", "price_key": "b200"}, "is one price, not a JSON object"),
        ({"price_per_hour": '{"b200": [1]}', "price_key": "b200"}, "must be an object of prices"),
        ({"price_per_hour": '{"b200": ', "price_key": "b200"}, "does not parse"),
    ],
)
def test_a_key_that_finds_no_price_says_what_to_write(values, says):
    with pytest.raises(UsageError) as err:
        pricing_inputs(inputs(**values), DAY)
    assert says in err.value.message
