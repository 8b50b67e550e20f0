"""The price table and the billing rule shared by the budget guard and gpu-monitor."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest

from gpu_ci.pricing import PriceError, billed_minutes, load_table, normalise_sku, parse_price


def test_table_rows_are_sourced_dated_and_never_overlap():
    table = load_table()
    assert {"linux_4_core_gpu", "windows_4_core_gpu"} <= set(table.skus)
    for sku in table.skus:
        rows = sorted((p for p in table.prices if p.sku == sku), key=lambda p: p.valid_from)
        assert rows[-1].valid_until is None, f"{sku}: no current price"
        for a, b in zip(rows, rows[1:]):
            assert a.valid_until is not None and a.valid_until < b.valid_from, sku
        assert all(p.source and p.usd_per_minute > 0 for p in rows)


def test_price_changes_on_the_documented_day():
    table = load_table()
    assert table.price_on("linux_4_core_gpu", date(2025, 12, 31)).usd_per_minute == Decimal("0.07")
    assert table.price_on("linux_4_core_gpu", date(2026, 1, 1)).usd_per_minute == Decimal("0.052")
    assert table.price_on("windows_4_core_gpu", date(2026, 11, 3)).usd_per_minute == Decimal(
        "0.102"
    )
    assert table.price_on("linux_4_core_gpu", date(2020, 1, 1)).usd_per_minute == Decimal("0.07")
    assert table.price_on("linux_8_core_gpu", date(2026, 1, 1)) is None


@pytest.mark.parametrize(
    "spelling",
    [
        "linux_4_core_gpu",
        "actions_linux_4_core_gpu",
        "Actions Linux 4-core GPU",
        "LINUX 4-CORE GPU",
    ],
)
def test_sku_spellings_of_the_billing_api_are_one_sku(spelling):
    assert normalise_sku(spelling) == "linux_4_core_gpu"


@pytest.mark.parametrize(
    ("seconds", "minutes"), [(0, 0), (1, 1), (59.9, 1), (60, 1), (60.5, 2), (3600, 60), (3601, 61)]
)
def test_jobs_are_billed_in_whole_minutes_never_free(seconds, minutes):
    assert billed_minutes(seconds) == minutes


def test_parse_price_amounts_units_and_skus():
    table = load_table()
    assert parse_price("0.052", table).usd_per_minute == Decimal("0.052")
    assert parse_price("$3.12/h", table).usd_per_minute == Decimal("0.052")
    assert parse_price("3.12", table, per="hour").usd_per_minute == Decimal("0.052")
    assert parse_price("Linux 4-core GPU", table).sku == "linux_4_core_gpu"
    for bad, words in [
        ("", "empty"),
        ("0", "never free"),
        ("-1", "negative"),
        ("linux_8_core_gpu", "known GitHub-hosted GPU SKU"),
        ("abc", "neither"),
    ]:
        with pytest.raises(PriceError, match=words):
            parse_price(bad, table)
