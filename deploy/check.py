"""Check a GPU runner scale set before it reaches a cluster: the mistakes that leave GPU jobs
queued for ever, without a GPU, or sharing one they should not.

    python deploy/check.py deploy/arc/values-whole-gpu.yaml [more values files]

Each values file (gha-runner-scale-set 0.14.2) is

1. checked against the values the chart documents in its ``values.yaml`` (set or shown
   commented out there; a misspelt ``maxRunner`` is silently ignored by Helm, leaving the
   scale set unbounded);
2. rendered into the AutoscalingRunnerSet the chart would create (the part of the template
   that builds ``spec``, re-implemented here because no ``helm`` binary is assumed), and that
   object validated against the CRD's openAPIV3Schema, made strict: an unknown field is an
   error, as with ``kubectl --validate=strict`` (a misspelt ``runtimeClassname`` would
   otherwise be pruned and the pod would run without the NVIDIA runtime);
3. held to the GPU rules (:func:`gpu_problems`): GPU limits on the container the job's
   steps run in, the NVIDIA RuntimeClass, a node selector and a toleration for the GPU nodes,
   scale to zero with a bound, no Docker-in-Docker, no privileged container, the job-started
   admission hook wired (:func:`admission_problems`). In ``kubernetes`` container mode the
   steps run in a workflow pod the container hook creates, so those pod rules apply to the
   hook's pod template (``ACTIONS_RUNNER_CONTAINER_HOOK_TEMPLATE``, read from the ConfigMap the
   runner mounts: ``--hook-template``), and the runner pod must hold no GPU but sit on a GPU
   node (:func:`kubernetes_mode_problems`).

Cross-file rules tie a values file to the GPU operator's configuration
(:func:`operator_problems`). Only PyYAML and jsonschema are needed.

The chart's ``values.yaml`` and the CRD are ARC's files, not ours: they are read from a
reference directory, ``../shared/reference/arc-0.14.2`` beside the project by default
(``--reference DIR`` or ``GPU_CI_ARC_REFERENCE`` name another), never copied here.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REFERENCE = Path(
    os.environ.get("GPU_CI_ARC_REFERENCE")
    or HERE.parent.parent / "shared" / "reference" / "arc-0.14.2"
)
"""ARC 0.14.2's chart values.yaml and AutoscalingRunnerSet CRD (../shared beside the clone)."""
CRD_NAME = "actions.github.com_autoscalingrunnersets.yaml"
CHART_VALUES_NAME = "values.yaml"

GPU_RESOURCE = re.compile(r"^nvidia\.com/(gpu|gpu\.shared|mig-\d+g\.\d+gb(\+me)?)$")
RUNTIME_CLASS = "nvidia"
GPU_TAINT_KEY = "nvidia.com/gpu"
LATE_LABELS = frozenset(
    {
        "nvidia.com/gpu.present",
        "nvidia.com/gpu.product",
        "nvidia.com/gpu.count",
        "nvidia.com/gpu.memory",
        "nvidia.com/gpu.family",
        "nvidia.com/cuda.driver.major",
        "nvidia.com/mig.capable",
    }
)
"""Labels GPU feature discovery puts on a node once it runs (not known before it exists)."""
ADMISSION_HOOK = "/opt/gpu-ci/gpu-admission.sh"
"""Where deploy/arc/runner-image/Dockerfile installs the job-started admission hook (its
``ENV ACTIONS_RUNNER_HOOK_JOB_STARTED``; a test ties the two)."""
HOOK_TEMPLATE_ENV = "ACTIONS_RUNNER_CONTAINER_HOOK_TEMPLATE"
"""runner-container-hooks: the pod template file merged into the workflow pod
(packages/k8s/src/k8s/utils.ts, ENV_HOOK_TEMPLATE_PATH; docs/adrs/0134-hook-extensions.md)."""
HOOK_TEMPLATE = HERE / "arc" / "hook-template-gpu.yaml"
MAX_RUNNERS_CAP = 64
"""Above this a scale set is not a bound on spend but a typo; raise it knowingly."""


@dataclass(frozen=True)
class Problem:
    """One mistake: where it is, what is wrong, how to fix it."""

    where: str
    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what} Fix: {self.fix}"


class RenderError(Exception):
    """What the chart's own ``fail`` would say (helm install stops with it)."""


def load_yaml(path: Path) -> Any:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with path.open(encoding="utf-8") as handle:
        return yaml.load(handle, Loader=loader)  # noqa: S506 - a safe loader


