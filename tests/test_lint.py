"""Schema validation (check-jsonschema) and security audit (zizmor) of actions and workflows.

These run the real tools; they are test dependencies, so a missing tool is a failure.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.shared import ROOT

BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    found = shutil.which(name) or str(BIN / name)
    if not Path(found).exists():
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
    return found


# rglob: actions/gpu-monitor/job/action.yml (the one-step form) too
ACTION_FILES = [ROOT / "action.yml", *sorted((ROOT / "actions").rglob("action.yml"))]
WORKFLOW_FILES = sorted(
    [
        *(ROOT / ".github" / "workflows").glob("*.yml"),
        *(ROOT / "examples").rglob("*.yml"),
        *(ROOT / "tests" / "e2e" / "workflows").glob("*.yml"),
    ]
)


def check_schema(schema: str, files: list[Path]) -> subprocess.CompletedProcess[str]:
    """check-jsonschema's verdict on ``files`` against one of its built-in schemas."""
    return subprocess.run(
        [tool("check-jsonschema"), "--builtin-schema", schema, *map(str, files)],
        capture_output=True,
        text=True,
    )


def test_action_files_validate_against_the_actions_schema():
    proc = check_schema("vendor.github-actions", ACTION_FILES)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_workflows_validate_against_the_workflows_schema():
    assert any("examples" in str(p) for p in WORKFLOW_FILES)
    proc = check_schema("vendor.github-workflows", WORKFLOW_FILES)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_schema_check_really_rejects_a_broken_action(tmp_path):
    bad = tmp_path / "action.yml"
    bad.write_text("name: x\nruns:\n  using: composite\n  steps: 3\n")
    assert check_schema("vendor.github-actions", [bad]).returncode != 0


