"""The root action.yml runs each action's extra steps (e.g. setup-conda-from-lock's
actions/cache restore and save), guarded by ``command``, and every reference resolves."""

from __future__ import annotations

import re
import sys

import pytest
import yaml

from gpu_ci.specs import ACTIONS
from testkit.shared import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
try:
    import render_actions
finally:
    sys.path.remove(str(ROOT / "scripts"))


def load(path):
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


ACTION_FILES = [ROOT / "action.yml", *sorted((ROOT / "actions").glob("*/action.yml"))]


def test_root_action_has_each_actions_extra_steps_guarded_by_its_command():
    steps = load(ROOT / "action.yml")["runs"]["steps"]
    ids = [step.get("id") for step in steps]
    run_at = ids.index("run")
    checked = 0
    for name, spec in ACTIONS.items():
        guard = f"inputs.command == '{name}'"
        for text, where in (
            (spec.steps_before, steps[:run_at]),
            (spec.steps_after, steps[run_at + 1 :]),
        ):
            # the root action sits two folders above the actions' own: paths follow
            text = text.replace("$GITHUB_ACTION_PATH/../../", "$GITHUB_ACTION_PATH/")
            for own in yaml.safe_load(text) or []:
                match = [s for s in where if s["name"] == own["name"]]
                assert len(match) == 1, (name, own["name"])
                step = match[0]
                assert {k: v for k, v in step.items() if k != "if"} == {
                    k: v for k, v in own.items() if k != "if"
                }
                assert step["if"] == (f"{guard} && ({own['if']})" if "if" in own else guard)
                checked += 1
    # setup-conda-from-lock's cache: the plan, restore before the command, save after it
    assert checked >= 3
    uses = [s["uses"].split("@")[0] for s in steps if "uses" in s]
    # (package cache, then environment: cache: true / environment)
    assert uses == ["actions/cache/restore"] * 2 + ["actions/cache/save"] * 2
    assert ids.index("cache-plan") < ids.index("cache-restore") < run_at
    assert ids.index("cache-plan") < ids.index("cache-restore-env") < run_at


@pytest.mark.parametrize("path", ACTION_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_input_and_step_reference_resolves(path):
    doc = load(path)
    inputs = set(doc["inputs"])
    steps = doc["runs"]["steps"]
    seen: list[str] = []
    for step in steps:
        text = yaml.safe_dump({k: v for k, v in step.items() if k != "run"})
        for name in re.findall(r"\binputs\.([A-Za-z0-9_-]+)", text):
            assert name in inputs, (path, step["name"], name)
        for ref in re.findall(r"\bsteps\.([A-Za-z0-9_-]+)\.", text):
            assert ref in seen, (path, step["name"], ref)  # an earlier step's id
        if "uses" in step:
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", step["uses"]), step
        assert "${{" not in step.get("run", ""), step  # inputs reach run: via env only
        if "id" in step:
            assert step["id"] not in seen, (path, step["id"])
            seen.append(step["id"])
    for output in doc.get("outputs", {}).values():
        for ref in re.findall(r"\bsteps\.([A-Za-z0-9_-]+)\.", output["value"]):
            assert ref in seen, (path, ref)


def test_guard_keeps_every_key_and_each_form_of_condition():
    text = (
        "    - if: ${{ inputs.a == 'x' }}\n"
        "      shell: bash\n"
        "      run: echo one\n"
        "    - run: |\n"
        "        echo two\n"
        "        echo '      if: not a key'\n"
        "      shell: bash\n"
        "    - name: three\n"
        "      if: >-\n"
        "        inputs.a == 'y' ||\n"
        "        always()\n"
        "      uses: o/r@0123456789012345678901234567890123456789  # v1\n"
        "      with:\n"
        "        path: $GITHUB_ACTION_PATH/../../scripts\n"
    )
    guarded = yaml.safe_load(render_actions.guard_steps(text, "cmd"))
    guard = "inputs.command == 'cmd'"
    assert [s["if"] for s in guarded] == [
        f"{guard} && (inputs.a == 'x')",
        guard,
        f"{guard} && (inputs.a == 'y' || always())",
    ]
    assert guarded[1]["run"] == "echo two\necho '      if: not a key'\n"
    assert guarded[2]["with"] == {"path": "$GITHUB_ACTION_PATH/scripts"}  # from the root
    assert guarded[0]["run"] == "echo one" and guarded[1]["shell"] == "bash"


def test_two_actions_extra_steps_may_not_share_a_step_id(monkeypatch):
    step = "    - id: same\n      shell: bash\n      run: 'true'\n"
    first, second = list(ACTIONS)[:2]
    fake = dict(ACTIONS)
    fake[first] = ACTIONS[first]._replace(steps_before=step)
    fake[second] = ACTIONS[second]._replace(steps_after=step)
    monkeypatch.setattr(render_actions, "ACTIONS", fake)
    with pytest.raises(SystemExit, match="same"):
        render_actions.render_root()
