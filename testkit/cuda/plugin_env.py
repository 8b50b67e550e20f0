"""The pytest plugin's test set-up: the fake NVML, two GPUs and an empty ledger.

Shared by the plugin's test modules (a test module never imports another): each wraps
these in its fixtures.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.cuda import plugin_standins
from testkit.cuda_env import build_fake_nvml, gpu_config, nvml_config, write_config

PLUGIN = ("-p", "gpu_ci.pytest_plugin", "-p", "no:cacheprovider")


def fake_nvml_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake libnvidia-ml.so.1, built once per module."""
    return build_fake_nvml(tmp_path_factory.mktemp("nvml"), with_libcuda=False)


def two_gpus(pytester: pytest.Pytester, lib: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two 8 GiB GPUs, an empty ledger (returned) and the torch stand-in."""
    ledger = pytester.path / "ledger"
    ledger.mkdir()
    config = nvml_config(gpu_config(0, memory_mib=8192), gpu_config(1, memory_mib=8192))
    write_config(pytester.path / "nvml.cfg", config)
    for name in ("PYTEST_XDIST_WORKER", "GPU_CI_WORKER_DEVICES", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(lib))
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(pytester.path / "nvml.cfg"))
    monkeypatch.setenv("FAKE_NVML_LEDGER", str(ledger))
    monkeypatch.setenv("FAKE_TORCH_CAPACITY_MIB", "8192")
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    pytester.makepyfile(**plugin_standins.torch_files())
    return ledger
