"""action.yml files, the CLI and README's tables agree with src/gpu_ci/specs.py."""

from __future__ import annotations

import subprocess
import sys

import yaml

from gpu_ci.specs import ACTIONS
from tests.conftest import ROOT


def load(path):
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def test_generated_files_are_current():
    proc = subprocess.run([sys.executable, "scripts/render_actions.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True)
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
        run_step = steps[-1]
        assert run_step["run"] == f'"$GPU_CI_PYTHON" -m gpu_ci {name}'
        assert run_step["env"] == {i.env_name: f"${{{{ inputs.{i.name} }}}}"
                                   for i in spec.inputs}


def test_root_action_passes_every_sub_action_input_through():
    doc = load(ROOT / "action.yml")
    sub_inputs = {i.name for spec in ACTIONS.values() for i in spec.inputs}
    assert set(doc["inputs"]) == sub_inputs | {"command"}
    sub_outputs = {o.name for spec in ACTIONS.values() for o in spec.outputs}
    assert set(doc["outputs"]) == sub_outputs
    env = doc["runs"]["steps"][-1]["env"]
    for spec in ACTIONS.values():
        for item in spec.inputs:
            assert env[item.env_name] == f"${{{{ inputs.{item.name} }}}}"


def test_readme_tables_list_every_input_and_output():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name, spec in ACTIONS.items():
        table = readme.split(f"<!-- BEGIN {name} table -->")[1].split(
            f"<!-- END {name} table -->")[0]
        for item in spec.inputs:
            assert f"| `{item.name}` |" in table
        for output in spec.outputs:
            assert f"| `{output.name}` |" in table


def test_no_template_expression_inside_run_scripts():
    for path in [ROOT / "action.yml", *(ROOT / "actions").glob("*/action.yml")]:
        for step in load(path)["runs"]["steps"]:
            assert "${{" not in step.get("run", ""), path
