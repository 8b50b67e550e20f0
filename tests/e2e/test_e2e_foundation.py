"""The act harness runs a composite action of this repository end to end."""

from __future__ import annotations

import pytest

from gpu_ci import __version__
from testkit.shared import ROOT

pytestmark = pytest.mark.e2e


def test_root_action_runs_under_act(act):
    result = act(
        ROOT / "tests" / "e2e" / "workflows" / "version.yml", "workflow_dispatch", {"inputs": {}}
    )
    assert result.returncode == 0, result.log
    assert f"gpu-ci {__version__}" in result.log
    assert result.outputs["version"] == f"gpu-ci {__version__}"
    assert "gpu-ci-actions" in result.outputs["python"]
