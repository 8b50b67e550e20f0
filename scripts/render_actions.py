"""Render generated files from the specs: ``actions/*/action.yml``, the root ``action.yml``,
each action's README table, the root README's overview of actions, ``bootstrap.sh``'s group
``case``; the READMEs' embedded examples; and the driver table's JSON rendering.

``python scripts/render_actions.py`` rewrites them; ``--check`` exits 1 when any is stale
(the test suite runs the check). Writing YAML by hand keeps the files readable and stable.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from gpu_ci.specs import ACTIONS, GROUPS, ActionSpec, InputSpec  # noqa: E402

BOOTSTRAP_STEP = """\
    - name: Bootstrap gpu-ci (once per job)
      shell: bash
      env:
        GPU_CI_INSTALL_PYTHON: ${{{{ inputs.install-python }}}}
      run: bash "$GITHUB_ACTION_PATH/{rel}scripts/bootstrap.sh" {action}
"""

ROOT_BOOTSTRAP_STEP = """\
    - name: Bootstrap gpu-ci (once per job)
      shell: bash
      env:
        GPU_CI_COMMAND: ${{ inputs.command }}
        GPU_CI_INSTALL_PYTHON: ${{ inputs.install-python }}
      run: bash "$GITHUB_ACTION_PATH/scripts/bootstrap.sh" "$GPU_CI_COMMAND"
"""

MARKETPLACE = {
    "name": "GPU CI Actions",
    "description": "Label-gated GPU jobs, conda envs from lock files, and CUDA driver checks "
    "for GPU CI.",
    "author": "gpu-ci-actions",
    "icon": "cpu",
    "color": "green",
}


def q(text: str) -> str:
    """A YAML double-quoted scalar (JSON strings are valid YAML)."""
    return json.dumps(text, ensure_ascii=False)


def _input_block(item: InputSpec, required: bool) -> str:
    return (
        f"  {item.name}:\n"
        f"    description: {q(item.description)}\n"
        f"    required: {'true' if required else 'false'}\n"
        f"    default: {q(item.yaml_default)}\n"
    )


def _env_lines(inputs: list[InputSpec]) -> str:
    return "".join(f"        {item.env_name}: ${{{{ inputs.{item.name} }}}}\n" for item in inputs)


def up(spec: ActionSpec) -> str:
    """The path from ``actions/<name>/`` back to the root (``gpu-cloud-runner/stop`` is one
    folder deeper)."""
    return "../" * (spec.name.count("/") + 2)


def readme_of(name: str) -> str:
    """An action's README: a sub-action (``gpu-cloud-runner/stop``) shares its family's."""
    return f"actions/{name.split('/')[0]}/README.md"


def render_action(spec: ActionSpec) -> str:
    out = [
        "# Generated from src/gpu_ci/specs.py by scripts/render_actions.py; edit the spec.\n",
        f"name: {q('gpu-ci ' + spec.name)}\n",
        f"description: {q(spec.summary)}\n",
        f"author: {q(MARKETPLACE['author'])}\n",
        "inputs:\n",
    ]
    out += [_input_block(item, item.required) for item in spec.inputs]
    out.append("outputs:\n")
    for o in spec.outputs:
        out.append(
            f"  {o.name}:\n    description: {q(o.description)}\n"
            f"    value: ${{{{ steps.run.outputs.{o.name} }}}}\n"
        )
    out.append("runs:\n  using: composite\n  steps:\n")
    out.append(BOOTSTRAP_STEP.format(rel=up(spec), action=spec.name))
    out.append(spec.steps_before)
    out.append(f"    - name: gpu-ci {spec.name}\n      id: run\n      shell: bash\n      env:\n")
    out.append(_env_lines(list(spec.inputs)))
    script = f"$GITHUB_ACTION_PATH/{up(spec)}scripts/run.py"
    out.append(f'      run: \'"$GPU_CI_PYTHON" "{script}" {spec.name}\'\n')
    out.append(spec.steps_after)
    return "".join(out)


#: gpu-monitor as one ``uses:`` line: a JavaScript action (composite actions have no post
#: step) whose ``main`` is ``mode: start`` and whose ``post`` is ``mode: report``.
JOB_FORM = Path("actions") / "gpu-monitor" / "job"
#: What the job form's main (the start) sets; the report's outputs come after every step.
JOB_OUTPUTS = ("gpu-count", "samples-file")


def render_job_action(spec: ActionSpec) -> str:
    """``actions/gpu-monitor/job/action.yml``: the spec's inputs but ``mode`` (main starts,
    post reports), so that both forms take the same inputs from one source."""
    out = [
        "# Generated from src/gpu_ci/specs.py by scripts/render_actions.py; edit the spec.\n",
        "# The one-step form of actions/gpu-monitor: main.js starts the sampler, post.js\n",
        "# reports at the end of the job (after a failed step or a cancellation too).\n",
        f"name: {q('gpu-ci ' + spec.name + ' (one step)')}\n",
        f"description: {q(spec.summary + ' One step: it reports at the end of the job.')}\n",
        f"author: {q(MARKETPLACE['author'])}\n",
        "inputs:\n",
    ]
    out += [_input_block(item, item.required) for item in spec.inputs if item.name != "mode"]
    out.append("outputs:\n")
    for o in spec.outputs:
        if o.name in JOB_OUTPUTS:
            out.append(f"  {o.name}:\n    description: {q(o.description)}\n")
    out.append("runs:\n  using: node24\n  main: main.js\n  post: post.js\n  post-if: always()\n")
    return "".join(out)


def root_inputs() -> list[InputSpec]:
    """The union of every action's inputs; a name shared by two actions must agree."""
    merged: dict[str, InputSpec] = {}
    for spec in ACTIONS.values():
        for item in spec.inputs:
            seen = merged.get(item.name)
            if seen and (seen.default, seen.action_default) != (item.default, item.action_default):
                raise SystemExit(f"input {item.name} has different defaults across actions")
            merged.setdefault(item.name, item)
    return list(merged.values())


