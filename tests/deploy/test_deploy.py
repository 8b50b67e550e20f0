"""deploy/: the runner scale sets and GPU operator configuration, checked as a cluster would.

Each variant's Helm values are rendered into the AutoscalingRunnerSet the chart (0.14.2)
would create and validated against the CRD's openAPIV3Schema (strict: unknown fields are
errors), their keys against the values the chart's values.yaml documents, and the result
against the GPU rules of deploy/check.py (in kubernetes container mode, against the workflow
pod the container hook builds from deploy/arc/hook-template-gpu.yaml; every variant keeps
the job-started admission hook wired). Core objects go through kubernetes-validate. For
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
from testkit.shared import ROOT, shared_path

DEPLOY = ROOT / "deploy"
ARC = DEPLOY / "arc"
OPERATOR = DEPLOY / "gpu-operator"
KUBE_MODE = ARC / "values-kubernetes-mode.yaml"
HOOK_TEMPLATE = ARC / "hook-template-gpu.yaml"
VARIANTS = sorted(p for p in ARC.glob("values-*.yaml") if p != KUBE_MODE)
"""The variants whose runner container runs the job's steps (and holds the GPU)."""
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


def problems_of(
    values: dict[str, Any], crd: Any, chart: str, config_maps: list[Any] | None = None
) -> list[Any]:
    """All of check.py's findings, with the shipped hook template ConfigMap unless
    ``config_maps`` names others."""
    maps = [load(HOOK_TEMPLATE)] if config_maps is None else config_maps
    found = check.check_values(values, crd, chart, config_maps=maps)
    if not found:
        ars = check.render_autoscaling_runner_set(values)
        found = check.operator_problems(
            ars,
            load(OPERATOR / "device-plugin-config.yaml"),
            load(OPERATOR / "mig-parted-config.yaml"),
            resource=check.step_gpu_resource(ars, maps),
        )
    return found


# -- the reference files ------------------------------------------------------------------------


