"""verify-cuda-env as a composite action under act: fake NVML, and a CPU-only machine."""

from __future__ import annotations

import json

import pytest

from testkit.cuda_env import build_fake_nvml, observed_h200, write_config
from testkit.shared import ROOT

pytestmark = pytest.mark.e2e

WORKFLOW = ROOT / "tests" / "e2e" / "workflows" / "verify.yml"


def test_fake_h200_through_the_action(act, tmp_path):
    lib = build_fake_nvml(tmp_path / "nvml")
    config = write_config(tmp_path / "nvml.cfg", observed_h200()[1])
    result = act(
        WORKFLOW,
        "workflow_dispatch",
        {"inputs": {}},
        env={
            "LD_LIBRARY_PATH": str(lib),
            "FAKE_NVML_CONFIG": str(config),
            "E2E_REQUIRE_GPU": "true",
            "E2E_REQUIRE": "cuda>=12.4",
        },
    )
    assert result.returncode == 0, result.log
    assert result.outputs["ok"] == "true"
    assert result.outputs["driver-version"] == "580.159.04"
    assert json.loads(result.outputs["gpus"])[0]["name"] == "NVIDIA H200"


def on_a_cpu_runner(act, require_gpu: str):
    """The workflow where no NVIDIA library loads, with ``require-gpu`` as given."""
    return act(
        WORKFLOW,
        "workflow_dispatch",
        {"inputs": {}},
        env={"LD_LIBRARY_PATH": "", "E2E_REQUIRE_GPU": require_gpu, "E2E_REQUIRE": ""},
    )


def test_cpu_runner_reports_no_driver(act):
    result = on_a_cpu_runner(act, "false")
    assert result.returncode == 0, result.log
    assert result.outputs["ok"] == "true"
    assert json.loads(result.outputs["findings"])[0]["code"] == "no-driver"
    assert "No NVIDIA driver visible to this job" in result.log


def test_cpu_runner_fails_when_a_gpu_is_required(act):
    result = on_a_cpu_runner(act, "true")
    assert result.returncode != 0
    assert "no-driver" in result.log