def load_all_yaml(path: Path) -> list[Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with path.open(encoding="utf-8") as handle:
        return list(yaml.load_all(handle, Loader=loader))  # noqa: S506 - a safe loader


# -- 1. values keys against the chart's documented values -------------------------------------

_KEY_LINE = re.compile(
    r"^(?P<indent>[ ]*)(?P<comment>#[ ]?)?(?P<inner>[ ]*)"
    r"(?P<key>[A-Za-z_][A-Za-z0-9_]*):(?:[ ]|$)"
)

FREE_FORM: frozenset[tuple[str, ...]] = frozenset(
    {
        ("template",),
        ("listenerTemplate",),
        ("listenerMetrics",),
        ("githubConfigSecret",),
        ("labels",),
        ("annotations",),
        ("proxy",),
        ("githubServerTLS", "certificateFrom"),
        ("containerMode", "kubernetesModeWorkVolumeClaim"),
        ("containerMode", "kubernetesModeAdditionalRoleRules"),
        ("keyVault",),
        ("controllerServiceAccount",),
    }
)
"""Our model of the chart: values it passes on whole (a PodSpec, a secret's fields, label
maps, a claim spec), so keys below them are not the chart's to document; what they hold is
checked after rendering, against the CRD."""

_RESOURCE_META_ENTRIES = ("labels", "annotations")
"""``resourceMeta.<resource>`` holds labels and annotations: free-form maps."""


def documented_value_paths(chart_values: str) -> set[tuple[str, ...]]:
    """Every key path ``values.yaml`` documents: the keys it sets and the ones it shows
    commented out (``# maxRunners: 5``, ``#   type: "dind"``). Prose lines (``##``) and list
    items are skipped; a commented key's indentation is counted from after ``# ``."""
    paths: set[tuple[str, ...]] = set()
    stack: list[tuple[int, str]] = []
    for line in chart_values.splitlines():
        if line.lstrip().startswith("##"):
            continue
        match = _KEY_LINE.match(line)
        if not match:
            continue
        indent = len(match.group("indent")) + len(match.group("inner"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match.group("key")))
        paths.add(tuple(key for _, key in stack))
    return paths


def _documented(leaf: tuple[str, ...], documented: set[tuple[str, ...]]) -> bool:
    if leaf in documented:
        return True
    if any(leaf[: len(free)] == free for free in FREE_FORM):
        return leaf[:1] in documented
    if len(leaf) > 3 and leaf[0] == "resourceMeta" and leaf[2] in _RESOURCE_META_ENTRIES:
        return leaf[:3] in documented
    # a documented key whose value we set to a mapping or list deeper than the example shows
    return any(
        leaf[: len(path)] == path
        for path in documented
        if not any(other[: len(path)] == path and other != path for other in documented)
    )


def _leaves(value: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    if isinstance(value, Mapping) and value:
        for key, sub in value.items():
            yield from _leaves(sub, (*prefix, str(key)))
    else:
        yield prefix


def unread_values(values: Mapping[str, Any], documented: set[tuple[str, ...]]) -> list[Problem]:
    """Values the chart does not document: its template never reads them, and Helm ignores
    them without a word."""
    problems = []
    for leaf in _leaves(values):
        if not _documented(leaf, documented):
            dotted = ".".join(leaf)
            known = sorted({p[0] for p in documented})
            problems.append(
                Problem(
                    dotted,
                    "the chart's template never reads this value (the chart's values.yaml "
                    "does not document it), so Helm ignores it.",
                    f"check the spelling; top-level keys the chart documents: {', '.join(known)}.",
                )
            )
    return problems


# -- 2. render the AutoscalingRunnerSet the chart would create ----------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def render_autoscaling_runner_set(
    values: Mapping[str, Any],
    release: str = "gpu-ci",
    namespace: str = "gpu-ci-runners",
    kube_minor: int = 31,
) -> dict[str, Any]:
    """The object templates/autoscalingrunnerset.yaml (0.14.2) renders from ``values``.

    Re-implemented for the fields a runner's behaviour depends on (spec, the pod template
    with the chart's containerMode additions); labels and annotations are reduced to the
    ones the controller needs. Raises :class:`RenderError` where the chart calls ``fail``.
    """
    name = str(values.get("runnerScaleSetName") or release)
    if not name or len(name) > 45:
        raise RenderError("Name must have up to 45 characters")
    url = str(values.get("githubConfigUrl") or "").rstrip("/")
    if not url:
        raise RenderError(".Values.githubConfigUrl is required")
    fullname = f"{name}-gha-rs"[:63].rstrip("-")
    secret = values.get("githubConfigSecret")
    if isinstance(secret, str):
        if not secret:
            raise RenderError(
                "Values.githubConfigSecret is required for setting auth with GitHub server."
            )
        secret_name = secret
    else:
        secret_name = f"{fullname}-github-secret".replace("_", "-")
    spec: dict[str, Any] = {"githubConfigUrl": url, "githubConfigSecret": secret_name}
    if values.get("runnerGroup"):
        spec["runnerGroup"] = values["runnerGroup"]
    if values.get("runnerScaleSetName"):
        spec["runnerScaleSetName"] = values["runnerScaleSetName"]
    labels = values.get("scaleSetLabels")
    if labels and isinstance(labels, list):
        for label in labels:
            if not label or len(str(label)) >= 256:
                raise RenderError(
                    "scaleSetLabels contains an empty string or a label of 256 characters or more"
                )
        spec["runnerScaleSetLabels"] = list(labels)
    low, high = values.get("minRunners"), values.get("maxRunners")
    if _is_number(low) and _is_number(high) and low > high:
        raise RenderError("maxRunners has to be greater or equal to minRunners")
    if _is_number(high):
        if int(high) < 0:
            raise RenderError("maxRunners has to be greater or equal to 0")
        spec["maxRunners"] = int(high)
    if _is_number(low):
        if int(low) < 0:
            raise RenderError("minRunners has to be greater or equal to 0")
        spec["minRunners"] = int(low)
    for key in ("listenerTemplate", "listenerMetrics"):
        if values.get(key):
            spec[key] = values[key]

    tmpl = values.get("template") or {}
    user_spec = dict(tmpl.get("spec") or {})
    mode = str((values.get("containerMode") or {}).get("type") or "")
    pod: dict[str, Any] = {
        k: v
        for k, v in user_spec.items()
        if k not in ("containers", "volumes", "initContainers", "serviceAccountName")
    }
    pod.setdefault("restartPolicy", "Never")
    kube_mode = mode in ("kubernetes", "kubernetes-novolume")
    pod["serviceAccountName"] = user_spec.get("serviceAccountName") or (
        f"{fullname}-kube-mode" if kube_mode else f"{fullname}-no-permission"
    )
    containers = [dict(c) for c in user_spec.get("containers") or []]
    runner = next((c for c in containers if c.get("name") == "runner"), {})
    others = [c for c in containers if c.get("name") != "runner"]
    init = list(user_spec.get("initContainers") or [])
    volumes = list(user_spec.get("volumes") or [])
    if mode == "dind":
        dind = {
            "name": "dind",
            "image": "docker:dind",
            "args": [
                "dockerd",
                "--host=unix:///var/run/docker.sock",
                "--group=$(DOCKER_GROUP_GID)",
            ],
            "env": [{"name": "DOCKER_GROUP_GID", "value": "123"}],
            "securityContext": {"privileged": True},
            "volumeMounts": [
                {"name": "work", "mountPath": "/home/runner/_work"},
                {"name": "dind-sock", "mountPath": "/var/run"},
                {"name": "dind-externals", "mountPath": "/home/runner/externals"},
            ],
        }
        externals = {
            "name": "init-dind-externals",
            "image": runner.get("image"),
            "command": ["cp"],
            "args": ["-r", "/home/runner/externals/.", "/home/runner/tmpDir/"],
            "volumeMounts": [{"name": "dind-externals", "mountPath": "/home/runner/tmpDir"}],
        }
        runner["env"] = [
            *runner.get("env", []),
            {"name": "DOCKER_HOST", "value": "unix:///var/run/docker.sock"},
            {"name": "RUNNER_WAIT_FOR_DOCKER_IN_SECONDS", "value": "120"},
        ]
        runner["volumeMounts"] = [
            *runner.get("volumeMounts", []),
            {"name": "work", "mountPath": "/home/runner/_work"},
            {"name": "dind-sock", "mountPath": "/var/run"},
        ]
        others = [c for c in others if c.get("name") != "dind"]
        if kube_minor >= 29:  # a native sidecar: an init container that keeps running
            init = [externals, {**dind, "restartPolicy": "Always"}, *init]
        else:
            init = [externals, *init]
            others = [dind, *others]
        volumes = [
            {"name": "dind-sock", "emptyDir": {}},
            {"name": "dind-externals", "emptyDir": {}},
            *(
                [v for v in volumes if v.get("name") == "work"]
                or [{"name": "work", "emptyDir": {}}]
            ),
            *[v for v in volumes if v.get("name") != "work"],
        ]
    elif kube_mode:
        runner, volumes = _kubernetes_mode_runner(runner, volumes, mode, values)
    if init:
        pod["initContainers"] = init
    pod["containers"] = ([runner] if runner else []) + others
    if volumes or mode == "kubernetes-novolume":
        pod["volumes"] = volumes
    template: dict[str, Any] = {"spec": pod}
    meta = tmpl.get("metadata") or {}
    if meta:
        template["metadata"] = {k: meta[k] for k in ("labels", "annotations") if meta.get(k)}
    spec["template"] = template
    return {
        "apiVersion": "actions.github.com/v1alpha1",
        "kind": "AutoscalingRunnerSet",
        "metadata": {
            "name": name.replace("_", "-"),
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/component": "autoscaling-runner-set",
                "actions.github.com/scale-set-name": name,
                "actions.github.com/scale-set-namespace": namespace,
            },
        },
        "spec": spec,
    }


