"""The self-test workflow's local-path job, under act (workflow_dispatch, no network)."""

from __future__ import annotations

import pytest

from testkit.shared import ROOT

pytestmark = pytest.mark.e2e


def test_self_test_local_job(act):
    result = act(
        ROOT / ".github" / "workflows" / "self-test.yml",
        "workflow_dispatch",
        {"inputs": {}},
        job="local",
    )
    assert result.returncode == 0, result.log
    assert result.outputs["run"] == "true"
    assert result.outputs["packages"] == "6"
    assert result.outputs["ok"] == "true"
    assert "removed" not in result.outputs  # remove-label runs on same-repo PRs only
