"""Worker pools and download streams are sized from the cores this process may use (its
affinity), not from the host's count: a runner pinned to 2 cores of a 64-core GPU host."""

from __future__ import annotations

import importlib.util
import os

import pytest

from gpu_ci import cpus
from testkit.shared import ROOT


@pytest.fixture
def pinned(monkeypatch):
    """A 64-core host; this process may run on 2 of them."""
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 7}, raising=False)


def test_usable_cores_are_the_affinity_not_the_hosts(pinned):
    assert cpus.usable() == 2


def test_without_affinity_the_machines_count(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 12)
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    assert cpus.usable() == 12


def test_streams_and_the_bootstrap_follow_the_affinity(pinned):
    from gpu_ci.conda import streams

    assert streams.streams() == 6  # 16 on the host's 64 cores
    spec = importlib.util.spec_from_file_location("boot", ROOT / "scripts" / "bootstrap.py")
    boot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(boot)
    assert boot.usable_cores() == 2  # it runs before gpu_ci is installed: its own copy
