"""The Karpenter GPU pools (issue 32): spot first, on-demand as the fallback, checked two ways.

1. Against Karpenter's v1 API models: npm ``@kubernetes-models/karpenter`` 2.0.0 (generated
   from Karpenter's Go API types, ``sigs.k8s.io/karpenter/pkg/apis/v1`` and
   ``karpenter-provider-aws/pkg/apis/v1``, the types its CRDs are generated from), pinned with
   its integrity hash in ``tests/karpenter/package-lock.json`` and installed from the npm
   registry at test time (``npm ci``) when it is not there yet; the test skips with the reason
   where npm or node is missing. Those models check types, enums, patterns and required
   fields; they carry no ``additionalProperties: false``, so an unknown field is not theirs to
   catch: the rules below name the fields that matter.
2. Against deploy/check.py's GPU and spot rules (:func:`check.karpenter_problems`).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import shutil
import subprocess
import sys

import pytest
import yaml

from testkit.shared import ROOT

MANIFEST = ROOT / "deploy" / "karpenter" / "nodepools.yaml"
MODELS = ROOT / "tests" / "karpenter"
PACKAGE = "@kubernetes-models/karpenter"


def _check():
    spec = importlib.util.spec_from_file_location("deploy_check", ROOT / "deploy" / "check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["deploy_check"] = module
    spec.loader.exec_module(module)
    return module


check = _check()


def docs():
    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]


@pytest.fixture(scope="module")
def validate():
    """Objects -> the models' errors per object (``tests/karpenter/validate.mjs``)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed for Karpenter's API models (npm package)")
    if not (MODELS / "node_modules" / PACKAGE / "package.json").is_file():
        got = subprocess.run(
            [npm, "ci", "--prefix", str(MODELS), "--no-audit", "--no-fund", "--loglevel=error"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if got.returncode != 0:
            pytest.skip(f"npm ci --prefix tests/karpenter failed: {got.stderr.strip()[-300:]}")

    def run(objects):
        text = "".join(json.dumps(o) + "\n" for o in objects)
        out = subprocess.run(
            [node, str(MODELS / "validate.mjs")],
            input=text,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return [json.loads(line)["errors"] for line in out.stdout.splitlines()]

    return run


def test_the_models_are_pinned_with_their_integrity():
    lock = json.loads((MODELS / "package-lock.json").read_text())
    entry = lock["packages"][f"node_modules/{PACKAGE}"]
    assert entry["version"] == "2.0.0"
    assert entry["integrity"].startswith("sha512-")
    assert json.loads((MODELS / "package.json").read_text())["dependencies"] == {PACKAGE: "2.0.0"}


def test_the_pools_validate_against_karpenters_models(validate):
    objects = docs()
    assert [o["kind"] for o in objects] == ["NodePool", "NodePool", "EC2NodeClass"]
    assert validate(objects) == [[], [], []]


BROKEN = [
    (("spec", "weight"), "high", "/spec/weight must be integer"),
    (
        ("spec", "disruption", "consolidationPolicy"),
        "Always",
        "/spec/disruption/consolidationPolicy must be equal to one of the allowed values",
    ),
    (
        ("spec", "template", "spec", "taints", 0, "effect"),
        "Sometimes",
        "/spec/template/spec/taints/0/effect must be equal to one of the allowed values",
    ),
    (("spec", "template", "spec", "nodeClassRef"), None, "must have required property"),
]


def test_a_broken_pool_is_rejected_by_the_models(validate):
    """One node process for every broken copy (each is its own object and verdict)."""
    pools = []
    for path, value, _expected in BROKEN:
        pool = copy.deepcopy(docs()[0])
        target = pool
        for key in path[:-1]:
            target = target[key]
        if value is None:
            del target[path[-1]]
        else:
            target[path[-1]] = value
        pools.append(pool)
    for (_path, _value, expected), errors in zip(BROKEN, validate(pools)):
        assert any(expected in e for e in errors), (expected, errors)


def test_the_manifest_keeps_the_gpu_and_spot_rules():
    assert check.karpenter_problems(docs()) == []
    spot, demand, _cls = docs()
    assert check._capacity(spot) == {"spot"} and check._capacity(demand) == {"on-demand"}
    assert spot["spec"]["weight"] > demand["spec"]["weight"]


def _mutated(index, change):
    objects = docs()
    change(objects[index])
    return [str(p) for p in check.karpenter_problems(objects)]


@pytest.mark.parametrize(
    "index, change, expected",
    [
        (1, lambda p: p["spec"].update(weight=100), "weighs as much as the spot pool or more"),
        (
            0,
            lambda p: p["spec"]["template"]["spec"]["requirements"][0].update(values=["on-demand"]),
            "no NodePool on spot capacity only",
        ),
        (
            1,
            lambda p: p["spec"]["template"]["spec"]["requirements"][0].update(values=["spot"]),
            "no on-demand NodePool",
        ),
        (
            0,
            lambda p: p["spec"]["disruption"].update(
                consolidationPolicy="WhenEmptyOrUnderutilized"
            ),
            "may move a running GPU job",
        ),
        (0, lambda p: p["spec"]["template"]["spec"].pop("taints"), "no nvidia.com/gpu:NoSchedule"),
        (0, lambda p: p["spec"].pop("limits"), "may grow without bound"),
        (0, lambda p: p["spec"]["template"].pop("metadata"), "no runner scale set selects them"),
        (
            0,
            lambda p: p["spec"]["template"]["spec"]["nodeClassRef"].update(name="gpus"),
            "not a node class in this file",
        ),
    ],
)
def test_a_broken_copy_breaks_a_rule(index, change, expected):
    found = _mutated(index, change)
    assert any(expected in p for p in found), found


def test_the_cli_checks_a_karpenter_manifest(tmp_path):
    ok = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "check.py"), "--karpenter", str(MANIFEST)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0 and ok.stdout.strip().endswith(": ok"), ok.stdout + ok.stderr
    objects = docs()
    objects[1]["spec"]["weight"] = 500
    broken = tmp_path / "pools.yaml"
    broken.write_text(yaml.safe_dump_all(objects))
    bad = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "check.py"), "--karpenter", str(broken)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 1 and "give the spot pool the higher spec.weight" in bad.stdout


def test_the_selector_label_is_the_scale_sets():
    values = yaml.safe_load((ROOT / "deploy" / "arc" / "values-whole-gpu.yaml").read_text())
    selector = values["template"]["spec"]["nodeSelector"]
    for pool in docs()[:2]:
        labels = pool["spec"]["template"]["metadata"]["labels"]
        assert labels[check.POOL_LABEL] == selector[check.POOL_LABEL]