def root_outputs() -> list[str]:
    names: list[str] = []
    for spec in ACTIONS.values():
        names += [o.name for o in spec.outputs if o.name not in names]
    return names


_STEP = "    - "
_KEY = " " * 6


def _split_steps(text: str) -> list[list[str]]:
    """The lines of each step in ``text`` (YAML indented as under ``runs.steps``)."""
    steps: list[list[str]] = []
    for line in text.splitlines(keepends=True):
        if line.startswith(_STEP):
            steps.append([_KEY + line[len(_STEP) :]])  # the first key, as indented as the rest
        elif steps:
            steps[-1].append(line)
        elif line.strip():
            raise SystemExit(f"extra steps must start with '{_STEP.strip()} ': {line!r}")
    return steps


def _is_key(line: str) -> bool:
    return line.startswith(_KEY) and line[len(_KEY) : len(_KEY) + 1] not in (" ", "\n", "")


def _guard_expr(guard: str, condition: object) -> str:
    """``guard``, and ``condition`` (a step's own ``if:``, bare or in ``${{ }}``) if any."""
    if condition is None:
        return guard
    expr = " ".join(str(condition).split("\n")).strip()
    inner = re.fullmatch(r"\$\{\{(.*)\}\}", expr, re.DOTALL)
    return f"{guard} && ({(inner.group(1) if inner else expr).strip()})"


def _if_lines(expr: str) -> list[str]:
    """An ``if:`` key, folded (``>-``) so that no quoting is needed, wrapped at spaces."""
    body = textwrap.wrap(expr, 88, break_long_words=False, break_on_hyphens=False)
    return [f"{_KEY}if: >-\n", *(f"{_KEY}  {line}\n" for line in body)]


def guard_steps(text: str, command: str) -> str:
    """``text``'s steps for the root action: each runs only for ``command``, on top of its own
    ``if:``; paths relative to ``actions/<name>/`` are made relative to the root.

    The result is checked against YAML's reading of ``text``: the same steps, every key the
    same but ``if``, which is the guard and (in parentheses) the step's own condition.
    """
    import yaml

    guard = f"inputs.command == '{command}'"
    text = text.replace("$GITHUB_ACTION_PATH/../../", "$GITHUB_ACTION_PATH/")
    if "GITHUB_ACTION_PATH" in text.replace("$GITHUB_ACTION_PATH/", ""):
        raise SystemExit(f"{command}: write extra steps' paths as $GITHUB_ACTION_PATH/../../")
    originals = yaml.safe_load(text) or []
    split = _split_steps(text)
    if len(split) != len(originals):
        raise SystemExit(f"{command}: extra steps must each start with '{_STEP.strip()} '")
    out: list[str] = []
    for lines, step in zip(split, originals):
        at = next((i for i, line in enumerate(lines) if line.startswith(_KEY + "if:")), None)
        if at is None:  # after the first key and its value
            at = end = next((i for i in range(1, len(lines)) if _is_key(lines[i])), len(lines))
        else:
            end = next((i for i in range(at + 1, len(lines)) if _is_key(lines[i])), len(lines))
        lines[at:end] = _if_lines(_guard_expr(guard, step.get("if")))
        out += [_STEP + lines[0][len(_KEY) :], *lines[1:]]
    result = "".join(out)
    expected = [{**step, "if": _guard_expr(guard, step.get("if"))} for step in originals]
    if (yaml.safe_load(result) or []) != expected:
        raise SystemExit(f"{command}: could not add the command guard to its extra steps")
    return result


