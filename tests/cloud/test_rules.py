"""The cloud wing's pure rules: budget, markets, names, user data, prices."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from gpu_ci.cloud import budget, launch, naming, reap, userdata
from gpu_ci.cloud.provider import Instance, Market
from gpu_ci.pricing import instance_price, load_instance_prices

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=timezone.utc)
PRICES = {"g4dn.xlarge": Decimal("0.526"), "g5.xlarge": Decimal("1.006")}


@pytest.mark.parametrize(
    ("text", "amount", "unit"),
    [("12.50", "12.50", "usd"), ("$3", "3", "usd"), ("120 minutes", "120", "minutes")],
)
def test_budget_left_reads_the_gates_output_and_units(text, amount, unit):
    assert budget.parse_budget_left(text) == budget.BudgetLeft(Decimal(amount), unit)


@pytest.mark.parametrize("text", ["twelve", "$5 minutes", "5 hours"])
def test_budget_left_refuses_what_it_cannot_read(text):
    assert "budget-left" in budget.parse_budget_left(text)


def test_the_reservation_is_the_dearest_candidate_for_max_minutes():
    held = budget.reserve(budget.BudgetLeft(Decimal("2.012"), "usd"), 120, PRICES)
    assert (held.instance_type, held.usd, held.refusal) == ("g5.xlarge", Decimal("2.012"), "")
    over = budget.reserve(budget.BudgetLeft(Decimal("2.01"), "usd"), 120, PRICES)
    assert "g5.xlarge" in over.refusal and "$2.01 left" in over.refusal
    minutes = budget.reserve(budget.BudgetLeft(Decimal(119), "minutes"), 120, PRICES)
    assert "120 min" in minutes.refusal
    assert budget.reserve(None, 120, PRICES).refusal == ""


def test_prices_come_from_the_input_first_then_the_table():
    rows = load_instance_prices()
    table = lambda t: instance_price(rows, "aws", "us-east-1", t, date(2026, 12, 6))  # noqa: E731
    given = budget.parse_instance_prices("g5.xlarge=2, p5.48xlarge=98.32/h")
    assert isinstance(given, dict)
    found = budget.candidate_prices(["g5.xlarge", "g4dn.xlarge"], given, table, "us-east-1")
    assert found == {"g5.xlarge": Decimal(2), "g4dn.xlarge": Decimal("0.526")}
    missing = budget.candidate_prices(["p4d.24xlarge"], given, table, "us-east-1")
    assert isinstance(missing, str) and "p4d.24xlarge" in missing
    assert "instance-prices" in budget.parse_instance_prices("g5.xlarge=free")


def test_a_re_run_walks_on_demand_only():
    assert launch.markets_for("spot-then-on-demand", 1) == (Market.SPOT, Market.ON_DEMAND)
    assert launch.markets_for("spot-then-on-demand", 2) == (Market.ON_DEMAND,)
    assert launch.markets_for("spot", 3) == (Market.SPOT,)


def test_candidates_go_market_then_type_then_zone():
    plan = launch.candidates(
        (Market.SPOT, Market.ON_DEMAND), PRICES, {"subnet-a": "az-a", "subnet-b": "az-b"}
    )
    assert [(c.market.value, c.instance_type, c.zone) for c in plan[:3]] == [
        ("spot", "g4dn.xlarge", "az-a"),
        ("spot", "g4dn.xlarge", "az-b"),
        ("spot", "g5.xlarge", "az-a"),
    ]
    assert len(plan) == 8


def test_a_runner_name_round_trips_and_other_names_are_not_ours():
    name = naming.RunnerName.new(8812345678, 2, "gpu", NOW)
    assert naming.RunnerName.parse(str(name)) == name
    assert len(name.nonce) == 16 and name.nonce != naming.RunnerName.new(1, 1, "gpu", NOW).nonce
    assert naming.RunnerName.parse("gpu-ci-runner-1") is None
    assert naming.RunnerName.parse("my-gpu-box") is None
    assert len(str(name)) <= 64


def test_user_data_refuses_what_would_break_the_shell():
    good = userdata.Boot(120, 15, "2.329.0", "a" * 64, "QUJD")
    assert userdata.check(good) == ""
    assert "runner-version" in userdata.check(good.__class__(120, 15, "2.329.0; rm", "a" * 64, "x"))
    assert "sha256" in userdata.check(good.__class__(120, 15, "2.329.0", "A" * 63, "x"))
    assert "base64" in userdata.check(good.__class__(120, 15, "2.329.0", "a" * 64, "$(x)"))
    assert "idle" in userdata.check(good.__class__(120, 121, "2.329.0", "a" * 64, "x"))
    with pytest.raises(ValueError):
        userdata.render(good.__class__(120, 15, "x", "a" * 64, "x"))


def _vm(**tags: str) -> Instance:
    return Instance(
        "i-1", "g5.xlarge", "az-a", "running", NOW - timedelta(hours=3), tags, Market.SPOT
    )


def test_leaks_are_priced_from_when_the_vm_should_have_ended():
    vm = _vm(**{naming.EXPIRES_AT: "2026-12-06T11:30:00Z", naming.PRICE: "1.2"})
    leak = reap.expired(vm, NOW)
    assert leak is not None and (leak.minutes, leak.usd) == (30, Decimal("0.6"))
    assert reap.expired(_vm(**{naming.EXPIRES_AT: "2026-12-06T12:30:00Z"}), NOW) is None
    ended = reap.orphaned(vm, reap.RunState(True, NOW - timedelta(minutes=10)), NOW)
    assert ended is not None and ended.minutes == 10
    assert reap.orphaned(vm, reap.RunState(True, None), NOW) is None


def test_only_our_old_offline_idle_registrations_with_no_vm_are_stale():
    name = str(naming.RunnerName.new(5, 1, "gpu", NOW - timedelta(minutes=30)))
    grace = timedelta(minutes=15)
    assert reap.stale_registration(name, "offline", False, 7, set(), NOW, grace)
    assert not reap.stale_registration(name, "online", False, 7, set(), NOW, grace)
    assert not reap.stale_registration(name, "offline", True, 7, set(), NOW, grace)
    assert not reap.stale_registration(name, "offline", False, 7, {"7"}, NOW, grace)
    assert not reap.stale_registration(name, "offline", False, 7, set(), NOW, timedelta(hours=1))
    assert not reap.stale_registration("gpu-box-1", "offline", False, 7, set(), NOW, grace)


class _Cloud:
    """A provider whose launches answer from a script: one failure code or None each."""

    name, region = "test", "test-1"

    def __init__(self, script):
        self.script, self.calls, self.tokens = list(script), 0, []

    def launch(self, spec, candidate, token):
        from gpu_ci.cloud.aws import classify
        from gpu_ci.cloud.provider import LaunchFailure

        self.calls += 1
        self.tokens.append(token)
        code = self.script.pop(0)
        if code is None:
            return Instance(
                "i-1", candidate.instance_type, candidate.zone, "pending", NOW, {}, candidate.market
            )
        return LaunchFailure(classify(code), code, "scripted")


def _spec():
    from gpu_ci.cloud.provider import LaunchSpec

    return LaunchSpec("ami-1", "sg-1", "#!/bin/bash", {}, "tok")


def _plan():
    return launch.candidates((Market.SPOT,), PRICES, {"subnet-a": "az-a", "subnet-b": "az-b"})


def test_throttling_that_never_ends_stops_the_walk_with_its_own_reason():
    cloud = _Cloud(["RequestLimitExceeded"] * 3)
    waits = []
    walk = launch.walk(cloud, _spec(), _plan(), launch.Backoff(retries=2), sleep=waits.append)
    assert walk.instance is None and "throttling" in walk.error
    assert waits == [1.0, 2.0] and len(set(cloud.tokens)) == 1  # one candidate, one token


def test_no_new_candidate_is_tried_past_the_launch_timeout():
    cloud = _Cloud(["InsufficientInstanceCapacity"] * 4)
    walk = launch.walk(cloud, _spec(), _plan(), deadline=0.0)  # already past after the first
    assert cloud.calls == 1 and walk.instance is None
    assert "launch-timeout passed after 1 of 4 candidates" in walk.error


def test_no_answer_is_waited_out_and_no_credentials_is_configuration():
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError

    from gpu_ci.cloud.aws import _kind
    from gpu_ci.cloud.provider import Failure

    assert _kind(EndpointConnectionError(endpoint_url="http://x")) is Failure.THROTTLED
    assert _kind(NoCredentialsError()) is Failure.CONFIGURATION