def _kubernetes_mode_runner(
    runner: dict[str, Any], volumes: list[Any], mode: str, values: Mapping[str, Any]
) -> tuple[dict[str, Any], list[Any]]:
    """What the chart adds in ``kubernetes`` and ``kubernetes-novolume`` mode (0.14.2,
    templates/_helpers.tpl, ``kubernetes-mode-runner-container``,
    ``kubernetes-novolume-mode-runner-container``, ``kubernetes-mode-work-volume``): the
    container hooks' env, each only where the runner's env lacks it, and in ``kubernetes``
    mode the ``work`` volume (an ephemeral claim from ``kubernetesModeWorkVolumeClaim``
    unless ``template.spec.volumes`` has one) mounted at /home/runner/_work."""
    novolume = mode == "kubernetes-novolume"
    added: list[dict[str, Any]] = [
        {
            "name": "ACTIONS_RUNNER_CONTAINER_HOOKS",
            "value": f"/home/runner/{'k8s-novolume' if novolume else 'k8s'}/index.js",
        },
        {
            "name": "ACTIONS_RUNNER_POD_NAME",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
        },
        {"name": "ACTIONS_RUNNER_REQUIRE_JOB_CONTAINER", "value": "true"},
    ]
    if novolume:
        added.append({"name": "ACTIONS_RUNNER_IMAGE", "value": str(runner.get("image") or "")})
    env = list(runner.get("env") or [])
    have = {e.get("name") for e in env}
    runner = {**runner, "env": [*env, *(e for e in added if e["name"] not in have)]}
    if novolume:
        return runner, volumes
    mounts = list(runner.get("volumeMounts") or [])
    if not any(m.get("name") == "work" for m in mounts):
        mounts.append({"name": "work", "mountPath": "/home/runner/_work"})
    runner["volumeMounts"] = mounts
    claim = (values.get("containerMode") or {}).get("kubernetesModeWorkVolumeClaim")
    work = [v for v in volumes if v.get("name") == "work"] or [
        {"name": "work", "ephemeral": {"volumeClaimTemplate": {"spec": claim}}}
    ]
    return runner, [*work, *(v for v in volumes if v.get("name") != "work")]


# -- schema -------------------------------------------------------------------------------------


def crd_schema(crd: Mapping[str, Any], version: str = "v1alpha1") -> dict[str, Any]:
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            return dict(entry["schema"]["openAPIV3Schema"])
    raise KeyError(f"the CRD has no version {version}")