def root_extra_steps() -> tuple[str, str]:
    """Every action's extra steps (before and after its command), guarded by ``command``,
    so that the root action does what ``actions/<name>/action.yml`` does."""
    import yaml

    before = "".join(guard_steps(spec.steps_before, name) for name, spec in ACTIONS.items())
    after = "".join(guard_steps(spec.steps_after, name) for name, spec in ACTIONS.items())
    ids = [step["id"] for step in yaml.safe_load(before + after) or [] if "id" in step]
    dups = sorted({i for i in ids + ["run"] if (ids + ["run"]).count(i) > 1})
    if dups:
        raise SystemExit(f"step ids {dups} are used by two actions' extra steps (or are 'run')")
    return before, after


def render_root() -> str:
    commands = ", ".join(ACTIONS)
    steps_before, steps_after = root_extra_steps()
    out = [
        "# Generated from src/gpu_ci/specs.py by scripts/render_actions.py; edit the spec.\n",
        "# The Marketplace entry: `command` picks one of the actions under actions/.\n",
        f"name: {q(MARKETPLACE['name'])}\n",
        f"description: {q(MARKETPLACE['description'])}\n",
        f"author: {q(MARKETPLACE['author'])}\n",
        f"branding:\n  icon: {q(MARKETPLACE['icon'])}\n  color: {q(MARKETPLACE['color'])}\n",
        "inputs:\n",
        "  command:\n"
        f"    description: {q('The action to run: ' + commands + '.')}\n"
        "    required: true\n",
    ]
    out += [_input_block(item, False) for item in root_inputs()]
    out.append("outputs:\n")
    for name in root_outputs():
        out.append(
            f"  {name}:\n    description: {q('Output ' + name + ' of the chosen command.')}\n"
            f"    value: ${{{{ steps.run.outputs.{name} }}}}\n"
        )
    out.append("runs:\n  using: composite\n  steps:\n")
    out.append(ROOT_BOOTSTRAP_STEP)
    out.append(steps_before)
    out.append("    - name: gpu-ci\n      id: run\n      shell: bash\n      env:\n")
    out.append("        GPU_CI_COMMAND: ${{ inputs.command }}\n")
    out.append(_env_lines(root_inputs()))
    out.append(
        '      run: \'"$GPU_CI_PYTHON" "$GITHUB_ACTION_PATH/scripts/run.py" "$GPU_CI_COMMAND"\'\n'
    )
    out.append(steps_after)
    return "".join(out)


def readme_table(spec: ActionSpec) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    rows = ["| input | default | description |", "|---|---|---|"]
    for item in spec.inputs:
        default = (
            "**required**"
            if item.required
            else (f"`{cell(item.yaml_default)}`" if item.yaml_default else "")
        )
        rows.append(f"| `{item.name}` | {default} | {cell(item.description)} |")
    rows += ["", "| output | description |", "|---|---|"]
    rows += [f"| `{o.name}` | {cell(o.description)} |" for o in spec.outputs]
    return "\n".join(rows) + "\n"


def _between(text: str, key: str, body: str, where: str) -> str:
    """Replace what lies between ``<!-- BEGIN key -->`` and ``<!-- END key -->``."""
    begin, end = f"<!-- BEGIN {key} -->", f"<!-- END {key} -->"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if not pattern.search(text):
        raise SystemExit(f"{where} lacks the markers {begin} ... {end}")
    return pattern.sub(lambda _m: f"{begin}\n{body}{end}", text)


def actions_overview() -> str:
    """The root README's table of actions, each linking its own README."""
    rows = ["| action | what it does | runs on |", "|---|---|---|"]
    rows += [
        f"| [`{name}`]({readme_of(name)}) | {spec.summary} | {spec.runs_on} |"
        for name, spec in ACTIONS.items()
    ]
    return "\n".join(rows) + "\n"


def render_action_readme(name: str, text: str) -> str:
    return _between(text, f"{name} table", readme_table(ACTIONS[name]), readme_of(name))


#: Said of a group beside what its lock file names.
GROUP_NOTES = {"github": " (without the `cryptography` it only needs for GitHub App auth)"}


def group_packages(group: str) -> list[str]:
    """The packages ``requirements/<group>.in`` names (its one source), markers dropped."""
    lines = (ROOT / "requirements" / f"{group}.in").read_text(encoding="utf-8").splitlines()
    return [
        line.split(";")[0].split("#")[0].strip() for line in lines if line.split("#")[0].strip()
    ]


