"""setup-conda-from-lock's cache plan: the ``cache`` input's three values, refused otherwise
by the command and by the action's own plan step (which runs first), and the environment
mode's path, key and "restore only into an absent or empty prefix" rule.

The plan step's script is taken from the rendered action.yml and run with bash, as the
runner runs it (``bash -e {0}``); its path must be the prefix the command computes
(``gpu_ci.conda.options.build``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from gpu_ci.conda import options as conda_options
from testkit.cli import parse_output_file
from testkit.shared import ROOT

MESSAGE = (
    "input 'cache' of setup-conda-from-lock must be one of true, false, environment; got 'yes'."
)


def plan_step(action: str = "actions/setup-conda-from-lock/action.yml") -> dict:
    with open(ROOT / action, encoding="utf-8") as handle:
        steps = yaml.safe_load(handle)["runs"]["steps"]
    return next(step for step in steps if step.get("id") == "cache-plan")


@pytest.fixture
def plan(tmp_path):
    """Run the plan step's script with the action's defaults and ``inputs`` overridden."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash runs the action's plan step")
    step = plan_step()
    script = tmp_path / "plan.sh"
    script.write_text(step["run"])
    lock = tmp_path / "conda-linux-64.lock"
    lock.write_text("@EXPLICIT\n")

    def run(**inputs: str):
        values = {
            "lock-file": str(lock),
            "platform": "",
            "engine": "rattler",
            "miniforge": "auto",
            "miniforge-version": "26.3.2-3",
            "categories": "main",
            "root": "",
            "pkgs-dir": "",
            "prefix": "",
            "environment-name": "ci",
            "pixi-environment": "default",
            "cache": "true",
            **inputs,
        }
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path / "home"),
            "GPU_CI_PYTHON": sys.executable,
            "GITHUB_ACTION_PATH": str(ROOT / "actions" / "setup-conda-from-lock"),
            "RUNNER_OS": "Linux",
            "RUNNER_ARCH": "X64",
            "RUNNER_TOOL_CACHE": str(tmp_path / "toolcache"),
            "GITHUB_OUTPUT": str(tmp_path / "output"),
        }
        for name, expr in step["env"].items():  # NAME: ${{ inputs.<input> }}
            env[name] = values[expr.split("inputs.")[1].rstrip(" }")]
        (tmp_path / "output").write_text("")
        proc = subprocess.run(
            [bash, "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        proc.outputs = parse_output_file((tmp_path / "output").read_text())
        proc.lock_sha256 = hashlib.sha256(lock.read_bytes()).hexdigest()
        return proc

    run.tool_cache = tmp_path / "toolcache"
    return run


def test_command_refuses_a_cache_value_other_than_the_three(run_cli, tmp_path):
    lock = tmp_path / "lock.txt"
    lock.write_text("@EXPLICIT\n")
    args = ["setup-conda-from-lock", "--lock-file", str(lock), "--miniforge", "false"]

    def dry_run(**inputs: str):
        env = {f"INPUT_{k.upper()}": v for k, v in inputs.items()}
        return run_cli(
            [*args, "--dry-run", "true"], {**env, "RUNNER_TOOL_CACHE": str(tmp_path / "tc")}
        )

    result = dry_run(cache="yes")
    assert result.returncode == 2, result.stdout + result.stderr
    assert MESSAGE in result.stdout + result.stderr
    bad_write = dry_run(cache="environment", cache_write="no")
    assert bad_write.returncode == 2
    assert "input 'cache-write' of setup-conda-from-lock must be true or false" in (
        bad_write.stdout + bad_write.stderr
    )
    for value in ("environment", "Environment", "true", "false"):
        ok = dry_run(cache=value)
        assert ok.returncode == 0, (value, ok.stdout + ok.stderr)


def test_plan_step_fails_on_a_typo_before_anything_is_restored(plan):
    # the step's if: is `inputs.cache != 'false'`, so a typo reaches the script
    assert plan_step()["if"] == "inputs.cache != 'false'"
    proc = plan(cache="yes")
    assert proc.returncode == 2
    assert proc.stdout.strip() == f"::error title=setup-conda-from-lock::{MESSAGE}"
    assert proc.outputs == {}  # no key, no path: the restore steps have nothing to use
    # a line break in the value cannot start a workflow command of its own
    injected = plan(cache="x\n::add-mask::y")
    assert injected.returncode == 2 and len(injected.stdout.splitlines()) == 1
    assert "got 'x%0A::add-mask::y'" in injected.stdout
    assert plan(cache="").returncode == 0 and plan(cache="").outputs == {}


def test_root_action_runs_the_same_plan_step():
    own, root = plan_step(), plan_step("action.yml")
    # the root action runs the scripts beside it, not two folders up
    assert root["run"] == own["run"].replace("$GITHUB_ACTION_PATH/../../", "$GITHUB_ACTION_PATH/")
    assert root["env"] == own["env"]
    assert root["if"] == f"inputs.command == 'setup-conda-from-lock' && ({own['if']})"


@pytest.mark.parametrize(
    "inputs",
    [
        {},
        {"environment-name": "gpu"},
        {"root": "/opt/mf"},
        {"prefix": "/srv/envs/tests", "environment-name": "ignored"},
        {"miniforge-version": "25.1.1-0", "pkgs-dir": "/elsewhere/pkgs"},
    ],
    ids=["default", "name", "root", "prefix", "version"],
)
def test_environment_mode_caches_the_prefix_the_command_uses(plan, inputs):
    proc = plan(cache="environment", **inputs)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.outputs
    raw = conda_options.RawOptions(
        lock_file="x",
        platform="linux-64",
        categories=["main"],
        engine="rattler",
        miniforge=False,
        miniforge_version=inputs.get("miniforge-version", "26.3.2-3"),
        installer_url="",
        installer_sha256="",
        activate=True,
        dry_run=True,
        root=inputs.get("root", ""),
        pkgs_dir=inputs.get("pkgs-dir", ""),
        prefix=inputs.get("prefix", ""),
        environment_name=inputs.get("environment-name", "ci"),
    )
    want = conda_options.build(raw, {"RUNNER_TOOL_CACHE": str(plan.tool_cache)}).prefix
    assert out["path"] == str(want)
    where = hashlib.sha256(str(want).encode()).hexdigest()[:16]
    version = inputs.get("miniforge-version", "26.3.2-3")
    assert out["key"] == (
        f"gpu-ci-conda-env-v1-Linux-X64-auto-rattler-mf{version}-main-{where}-{proc.lock_sha256}"
    )
    assert out["mode"] == "environment" and out["fresh"] == "true"
    assert out["restore-prefix"] == ""  # no restore-keys: another lock's env is of no use


def test_environment_key_differs_by_path_and_never_matches_the_package_prefix(plan):
    one = plan(cache="environment", prefix="/a/env").outputs
    two = plan(cache="environment", prefix="/b/env").outputs
    packages = plan(cache="true").outputs
    assert one["key"] != two["key"]
    assert one["key"].rsplit("-", 2)[0] == two["key"].rsplit("-", 2)[0]
    # the package cache's restore-keys prefix can never pick an environment's blob
    assert not one["key"].startswith(packages["restore-prefix"])
    assert packages["key"] == packages["restore-prefix"] + "main-" + plan(cache="true").lock_sha256
    assert packages["path"] == str(plan.tool_cache / "miniforge3" / "26.3.2-3" / "pkgs")


def test_environment_is_restored_only_into_an_absent_or_empty_prefix(plan, tmp_path):
    prefix = tmp_path / "env"
    assert plan(cache="environment", prefix=str(prefix)).outputs["fresh"] == "true"
    prefix.mkdir()
    assert plan(cache="environment", prefix=str(prefix)).outputs["fresh"] == "true"
    (prefix / "conda-meta").mkdir()
    assert plan(cache="environment", prefix=str(prefix)).outputs["fresh"] == "false"
    empty = tmp_path / "empty"
    empty.mkdir()
    link = tmp_path / "link"
    link.symlink_to(empty)  # never restore through a link, even to an empty directory
    assert plan(cache="environment", prefix=str(link)).outputs["fresh"] == "false"
    afile = tmp_path / "file"
    afile.write_text("")
    assert plan(cache="environment", prefix=str(afile)).outputs["fresh"] == "false"


@pytest.mark.parametrize("action", ["actions/setup-conda-from-lock/action.yml", "action.yml"])
def test_environment_is_saved_only_when_the_command_created_it(action):
    with open(ROOT / action, encoding="utf-8") as handle:
        steps = yaml.safe_load(handle)["runs"]["steps"]
    ids = [step.get("id") for step in steps]
    save = next(step for step in steps if step.get("name") == "Save the environment")
    restore = next(step for step in steps if step.get("id") == "cache-restore-env")
    assert steps.index(save) > ids.index("run") > ids.index("cache-restore-env")
    # after a miss, with cache-write, and only if the command step succeeded and created the
    # environment (not reused; a dry run sets no `reused`); no status function such as
    # always() that would let it run after a failure
    for part in (
        "inputs.cache == 'environment'",
        "inputs.cache-write == 'true'",
        "steps.cache-plan.outputs.fresh == 'true'",
        "steps.cache-restore-env.outputs.cache-hit != 'true'",
        "steps.run.outcome == 'success'",
        "steps.run.outputs.reused == 'false'",
    ):
        assert part in save["if"], part
    assert not any(f in save["if"] for f in ("always()", "failure()", "cancelled()"))
    assert save["with"] == {
        "path": "${{ steps.cache-plan.outputs.path }}",
        "key": "${{ steps.cache-plan.outputs.key }}",
    }
    assert "restore-keys" not in restore["with"]
    assert restore["with"] == save["with"]


@pytest.mark.parametrize(
    "inputs",
    [
        {},
        {"miniforge": "false"},
        {"miniforge": "true"},
        {"miniforge": "True"},
        {"engine": "conda"},
        {"engine": "conda", "miniforge": "true"},
    ],
)
def test_a_job_that_installs_miniforge_keys_its_package_cache_apart(plan, inputs):
    """Its installer lives in the package cache; an exact hit saves nothing, so a cache
    saved by a job without Miniforge must never be the one such a job hits (nor the
    reverse): the same decision as the command's, in the key."""
    engine = inputs.get("engine", "rattler")
    installs = conda_options.wants_miniforge(engine, inputs.get("miniforge", "auto"))
    proc = plan(cache="true", **inputs)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.outputs
    tag = "+installer" if installs else ""
    assert out["restore-prefix"] == f"gpu-ci-conda-v1-Linux-X64-auto-{engine}-mf26.3.2-3{tag}-"
    assert out["key"] == out["restore-prefix"] + "main-" + proc.lock_sha256
    other = plan(cache="true", engine=engine, miniforge="false" if installs else "true")
    if engine == "rattler":  # engine conda always installs it
        assert not out["key"].startswith(other.outputs["restore-prefix"])
        assert not other.outputs["key"].startswith(out["restore-prefix"])
    # the finished environment holds no installer: its key is the same either way
    env = plan(cache="environment", **inputs).outputs["key"]
    assert "+installer" not in env and f"-{engine}-mf26.3.2-3-main-" in env


@pytest.mark.parametrize("kind", ["explicit", "explicit-bom-crlf", "pixi"])
def test_the_step_and_the_command_compute_one_key(plan, run_cli, tmp_path, kind):
    """gpu_ci.conda.cachekey computes both: the step's key is the command's cache-key,
    the lock's sha256 of its bytes (a BOM and CRLF line ends included)."""
    lock = tmp_path / "conda-linux-64.lock"
    if kind == "explicit-bom-crlf":
        lock.write_bytes(b"\xef\xbb\xbf# platform: linux-64\r\n@EXPLICIT\r\n")
    if kind == "pixi":
        lock = tmp_path / "pixi.lock"
        lock.write_text(
            "version: 6\nenvironments:\n  cuda:\n    channels: []\n    packages:\n"
            "      linux-64: []\npackages: []\n"
        )
    inputs = {"lock-file": str(lock), "pixi-environment": "cuda", "platform": "linux-64"}
    step = plan(cache="true", **inputs)
    assert step.returncode == 0, step.stdout + step.stderr
    result = run_cli(
        ["setup-conda-from-lock", "--lock-file", str(lock), "--platform", "linux-64"]
        + ["--dry-run", "true", "--miniforge", "auto"],
        {
            "RUNNER_OS": "Linux",
            "RUNNER_ARCH": "X64",
            "INPUT_PIXI_ENVIRONMENT": "cuda",
            "RUNNER_TOOL_CACHE": str(tmp_path / "tc"),
        },
    )
    assert result.returncode == 0, result.stdout + result.stderr
    command = result.outputs["cache-key"]
    assert command == step.outputs["key"]
    assert command.endswith("-" + hashlib.sha256(lock.read_bytes()).hexdigest())
    assert ("-pixi+cuda-" in command) is (kind == "pixi")
