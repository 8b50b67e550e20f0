"""setup-conda-from-lock as a composite action under act, then a plain run: step."""

from __future__ import annotations

import pytest

pytest.importorskip("rattler_build", reason="py-rattler-build needs Python >= 3.10")

from testkit.conda_channel import ChannelServer, build_channel  # noqa: E402
from testkit.shared import ROOT  # noqa: E402

pytestmark = pytest.mark.e2e


def test_later_plain_step_sees_binaries_and_activation(act, tmp_path):
    channel = build_channel(tmp_path / "chan", with_python=False)
    channel.server = ChannelServer(tmp_path / "chan").start()
    try:
        lock = tmp_path / "conda-linux-64.lock"
        lock.write_text(channel.explicit_lock(["libhello", "hello", "hello-data"]))
        result = act(
            ROOT / "tests" / "e2e" / "workflows" / "setup-conda.yml",
            "workflow_dispatch",
            {"inputs": {}},
            env={"E2E_LOCK": str(lock)},
        )
    finally:
        channel.server.stop()
    assert result.returncode == 0, result.log
    out = result.outputs
    prefix = out["prefix"]
    assert out["hello"] == f"hello from {prefix}"
    assert out["home"] == f"{prefix}/share/hello"
    assert out["activated"] == "yes"
    assert out["conda_prefix"] == prefix
    assert out["packages"] == "3"
    # miniforge: auto, the default, with engine: rattler: no Miniforge, no conda on PATH
    assert out["conda_out"] == "" and out["miniforge"] == "no" and out["condabin"] == "no"
    assert "not installed (`miniforge: true` puts conda on PATH)" in result.log