def test_the_reference_is_read_from_shared_not_copied(reference, tmp_path):
    assert check.REFERENCE.resolve() == reference.resolve()
    assert not list((ROOT / "deploy").rglob(check.CRD_NAME))
    proc = subprocess.run(
        [
            sys.executable,
            str(DEPLOY / "check.py"),
            "--reference",
            str(tmp_path),
            str(ARC / "values-whole-gpu.yaml"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "does not exist" in proc.stderr and "--reference" in proc.stderr


def test_the_crd_is_the_autoscaling_runner_set_crd(crd):
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["spec"]["names"]["kind"] == "AutoscalingRunnerSet"
    spec = check.crd_schema(crd)["properties"]["spec"]["properties"]
    assert {"minRunners", "maxRunners", "template", "githubConfigUrl"} <= set(spec)


def test_documented_paths_are_read_from_the_chart_values(chart):
    paths = check.documented_value_paths(chart)
    assert {
        ("minRunners",),
        ("maxRunners",),
        ("containerMode", "type"),
        ("template", "spec"),
        ("githubServerTLS", "runnerMountPath"),
        ("resourceMeta", "ephemeralRunner"),
    } <= paths
    assert ("maxRunner",) not in paths


# -- each variant is clean ----------------------------------------------------------------------


def test_there_are_three_variants():
    assert [p.name for p in VARIANTS] == [
        "values-mig.yaml",
        "values-time-sliced.yaml",
        "values-whole-gpu.yaml",
    ]


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
    proc = subprocess.run(
        [sys.executable, str(DEPLOY / "check.py"), str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("ok")


def test_check_cli_rejects_a_broken_copy_and_says_how_to_fix(tmp_path, reference):
    values = load(ARC / "values-whole-gpu.yaml")
    del values["template"]["spec"]["runtimeClassName"]
    bad = tmp_path / "values.yaml"
    bad.write_text(yaml.safe_dump(values))
    proc = subprocess.run(
        [sys.executable, str(DEPLOY / "check.py"), str(bad)], capture_output=True, text=True
    )
    assert proc.returncode == 1
    assert "runtimeClassName" in proc.stdout
    assert "Fix: set `runtimeClassName: nvidia`" in proc.stdout


def test_check_cli_missing_file_is_a_usage_error(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(DEPLOY / "check.py"), str(tmp_path / "no.yaml")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "does not exist" in proc.stderr


# -- broken copies: each mistake users report is rejected ---------------------------------------


def runner(values: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in values["template"]["spec"]["containers"] if c["name"] == "runner")


def gpu_on_sidecar(v):
    limits = runner(v)["resources"]["limits"]
    gpu = limits.pop("nvidia.com/gpu")
    v["template"]["spec"]["containers"].append(
        {
            "name": "sidecar",
            "image": "busybox:1.36",
            "resources": {"limits": {"nvidia.com/gpu": gpu}},
        }
    )


def gpu_on_init_container(v):
    gpu = runner(v)["resources"]["limits"].pop("nvidia.com/gpu")
    v["template"]["spec"]["initContainers"] = [
        {
            "name": "warmup",
            "image": "busybox:1.36",
            "resources": {"limits": {"nvidia.com/gpu": gpu}},
        }
    ]


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
    v["template"]["spec"]["tolerations"] = [
        {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
    ]


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
    (
        "nodeSelector-on-a-label-set-after-boot",
        selects_on_a_late_label,
        "a node autoscaler scaling the pool up from zero does not know the label",
    ),
    ("privileged-runner", privileged_runner, "runs privileged"),
    ("latest-image", latest_image, "is not pinned"),
    ("no-runner-container", runner_renamed, "no container is named `runner`"),
    ("nodeSelector-not-a-map", node_selector_as_list, "is not of type 'object'"),
]


@pytest.mark.parametrize(
    "mutate,expected", [(m, e) for _, m, e in BROKEN], ids=[name for name, _, _ in BROKEN]
)
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


@pytest.mark.parametrize(
    "variant,resource,expected",
    [
        ("values-time-sliced.yaml", "nvidia.com/gpu", "advertise nvidia.com/gpu.shared"),
        ("values-mig.yaml", "nvidia.com/gpu", "advertise nvidia.com/mig-1g.18gb"),
        ("values-mig.yaml", "nvidia.com/mig-1g.10gb", "advertise nvidia.com/mig-1g.18gb"),
        ("values-whole-gpu.yaml", "nvidia.com/mig-1g.18gb", "selects no time-sliced or MIG pool"),
    ],
)
def test_resource_the_pool_does_not_advertise_is_rejected(variant, resource, expected, crd, chart):
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

CORE = [
    ARC / "namespace.yaml",
    ARC / "networkpolicy.yaml",
    OPERATOR / "runtimeclass.yaml",
    OPERATOR / "device-plugin-config.yaml",
    OPERATOR / "mig-parted-config.yaml",
]


@pytest.mark.parametrize("path", CORE, ids=lambda p: p.name)
def test_core_objects_validate(path):
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kubernetes_validate.validate(load(path), KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize(
    "path,mutate",
    [
        (OPERATOR / "runtimeclass.yaml", lambda d: d.pop("handler")),
        (OPERATOR / "device-plugin-config.yaml", lambda d: d.update(data={"x": 4})),
        (ARC / "namespace.yaml", lambda d: d["metadata"].update(labelz={})),
    ],
    ids=["runtimeclass-without-handler", "configmap-data-not-strings", "namespace-typo"],
)
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
    assert (
        load(ARC / "namespace.yaml")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
        == "restricted"
    )
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
H200_MIG_MEMORY = {
    "1g.18gb": 1 / 8,
    "1g.35gb": 2 / 8,
    "2g.35gb": 2 / 8,
    "3g.71gb": 4 / 8,
    "4g.71gb": 4 / 8,
    "7g.141gb": 1,
}


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
    gpu = Gpu(
        index=0,
        name=name,
        uuid="GPU-0",
        compute_capability=tuple(board["compute_capability"]),
        memory_total_bytes=memory,
        brand="nvidia",
    )
    return require.Facts(
        cuda=f"{cuda // 1000}.{cuda % 1000 // 10}", driver=machine["driver_version"], gpus=(gpu,)
    )


def example_pools() -> list[dict[str, Any]]:
    workflow = load(ROOT / "examples" / "cuda-ci-reusable.yml")
    return workflow["jobs"]["gpu"]["strategy"]["matrix"]["include"]


def values_for_pool(pool: str) -> dict[str, Any]:
    matches = [load(p) for p in VARIANTS if load(p)["runnerScaleSetName"] == pool]
    assert len(matches) == 1, f"no single deploy/arc values file is scale set {pool!r}"
    return matches[0]


def test_each_variant_has_an_example_row():
    assert sorted(row["pool"] for row in example_pools()) == sorted(
        load(p)["runnerScaleSetName"] for p in VARIANTS
    )


@pytest.mark.parametrize("row", example_pools(), ids=lambda r: r["pool"])
def test_example_require_accepts_the_gpu_the_pool_hands_a_job(row):
    facts = facts_for(values_for_pool(row["pool"]))
    lines = [line for line in row["require"].splitlines() if line.strip()]
    assert lines
    for requirement in require.parse_lines(lines):
        assert require.unmet(requirement, facts) is None, (
            requirement.text,
            require.describe(facts),
        )


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
    blocks = [
        rule["ipBlock"]
        for egress in policy["spec"]["egress"]
        for rule in egress["to"]
        if "ipBlock" in rule
    ]
    assert blocks and all("169.254.169.254/32" in b["except"] for b in blocks)


def test_deploy_check_is_ruff_clean():
    # `make test` lints src, tests, scripts and benchmarks; deploy/check.py is linted here.
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", str(DEPLOY)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("path", VARIANTS, ids=lambda p: p.stem)
def test_runner_pod_validates_as_a_kubernetes_pod(path):
    # The CRD embeds a PodTemplateSpec; the pod ARC creates from it must also pass the
    # Kubernetes API's own Pod schema (strict) of a current release.
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    template = check.render_autoscaling_runner_set(load(path))["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "runner-x", "namespace": "gpu-ci-runners"},
        "spec": template["spec"],
    }
    kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)
    broken = copy.deepcopy(pod)
    broken["spec"]["containers"][0]["resources"]["limitz"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


# -- the job-started admission hook stays wired on every GPU runner ------------------------------


def test_admission_hook_path_is_the_one_the_runner_image_sets():
    text = (ARC / "runner-image" / "Dockerfile").read_text(encoding="utf-8")
    assert f"ENV ACTIONS_RUNNER_HOOK_JOB_STARTED={check.ADMISSION_HOOK}" in text.splitlines()


def _env(values: dict[str, Any]) -> list[dict[str, Any]]:
    return runner(values).setdefault("env", [])


def _drop_env(values: dict[str, Any], name: str) -> None:
    runner(values)["env"] = [e for e in _env(values) if e["name"] != name]


def hook_overridden(v):
    _env(v).append({"name": "ACTIONS_RUNNER_HOOK_JOB_STARTED", "value": "/bin/true.sh"})


def allowed_workflows_missing(v):
    _drop_env(v, "GPU_CI_ALLOWED_WORKFLOWS")


def allowed_workflows_empty(v):
    next(e for e in _env(v) if e["name"] == "GPU_CI_ALLOWED_WORKFLOWS")["value"] = ""


def gate_labels_missing(v):
    _drop_env(v, "GPU_CI_GATE_LABELS")


def gate_labels_empty(v):
    next(e for e in _env(v) if e["name"] == "GPU_CI_GATE_LABELS")["value"] = " "


def admission_token_file_missing(v):
    _drop_env(v, "GPU_CI_ADMISSION_TOKEN_FILE")


def admission_token_in_the_environment(v):
    _env(v).append(
        {
            "name": "GPU_CI_ADMISSION_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "gpu-ci-admission", "key": "token"}},
        }
    )


def admission_token_in_plain_text(v):
    _env(v).append({"name": "GPU_CI_ADMISSION_TOKEN", "value": "github_pat_x"})


def _volume(v, name):
    return next(x for x in v["template"]["spec"]["volumes"] if x["name"] == name)


def admission_token_file_on_the_secret(v):
    """The runner mounts the Secret where the file should be: read-only, never removed."""
    _volume(v, "admission-token").pop("emptyDir")
    _volume(v, "admission-token")["secret"] = {"secretName": "gpu-ci-admission"}


def admission_token_never_copied(v):
    v["template"]["spec"].pop("initContainers")


def admission_token_copied_elsewhere(v):
    (init,) = v["template"]["spec"]["initContainers"]
    init["command"] = [*init["command"][:-1], "/run/gpu-ci/admission/other"]


ADMISSION_BROKEN = [
    (
        "hook-overridden",
        hook_overridden,
        "ACTIONS_RUNNER_HOOK_JOB_STARTED",
        "remove the ACTIONS_RUNNER_HOOK_JOB_STARTED entry",
    ),
    (
        "allowed-workflows-missing",
        allowed_workflows_missing,
        "GPU_CI_ALLOWED_WORKFLOWS",
        "GPU_CI_ALLOWED_WORKFLOWS",
    ),
    (
        "allowed-workflows-empty",
        allowed_workflows_empty,
        "GPU_CI_ALLOWED_WORKFLOWS",
        "GPU_CI_ALLOWED_WORKFLOWS",
    ),
    ("gate-labels-missing", gate_labels_missing, "GPU_CI_GATE_LABELS", "gate label"),
    ("gate-labels-empty", gate_labels_empty, "GPU_CI_GATE_LABELS", "gate label"),
    (
        "admission-token-file-missing",
        admission_token_file_missing,
        "GPU_CI_ADMISSION_TOKEN_FILE",
        "init container",
    ),
    (
        "admission-token-in-the-environment",
        admission_token_in_the_environment,
        "GPU_CI_ADMISSION_TOKEN",
        "GPU_CI_ADMISSION_TOKEN_FILE",
    ),
    (
        "admission-token-in-plain-text",
        admission_token_in_plain_text,
        "GPU_CI_ADMISSION_TOKEN",
        "GPU_CI_ADMISSION_TOKEN_FILE",
    ),
    (
        "admission-token-file-on-the-secret",
        admission_token_file_on_the_secret,
        "GPU_CI_ADMISSION_TOKEN_FILE",
        "emptyDir",
    ),
    (
        "admission-token-never-copied",
        admission_token_never_copied,
        "GPU_CI_ADMISSION_TOKEN_FILE",
        "init container",
    ),
    (
        "admission-token-copied-elsewhere",
        admission_token_copied_elsewhere,
        "GPU_CI_ADMISSION_TOKEN_FILE",
        "init container",
    ),
]


def another_secret_in_the_environment(v):
    _env(v).append(
        {"name": "PYPI_TOKEN", "valueFrom": {"secretKeyRef": {"name": "pypi", "key": "token"}}}
    )


def a_secret_from_env_from(v):
    runner(v)["envFrom"] = [{"secretRef": {"name": "ci-secrets"}}]


def the_secret_mounted_on_the_runner(v):
    runner(v)["volumeMounts"].append(
        {"name": "admission-secret", "mountPath": "/etc/gpu-ci/admission-secret"}
    )


SECRET_TO_THE_JOB = [
    ("another-secret-in-the-environment", another_secret_in_the_environment, "PYPI_TOKEN"),
    ("a-secret-from-env-from", a_secret_from_env_from, "envFrom"),
    ("the-secret-mounted-on-the-runner", the_secret_mounted_on_the_runner, "admission-secret"),
]


@pytest.mark.parametrize(
    "mutate,what", [(m, w) for _, m, w in SECRET_TO_THE_JOB], ids=[n for n, *_ in SECRET_TO_THE_JOB]
)
@pytest.mark.parametrize("path", VARIANTS, ids=lambda p: p.stem)
def test_a_secret_where_the_jobs_steps_run_is_rejected(path, mutate, what, crd, chart):
    """Steps run in the runner container: a Secret there is every admitted job's."""
    values = load(path)
    mutate(values)
    found = check.check_values(values, crd, chart)
    assert [p for p in found if what in str(p) and "Secret" in str(p)], [str(p) for p in found]


def test_the_kubernetes_mode_runner_may_hold_other_secrets(crd, chart):
    """There the steps run in the workflow pod: the runner's environment is not theirs."""
    values = load(KUBE_MODE)
    another_secret_in_the_environment(values)
    found = check.check_values(values, crd, chart, config_maps=[load(HOOK_TEMPLATE)])
    assert [str(p) for p in found] == []


@pytest.mark.parametrize(
    "mutate,what,fix",
    [(m, w, f) for _, m, w, f in ADMISSION_BROKEN],
    ids=[name for name, *_ in ADMISSION_BROKEN],
)
@pytest.mark.parametrize("path", [*VARIANTS, KUBE_MODE], ids=lambda p: p.stem)
def test_unwired_admission_hook_is_rejected_with_the_fix(path, mutate, what, fix, crd, chart):
    values = load(path)
    mutate(values)
    found = check.check_values(values, crd, chart, config_maps=[load(HOOK_TEMPLATE)])
    hits = [p for p in found if what in str(p) and "admission" in str(p)]
    assert hits, [str(p) for p in found]
    assert any(fix in p.fix for p in hits), [p.fix for p in hits]


def test_the_admission_hook_set_to_its_own_path_is_accepted(crd, chart):
    values = load(ARC / "values-whole-gpu.yaml")
    _env(values).append({"name": "ACTIONS_RUNNER_HOOK_JOB_STARTED", "value": check.ADMISSION_HOOK})
    assert [str(p) for p in problems_of(values, crd, chart)] == []


# -- kubernetes container mode: the GPU goes to the workflow pod ---------------------------------


def hook_template_doc() -> dict[str, Any]:
    """The pod template inside the shipped ConfigMap (a deep copy, safe to edit)."""
    config_map = load(HOOK_TEMPLATE)
    (text,) = config_map["data"].values()
    return yaml.safe_load(text)


def config_map_with(template: dict[str, Any]) -> dict[str, Any]:
    config_map = load(HOOK_TEMPLATE)
    (key,) = config_map["data"]
    config_map["data"][key] = yaml.safe_dump(template)
    return config_map


def job_container(template: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in template["spec"]["containers"] if c["name"] == "$job")


def test_kubernetes_mode_variant_passes_every_check(crd, chart):
    values = load(KUBE_MODE)
    assert values["containerMode"]["type"] == "kubernetes"
    assert [str(p) for p in problems_of(values, crd, chart)] == []


def test_kubernetes_mode_renders_what_the_chart_adds(crd):
    values = load(KUBE_MODE)
    ars = check.render_autoscaling_runner_set(values)
    pod = ars["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["ACTIONS_RUNNER_CONTAINER_HOOKS"]["value"] == "/home/runner/k8s/index.js"
    assert env["ACTIONS_RUNNER_REQUIRE_JOB_CONTAINER"]["value"] == "true"
    assert env["ACTIONS_RUNNER_POD_NAME"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.name"}
    }
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert (
        volumes["work"]["ephemeral"]["volumeClaimTemplate"]["spec"]
        == values["containerMode"]["kubernetesModeWorkVolumeClaim"]
    )
    assert volumes["hook-template"]["configMap"]["name"] == load(HOOK_TEMPLATE)["metadata"]["name"]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["work"] == "/home/runner/_work"
    assert pod["serviceAccountName"].endswith("-kube-mode")
    assert check.runner_gpu_resource(ars) is None  # the runner pod holds no GPU
    assert check.schema_problems(ars, check.strict(check.crd_schema(crd)), "x") == []


def test_kubernetes_mode_puts_the_gpu_on_the_workflow_pod():
    values = load(KUBE_MODE)
    ars = check.render_autoscaling_runner_set(values)
    workflow = check.workflow_pod(ars, [load(HOOK_TEMPLATE)])
    assert workflow is not None
    job = next(c for c in workflow["containers"] if c["name"] == "job")
    assert job["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert job["image"] != "$job"  # the hook keeps the job's image: `$job`'s is ignored
    assert workflow["runtimeClassName"] == "nvidia"
    assert workflow["automountServiceAccountToken"] is False
    runner_pod = ars["spec"]["template"]["spec"]
    assert workflow["nodeSelector"] == runner_pod["nodeSelector"]  # pinned to its node
    assert workflow["tolerations"] == runner_pod["tolerations"]
    assert check.step_gpu_resource(ars, [load(HOOK_TEMPLATE)]) == "nvidia.com/gpu"


def test_workflow_pod_validates_and_meets_pod_security_restricted():
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    ars = check.render_autoscaling_runner_set(load(KUBE_MODE))
    spec = check.workflow_pod(ars, [load(HOOK_TEMPLATE)])
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "runner-x-workflow", "namespace": "gpu-ci-runners"},
        "spec": spec,
    }
    kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)
    kubernetes_validate.validate(load(HOOK_TEMPLATE), KUBERNETES_VERSION, strict=True)
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    for container in spec["containers"]:
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]


def test_kubernetes_mode_runner_pod_validates_as_a_kubernetes_pod():
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    template = check.render_autoscaling_runner_set(load(KUBE_MODE))["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "runner-x", "namespace": "gpu-ci-runners"},
        "spec": template["spec"],
    }
    kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)


def test_check_cli_accepts_the_kubernetes_mode_variant(reference):
    proc = subprocess.run(
        [sys.executable, str(DEPLOY / "check.py"), str(KUBE_MODE)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("ok")


def test_check_cli_reads_the_hook_template_it_is_given(tmp_path, reference):
    template = hook_template_doc()
    del job_container(template)["resources"]["limits"]["nvidia.com/gpu"]
    bad = tmp_path / "hook-template.yaml"
    bad.write_text(yaml.safe_dump(config_map_with(template)))
    proc = subprocess.run(
        [sys.executable, str(DEPLOY / "check.py"), "--hook-template", str(bad), str(KUBE_MODE)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "$job" in proc.stdout and "Fix: " in proc.stdout


def no_hook_template_env(v, t):
    _drop_env(v, "ACTIONS_RUNNER_CONTAINER_HOOK_TEMPLATE")


def hook_template_not_mounted(v, t):
    runner(v)["volumeMounts"][0]["mountPath"] = "/etc/elsewhere"


def hook_template_key_missing(v, t):
    next(e for e in _env(v) if e["name"] == "ACTIONS_RUNNER_CONTAINER_HOOK_TEMPLATE")["value"] = (
        "/etc/gpu-ci/hook-template/other.yaml"
    )


def job_without_gpu(v, t):
    del job_container(t)["resources"]["limits"]["nvidia.com/gpu"]


def job_gpu_in_requests_only(v, t):
    job = job_container(t)
    job["resources"]["requests"]["nvidia.com/gpu"] = job["resources"]["limits"].pop(
        "nvidia.com/gpu"
    )


def job_container_misnamed(v, t):
    job_container(t)["name"] = "job"  # not `$job`: added as a second container


def template_without_runtime_class(v, t):
    del t["spec"]["runtimeClassName"]


def template_runtime_class_misspelt(v, t):
    t["spec"]["runtimeClassname"] = t["spec"].pop("runtimeClassName")


def template_without_node_selector(v, t):
    del t["spec"]["nodeSelector"]


def template_without_tolerations(v, t):
    del t["spec"]["tolerations"]


def gpu_on_the_runner_in_kubernetes_mode(v, t):
    runner(v)["resources"]["limits"]["nvidia.com/gpu"] = 1


def runner_pod_on_another_pool(v, t):
    v["template"]["spec"]["nodeSelector"] = {"gpu-ci/pool": "cpu"}


def runner_pod_without_toleration(v, t):
    del v["template"]["spec"]["tolerations"]


def no_work_volume_claim(v, t):
    del v["containerMode"]["kubernetesModeWorkVolumeClaim"]


def docker_in_docker_instead(v, t):
    v["containerMode"] = {"type": "dind"}


KUBE_BROKEN: list[tuple[str, Callable[[dict[str, Any], dict[str, Any]], None], str]] = [
    ("no-hook-template", no_hook_template_env, "no hook template"),
    ("hook-template-not-mounted", hook_template_not_mounted, "no volume is mounted"),
    ("hook-template-key-missing", hook_template_key_missing, "has no key other.yaml"),
    ("job-container-without-gpu", job_without_gpu, "the `$job` container has no GPU limit"),
    ("job-gpu-in-requests-only", job_gpu_in_requests_only, "requested but not limited"),
    ("job-container-misnamed", job_container_misnamed, "no container named `$job`"),
    (
        "template-without-runtimeClassName",
        template_without_runtime_class,
        "without the NVIDIA runtime",
    ),
    (
        "template-runtimeClassName-misspelt",
        template_runtime_class_misspelt,
        "Additional properties are not allowed",
    ),
    ("template-without-nodeSelector", template_without_node_selector, "no node selector"),
    (
        "template-without-tolerations",
        template_without_tolerations,
        "no toleration for the `nvidia.com/gpu`",
    ),
    ("gpu-on-the-runner", gpu_on_the_runner_in_kubernetes_mode, "a GPU the job never sees"),
    ("runner-pod-on-another-pool", runner_pod_on_another_pool, "on the runner pod's node"),
    (
        "runner-pod-without-toleration",
        runner_pod_without_toleration,
        "the runner pod has no toleration",
    ),
    ("no-work-volume-claim", no_work_volume_claim, "kubernetesModeWorkVolumeClaim"),
    (
        "docker-in-docker",
        docker_in_docker_instead,
        "the stock docker:dind daemon has no NVIDIA runtime",
    ),
]


@pytest.mark.parametrize(
    "mutate,expected", [(m, e) for _, m, e in KUBE_BROKEN], ids=[name for name, _, _ in KUBE_BROKEN]
)
def test_broken_kubernetes_mode_copy_is_rejected(mutate, expected, crd, chart):
    values, template = load(KUBE_MODE), hook_template_doc()
    mutate(values, template)
    found = [str(p) for p in problems_of(values, crd, chart, [config_map_with(template)])]
    assert any(expected in p for p in found), found
    assert all(" Fix: " in p for p in found)


def test_kubernetes_mode_without_the_hook_template_manifest_is_rejected(crd, chart):
    found = [str(p) for p in problems_of(load(KUBE_MODE), crd, chart, config_maps=[])]
    assert any("gpu-ci-hook-template" in p and "--hook-template" in p for p in found), found


def test_check_cli_missing_hook_template_is_a_usage_error(tmp_path, reference):
    proc = subprocess.run(
        [
            sys.executable,
            str(DEPLOY / "check.py"),
            "--hook-template",
            str(tmp_path / "none.yaml"),
            str(KUBE_MODE),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "none.yaml does not exist" in proc.stderr
