"""action.yml files, the CLI, the bootstrap and the READMEs agree with src/gpu_ci/specs.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from gpu_ci.specs import ACTIONS
from testkit.shared import ROOT


def load(path):
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def test_generated_files_are_current():
    proc = subprocess.run(
        [sys.executable, "scripts/render_actions.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout


def test_each_action_yml_matches_its_spec():
    for name, spec in ACTIONS.items():
        doc = load(ROOT / "actions" / name / "action.yml")
        assert list(doc["inputs"]) == [i.name for i in spec.inputs]
        for item in spec.inputs:
            assert doc["inputs"][item.name]["default"] == item.yaml_default
            assert doc["inputs"][item.name]["required"] is item.required
        assert list(doc["outputs"]) == [o.name for o in spec.outputs]
        steps = doc["runs"]["steps"]
        assert "scripts/bootstrap.sh" in steps[0]["run"]
        run_step = next(step for step in steps if step.get("id") == "run")
        up = "../" * (name.count("/") + 2)  # gpu-cloud-runner/stop sits one folder deeper
        assert run_step["run"] == (
            f'"$GPU_CI_PYTHON" "$GITHUB_ACTION_PATH/{up}scripts/run.py" {name}'
        )
        assert run_step["env"] == {i.env_name: f"${{{{ inputs.{i.name} }}}}" for i in spec.inputs}


def test_root_action_passes_every_sub_action_input_through():
    doc = load(ROOT / "action.yml")
    sub_inputs = {i.name for spec in ACTIONS.values() for i in spec.inputs}
    assert set(doc["inputs"]) == sub_inputs | {"command"}
    sub_outputs = {o.name for spec in ACTIONS.values() for o in spec.outputs}
    assert set(doc["outputs"]) == sub_outputs
    env = next(step for step in doc["runs"]["steps"] if step.get("id") == "run")["env"]
    for spec in ACTIONS.values():
        for item in spec.inputs:
            assert env[item.env_name] == f"${{{{ inputs.{item.name} }}}}"


def test_readme_tables_list_every_input_and_output():
    for name, spec in ACTIONS.items():
        family = name.split("/")[0]  # a family's README holds each of its actions' tables
        readme = (ROOT / "actions" / family / "README.md").read_text(encoding="utf-8")
        table = readme.split(f"<!-- BEGIN {name} table -->")[1].split(f"<!-- END {name} table -->")[
            0
        ]
        for item in spec.inputs:
            assert f"| `{item.name}` |" in table
        for output in spec.outputs:
            assert f"| `{output.name}` |" in table


def test_no_template_expression_inside_run_scripts():
    for path in [ROOT / "action.yml", *(ROOT / "actions").glob("**/action.yml")]:
        for step in load(path)["runs"].get("steps", ()):  # gpu-monitor/job runs node
            assert "${{" not in step.get("run", ""), path


def test_root_readme_links_every_action_readme():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in ACTIONS:
        family = name.split("/")[0]
        assert f"](actions/{family}/README.md)" in readme
        assert (ROOT / "actions" / family / "README.md").is_file()


def test_every_spec_names_an_importable_command_with_known_groups():
    import importlib

    from gpu_ci.specs import GROUPS

    for name, spec in ACTIONS.items():
        module = importlib.import_module(spec.command_module)
        assert callable(module.run), name
        assert spec.groups[0] == "base" and set(spec.groups) <= set(GROUPS), name
    for group in GROUPS:
        assert (ROOT / "requirements" / f"{group}.txt").is_file()
        assert (ROOT / "requirements" / f"{group}.in").is_file()


def _bash_groups(action: str) -> list[str]:
    """What bootstrap.sh's rendered ``case`` picks for ``action``, run by bash itself."""
    text = (ROOT / "scripts" / "bootstrap.sh").read_text(encoding="utf-8")
    case = text.split("# BEGIN groups")[1].split("\n", 1)[1].split("# END groups")[0]
    proc = subprocess.run(
        ["bash", "-c", f'action="$1"\n{case}echo "$groups"', "_", action],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.split()


def test_bootstrap_shell_and_python_read_the_same_groups_as_the_specs():
    from gpu_ci.specs import GROUPS

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import bootstrap
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    for name, spec in ACTIONS.items():
        assert bootstrap.groups_for(name) == spec.groups
        assert _bash_groups(name) == list(spec.groups)
    assert bootstrap.groups_for("no-such-action") == GROUPS
    assert _bash_groups("no-such-action") == list(GROUPS)


def test_specs_module_needs_only_the_standard_library():
    # bootstrap.py imports it before any dependency is installed.
    code = (
        "import sys; sys.path.insert(0, 'src'); import gpu_ci.specs; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'yaml', 'github', 'pynvml', 'rattler', 'packaging', 'actions'}); "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-I", "-c", code], cwd=ROOT, check=True)


def test_extra_steps_use_actions_pinned_by_full_commit_sha():
    """Steps an action adds around its command (e.g. actions/cache) pin what they use."""
    import re

    for name in ACTIONS:
        doc = load(ROOT / "actions" / name / "action.yml")
        for step in doc["runs"]["steps"]:
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", step["uses"]), step
            assert "${{" not in step.get("run", ""), step  # inputs reach run: via env only


def test_gpu_monitor_job_form_takes_the_specs_inputs_and_runs_the_same_python():
    """actions/gpu-monitor/job: gpu-monitor's inputs but ``mode`` (main starts, post
    reports), the start's outputs, a post step that runs whatever happened before it, and
    scripts that call the same bootstrap and entry point as the composite action."""
    spec = ACTIONS["gpu-monitor"]
    job = ROOT / "actions" / "gpu-monitor" / "job"
    doc = load(job / "action.yml")
    assert list(doc["inputs"]) == [i.name for i in spec.inputs if i.name != "mode"]
    for item in spec.inputs[1:]:
        assert doc["inputs"][item.name]["default"] == item.yaml_default
        assert doc["inputs"][item.name]["required"] is item.required
    assert set(doc["outputs"]) == {"gpu-count", "samples-file"} <= {o.name for o in spec.outputs}
    assert doc["runs"] == {
        "using": "node24",
        "main": "main.js",
        "post": "post.js",
        "post-if": "always()",
    }
    assert "run('start')" in (job / "main.js").read_text(encoding="utf-8")
    assert "run('report')" in (job / "post.js").read_text(encoding="utf-8")
    shared = (job / "gpu-monitor.js").read_text(encoding="utf-8")
    assert "'scripts', 'bootstrap.sh'), 'gpu-monitor'" in shared
    assert "'scripts', 'run.py'), 'gpu-monitor'" in shared
    # plain Node: nothing to install, vendor or audit
    assert set(re.findall(r"require\('([^']+)'\)", shared)) == {"child_process", "fs", "os", "path"}


def test_gpu_monitor_job_form_passes_inputs_as_the_python_reads_them(tmp_path):
    """The runner names a JavaScript action's inputs with their '-' (INPUT_PRICE-PER-HOUR);
    the Python reads them as the composite actions pass them (INPUT_PRICE_PER_HOUR)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    script = ROOT / "actions" / "gpu-monitor" / "job" / "gpu-monitor.js"
    env = {"INPUT_PRICE-PER-HOUR": "3.12", "INPUT_INTERVAL": "2", "OTHER": "x"}
    proc = subprocess.run(
        [
            node,
            "-e",
            f"const m = require({json.dumps(str(script))}); "
            "console.log(JSON.stringify([m.inputs(JSON.parse(process.argv[1])), "
            "m.parseEnvFile('GPU_CI_PYTHON=/v/bin/python\\nGPU_CI_GROUPS=a b\\n')]))",
            json.dumps(env),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(proc.stdout) == [
        {"INPUT_PRICE_PER_HOUR": "3.12", "INPUT_INTERVAL": "2"},
        {"GPU_CI_PYTHON": "/v/bin/python", "GPU_CI_GROUPS": "a b"},
    ]


def _group_modules() -> dict[str, set[str]]:
    """Each group's top-level modules, from its lock's pins and the installed distributions'
    files (every pin of every lock is installed in the test venv)."""
    from importlib import metadata

    from gpu_ci.specs import GROUPS

    modules: dict[str, set[str]] = {}
    for group in GROUPS:
        text = (ROOT / "requirements" / f"{group}.txt").read_text(encoding="utf-8")
        names = {m.group(1) for m in re.finditer(r"^([A-Za-z0-9_.-]+)==", text, re.MULTILINE)}
        tops: set[str] = set()
        for name in names:
            try:
                files = metadata.distribution(name).files or []
            except metadata.PackageNotFoundError:
                continue  # a pin for another Python (e.g. py-rattler's marker)
            for file in files:
                top = file.parts[0]
                if top.endswith((".dist-info", ".data")) or top in ("..", "bin"):
                    continue
                tops.add(top.split(".")[0] if top.endswith((".py", ".so", ".pyd")) else top)
        modules[group] = tops
    return modules


def test_each_command_imports_nothing_from_groups_its_action_does_not_install():
    """An action's venv holds its groups only (packaging is the nvml group's: only the cuda
    wing compares versions). A module-level import of another group's module would fail
    on a runner: here a finder refuses each such module while the command is imported."""
    from gpu_ci.specs import GROUPS

    modules = _group_modules()
    assert "packaging" in modules["nvml"] and "actions_toolkit" in modules["base"]
    for name, spec in ACTIONS.items():
        allowed = set().union(*(modules[g] for g in spec.groups))
        refused = set().union(*(modules[g] for g in GROUPS)) - allowed
        code = (
            "import sys\n"
            f"refused = {sorted(refused)!r}\n"
            "class Refuse:\n"
            "    def find_spec(self, fullname, path=None, target=None):\n"
            "        if fullname.split('.')[0] in refused:\n"
            "            raise ImportError(f'{fullname} belongs to another group')\n"
            "        return None\n"
            "sys.meta_path.insert(0, Refuse())\n"
            "sys.path.insert(0, 'src')\n"
            f"import {spec.command_module}\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True
        )
        assert proc.returncode == 0, (name, proc.stderr[-2000:])