def strict(schema: Any) -> Any:
    """The schema with unknown fields forbidden wherever the API server would prune them
    (objects with ``properties`` and no ``additionalProperties`` or
    ``x-kubernetes-preserve-unknown-fields``)."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def schema_problems(obj: Any, schema: Mapping[str, Any], where: str) -> list[Problem]:
    import jsonschema  # the test tools bring it (check-jsonschema depends on it)

    validator = jsonschema.Draft7Validator(schema)
    problems = []
    for error in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path)):
        path = ".".join(str(p) for p in error.absolute_path) or "(top)"
        problems.append(
            Problem(
                f"{where}: {path}",
                f"{error.message}.",
                "compare with the AutoscalingRunnerSet CRD (kubectl explain "
                "autoscalingrunnerset.spec...).",
            )
        )
    return problems


# -- 3. the GPU rules ---------------------------------------------------------------------------


def _gpu_limits(container: Mapping[str, Any]) -> dict[str, Any]:
    limits = (container.get("resources") or {}).get("limits") or {}
    return {k: v for k, v in limits.items() if GPU_RESOURCE.match(str(k))}


def _gpu_requests(container: Mapping[str, Any]) -> dict[str, Any]:
    requests = (container.get("resources") or {}).get("requests") or {}
    return {k: v for k, v in requests.items() if GPU_RESOURCE.match(str(k))}


def runner_gpu_resource(ars: Mapping[str, Any]) -> str | None:
    """The GPU resource the runner container asks for (None when it asks for none)."""
    pod = ars["spec"]["template"]["spec"]
    runner = next((c for c in pod.get("containers", []) if c.get("name") == "runner"), {})
    limits = _gpu_limits(runner)
    return next(iter(limits), None)


def _env_of(container: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(e.get("name")): e for e in container.get("env") or []}


def step_pod_problems(pod: Mapping[str, Any], step: str, where: str) -> list[Problem]:
    """The rules for the pod the job's steps run in: the runner pod (``step`` = ``runner``),
    or in kubernetes mode the hook's workflow pod (``step`` = ``job``, ``where`` = the
    hook template). The GPU limit belongs on the container named ``step``."""
    out: list[Problem] = []
    label = "runner" if step == "runner" else "`$job`"
    at = f"{where}.containers[{'runner' if step == 'runner' else '$job'}]"
    containers = list(pod.get("containers") or [])
    every = [*containers, *pod.get("initContainers", [])]
    main = next((c for c in containers if c.get("name") == step), None)
    if main is None:
        if step == "runner":
            out.append(
                Problem(
                    f"{where}.containers",
                    "no container is named `runner`.",
                    "name the container that runs /home/runner/run.sh `runner`.",
                )
            )
        else:
            out.append(
                Problem(
                    f"{where}.containers",
                    "no container named `$job`: the hook "
                    "adds a container of another name to the workflow pod as it "
                    "is, and the job container gets nothing of it.",
                    "name the job container's entry `$job`.",
                )
            )
        return out
    limits = _gpu_limits(main)
    if not limits:
        elsewhere = [
            c.get("name", "?")
            for c in every
            if c is not main and (_gpu_limits(c) or _gpu_requests(c))
        ]
        out.append(
            Problem(
                f"{at}.resources.limits",
                f"the {label} container has no GPU limit"
                + (
                    f" (it is on {', '.join(elsewhere)}, where the job's steps do not run)"
                    if elsewhere
                    else ""
                )
                + ": the job gets no GPU.",
                "set `nvidia.com/gpu: 1` (or the variant's shared / MIG resource) under the "
                f"{label} container's resources.limits.",
            )
        )
    elif len(limits) > 1:
        out.append(
            Problem(
                f"{at}.resources.limits",
                f"asks for several GPU resources ({', '.join(limits)}).",
                "ask for one resource: whole GPU, shared replica or MIG profile.",
            )
        )
    for name, count in limits.items():
        if name != "nvidia.com/gpu" and str(count) != "1":
            out.append(
                Problem(
                    f"{at}.resources.limits.{name}",
                    f"asks for {count}: a job gets one replica or one MIG "
                    "instance (two replicas are not two GPUs).",
                    "set it to 1.",
                )
            )
    for name, count in _gpu_requests(main).items():
        if name not in limits:
            out.append(
                Problem(
                    f"{at}.resources.requests.{name}",
                    "a GPU is requested but not limited: Kubernetes refuses extended resources "
                    "without a limit.",
                    f"move `{name}: {count}` to resources.limits.",
                )
            )
    for other in every:
        if other is not main and (_gpu_limits(other) or _gpu_requests(other)):
            out.append(
                Problem(
                    f"{where} containers[{other.get('name', '?')}]",
                    f"a GPU limit on a container other than the {label}: the GPU is held by a "
                    "container the job's steps never run in.",
                    f"move the GPU limit to the {label} container.",
                )
            )
    if pod.get("runtimeClassName") != RUNTIME_CLASS:
        out.append(
            Problem(
                f"{where}.runtimeClassName",
                (f"is {pod['runtimeClassName']!r}" if pod.get("runtimeClassName") else "is not set")
                + f", not {RUNTIME_CLASS!r}: without the NVIDIA "
                "runtime no driver library is injected (nvidia-smi and libcuda are missing) on "
                "clusters where it is not the default runtime.",
                f"set `runtimeClassName: {RUNTIME_CLASS}` (the GPU operator creates it).",
            )
        )
    affinity = ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not pod.get("nodeSelector") and not affinity:
        out.append(
            Problem(
                f"{where}.nodeSelector",
                "no node selector or required node affinity: the "
                "autoscaler cannot tell which node pool to grow, and the pod may wait on a CPU "
                "node.",
                "select the GPU pool by a label set on the pool itself (e.g. "
                "gpu-ci/pool: whole-gpu), which a node autoscaler knows before the node exists.",
            )
        )
    late = sorted(k for k in (pod.get("nodeSelector") or {}) if k in LATE_LABELS)
    if late:
        out.append(
            Problem(
                f"{where}.nodeSelector",
                f"selects on {', '.join(late)}, which GPU feature "
                "discovery sets only after a GPU node has started: a node autoscaler scaling the "
                "pool up from zero does not know the label, adds no node, and the job waits.",
                "select on a label set on the node pool itself (e.g. gpu-ci/pool: whole-gpu), "
                "or declare the label in the node group's autoscaler template too.",
            )
        )
    if not _tolerates_gpu(pod):
        out.append(
            Problem(
                f"{where}.tolerations",
                f"no toleration for the `{GPU_TAINT_KEY}` "
                "NoSchedule taint that keeps other pods off GPU nodes: the pod stays Pending.",
                f"add {{key: {GPU_TAINT_KEY}, operator: Exists, effect: NoSchedule}}.",
            )
        )
    out += _privileged_problems(every, where)
    resource = next(iter(limits), "")
    if resource == "nvidia.com/gpu.shared":
        env = _env_of(main)
        if (
            str((env.get("XLA_PYTHON_CLIENT_PREALLOCATE") or {}).get("value", "")).lower()
            != "false"
        ):
            out.append(
                Problem(
                    f"{at}.env",
                    "a time-sliced GPU is shared, memory included, but JAX preallocates 75 % of "
                    "it at start: the first JAX job starves its neighbours.",
                    f"set XLA_PYTHON_CLIENT_PREALLOCATE=false on the {label} container.",
                )
            )
    return out


def _privileged_problems(containers: Sequence[Mapping[str, Any]], where: str) -> list[Problem]:
    return [
        Problem(
            f"{where} containers[{c.get('name', '?')}]",
            "runs privileged: a pull request's code owns the node.",
            "remove privileged: the GPU needs no privilege.",
        )
        for c in containers
        if (c.get("securityContext") or {}).get("privileged")
    ]


def _tolerates_gpu(pod: Mapping[str, Any]) -> bool:
    return any(
        t.get("key") == GPU_TAINT_KEY
        and t.get("effect") in (None, "NoSchedule")
        or (t.get("operator") == "Exists" and not t.get("key"))
        for t in pod.get("tolerations") or []
    )


def admission_problems(runner: Mapping[str, Any]) -> list[Problem]:
    """The job-started admission hook stays wired: the runner image sets
    ``ACTIONS_RUNNER_HOOK_JOB_STARTED`` (deploy/arc/runner-image/Dockerfile); the values
    must not point it elsewhere, and must give the hook its allow list and its gate labels
    (its token: ``token_problems``). The runner runs the hook itself before the job's first
    step, so this holds in every container mode (https://docs.github.com/en/actions/hosting-your-own-runners/
    running-scripts-before-or-after-a-job: "scripts ... on a self-hosted runner")."""
    out: list[Problem] = []
    where = "template.spec.containers[runner].env"
    env = _env_of(runner)
    hook = env.get("ACTIONS_RUNNER_HOOK_JOB_STARTED")
    if hook is not None and hook.get("value") != ADMISSION_HOOK:
        shown = hook.get("value") or "a value from elsewhere"
        out.append(
            Problem(
                f"{where}.ACTIONS_RUNNER_HOOK_JOB_STARTED",
                f"is {shown}, replacing the image's admission hook ({ADMISSION_HOOK}): a pull "
                "request that edits the GPU workflow runs unapproved on the GPU.",
                "remove the ACTIONS_RUNNER_HOOK_JOB_STARTED entry (the runner image sets it); to "
                f"run another script too, call it from a wrapper that runs {ADMISSION_HOOK} first.",
            )
        )
    if runner.get("envFrom"):
        return out  # the two below may come from there: not visible in the values
    allowed = env.get("GPU_CI_ALLOWED_WORKFLOWS")
    if allowed is None or (
        "valueFrom" not in allowed and not str(allowed.get("value") or "").strip()
    ):
        out.append(
            Problem(
                f"{where}.GPU_CI_ALLOWED_WORKFLOWS",
                ("is empty" if allowed is not None else "is not set")
                + ": the admission hook admits no workflow from the default branch (only "
                "approved pull request heads run).",
                "set GPU_CI_ALLOWED_WORKFLOWS to the GPU workflow files, e.g. "
                ".github/workflows/cuda-ci.yml.",
            )
        )
    labels = env.get("GPU_CI_GATE_LABELS")
    if labels is None or ("valueFrom" not in labels and not str(labels.get("value") or "").strip()):
        out.append(
            Problem(
                f"{where}.GPU_CI_GATE_LABELS",
                ("is empty" if labels is not None else "is not set")
                + ": the admission hook takes a `labeled` run of any label for the approval's "
                "run (a `bug` label the maintainer applies minutes before the gate label).",
                "set GPU_CI_GATE_LABELS to the gate label (default CUDA CI) and, with the "
                "comment relay, its relay label.",
            )
        )
    return out


def _mounted_volume(
    pod: Mapping[str, Any], container: Mapping[str, Any], path: str
) -> tuple[Mapping[str, Any], Mapping[str, Any]] | None:
    """(mount, volume) of ``container`` that holds ``path``, or None."""
    for mount in container.get("volumeMounts") or []:
        root = str(mount.get("mountPath") or "").rstrip("/")
        if root and path.startswith(root + "/"):
            volume = next(
                (v for v in pod.get("volumes") or [] if v.get("name") == mount.get("name")), None
            )
            return (mount, volume) if volume is not None else None
    return None


def _holds_secret(volume: Mapping[str, Any]) -> bool:
    sources = (volume.get("projected") or {}).get("sources") or []
    return "secret" in volume or any("secret" in s for s in sources)


def token_problems(
    pod: Mapping[str, Any], runner: Mapping[str, Any], steps_here: bool
) -> list[Problem]:
    """The admission token reaches the hook, never the job.

    On the same-container modes the job's steps run in the runner container, as its user,
    with its environment: a Secret in that environment or mounted there is every admitted
    job's. So an init container copies the token into an ``emptyDir`` file of the runner
    user, the runner container gets its path (``GPU_CI_ADMISSION_TOKEN_FILE``), and the hook
    reads and removes it before the job's first step (the pods are ephemeral, one job
    each). Every mode gets that one wiring; ``steps_here``: the job's steps run in the
    runner container (every mode but kubernetes), where no other Secret may reach them."""
    out: list[Problem] = []
    where = "template.spec.containers[runner]"
    env = _env_of(runner)
    example = "deploy/arc/values-whole-gpu.yaml"
    as_file = (
        "give the admission token as a file: an init container copies the Secret into an "
        f"emptyDir, the runner gets GPU_CI_ADMISSION_TOKEN_FILE (see {example})."
    )
    if "GPU_CI_ADMISSION_TOKEN" in env:
        out.append(
            Problem(
                f"{where}.env.GPU_CI_ADMISSION_TOKEN",
                "puts the admission token in the runner's environment: where the job's steps "
                "run in the runner container (as its user) they inherit it, and an admitted "
                "pull request's test can print it.",
                as_file,
            )
        )
    for name, entry in sorted(env.items()) if steps_here else ():
        if name != "GPU_CI_ADMISSION_TOKEN" and "secretKeyRef" in (entry.get("valueFrom") or {}):
            out.append(
                Problem(
                    f"{where}.env.{name}",
                    "comes from a Secret into the runner's environment, which every job's "
                    "steps inherit, an admitted pull request's included.",
                    "give jobs their secrets through the workflow, never through the runner.",
                )
            )
    if steps_here and any("secretRef" in ref for ref in runner.get("envFrom") or []):
        out.append(
            Problem(
                f"{where}.envFrom",
                "puts a Secret into the runner's environment, which every job's steps "
                "inherit, an admitted pull request's included.",
                "give jobs their secrets through the workflow, never through the runner.",
            )
        )
    for mount in runner.get("volumeMounts") or [] if steps_here else []:
        volume = next(
            (v for v in pod.get("volumes") or [] if v.get("name") == mount.get("name")), {}
        )
        if _holds_secret(volume):
            out.append(
                Problem(
                    f"{where}.volumeMounts[{mount.get('name')}]",
                    "mounts a Secret where the job's steps run: they can read it.",
                    "mount the Secret only on the init container that copies the token.",
                )
            )
    entry = env.get("GPU_CI_ADMISSION_TOKEN_FILE")
    if entry is None:
        if not runner.get("envFrom"):
            out.append(
                Problem(
                    f"{where}.env.GPU_CI_ADMISSION_TOKEN_FILE",
                    "is not set: the admission hook has no token, cannot read the approval "
                    "status and refuses every pull request job.",
                    as_file,
                )
            )
        return out
    return [*out, *_token_file_problems(pod, str(entry.get("value") or ""), as_file)]


def _token_file_problems(pod: Mapping[str, Any], path: str, as_file: str) -> list[Problem]:
    """The file ``GPU_CI_ADMISSION_TOKEN_FILE`` names is an init container's emptyDir copy."""
    where = "template.spec.containers[runner].env.GPU_CI_ADMISSION_TOKEN_FILE"
    runner = next(c for c in pod.get("containers") or [] if c.get("name") == "runner")
    found = _mounted_volume(pod, runner, path) if path.startswith("/") else None
    if found is None or "emptyDir" not in found[1]:
        return [
            Problem(
                where,
                f"{path or 'the value'} is not on an emptyDir volume of the runner container: "
                "the hook cannot remove the token (a Secret volume is read-only), so the job "
                "reads it, or there is no file and every pull request job is refused.",
                as_file,
            )
        ]
    volume = found[1].get("name")
    writers = [
        c
        for c in pod.get("initContainers") or []
        if any(m.get("name") == volume for m in c.get("volumeMounts") or [])
        and any(
            _holds_secret(v)
            for v in pod.get("volumes") or []
            for m in c.get("volumeMounts") or []
            if v.get("name") == m.get("name")
        )
    ]
    if not writers:
        return [
            Problem(
                where,
                f"no init container mounts both the Secret and the {volume} volume: nothing "
                "writes the token file, and the hook refuses every pull request job.",
                as_file,
            )
        ]
    if not any(path in [*(c.get("command") or []), *(c.get("args") or [])] for c in writers):
        return [
            Problem(
                where,
                f"no init container names {path} in its command: the file the hook reads is "
                "not the one written, and the hook refuses every pull request job.",
                as_file,
            )
        ]
    return []