def test_zizmor_reports_no_findings():
    # A directory is read as a repository root (only .github/workflows and action.yml
    # files), so examples/ are named file by file.
    examples = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").rglob("*.yml"))
    assert examples
    targets = ["action.yml", "actions", ".github/workflows", *examples]
    proc = subprocess.run(
        [tool("zizmor"), "--offline", "--no-progress", *targets],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No findings" in proc.stdout + proc.stderr


def test_zizmor_really_finds_template_injection(tmp_path):
    assert_injection_found(
        tmp_path / "action.yml",
        "name: x\ndescription: x\ninputs:\n  a:\n    description: a\nruns:\n"
        "  using: composite\n  steps:\n    - shell: bash\n"
        "      run: echo ${{ inputs.a }} ${{ github.event.pull_request.title }}\n",
    )


def assert_injection_found(bad: Path, text: str) -> None:
    """zizmor, offline, fails ``text`` written at ``bad`` for template injection."""
    bad.write_text(text)
    proc = subprocess.run(
        [tool("zizmor"), "--offline", "--no-progress", str(bad)], capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert "template-injection" in proc.stdout + proc.stderr


def test_reusable_workflow_is_linted_and_zizmor_audits_workflow_call_inputs(tmp_path):
    # .github/workflows/gpu-ci.yml (workflow_call) is in both lint sets above; and zizmor
    # flags a workflow_call input expanded inside run:, the mistake that file avoids.
    assert ROOT / ".github" / "workflows" / "gpu-ci.yml" in WORKFLOW_FILES
    assert_injection_found(
        tmp_path / "reusable.yml",
        "on:\n  workflow_call:\n    inputs:\n      cmd:\n        type: string\n"
        "        required: true\npermissions: {}\njobs:\n  t:\n    runs-on: ubuntu-latest\n"
        "    steps:\n      - run: ${{ inputs.cmd }}\n",
    )


ZIZMOR_TARGETS = [
    "action.yml",
    "actions",
    ".github/workflows",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").rglob("*.yml")),
]


def test_zizmor_auditor_persona_reports_no_findings():
    """The strictest persona: every finding is fixed, or ignored inline with a reason."""
    proc = subprocess.run(
        [tool("zizmor"), "--offline", "--no-progress", "--persona", "auditor", *ZIZMOR_TARGETS],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No findings" in proc.stdout + proc.stderr


def test_every_inline_zizmor_ignore_gives_a_reason():
    files = [*ACTION_FILES, *WORKFLOW_FILES]
    ignores = [
        (path, line)
        for path in files
        for line in path.read_text(encoding="utf-8").splitlines()
        if "zizmor: ignore[" in line
    ]
    assert ignores  # the remover's pull_request_target is one
    for path, line in ignores:
        reason = re.sub(r".*zizmor: ignore\[[^\]]*\]", "", line).strip()
        assert len(reason) >= 10, f"{path.name}: ignore without a reason: {line.strip()}"


def test_a_nested_action_is_pinned_and_checked_like_the_others():
    from gpu_ci.release import pin_uses, unpinned_uses

    text = "      - uses: gpu-ci-actions/gpu-ci-actions/actions/gpu-monitor/job@v2\n"
    assert unpinned_uses(text) == [text.strip()[2:]]
    pinned = pin_uses(text, "1.2.3", "a" * 40)
    assert pinned == (
        "      - uses: gpu-ci-actions/gpu-ci-actions/actions/gpu-monitor/job@"
        + "a" * 40
        + "  # v1.2.3\n"
    )
    assert unpinned_uses(pinned) == []


def test_privileged_examples_must_pin_our_actions_by_sha(tmp_path):
    import yaml

    from gpu_ci.release import PRIVILEGED_EXAMPLES, pin_uses, unpinned_uses

    # Every example whose jobs may write (other than contents: read) is in the list.
    for path in sorted((ROOT / "examples").glob("*.yml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        triggers = doc.get(True) or doc.get("on") or {}
        writes = any(
            v == "write"
            for job in doc["jobs"].values()
            for v in (job.get("permissions") or {}).values()
        )
        privileged = "pull_request_target" in triggers or "workflow_run" in triggers
        if writes or privileged:
            assert f"examples/{path.name}" in PRIVILEGED_EXAMPLES, path.name
    for name in PRIVILEGED_EXAMPLES:
        text = (ROOT / name).read_text(encoding="utf-8")
        assert "gpu-ci-actions/actions/" in text and unpinned_uses(text) == []
        # zizmor's policy (.github/zizmor.yml) refuses a moving tag for the actions that
        # only privileged workflows use (the comment relay uses gpu-gate alone, pinned above)
        if not re.search(r"actions/(remove-label|gpu-status|gpu-watchdog)@", text):
            continue
        moved = tmp_path / "privileged.yml"
        moved.write_text(
            re.sub(
                r"(actions/(remove-label|gpu-status|gpu-watchdog|gpu-cloud-runner(/stop|/reap)?))"
                r"@\S+ +# \S+",
                r"\1@v2",
                text,
            )
        )
        assert "@v2\n" in moved.read_text()
        proc = subprocess.run(
            [
                tool("zizmor"),
                "--offline",
                "--no-progress",
                "--config",
                str(ROOT / ".github" / "zizmor.yml"),
                str(moved),
            ],
            capture_output=True,
            text=True,
        )
        assert proc.returncode != 0 and "unpinned-uses" in proc.stdout + proc.stderr
        assert unpinned_uses(moved.read_text()) != []
        repinned = pin_uses(moved.read_text(), "1.2.3", "a" * 40)
        assert f"@{'a' * 40}  # v1.2.3" in repinned
        assert unpinned_uses(repinned) == []


def test_release_tools_are_installed_with_hashes():
    workflow = (ROOT / ".github" / "workflows" / "release.yml").read_text(encoding="utf-8")
    installs = [line for line in workflow.splitlines() if "pip install" in line]
    assert installs and all("--require-hashes" in line for line in installs)
    assert "python -m build --no-isolation" in workflow
    pins = (ROOT / ".github" / "release-requirements.txt").read_text(encoding="utf-8")
    for tool_name in ("build==", "setuptools=="):
        assert tool_name in pins
    assert pins.count("--hash=sha256:") == pins.count("==")


def test_gpu_example_concurrency_group_includes_the_label():
    import yaml

    doc = yaml.safe_load((ROOT / "examples" / "cuda-ci.yml").read_text(encoding="utf-8"))
    assert "github.event.label.name" in doc["concurrency"]["group"]
    gate = next(s for s in doc["jobs"]["gate"]["steps"] if "gpu-gate" in s.get("uses", ""))
    assert "self-hosted" not in gate["with"]["gpu-runs-on"]


def test_no_action_description_holds_an_expression():
    """The runner refuses a composite action whose description holds ``${{`` (act: "expressions
    are not allowed here"), so one input's example would break every action of the file."""
    import yaml

    for path in ACTION_FILES:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        for kind in ("inputs", "outputs"):
            for name, item in (doc.get(kind) or {}).items():
                assert "${{" not in str(item.get("description", "")), (path, name)
