"""deploy/: the runner scale sets and GPU operator configuration, checked as a cluster would.

Each variant's Helm values are rendered into the AutoscalingRunnerSet the chart (0.14.2)
would create and validated against the CRD's openAPIV3Schema (strict: unknown fields are
errors), their keys against the values the chart's values.yaml documents, and the result
against the GPU rules of deploy/check.py. Core objects go through kubernetes-validate. For
every mistake users report there is a broken copy here that must be rejected. No helm binary
is assumed: deploy/check.py models the template's spec part itself. ARC's values.yaml and
CRD are read from ../shared/reference/arc-0.14.2 (the tests that need them skip where it is
absent).
"""

from __future__ import annotations

import copy
import importlib.util
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_ci.cuda import require
from gpu_ci.cuda.facts import Gpu
from tests.conftest import ROOT, shared_path

DEPLOY = ROOT / "deploy"
ARC = DEPLOY / "arc"
OPERATOR = DEPLOY / "gpu-operator"
VARIANTS = sorted(ARC.glob("values-*.yaml"))
KUBERNETES_VERSION = "1.32.0"


def _load_check() -> Any:
    spec = importlib.util.spec_from_file_location("deploy_check", DEPLOY / "check.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["deploy_check"] = module
    spec.loader.exec_module(module)
    return module


check = _load_check()


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def reference() -> Path:
    """ARC 0.14.2's chart values.yaml and CRD, in ../shared (skips where absent)."""
    return shared_path("reference", "arc-0.14.2")


@pytest.fixture(scope="module")
def crd(reference) -> Any:
    return check.load_yaml(reference / check.CRD_NAME)


@pytest.fixture(scope="module")
def chart(reference) -> str:
    """The text of the chart's values.yaml: the keys it sets and documents in comments."""
    return (reference / check.CHART_VALUES_NAME).read_text(encoding="utf-8")


def problems_of(values: dict[str, Any], crd: Any, chart: str) -> list[Any]:
    found = check.check_values(values, crd, chart)
    if not found:
        ars = check.render_autoscaling_runner_set(values)
        found = check.operator_problems(ars, load(OPERATOR / "device-plugin-config.yaml"),
                                        load(OPERATOR / "mig-parted-config.yaml"))
    return found


# -- the reference files ------------------------------------------------------------------------

def test_the_reference_is_read_from_shared_not_copied(reference, tmp_path):
    assert check.REFERENCE.resolve() == reference.resolve()
    assert not list((ROOT / "deploy").rglob(check.CRD_NAME))
    proc = subprocess.run([sys.executable, str(DEPLOY / "check.py"), "--reference",
                           str(tmp_path), str(ARC / "values-whole-gpu.yaml")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "does not exist" in proc.stderr and "--reference" in proc.stderr


def test_the_crd_is_the_autoscaling_runner_set_crd(crd):
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["spec"]["names"]["kind"] == "AutoscalingRunnerSet"
    spec = check.crd_schema(crd)["properties"]["spec"]["properties"]
    assert {"minRunners", "maxRunners", "template", "githubConfigUrl"} <= set(spec)


def test_documented_paths_are_read_from_the_chart_values(chart):
    paths = check.documented_value_paths(chart)
    assert {("minRunners",), ("maxRunners",), ("containerMode", "type"), ("template", "spec"),
            ("githubServerTLS", "runnerMountPath"), ("resourceMeta", "ephemeralRunner")} <= paths
    assert ("maxRunner",) not in paths


# -- each variant is clean ----------------------------------------------------------------------

def test_there_are_three_variants():
    assert [p.name for p in VARIANTS] == ["values-mig.yaml", "values-time-sliced.yaml",
                                          "values-whole-gpu.yaml"]


@pytest.mark.parametrize("path", VARIANTS, ids=lambda p: p.stem)
def test_variant_passes_every_check(path, crd, chart):
    values = load(path)
    assert [str(p) for p in problems_of(values, crd, chart)] == []
    ars = check.render_autoscaling_runner_set(values)
    assert ars["spec"]["minRunners"] == 0
    assert 1 <= ars["spec"]["maxRunners"] <= check.MAX_RUNNERS_CAP
    assert ars["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"
    assert ars["spec"]["template"]["spec"]["restartPolicy"] == "Never"  # the chart's default
    assert ars["metadata"]["name"] == values["runnerScaleSetName"]


@pytest.mark.parametrize("path", VARIANTS, ids=lambda p: p.stem)
def test_check_cli_accepts_the_variant(path, reference):
    proc = subprocess.run([sys.executable, str(DEPLOY / "check.py"), str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("ok")


def test_check_cli_rejects_a_broken_copy_and_says_how_to_fix(tmp_path, reference):
    values = load(ARC / "values-whole-gpu.yaml")
    del values["template"]["spec"]["runtimeClassName"]
    bad = tmp_path / "values.yaml"
    bad.write_text(yaml.safe_dump(values))
    proc = subprocess.run([sys.executable, str(DEPLOY / "check.py"), str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "runtimeClassName" in proc.stdout
    assert "Fix: set `runtimeClassName: nvidia`" in proc.stdout


def test_check_cli_missing_file_is_a_usage_error(tmp_path):
    proc = subprocess.run([sys.executable, str(DEPLOY / "check.py"), str(tmp_path / "no.yaml")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "does not exist" in proc.stderr


# -- broken copies: each mistake users report is rejected ---------------------------------------

def runner(values: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in values["template"]["spec"]["containers"] if c["name"] == "runner")


def gpu_on_sidecar(v):
    limits = runner(v)["resources"]["limits"]
    gpu = limits.pop("nvidia.com/gpu")
    v["template"]["spec"]["containers"].append(
        {"name": "sidecar", "image": "busybox:1.36",
         "resources": {"limits": {"nvidia.com/gpu": gpu}}})


def gpu_on_init_container(v):
    gpu = runner(v)["resources"]["limits"].pop("nvidia.com/gpu")
    v["template"]["spec"]["initContainers"] = [
        {"name": "warmup", "image": "busybox:1.36",
         "resources": {"limits": {"nvidia.com/gpu": gpu}}}]


def gpu_in_requests_only(v):
    gpu = runner(v)["resources"]["limits"].pop("nvidia.com/gpu")
    runner(v)["resources"]["requests"]["nvidia.com/gpu"] = gpu


def no_runtime_class(v):
    del v["template"]["spec"]["runtimeClassName"]


def runtime_class_misspelt(v):
    v["template"]["spec"]["runtimeClassname"] = v["template"]["spec"].pop("runtimeClassName")


def max_runners_unbounded(v):
    del v["maxRunners"]


def max_runners_misspelt(v):
    v["maxRunner"] = v.pop("maxRunners")


def max_runners_huge(v):
    v["maxRunners"] = 1000


def min_runners_warm(v):
    v["minRunners"] = 1


def min_above_max(v):
    v["minRunners"], v["maxRunners"] = 5, 2


def dind_mode(v):
    v["containerMode"] = {"type": "dind"}


def kubernetes_mode(v):
    v["containerMode"] = {"type": "kubernetes"}


def no_tolerations(v):
    del v["template"]["spec"]["tolerations"]


def toleration_for_another_taint(v):
    v["template"]["spec"]["tolerations"] = [{"key": "sku", "operator": "Equal", "value": "gpu",
                                             "effect": "NoSchedule"}]


def no_node_selector(v):
    del v["template"]["spec"]["nodeSelector"]


def privileged_runner(v):
    runner(v)["securityContext"] = {"privileged": True}


def latest_image(v):
    runner(v)["image"] = "ghcr.io/actions/actions-runner:latest"


def runner_renamed(v):
    runner(v)["name"] = "main"


def node_selector_as_list(v):
    v["template"]["spec"]["nodeSelector"] = ["gpu-ci/pool=whole-gpu"]  # a list, not a map


def selects_on_a_late_label(v):
    v["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.present"] = "true"


BROKEN: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("gpu-limit-on-a-sidecar", gpu_on_sidecar, "a GPU limit on a container other than the runner"),
    ("gpu-limit-on-an-init-container", gpu_on_init_container, "it is on warmup"),
    ("gpu-in-requests-only", gpu_in_requests_only, "requested but not limited"),
    ("no-runtimeClassName", no_runtime_class, "without the NVIDIA runtime"),
    ("runtimeClassName-misspelt", runtime_class_misspelt, "Additional properties are not allowed"),
    ("maxRunners-unbounded", max_runners_unbounded, "maxRunners: is not set"),
    ("maxRunners-misspelt", max_runners_misspelt, "maxRunner: the chart's template never reads"),
    ("maxRunners-huge", max_runners_huge, "not a bound"),
    ("minRunners-above-zero", min_runners_warm, "idle runners hold GPUs"),
    ("minRunners-above-maxRunners", min_above_max, "maxRunners has to be greater or equal"),
    ("docker-in-docker", dind_mode, "the stock docker:dind daemon has no NVIDIA runtime"),
    ("kubernetes-mode", kubernetes_mode, "a GPU the job never sees"),
    ("no-tolerations", no_tolerations, "no toleration for the `nvidia.com/gpu`"),
    ("toleration-for-another-taint", toleration_for_another_taint, "no toleration"),
    ("no-nodeSelector", no_node_selector, "no node selector"),
    ("nodeSelector-on-a-label-set-after-boot", selects_on_a_late_label,
     "a node autoscaler scaling the pool up from zero does not know the label"),
    ("privileged-runner", privileged_runner, "runs privileged"),
    ("latest-image", latest_image, "is not pinned"),
    ("no-runner-container", runner_renamed, "no container is named `runner`"),
    ("nodeSelector-not-a-map", node_selector_as_list, "is not of type 'object'"),
]


@pytest.mark.parametrize("mutate,expected", [(m, e) for _, m, e in BROKEN],
                         ids=[name for name, _, _ in BROKEN])
@pytest.mark.parametrize("path", VARIANTS, ids=lambda p: p.stem)
def test_broken_copy_is_rejected(path, mutate, expected, crd, chart):
    values = load(path)
    if mutate in (gpu_on_sidecar, gpu_on_init_container, gpu_in_requests_only):
        # the same mistake with the variant's own resource name
        limits = runner(values)["resources"]["limits"]
        name = next(k for k in limits if k.startswith("nvidia.com/"))
        limits["nvidia.com/gpu"] = limits.pop(name)
    mutate(values)
    found = [str(p) for p in problems_of(values, crd, chart)]
    assert any(expected in p for p in found), found
    assert all(" Fix: " in p for p in found)


def test_broken_copy_of_a_shared_gpu_without_jax_preallocation_off(crd, chart):
    values = load(ARC / "values-time-sliced.yaml")
    runner(values)["env"] = []
    found = [str(p) for p in problems_of(values, crd, chart)]
    assert any("XLA_PYTHON_CLIENT_PREALLOCATE=false" in p for p in found), found


def test_dind_rendering_puts_the_daemon_in_a_privileged_sidecar():
    values = load(ARC / "values-whole-gpu.yaml")
    values["containerMode"] = {"type": "dind"}
    pod = check.render_autoscaling_runner_set(values)["spec"]["template"]["spec"]
    dind = next(c for c in pod["initContainers"] if c["name"] == "dind")
    assert dind["restartPolicy"] == "Always" and dind["securityContext"]["privileged"]
    assert "resources" not in dind  # the daemon that runs `container:` jobs has no GPU


# -- cross-file: what the pool advertises is what the runner asks for ---------------------------

def test_time_sliced_variant_asks_for_what_its_pool_advertises():
    config = load(OPERATOR / "device-plugin-config.yaml")
    values = load(ARC / "values-time-sliced.yaml")
    key = values["template"]["spec"]["nodeSelector"]["nvidia.com/device-plugin.config"]
    assert check.time_slicing_resources(config, key) == {"nvidia.com/gpu.shared": 4}
    assert values["maxRunners"] % 4 == 0  # whole GPUs' worth of replicas


def test_mig_variant_asks_for_a_profile_its_layout_creates():
    config = load(OPERATOR / "mig-parted-config.yaml")
    values = load(ARC / "values-mig.yaml")
    key = values["template"]["spec"]["nodeSelector"]["nvidia.com/mig.config"]
    profiles = check.mig_profiles(config, key)
    assert profiles == {"1g.18gb": 7}
    assert "nvidia.com/mig-1g.18gb" in runner(values)["resources"]["limits"]
    assert values["maxRunners"] % 7 == 0


@pytest.mark.parametrize("variant,resource,expected", [
    ("values-time-sliced.yaml", "nvidia.com/gpu", "advertise nvidia.com/gpu.shared"),
    ("values-mig.yaml", "nvidia.com/gpu", "advertise nvidia.com/mig-1g.18gb"),
    ("values-mig.yaml", "nvidia.com/mig-1g.10gb", "advertise nvidia.com/mig-1g.18gb"),
    ("values-whole-gpu.yaml", "nvidia.com/mig-1g.18gb", "selects no time-sliced or MIG pool"),
])
def test_resource_the_pool_does_not_advertise_is_rejected(variant, resource, expected, crd,
                                                          chart):
    values = load(ARC / variant)
    limits = runner(values)["resources"]["limits"]
    limits.pop(next(k for k in limits if k.startswith("nvidia.com/")))
    limits[resource] = 1
    found = [str(p) for p in problems_of(values, crd, chart)]
    assert any(expected in p for p in found), found


def test_selecting_a_layout_that_does_not_exist_is_rejected(crd, chart):
    values = load(ARC / "values-mig.yaml")
    values["template"]["spec"]["nodeSelector"]["nvidia.com/mig.config"] = "all-1g.18gb"
    found = [str(p) for p in problems_of(values, crd, chart)]
    assert any("which the mig-parted config lacks" in p for p in found), found


# -- core objects: kubernetes-validate ----------------------------------------------------------

CORE = [ARC / "namespace.yaml", ARC / "networkpolicy.yaml", OPERATOR / "runtimeclass.yaml",
        OPERATOR / "device-plugin-config.yaml", OPERATOR / "mig-parted-config.yaml"]


@pytest.mark.parametrize("path", CORE, ids=lambda p: p.name)
def test_core_objects_validate(path):
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kubernetes_validate.validate(load(path), KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("path,mutate", [
    (OPERATOR / "runtimeclass.yaml", lambda d: d.pop("handler")),
    (OPERATOR / "device-plugin-config.yaml", lambda d: d.update(data={"x": 4})),
    (ARC / "namespace.yaml", lambda d: d["metadata"].update(labelz={})),
], ids=["runtimeclass-without-handler", "configmap-data-not-strings", "namespace-typo"])
def test_kubernetes_validate_rejects_broken_core_objects(path, mutate):
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    doc = copy.deepcopy(load(path))
    mutate(doc)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_runtime_class_is_the_one_the_runners_and_the_operator_name():
    assert load(OPERATOR / "runtimeclass.yaml")["metadata"]["name"] == check.RUNTIME_CLASS
    assert load(OPERATOR / "values.yaml")["operator"]["runtimeClass"] == check.RUNTIME_CLASS


def test_operator_values_name_the_shipped_configmaps():
    values = load(OPERATOR / "values.yaml")
    plugin = load(OPERATOR / "device-plugin-config.yaml")
    mig = load(OPERATOR / "mig-parted-config.yaml")
    assert values["devicePlugin"]["config"]["name"] == plugin["metadata"]["name"]
    assert values["migManager"]["config"]["name"] == mig["metadata"]["name"]
    assert values["mig"]["strategy"] == "mixed"  # the MIG variant asks for a profile by name
    layouts = yaml.safe_load(mig["data"]["config.yaml"])["mig-configs"]
    assert values["migManager"]["config"]["default"] in layouts
    assert values["devicePlugin"]["config"]["default"] in ("", *plugin["data"])


def test_time_slicing_config_refuses_multi_replica_requests_and_renames():
    plugin = load(OPERATOR / "device-plugin-config.yaml")
    for text in plugin["data"].values():
        config = yaml.safe_load(text)
        assert config["version"] == "v1"
        sharing = config["sharing"]["timeSlicing"]
        assert sharing["renameByDefault"] is True
        assert sharing["failRequestsGreaterThanOne"] is True
        assert all(int(r["replicas"]) >= 2 for r in sharing["resources"])


def test_mig_layouts_use_valid_profiles_and_keep_all_disabled():
    mig = load(OPERATOR / "mig-parted-config.yaml")
    config = yaml.safe_load(mig["data"]["config.yaml"])
    assert config["version"] == "v1"
    assert config["mig-configs"]["all-disabled"] == [{"devices": "all", "mig-enabled": False}]
    for key in config["mig-configs"]:
        for profile, count in check.mig_profiles(mig, key).items():
            assert re.fullmatch(r"[1-7]g\.\d+gb", profile) and 1 <= count <= 7


# -- the namespace's Pod Security level holds for the runner pods --------------------------------

@pytest.mark.parametrize("path", VARIANTS, ids=lambda p: p.stem)
def test_runner_pods_meet_pod_security_restricted(path):
    assert load(ARC / "namespace.yaml")["metadata"]["labels"][
        "pod-security.kubernetes.io/enforce"] == "restricted"
    pod = check.render_autoscaling_runner_set(load(path))["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["automountServiceAccountToken"] is False
    for container in pod["containers"]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        assert not context.get("privileged")


# -- the runner image ---------------------------------------------------------------------------

def test_runner_image_pins_the_runner_and_adds_python_for_the_bootstrap():
    text = (ARC / "runner-image" / "Dockerfile").read_text(encoding="utf-8")
    version = re.search(r"^ARG RUNNER_VERSION=(\d+\.\d+\.\d+)$", text, re.M)
    assert version, "RUNNER_VERSION must be a pinned x.y.z"
    assert re.search(r"^FROM ghcr\.io/actions/actions-runner:\$\{RUNNER_VERSION\}$", text, re.M)
    install = re.search(r"apt-get install .*", text)
    assert install and {"python3", "python3-venv", "python3-pip"} <= set(install.group().split())
    assert "sys.version_info >= (3, 9)" in text  # the build fails on an older Python
    assert [line for line in text.splitlines() if line.startswith("USER ")][-1] == "USER runner"
    for path in VARIANTS:  # the values run the image this Dockerfile builds
        assert runner(load(path))["image"].endswith(f"/gpu-ci-runner:{version.group(1)}")


# -- verify-cuda-env's require line accepts the GPU each pool hands a job ------------------------

#: Fraction of the board's memory per MIG profile of the H200 141GB ("Fraction of Memory",
#: NVIDIA MIG User Guide, Supported MIG Profiles: H200 profiles follow the A100/H100 layout
#: of 8 memory slices). https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html
H200_MIG_MEMORY = {"1g.18gb": 1 / 8, "1g.35gb": 2 / 8, "2g.35gb": 2 / 8, "3g.71gb": 4 / 8,
                   "4g.71gb": 4 / 8, "7g.141gb": 1}


def observed_h200() -> dict[str, Any]:
    machines = load(shared_path("reference", "observed-gpu-machines.yaml"))
    return next(m for m in machines if m["gpus"][0]["name"] == "NVIDIA H200")


def facts_for(values: dict[str, Any]) -> require.Facts:
    """What the job sees in a pod of this pool on the observed H200 nodes: the whole board
    (time-slicing shows the whole board too: its memory is shared, not reserved), or one MIG
    instance of the profile the runner asks for, with its fraction of the board's memory
    (an upper bound: the driver keeps a little of each slice)."""
    machine = observed_h200()
    board = machine["gpus"][0]
    cuda = machine["cuda_driver_version"]
    name, memory = board["name"], board["memory_total_mib"] * 2**20
    resource = check.runner_gpu_resource(check.render_autoscaling_runner_set(values))
    if resource.startswith("nvidia.com/mig-"):
        profile = resource.removeprefix("nvidia.com/mig-")
        name, memory = f"{name} MIG {profile}", int(memory * H200_MIG_MEMORY[profile])
    gpu = Gpu(index=0, name=name, uuid="GPU-0",
              compute_capability=tuple(board["compute_capability"]),
              memory_total_bytes=memory, brand="nvidia")
    return require.Facts(cuda=f"{cuda // 1000}.{cuda % 1000 // 10}",
                         driver=machine["driver_version"], gpus=(gpu,))


def example_pools() -> list[dict[str, Any]]:
    workflow = load(ROOT / "examples" / "cuda-ci-reusable.yml")
    return workflow["jobs"]["gpu"]["strategy"]["matrix"]["include"]


def values_for_pool(pool: str) -> dict[str, Any]:
    matches = [load(p) for p in VARIANTS if load(p)["runnerScaleSetName"] == pool]
    assert len(matches) == 1, f"no single deploy/arc values file is scale set {pool!r}"
    return matches[0]


def test_each_variant_has_an_example_row():
    assert sorted(row["pool"] for row in example_pools()) == sorted(
        load(p)["runnerScaleSetName"] for p in VARIANTS)


@pytest.mark.parametrize("row", example_pools(), ids=lambda r: r["pool"])
def test_example_require_accepts_the_gpu_the_pool_hands_a_job(row):
    facts = facts_for(values_for_pool(row["pool"]))
    lines = [line for line in row["require"].splitlines() if line.strip()]
    assert lines
    for requirement in require.parse_lines(lines):
        assert require.unmet(requirement, facts) is None, (requirement.text,
                                                           require.describe(facts))


def test_mig_slice_is_smaller_than_its_name_suggests():
    facts = facts_for(values_for_pool("gpu-ci-mig-1g"))
    assert facts.gpus[0].name == "NVIDIA H200 MIG 1g.18gb"
    # "18gb" is 18 GB of 1/8 of the board (17.5 GiB as NVML counts): memory>=18GiB fails
    # on the slice, and the whole-GPU job's memory>=40GiB fails there too.
    for line in ("memory>=18GiB", "memory>=40GiB"):
        assert require.unmet(require.parse_requirement(line), facts), line
    assert require.unmet(require.parse_requirement("memory>=15GiB"), facts) is None


def test_whole_gpu_requirement_rejects_the_mig_pool_but_not_the_whole_gpu_pool():
    rows = {row["pool"]: row for row in example_pools()}
    whole = require.parse_lines(rows["gpu-ci-whole-gpu"]["require"].split())
    mig = facts_for(values_for_pool("gpu-ci-mig-1g"))
    assert any(require.unmet(r, mig) for r in whole)


def test_network_policy_blocks_the_metadata_service_for_every_runner_pod():
    policy = load(ARC / "networkpolicy.yaml")
    assert policy["metadata"]["namespace"] == load(ARC / "namespace.yaml")["metadata"]["name"]
    assert policy["spec"]["podSelector"] == {}
    blocks = [rule["ipBlock"] for egress in policy["spec"]["egress"] for rule in egress["to"]
              if "ipBlock" in rule]
    assert blocks and all("169.254.169.254/32" in b["except"] for b in blocks)


def test_deploy_check_is_ruff_clean():
    # `make test` lints src, tests, scripts and benchmarks; deploy/check.py is linted here.
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", str(DEPLOY)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("path", VARIANTS, ids=lambda p: p.stem)
def test_runner_pod_validates_as_a_kubernetes_pod(path):
    # The CRD embeds a PodTemplateSpec; the pod ARC creates from it must also pass the
    # Kubernetes API's own Pod schema (strict) of a current release.
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    template = check.render_autoscaling_runner_set(load(path))["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "runner-x", "namespace": "gpu-ci-runners"},
           "spec": template["spec"]}
    kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)
    broken = copy.deepcopy(pod)
    broken["spec"]["containers"][0]["resources"]["limitz"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)