# -- kubernetes mode: the hook template and the workflow pod -------------------------------------


def _hook_template_source(
    pod: Mapping[str, Any], runner: Mapping[str, Any]
) -> tuple[str, str] | Problem | None:
    """(ConfigMap name, key) of the file ACTIONS_RUNNER_CONTAINER_HOOK_TEMPLATE names, a
    Problem where it cannot be one, None where the variable is not set."""
    entry = _env_of(runner).get(HOOK_TEMPLATE_ENV)
    if entry is None:
        return None
    where = f"template.spec.containers[runner].env.{HOOK_TEMPLATE_ENV}"
    path = str(entry.get("value") or "")
    mount = next(
        (
            m
            for m in runner.get("volumeMounts") or []
            if path == m.get("mountPath")
            or path.startswith(str(m.get("mountPath", "")).rstrip("/") + "/")
        ),
        None,
    )
    volume = mount and next(
        (v for v in pod.get("volumes") or [] if v.get("name") == mount.get("name")), None
    )
    if not mount or not volume or "configMap" not in volume:
        return Problem(
            where,
            f"{path or 'the value'}: no volume is mounted there from a "
            "ConfigMap, so the hook fails to read its template and every job "
            "fails (runner-container-hooks, docs/adrs/0134-hook-extensions.md).",
            "mount the hook template's ConfigMap (deploy/arc/"
            "hook-template-gpu.yaml) on the runner container at that path.",
        )
    relative = (
        str(mount.get("subPath") or "")
        if path == mount.get("mountPath")
        else path[len(str(mount["mountPath"]).rstrip("/")) + 1 :]
    )
    config = volume["configMap"]
    items = {i.get("path"): i.get("key") for i in config.get("items") or []}
    return str(config.get("name")), str(items.get(relative, relative) if items else relative)