def groups_table() -> str:
    """The root README's table of dependency groups and the actions that install each."""
    rows = ["| group | holds | installed for |", "|---|---|---|"]
    for group in GROUPS:
        users = [f"`{name}`" for name, spec in ACTIONS.items() if group in spec.groups]
        holds = ", ".join(group_packages(group)) + GROUP_NOTES.get(group, "")
        rows.append(
            f"| `{group}` | {holds} | "
            f"{'every action' if len(users) == len(ACTIONS) else ', '.join(users)} |"
        )
    return "\n".join(rows) + "\n"


def render_root_readme(text: str) -> str:
    text = _between(text, "actions table", actions_overview(), "README.md")
    return _between(text, "groups table", groups_table(), "README.md")


def bootstrap_case() -> str:
    """The ``case`` of ``bootstrap.sh``: which groups each action installs, for the shell's
    no-Python fast path (a later action of the same job)."""
    by_groups: dict[tuple[str, ...], list[str]] = {}
    for name, spec in sorted(ACTIONS.items()):
        by_groups.setdefault(spec.groups, []).append(name)
    lines = ['case "$action" in']
    for groups, names in by_groups.items():
        lines.append(f'  {"|".join(names)}) groups="{" ".join(groups)}" ;;')
    lines.append(f'  *) groups="{" ".join(GROUPS)}" ;;')
    lines.append("esac")
    return "\n".join(lines) + "\n"


def render_bootstrap(text: str) -> str:
    begin = "# BEGIN groups (rendered from src/gpu_ci/specs.py by scripts/render_actions.py)\n"
    end = "# END groups\n"
    if begin not in text or end not in text:
        raise SystemExit("scripts/bootstrap.sh lacks the BEGIN/END groups markers")
    head, rest = text.split(begin, 1)
    return head + begin + bootstrap_case() + end + rest.split(end, 1)[1]


EXAMPLE_MARKER = re.compile(
    r"(<!-- BEGIN example (?P<path>[\w./-]+) -->\n).*?(<!-- END example (?P=path) -->)", re.DOTALL
)


def embed_examples(text: str) -> str:
    """Copy each ``examples/*.yml`` named by a marker pair into README verbatim."""

    def body(match: re.Match[str]) -> str:
        source = (ROOT / match.group("path")).read_text(encoding="utf-8")
        return f"{match.group(1)}```yaml\n{source}```\n{match.group(3)}"

    return EXAMPLE_MARKER.sub(body, text)


def driver_table_json() -> str:
    """The YAML driver table as JSON: read at run time without importing PyYAML."""
    import yaml

    data_dir = ROOT / "src" / "gpu_ci" / "data"
    doc = yaml.safe_load((data_dir / "cuda-toolkit-driver-table.yaml").read_text())
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def data_json(stem: str) -> str:
    """A YAML data file of the package as JSON (read at run time without PyYAML)."""
    import yaml

    doc = yaml.safe_load((ROOT / "src" / "gpu_ci" / "data" / f"{stem}.yaml").read_text())
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def targets() -> dict[Path, str]:
    files = {
        ROOT / "actions" / name / "action.yml": render_action(spec)
        for name, spec in ACTIONS.items()
    }
    files[ROOT / JOB_FORM / "action.yml"] = render_job_action(ACTIONS["gpu-monitor"])
    files[ROOT / "action.yml"] = render_root()
    files[ROOT / "src" / "gpu_ci" / "data" / "cuda-toolkit-driver-table.json"] = driver_table_json()
    files[ROOT / "src" / "gpu_ci" / "data" / "cuda-builds.json"] = data_json("cuda-builds")
    files[ROOT / "src" / "gpu_ci" / "data" / "gpu-sizes.json"] = data_json("gpu-sizes")
    readme = ROOT / "README.md"
    files[readme] = embed_examples(render_root_readme(readme.read_text(encoding="utf-8")))
    for name in ACTIONS:  # a family's README holds each of its actions' tables
        path = ROOT / readme_of(name)
        text = files[path] if path in files else path.read_text(encoding="utf-8")
        files[path] = embed_examples(render_action_readme(name, text))
    sh = ROOT / "scripts" / "bootstrap.sh"
    files[sh] = render_bootstrap(sh.read_text(encoding="utf-8"))
    return files


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for path, text in targets().items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != text:
            stale.append(path.relative_to(ROOT))
            if not check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
    if check and stale:
        print("stale (run python scripts/render_actions.py):", *stale, sep="\n  ")
        return 1
    for path in stale:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
