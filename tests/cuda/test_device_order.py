"""CUDA's default device order (FASTEST_FIRST) vs NVML's PCI order on a 2-model host.

CUDA C Programming Guide, "CUDA Environment Variables": ``CUDA_DEVICE_ORDER``
``FASTEST_FIRST`` (default) "causes CUDA to enumerate the available devices in fastest to
slowest order", ``PCI_BUS_ID`` "orders devices by PCI bus ID in ascending order". NVML (and
nvidia-smi) number GPUs in PCI order. So with an H200 at PCI 0 and an RTX 4090 at PCI 1,
``CUDA_VISIBLE_DEVICES=1`` need not select the 4090.
"""

from __future__ import annotations

import json

import pytest

from gpu_ci.cuda.facts import Gpu
from gpu_ci.cuda.visibility import visible_gpus
from testkit.cuda_env import build_fake_nvml, gpu_config, nvml_config, rtx_4090, write_config

H200 = Gpu(0, "NVIDIA H200", "GPU-aaaa1111", (9, 0), 143771 << 20, brand="tesla")
RTX = Gpu(1, "NVIDIA GeForce RTX 4090", "GPU-bbbb2222", (8, 9), 24564 << 20, brand="geforce")
H200_B = Gpu(1, "NVIDIA H200", "GPU-cccc3333", (9, 0), 143771 << 20, brand="tesla")


@pytest.mark.parametrize("order", [{}, {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}])
def test_an_index_on_a_two_model_host_selects_an_unknown_gpu(order):
    vis = visible_gpus((H200, RTX), {"CUDA_VISIBLE_DEVICES": "1", **order})
    # not "the 4090": CUDA's 1 may be either GPU, so both are checked
    assert [g.name for g in vis.gpus] == ["NVIDIA GeForce RTX 4090", "NVIDIA H200"]
    assert vis.by_index == "CUDA_VISIBLE_DEVICES='1'"
    assert "2 models" in vis.order_uncertain and "sm_89" in vis.order_uncertain


def test_pci_bus_id_order_or_uuids_or_one_model_resolve_as_nvml_does():
    pci = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1"}
    vis = visible_gpus((H200, RTX), pci)
    assert [g.name for g in vis.gpus] == ["NVIDIA GeForce RTX 4090"]
    assert (vis.order_uncertain, vis.by_index) == ("", "")
    vis = visible_gpus((H200, RTX), {"CUDA_VISIBLE_DEVICES": "GPU-bbbb"})
    assert [g.uuid for g in vis.gpus] == ["GPU-bbbb2222"] and vis.order_uncertain == ""
    vis = visible_gpus((H200, H200_B), {"CUDA_VISIBLE_DEVICES": "1"})
    assert [g.uuid for g in vis.gpus] == ["GPU-cccc3333"] and vis.order_uncertain == ""


@pytest.fixture
def verify(run_cli, tmp_path):
    libs = build_fake_nvml(tmp_path / "lib")

    def run(config, env=None):
        full = {
            "PATH": "/usr/bin:/bin",
            "LD_LIBRARY_PATH": str(libs),
            "FAKE_NVML_CONFIG": str(write_config(tmp_path / "nvml.cfg", config)),
            **(env or {}),
        }
        result = run_cli(["verify-cuda-env"], full)
        result.findings = json.loads(result.outputs.get("findings", "[]"))
        result.codes = [f["code"] for f in result.findings]
        return result

    return run


def two_models():
    return nvml_config(
        gpu_config(0),  # an H200
        rtx_4090(),
    )


def test_verify_warns_when_an_index_selects_on_a_two_model_host(verify):
    result = verify(config=two_models(), env={"CUDA_VISIBLE_DEVICES": "0"})
    (finding,) = [f for f in result.findings if f["code"] == "device-order-not-pci"]
    assert finding["level"] == "warning"
    assert "CUDA_VISIBLE_DEVICES='0' selects by index" in finding["message"]
    assert "NVIDIA GeForce RTX 4090 (sm_89), NVIDIA H200 (sm_90)" in finding["message"]
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in finding["fix"] and "UUID" in finding["fix"]
    # both GPUs it may be are reported and checked
    assert [g["name"] for g in json.loads(result.outputs["gpus"])] == [
        "NVIDIA H200",
        "NVIDIA GeForce RTX 4090",
    ]


def test_verify_notes_the_order_without_a_selection(verify):
    result = verify(config=two_models())
    (finding,) = [f for f in result.findings if f["code"] == "device-order-not-pci"]
    assert finding["level"] == "info" and "need not be the GPU N" in finding["message"]
    result = verify(
        config=two_models(), env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0"}
    )
    assert "device-order-not-pci" not in result.codes
    assert [g["name"] for g in json.loads(result.outputs["gpus"])] == ["NVIDIA H200"]
