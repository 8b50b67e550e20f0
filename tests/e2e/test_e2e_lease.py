"""gpu-lease as a composite action under act, on a fake 8-GPU host whose GPU 0 runs a
foreign process: the lease skips it, later steps see only the leased GPUs, the release
step frees them."""

from __future__ import annotations

import json

import pytest

from testkit.gpu_lease_env import UUIDS, fake_host_env
from testkit.shared import ROOT

pytestmark = pytest.mark.e2e

WORKFLOW = ROOT / "tests" / "e2e" / "workflows" / "lease.yml"


def test_lease_verify_release_under_act(act, tmp_path):
    from gpu_ci import locks
    from gpu_ci.cuda.lease.lease import lock_name

    env = fake_host_env(tmp_path, busy={0: 1})
    result = act(WORKFLOW, "workflow_dispatch", {"inputs": {}}, env=env)
    assert result.returncode == 0, result.log[-6000:]
    out = result.outputs
    assert json.loads(out["gpu-uuids"]) == [UUIDS[1], UUIDS[2]]  # GPU 0 is busy: skipped
    assert out["cuda-visible-devices"] == f"{UUIDS[1]},{UUIDS[2]}"
    assert out["xdist-workers"] == "6"  # 140 GiB free each, 40 GiB a worker: 3 + 3
    assert list(json.loads(out["worker-devices"]).values())[:2] == [UUIDS[1], UUIDS[2]]
    assert out["verify-gpu-count"] == "2" and out["verify-ok"] == "true"
    assert f"on {UUIDS[1]},{UUIDS[2]} (PCI_BUS_ID)" in result.log
    assert "gpu-lease: released" in result.log
    leases = tmp_path / "leases"
    assert not any(locks.held(leases / lock_name(u)) for u in UUIDS[:8])