def hook_template(
    ars: Mapping[str, Any], config_maps: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | Problem | None:
    """The pod template the runner's container hook merges into the workflow pod: read from
    the ConfigMap the runner mounts, among ``config_maps``. None where no template is set."""
    pod = ars["spec"]["template"]["spec"]
    runner: Mapping[str, Any] = next(
        (c for c in pod.get("containers") or [] if c.get("name") == "runner"), {}
    )
    source = _hook_template_source(pod, runner)
    if source is None or isinstance(source, Problem):
        return source
    name, key = source
    where = f"template.spec.containers[runner].env.{HOOK_TEMPLATE_ENV}"
    config_map = next(
        (
            m
            for m in config_maps
            if m.get("kind") == "ConfigMap" and (m.get("metadata") or {}).get("name") == name
        ),
        None,
    )
    if config_map is None:
        return Problem(
            where,
            f"reads ConfigMap {name}, which is not among the manifests "
            "checked: its pod template cannot be checked.",
            "pass its manifest with --hook-template (default deploy/arc/"
            "hook-template-gpu.yaml) and apply it in the runners' namespace.",
        )
    text = (config_map.get("data") or {}).get(key)
    if text is None:
        return Problem(
            where,
            f"ConfigMap {name} has no key {key}: the hook fails to read "
            "its template and every job fails.",
            f"use one of its keys ({', '.join(config_map.get('data') or {})}).",
        )
    doc = yaml.safe_load(text)
    if not isinstance(doc, dict):
        return Problem(
            f"ConfigMap {name} {key}",
            "is not a pod template (a mapping with `spec`).",
            "write it as a pod template: metadata and spec.",
        )
    return doc


def workflow_pod(
    ars: Mapping[str, Any], config_maps: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """The spec of the pod the kubernetes hook creates for a job, with the template merged
    the way runner-container-hooks does (docs/adrs/0134-hook-extensions.md; packages/k8s/
    src/k8s/utils.ts, mergePodSpecWithOptions and mergeContainerWithOptions): template
    fields replace the hook's, but for ``containers`` (``$job`` merged into the job
    container, ``env``/``volumeMounts``/``ports`` appended, ``name`` and ``image`` kept;
    other ``$``-names skipped here as they name service containers; the rest added as
    they are) and ``volumes`` (appended). The hook's own pod: one container ``job`` with
    the job's image, restartPolicy Never, the ``work`` claim, on the runner pod's node
    (v0.7.0 packages/k8s/src/k8s/index.ts, createPod). None without a readable template."""
    template = hook_template(ars, config_maps)
    if not isinstance(template, dict):
        return None
    runner_pod = ars["spec"]["template"]["spec"]
    job: dict[str, Any] = {"name": "job", "image": "the-job-container-image:tag"}
    pod: dict[str, Any] = {
        "containers": [job],
        "restartPolicy": "Never",
        "volumes": [{"name": "work", "persistentVolumeClaim": {"claimName": "runner-pod-work"}}],
    }
    spec = template.get("spec") or {}
    for key, value in spec.items():
        if key == "containers":
            for entry in value or []:
                name = str(entry.get("name") or "")
                if name == "$job":
                    for field, sub in entry.items():
                        if field in ("env", "volumeMounts", "ports"):
                            job[field] = [*job.get(field, []), *sub]
                        elif field not in ("name", "image"):
                            job[field] = sub
                elif not name.startswith("$"):
                    pod["containers"].append(entry)
        elif key == "volumes":
            pod["volumes"] = [*pod["volumes"], *(value or [])]
        else:
            pod[key] = value
    runner: Mapping[str, Any] = next(
        (c for c in runner_pod.get("containers") or [] if c.get("name") == "runner"), {}
    )
    hooks = _env_of(runner).get("ACTIONS_RUNNER_CONTAINER_HOOKS") or {}
    if "k8s-novolume" not in str(hooks.get("value", "")):
        pod.setdefault("nodeName", "the-runner-pods-node")
    return pod


def step_gpu_resource(
    ars: Mapping[str, Any], config_maps: Sequence[Mapping[str, Any]] = ()
) -> str | None:
    """The GPU resource the job's steps get: the runner container's, or in kubernetes
    mode the workflow pod's job container's."""
    resource = runner_gpu_resource(ars)
    if resource is None:
        pod = workflow_pod(ars, config_maps)
        job: Mapping[str, Any] = next(
            (c for c in (pod or {}).get("containers", []) if c.get("name") == "job"), {}
        )
        resource = next(iter(_gpu_limits(job)), None)
    return resource


def kubernetes_mode_problems(
    ars: Mapping[str, Any],
    mode: str,
    values: Mapping[str, Any],
    crd: Mapping[str, Any] | None,
    config_maps: Sequence[Mapping[str, Any]],
) -> list[Problem]:
    """Kubernetes container mode: the job's steps run in a workflow pod the container hook
    creates, which inherits nothing GPU of the runner pod (actions/actions-runner-controller
    #1730, actions/runner-container-hooks #46 and #152); the hook template must carry it."""
    out: list[Problem] = []
    pod = ars["spec"]["template"]["spec"]
    for c in [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]:
        for name in {**_gpu_limits(c), **_gpu_requests(c)}:
            out.append(
                Problem(
                    f"template.spec containers[{c.get('name', '?')}].resources",
                    f"{name} in {mode} mode: the job's steps run in the workflow pod the "
                    "container hook creates, so the runner pod holds a GPU the job never sees "
                    "(a GPU paid for and idle for the whole job).",
                    f"remove {name} from the runner pod; put it on the `$job` container of the "
                    "hook template (deploy/arc/hook-template-gpu.yaml).",
                )
            )
    if (
        mode == "kubernetes"
        and not any(
            v.get("name") == "work"
            for v in (values.get("template") or {}).get("spec", {}).get("volumes") or []
        )
        and not (values.get("containerMode") or {}).get("kubernetesModeWorkVolumeClaim")
    ):
        out.append(
            Problem(
                "containerMode.kubernetesModeWorkVolumeClaim",
                "is not set: the chart renders "
                "the runner's `work` volume from it, and the hook shares the job's workspace "
                "with the workflow pod through that claim; without it the pod is refused.",
                "set it to a claim spec (accessModes: [ReadWriteOnce], a storageClassName, "
                "resources.requests.storage).",
            )
        )
    template = hook_template(ars, config_maps)
    if template is None:
        return [
            *out,
            Problem(
                f"template.spec.containers[runner].env.{HOOK_TEMPLATE_ENV}",
                f"is not set: no hook template, so the workflow pod the hook creates for each "
                f"job ({mode} mode) has no GPU limit, runtimeClassName, node selector or "
                "tolerations: the job gets no GPU.",
                f"set {HOOK_TEMPLATE_ENV} to a pod template mounted from a ConfigMap whose "
                "`$job` container asks for the GPU (deploy/arc/hook-template-gpu.yaml), or "
                "remove containerMode.",
            ),
        ]
    if isinstance(template, Problem):
        return [*out, template]
    where = "hook template spec"
    if crd is not None:
        schema = crd_schema(crd)["properties"]["spec"]["properties"]["template"]
        out += schema_problems(template, strict(schema), "hook template (as a pod template)")
    spec = workflow_pod(ars, config_maps) or {}
    named = any(
        c.get("name") == "$job" for c in (template.get("spec") or {}).get("containers") or []
    )
    checked = dict(spec)
    if not named:
        checked["containers"] = [c for c in spec.get("containers", []) if c.get("name") != "job"]
    out += step_pod_problems(checked, "job", where)
    if mode == "kubernetes":
        wanted = dict((template.get("spec") or {}).get("nodeSelector") or {})
        have = dict(pod.get("nodeSelector") or {})
        differ = {k: v for k, v in wanted.items() if have.get(k) != v}
        if differ:
            out.append(
                Problem(
                    "template.spec.nodeSelector",
                    "does not select the hook template's nodes "
                    f"({', '.join(f'{k}={v}' for k, v in differ.items())}): in kubernetes mode "
                    "the hook puts the workflow pod on the runner pod's node (to share its work "
                    "volume), so it is refused there, or holds no GPU.",
                    "give the runner pod the hook template's nodeSelector (it needs no GPU "
                    "limit: it only has to be on a GPU node).",
                )
            )
        if not _tolerates_gpu(pod):
            out.append(
                Problem(
                    "template.spec.tolerations",
                    f"the runner pod has no toleration for the "
                    f"`{GPU_TAINT_KEY}` taint: in kubernetes mode the workflow pod runs on the "
                    "runner pod's node, which must be a GPU node.",
                    f"add {{key: {GPU_TAINT_KEY}, operator: Exists, effect: NoSchedule}} to "
                    "template.spec.tolerations.",
                )
            )
    return out


def gpu_problems(
    ars: Mapping[str, Any],
    values: Mapping[str, Any],
    max_runners_cap: int = MAX_RUNNERS_CAP,
    config_maps: Sequence[Mapping[str, Any]] = (),
    crd: Mapping[str, Any] | None = None,
) -> list[Problem]:
    """The rules a GPU scale set for pull-request jobs must satisfy."""
    out: list[Problem] = []
    spec = ars["spec"]
    pod = spec["template"]["spec"]
    mode = str((values.get("containerMode") or {}).get("type") or "")
    if mode == "dind":
        out.append(
            Problem(
                "containerMode.type",
                "Docker-in-Docker: the stock docker:dind daemon has no "
                "NVIDIA runtime, so `container:` jobs and `docker run --gpus` see no GPU, and "
                "the dind container runs privileged (a pull request's code can take the node).",
                "remove containerMode: steps run in the runner container, which has the GPU; "
                "for `container:` jobs use the kubernetes-mode variant "
                "(deploy/arc/values-kubernetes-mode.yaml).",
            )
        )
    containers = list(pod.get("containers") or [])
    runner = next((c for c in containers if c.get("name") == "runner"), None)
    if mode in ("kubernetes", "kubernetes-novolume"):
        if runner is None:
            return [*out, *step_pod_problems(pod, "runner", "template.spec")]
        out += kubernetes_mode_problems(ars, mode, values, crd, config_maps)
        out += _privileged_problems([*containers, *pod.get("initContainers", [])], "template.spec")
    else:
        out += step_pod_problems(pod, "runner", "template.spec")
        if runner is None:
            return out
    if spec.get("minRunners", 0) != 0:
        out.append(
            Problem(
                "minRunners",
                f"is {spec['minRunners']}: idle runners hold GPUs (and their "
                "nodes) while no job waits.",
                "set minRunners: 0 (scale to zero).",
            )
        )
    high = spec.get("maxRunners")
    if high is None:
        out.append(
            Problem(
                "maxRunners",
                "is not set: the scale set grows with the queue, "
                "and so do the GPU nodes and the bill.",
                "set maxRunners to the number of GPUs (or slices) you will pay for.",
            )
        )
    elif not 1 <= high <= max_runners_cap:
        out.append(
            Problem(
                "maxRunners",
                f"is {high}: "
                + (
                    "no job can ever run." if high < 1 else f"above {max_runners_cap}, not a bound."
                ),
                f"set it between 1 and {max_runners_cap}.",
            )
        )
    image = str(runner.get("image") or "")
    if not image or image.endswith(":latest") or ":" not in image.rsplit("/", 1)[-1]:
        out.append(
            Problem(
                "template.spec.containers[runner].image",
                f"{image or 'no image'} is not pinned: a new runner image can "
                "change every job at once.",
                "pin a version tag (or a digest) of deploy/arc/runner-image.",
            )
        )
    out += admission_problems(runner)
    out += token_problems(pod, runner, mode not in ("kubernetes", "kubernetes-novolume"))
    return out


# -- cross-file: the GPU operator's configuration -----------------------------------------------


def time_slicing_resources(config_map: Mapping[str, Any], key: str) -> dict[str, int]:
    """Resource name a pod asks for -> replicas per GPU, for one device-plugin config."""
    config = yaml.safe_load(config_map["data"][key])
    sharing = config["sharing"]["timeSlicing"]
    rename = bool(sharing.get("renameByDefault"))
    out = {}
    for res in sharing["resources"]:
        name = res.get("rename") or (f"{res['name']}.shared" if rename else res["name"])
        out[name] = int(res["replicas"])
    return out


def mig_profiles(config_map: Mapping[str, Any], key: str) -> dict[str, int]:
    """MIG profile -> instances per GPU, for one mig-parted layout."""
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    out: dict[str, int] = {}
    for part in config["mig-configs"][key]:
        if part.get("mig-enabled"):
            for profile, count in (part.get("mig-devices") or {}).items():
                out[profile] = out.get(profile, 0) + int(count)
    return out


def operator_problems(
    ars: Mapping[str, Any],
    device_plugin: Mapping[str, Any],
    mig_parted: Mapping[str, Any],
    resource: str | None = None,
) -> list[Problem]:
    """The runner's GPU resource must be one the node pool it selects advertises
    (``resource``: the one the job's steps get, where not the runner's: kubernetes mode)."""
    pod = ars["spec"]["template"]["spec"]
    selector = pod.get("nodeSelector") or {}
    resource = resource or runner_gpu_resource(ars) or ""
    out = []
    plugin_key = selector.get("nvidia.com/device-plugin.config")
    mig_key = selector.get("nvidia.com/mig.config")
    if plugin_key is not None:
        if plugin_key not in device_plugin["data"]:
            return [
                Problem(
                    "template.spec.nodeSelector",
                    f"selects device-plugin config "
                    f"{plugin_key!r}, which {device_plugin['metadata']['name']} lacks.",
                    f"use one of {', '.join(device_plugin['data'])}.",
                )
            ]
        offered = time_slicing_resources(device_plugin, plugin_key)
        if resource not in offered:
            out.append(
                Problem(
                    "template.spec.containers[runner].resources.limits",
                    f"asks for {resource or 'no GPU'}, but nodes with device-plugin config "
                    f"{plugin_key!r} advertise {', '.join(offered)}: the pod stays Pending.",
                    f"ask for {next(iter(offered))}: 1.",
                )
            )
    elif mig_key is not None:
        configs = yaml.safe_load(mig_parted["data"]["config.yaml"])["mig-configs"]
        if mig_key not in configs:
            return [
                Problem(
                    "template.spec.nodeSelector",
                    f"selects MIG layout {mig_key!r}, which the mig-parted config lacks.",
                    f"use one of {', '.join(configs)}.",
                )
            ]
        offered_mig = {f"nvidia.com/mig-{p}" for p in mig_profiles(mig_parted, mig_key)}
        if resource not in offered_mig:
            out.append(
                Problem(
                    "template.spec.containers[runner].resources.limits",
                    f"asks for {resource or 'no GPU'}, but nodes with MIG layout {mig_key!r} "
                    f"advertise {', '.join(sorted(offered_mig))} (mig.strategy mixed): the pod "
                    "stays Pending.",
                    f"ask for {sorted(offered_mig)[0]}: 1.",
                )
            )
    elif resource and resource != "nvidia.com/gpu":
        out.append(
            Problem(
                "template.spec.nodeSelector",
                f"asks for {resource} but selects no time-sliced or MIG pool.",
                "select the pool by nvidia.com/device-plugin.config or nvidia.com/mig.config.",
            )
        )
    return out


# -- all together -------------------------------------------------------------------------------


def check_values(
    values: Mapping[str, Any],
    crd: Mapping[str, Any],
    chart_values: str,
    where: str = "values",
    config_maps: Sequence[Mapping[str, Any]] = (),
) -> list[Problem]:
    """Every problem of one values file; ``chart_values`` is the text of the chart's
    values.yaml (its comments document most keys, so it is read as text); ``config_maps``
    the manifests a kubernetes-mode runner's hook template may come from."""
    problems = unread_values(values, documented_value_paths(chart_values))
    try:
        ars = render_autoscaling_runner_set(values)
    except RenderError as exc:
        return [
            *problems,
            Problem(
                where, f"the chart refuses these values: {exc}.", "fix the value the message names."
            ),
        ]
    problems += schema_problems(ars, strict(crd_schema(crd)), f"{where} (rendered)")
    problems += gpu_problems(ars, values, config_maps=config_maps, crd=crd)
    return problems


# -- Karpenter: GPU node pools on spot capacity with an on-demand fallback (issue 32) ----------

CAPACITY_TYPE = "karpenter.sh/capacity-type"
"""Karpenter's well-known label for spot / on-demand (karpenter.sh/v1 NodePool requirements)."""
POOL_LABEL = "gpu-ci/pool"


def _capacity(pool: Mapping[str, Any]) -> set[str]:
    reqs = ((pool.get("spec") or {}).get("template") or {}).get("spec", {}).get("requirements")
    for req in reqs or []:
        if req.get("key") == CAPACITY_TYPE and req.get("operator") == "In":
            return {str(v) for v in req.get("values") or []}
    return set()


def _pool_problems(pool: Mapping[str, Any], where: str, classes: set[str]) -> list[Problem]:
    spec = pool.get("spec") or {}
    template = spec.get("template") or {}
    node = template.get("spec") or {}
    problems = []
    if not _capacity(pool):
        problems.append(
            Problem(
                where,
                f"no '{CAPACITY_TYPE} In [...]' requirement: Karpenter picks the capacity type.",
                "require spot (the cheap pool) or on-demand (the fallback) explicitly.",
            )
        )
    if not ((template.get("metadata") or {}).get("labels") or {}).get(POOL_LABEL):
        problems.append(
            Problem(
                where,
                f"the nodes get no '{POOL_LABEL}' label: no runner scale set selects them.",
                f"set spec.template.metadata.labels.{POOL_LABEL} to the scale sets' selector.",
            )
        )
    if not any(
        t.get("key") == GPU_TAINT_KEY and t.get("effect") == "NoSchedule"
        for t in node.get("taints") or []
    ):
        problems.append(
            Problem(
                where,
                f"no {GPU_TAINT_KEY}:NoSchedule taint: any pod may land on a GPU node.",
                f"add taints: [{{key: {GPU_TAINT_KEY}, effect: NoSchedule}}].",
            )
        )
    if "nvidia.com/gpu" not in (spec.get("limits") or {}):
        problems.append(
            Problem(
                where,
                "no nvidia.com/gpu limit: the pool may grow without bound.",
                "set spec.limits.nvidia.com/gpu to the most GPUs you will pay for at once.",
            )
        )
    policy = (spec.get("disruption") or {}).get("consolidationPolicy")
    if policy != "WhenEmpty":
        problems.append(
            Problem(
                where,
                f"consolidationPolicy is {policy!r}: Karpenter may move a running GPU job "
                "to save money, and the job fails.",
                "use consolidationPolicy: WhenEmpty (a node goes once its runner is gone).",
            )
        )
    ref = node.get("nodeClassRef") or {}
    if ref.get("name") not in classes:
        problems.append(
            Problem(
                where,
                f"nodeClassRef names {ref.get('name')!r}, not a node class in this file.",
                "name the EC2NodeClass defined beside the pools.",
            )
        )
    return problems


def karpenter_problems(docs: Sequence[Any], where: str = "karpenter") -> list[Problem]:
    """The GPU and spot rules of a Karpenter manifest (its schema is checked against
    Karpenter's API models by the tests): every GPU pool labelled, tainted, bounded and
    consolidated only when empty; a spot pool, and an on-demand pool of lower weight that
    catches what spot cannot supply."""
    objs = [d for d in docs if isinstance(d, dict)]
    pools = [d for d in objs if d.get("kind") == "NodePool"]
    classes = {
        str((d.get("metadata") or {}).get("name")) for d in objs if d.get("kind") == "EC2NodeClass"
    }
    problems: list[Problem] = []
    for pool in pools:
        name = (pool.get("metadata") or {}).get("name")
        problems += _pool_problems(pool, f"{where}: NodePool {name}", classes)
    spot = [p for p in pools if _capacity(p) == {"spot"}]
    demand = [p for p in pools if "on-demand" in _capacity(p)]
    if not spot:
        problems.append(
            Problem(
                where, "no NodePool on spot capacity only.", f"add one: {CAPACITY_TYPE} In [spot]."
            )
        )
    if not demand:
        problems.append(
            Problem(
                where,
                "no on-demand NodePool: when spot GPUs run out, GPU jobs queue until the "
                "watchdog cancels them.",
                f"add a fallback pool with {CAPACITY_TYPE} In [on-demand] and a lower weight.",
            )
        )

    def weight(p: Mapping[str, Any]) -> int:
        return int((p.get("spec") or {}).get("weight") or 0)

    if spot and demand and max(weight(p) for p in demand) >= min(weight(p) for p in spot):
        problems.append(
            Problem(
                where,
                "an on-demand pool weighs as much as the spot pool or more: Karpenter may "
                "launch on-demand first, and the saving is gone.",
                "give the spot pool the higher spec.weight.",
            )
        )
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("values", nargs="*", type=Path)
    parser.add_argument(
        "--karpenter",
        type=Path,
        action="append",
        default=[],
        help="a Karpenter manifest (NodePools, EC2NodeClass) to hold to the GPU and spot rules",
    )
    parser.add_argument(
        "--reference",
        type=Path,
        default=REFERENCE,
        help="folder with ARC 0.14.2's chart values.yaml and the "
        "AutoscalingRunnerSet CRD (default: ../shared/reference/"
        "arc-0.14.2 beside the project, or $GPU_CI_ARC_REFERENCE)",
    )
    parser.add_argument("--crd", type=Path, help="the CRD (default: in --reference)")
    parser.add_argument(
        "--chart-values", type=Path, help="the chart's values.yaml (default: in --reference)"
    )
    parser.add_argument(
        "--device-plugin-config",
        type=Path,
        default=HERE / "gpu-operator" / "device-plugin-config.yaml",
    )
    parser.add_argument(
        "--mig-parted-config", type=Path, default=HERE / "gpu-operator" / "mig-parted-config.yaml"
    )
    parser.add_argument(
        "--hook-template",
        type=Path,
        action="append",
        help="a manifest with the ConfigMap a kubernetes-mode runner's "
        "hook template is mounted from (repeatable; default "
        "deploy/arc/hook-template-gpu.yaml)",
    )
    args = parser.parse_args(argv)
    if not args.values and not args.karpenter:
        parser.error("name a values file, or a Karpenter manifest with --karpenter")
    failed = _check_karpenter(args.karpenter)
    if not args.values:
        return 1 if failed else 0
    hook_templates = args.hook_template or [HOOK_TEMPLATE]
    crd_path = args.crd or args.reference / CRD_NAME
    chart_path = args.chart_values or args.reference / CHART_VALUES_NAME
    for path in (crd_path, chart_path):
        if not path.is_file():
            print(
                f"check: {path} does not exist: ARC's chart values.yaml and CRD are read "
                "from ../shared/reference/arc-0.14.2 beside the project; name another "
                "folder with --reference (or GPU_CI_ARC_REFERENCE).",
                file=sys.stderr,
            )
            return 2
    for path in (args.device_plugin_config, args.mig_parted_config, *hook_templates, *args.values):
        if not path.is_file():
            print(f"check: {path} does not exist.", file=sys.stderr)
            return 2
    crd = load_yaml(crd_path)
    chart_values = chart_path.read_text(encoding="utf-8")
    plugin, mig = load_yaml(args.device_plugin_config), load_yaml(args.mig_parted_config)
    config_maps = [
        doc for path in hook_templates for doc in load_all_yaml(path) if isinstance(doc, dict)
    ]
    for path in args.values:
        values = load_yaml(path)
        if not isinstance(values, dict):
            print(f"{path}: not a mapping of Helm values.")
            failed += 1
            continue
        problems = check_values(values, crd, chart_values, str(path), config_maps)
        if not problems:
            ars = render_autoscaling_runner_set(values)
            problems = operator_problems(
                ars, plugin, mig, resource=step_gpu_resource(ars, config_maps)
            )
        for problem in problems:
            print(f"{path}: {problem}")
        print(f"{path}: {'ok' if not problems else f'{len(problems)} problem(s)'}")
        failed += bool(problems)
    return 1 if failed else 0


def _check_karpenter(paths: Sequence[Path]) -> int:
    """Print each Karpenter manifest's problems; the number of manifests with any."""
    failed = 0
    for path in paths:
        problems = (
            karpenter_problems(load_all_yaml(path), str(path))
            if path.is_file()
            else [Problem(str(path), "does not exist.", "name the manifest's path.")]
        )
        for problem in problems:
            print(f"{path}: {problem}")
        print(f"{path}: {'ok' if not problems else f'{len(problems)} problem(s)'}")
        failed += bool(problems)
    return failed


if __name__ == "__main__":
    sys.exit(main())
