"""gpu-monitor as a composite action under act: start, a step, report (fake GPU, fake clock)."""

from __future__ import annotations

import re

import pytest

from testkit.gpu_monitor_env import E2E_SCRIPT, fake_gpu_env
from testkit.mermaid_check import assert_charts_parse, unavailable
from testkit.shared import ROOT

pytestmark = pytest.mark.e2e

WORKFLOW = ROOT / "tests" / "e2e" / "workflows" / "monitor.yml"


def test_start_step_report_under_act(act, tmp_path):
    env = fake_gpu_env(tmp_path, E2E_SCRIPT, samples=45)
    env.pop("RUNNER_TEMP")  # act's runner sets its own
    env.pop("INPUT_INTERVAL")
    result = act(
        WORKFLOW, "workflow_dispatch", {"inputs": {}}, env={**env, "GPU_CI_PRINT_SUMMARY": "1"}
    )
    assert result.returncode == 0, result.log[-6000:]
    out = result.outputs
    assert out["start-gpu-count"] == "1"
    assert out["ok"] == "true" and out["gpu-used"] == "true"
    assert out["busy-seconds"] == "30"
    assert out["peak-memory-mib"] == "8192"
    assert out["paid-minutes"] == "1"  # 45 s of monitor, rounded up
    assert out["gpu-minutes-used"] == "0.50"
    assert out["idle-cost-usd"] == "0.0260"  # $0.052 * 1 min * 50 % idle
    assert "### gpu-monitor: 1 GPU(s), 0.5 of 1 paid GPU-minutes used (50 % idle" in result.log
    # The summary (printed to the log by GPU_CI_PRINT_SUMMARY) holds a chart mermaid parses.
    lines = [re.sub(r"^\[[^\]]*\]\s+\|\s?", "", line) for line in result.log.splitlines()]
    text = "\n".join(lines)
    assert "```mermaid\nxychart-beta" in text
    if unavailable() is None:
        assert_charts_parse(text[text.index("```mermaid") :])  # the log repeats it
