"""Right-size advice: the rule over the sourced size table, and the line gpu-monitor's summary
and report carry (the CLI against the fake GPU)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import jsonschema

from gpu_ci.cuda.monitor import right_size as rs
from gpu_ci.pricing import load_table
from testkit.gpu_monitor_env import BUSY_SCRIPT, LOST_SCRIPT, fake_gpu_env, wait_for_stop_line
from testkit.shared import ROOT

GiB = 2**30
MiB = 2**20
H100 = ("NVIDIA H100 80GB HBM3", 81559 * MiB)
SCHEMA = json.loads((ROOT / "actions" / "gpu-monitor" / "report.schema.json").read_text())


def test_2_gib_on_an_h100_fits_the_smallest_slice():
    advice = rs.advise(*H100, 2 * GiB, 7.0, rs.load_sizes())
    assert advice.current == "H100 80GB"
    assert advice.needed == int(2.5 * GiB)  # peak x 1.25
    assert advice.suggestion is not None
    assert (advice.suggestion.profile, advice.suggestion.kind) == ("1g.10gb", "mig")
    assert "H100 80GB MIG 1g.10gb (slice, 10 GB) would do (the GPU was mostly idle)" in (
        advice.line()
    )
    assert advice.cost_usd is None  # no GitHub SKU for a slice


def test_70_gib_on_an_h100_has_no_smaller_size():
    advice = rs.advise(*H100, 70 * GiB, 7.0, rs.load_sizes())
    assert advice.suggestion is None
    assert "already the smallest that fits" in advice.line()
    # 64 GiB x 1.25 = 80 GiB is more than the 80 GB (74.5 GiB) any smaller row has
    assert rs.advise(*H100, 64 * GiB, 7.0, rs.load_sizes()).suggestion is None


def test_unknown_peak_memory_gives_no_advice():
    advice = rs.advise(*H100, None, None, rs.load_sizes())
    assert advice.suggestion is None and advice.needed is None
    assert "peak memory is unknown" in advice.line() and "activity unknown" in advice.line()


def test_same_board_slice_first_then_a_smaller_board_with_its_price():
    sizes = rs.load_sizes()
    # 12 GiB x 1.25 = 15 GiB: the H100's 1g.20gb, not the (smaller-memory) T4 board
    assert rs.advise(*H100, 12 * GiB, 5.0, sizes).suggestion.name == "H100 80GB MIG 1g.20gb"
    # an A10G has no MIG: a smaller board, priced by its GitHub SKU
    priced = sizes.with_prices({"Tesla T4 16GB": Decimal("0.052")})
    a10g = rs.advise("NVIDIA A10G", 23028 * MiB, 2 * GiB, 60.0, priced, paid_minutes=10, gpus=2)
    assert a10g.suggestion.name == "Tesla T4 16GB" and a10g.suggestion.kind == "gpu"
    assert a10g.cost_usd == Decimal("1.0400")  # 10 min x 2 GPUs x $0.052
    assert "busy 60 %" in a10g.line() and "fewer SMs" in a10g.line()
    assert "$1.04" in a10g.line()
    # already on the smallest board that holds it
    assert rs.advise("Tesla T4", 15360 * MiB, 2 * GiB, 1.0, sizes).suggestion is None
    # "L4" is not "L40S": the board match is a whole word
    assert rs.advise("NVIDIA L40S", 46068 * MiB, 30 * GiB, 1.0, sizes).current == "L40S 48GB"


def test_a_mig_slice_is_compared_with_its_own_profile():
    sizes = rs.load_sizes()
    advice = rs.advise(
        "NVIDIA A100-SXM4-40GB MIG 3g.20gb", 19968 * MiB, 3 * GiB, None, sizes, mig_slice=True
    )
    assert advice.current == "A100 40GB MIG 3g.20gb"
    assert advice.suggestion.name == "A100 40GB MIG 1g.5gb"
    assert "(activity unknown)" in advice.line()
    assert (
        rs.advise(
            "NVIDIA A100-SXM4-40GB MIG 1g.5gb", 4864 * MiB, 3 * GiB, 1.0, sizes, mig_slice=True
        ).suggestion
        is None
    )


def test_every_row_has_a_source_and_the_priced_sku_is_in_the_price_table():
    sizes = rs.load_sizes()
    rows = sizes.boards + sizes.profiles
    assert len(rows) == 35 and all(r.source.strip() for r in rows)
    assert {r.board for r in sizes.profiles} <= {b.board for b in sizes.boards}
    skus = {r.sku for r in sizes.boards if r.sku}
    assert skus == {"linux_4_core_gpu"} and skus <= set(load_table().skus)
    # the profiles named in NVIDIA's MIG guide text read here cite it; the rest say so
    cited = [r for r in rows if "unconfirmed" not in r.source]
    assert all("NVIDIA" in r.source for r in cited)
    assert any(r.profile == "1g.10gb" and r.board == "A100-80GB" for r in cited)


def _report(run_cli, env, *args):
    started = run_cli(["gpu-monitor", "--mode", "start"], env)
    assert started.returncode == 0, started.stdout + started.stderr
    wait_for_stop_line(env)
    result = run_cli(["gpu-monitor", "--mode", "report", *args], env)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(Path(result.outputs["report-file"]).read_text())
    jsonschema.validate(report, SCHEMA)
    return result, report


def test_summary_and_report_carry_the_right_size_line(run_cli, tmp_path):
    # BUSY_SCRIPT: an H200 (143,771 MiB) peaking at 30 GiB, 50 % mean utilisation.
    env = fake_gpu_env(tmp_path, BUSY_SCRIPT, samples=90)
    result, report = _report(run_cli, env, "--price-per-hour", "linux_4_core_gpu")
    got = report["right_size"]
    # 30 GiB x 1.25 = 37.5 GiB: more than 1g.35gb's 35 GB, within 3g.71gb's 71 GB
    assert got["suggestion"] == "H200 141GB MIG 3g.71gb" and got["suggestion_kind"] == "mig"
    assert got["peak_memory_bytes"] == 30 * GiB and got["needed_bytes"] == int(37.5 * GiB)
    assert got["activity"] == 50.0 and got["cost_usd"] is None
    assert got["current"] == "H200 141GB" and "unconfirmed" in got["suggestion_source"]
    assert (
        "**Right size:** peak 30.0 GiB of 140 GiB on H200 141GB, 50 % busy: "
        "H200 141GB MIG 3g.71gb (slice, 71 GB) would do (but the GPU was busy 50 %"
        in result.summary
    )


def test_unknown_activity_stays_unknown_in_the_advice(run_cli, tmp_path):
    env = fake_gpu_env(tmp_path, LOST_SCRIPT.split("5 ")[0], samples=4)
    config = tmp_path / "nvml.cfg"
    config.write_text(config.read_text() + "fail.nvmlDeviceGetUtilizationRates=3\n")
    result, report = _report(run_cli, env)
    got = report["right_size"]
    assert got["activity"] is None and got["peak_memory_bytes"] == 2048 * MiB
    assert got["suggestion"] is not None and "activity unknown" in got["line"]
    assert "**Right size:**" in result.summary and "activity unknown" in result.summary
