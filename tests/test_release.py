"""Release logic, Marketplace readiness, the release workflow's shape, and the PyPI path."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import yaml

from gpu_ci import __version__, release
from gpu_ci.specs import ACTIONS
from testkit.shared import ROOT

CHANGELOG = (ROOT / "CHANGELOG.md").read_text()


def test_current_version_would_release():
    result = release.check(f"v{__version__}", __version__, CHANGELOG)
    assert result.ok, result.problems
    assert result.version == __version__


@pytest.mark.parametrize(
    ("tag", "problem"),
    [
        ("v1.2", "is not vMAJOR.MINOR.PATCH"),
        ("1.0.0", "is not vMAJOR.MINOR.PATCH"),
        ("v01.0.0", "is not vMAJOR.MINOR.PATCH"),
        ("v1.0.0-rc1", "is not vMAJOR.MINOR.PATCH"),
        ("v9.9.9", "does not match the package version"),
    ],
)
def test_bad_tags(tag, problem):
    result = release.check(tag, "1.0.0", CHANGELOG)
    assert not result.ok and any(problem in p for p in result.problems)


def test_changelog_needs_a_dated_non_empty_section():
    assert "no '## [1.1.0]" in release.check("v1.1.0", "1.1.0", CHANGELOG).problems[0]
    undated = "## [1.1.0]\n\n- x\n"
    assert "no release date" in release.check("v1.1.0", "1.1.0", undated).problems[0]
    empty = "## [1.1.0] - 2026-12-01\n\n## [1.0.0] - 2026-11-29\n- y\n"
    assert "is empty" in release.check("v1.1.0", "1.1.0", empty).problems[0]


def test_notes_are_the_section_without_link_references():
    sections = release.changelog_sections(CHANGELOG)
    date, body = sections[__version__]
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", date)
    assert (
        body.startswith(("### Migration", "### Upgrading", "### Added"))
        and "]: https://" not in body
    )
    assert "Unreleased" in sections


def test_moving_tags():
    assert release.moving_tags("1.2.3") == ["v1", "v1.2"]
    assert release.moving_tags("2.0.0") == ["v2", "v2.0"]


def test_cli_prints_outputs_for_the_workflow(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "gpu_ci.release", "check", "--tag", f"v{__version__}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0
    assert proc.stdout.split() == [f"tag=v{__version__}", f"version={__version__}"]
    bad = subprocess.run(
        [sys.executable, "-m", "gpu_ci.release", "check", "--tag", "v0.0.1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert bad.returncode == 1 and bad.stdout.startswith("::error title=release check::")


def test_version_has_one_source():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject
    assert 'version = { attr = "gpu_ci.__version__" }' in pyproject
    assert not re.search(r'^version\s*=\s*"', pyproject, re.MULTILINE)
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import bootstrap

        assert bootstrap.package_version() == __version__
    finally:
        sys.path.remove(str(ROOT / "scripts"))


# -- Marketplace ------------------------------------------------------------------------------


def schema_enums():
    import check_jsonschema

    schema = (
        Path(check_jsonschema.__file__).parent
        / "builtin_schemas"
        / "vendor"
        / "github-actions.json"
    )
    branding = json.loads(schema.read_text())["properties"]["branding"]["properties"]
    return set(branding["icon"]["enum"]), set(branding["color"]["enum"])


def test_root_action_is_marketplace_ready():
    doc = yaml.safe_load((ROOT / "action.yml").read_text())
    icons, colors = schema_enums()
    assert doc["name"] == "GPU CI Actions"
    paths = [ROOT / "actions" / name / "action.yml" for name in ACTIONS]  # gpu-cloud-runner/stop
    subs = {yaml.safe_load(p.read_text())["name"] for p in paths}
    assert doc["name"] not in subs and len(subs) == len(ACTIONS)
    assert 0 < len(doc["description"]) <= 125
    assert doc["author"]
    assert doc["branding"]["icon"] in icons
    assert doc["branding"]["color"] in colors


def test_readme_has_marketplace_header_usage_at_v2_and_pinning():
    readme = (ROOT / "README.md").read_text()
    assert readme.startswith("# GPU CI Actions")
    for name in ("gpu-gate", "remove-label", "setup-conda-from-lock", "verify-cuda-env"):
        assert f"gpu-ci-actions/gpu-ci-actions/actions/{name}@v2" in readme
    pinning = readme.split("## Pinning")[1].split("\n## ")[0]
    assert "Dependabot" in pinning and "SHA" in pinning
    assert "pipx run --spec gpu-ci-actions gpu-ci verify-cuda-env" in readme


# -- workflows ----------------------------------------------------------------------------------


def workflow(name):
    return yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())


def all_uses(doc):
    return [s["uses"] for job in doc["jobs"].values() for s in job.get("steps", []) if "uses" in s]


@pytest.mark.parametrize("name", ["ci.yml", "release.yml", "self-test.yml"])
def test_workflows_pin_third_party_actions_and_start_without_permissions(name):
    doc = workflow(name)
    assert doc["permissions"] == {}
    for uses in all_uses(doc):
        if uses.startswith(("./", "gpu-ci-actions/gpu-ci-actions/")):
            continue
        assert re.search(r"@[0-9a-f]{40}$", uses), uses


def test_only_the_publish_job_can_mint_an_oidc_token():
    jobs = workflow("release.yml")["jobs"]
    with_oidc = [n for n, j in jobs.items() if (j.get("permissions") or {}).get("id-token")]
    assert with_oidc == ["publish-pypi"]
    assert jobs["publish-pypi"]["permissions"] == {"id-token": "write"}
    text = (ROOT / ".github" / "workflows" / "release.yml").read_text()
    for sub in ("gpu_ci.release check", "gpu_ci.release notes", "gpu_ci.release moving-tags"):
        assert sub in text


def test_dependabot_watches_actions_and_the_locks():
    doc = yaml.safe_load((ROOT / ".github" / "dependabot.yml").read_text())
    ecosystems = {(u["package-ecosystem"], u["directory"]) for u in doc["updates"]}
    assert ecosystems == {("github-actions", "/"), ("pip", "/requirements")}


# -- the PyPI path: what `pipx run --spec gpu-ci-actions gpu-ci ...` installs ------------------


@pytest.mark.slow
def test_wheel_installs_and_runs_verify_cuda_env(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = dist.glob("gpu_ci_actions-*.whl")
    assert wheel.name.startswith(f"gpu_ci_actions-{__version__}-")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(wheel)], check=True, capture_output=True
    )
    gpu_ci = env_dir / "bin" / "gpu-ci"
    version = subprocess.run([str(gpu_ci), "--version"], capture_output=True, text=True)
    assert version.stdout.strip() == f"gpu-ci {__version__}"
    proc = subprocess.run(
        [str(gpu_ci), "verify-cuda-env", "--require-gpu", "false"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ok=true" in proc.stdout
    data = subprocess.run(
        [
            str(python),
            "-c",
            "import gpu_ci.cuda.verify.table as t; "
            "print(t.load_table().bundled_driver(13, 0), "
            "t.load_builds().builds_of('torch')[0].tag)",
        ],
        capture_output=True,
        text=True,
    )
    assert data.stdout.strip() == "580.65.06 cu118"  # package data made it into the wheel


def test_every_pin_comment_names_a_release_that_exists():
    """Issue 26: the examples pinned `# v1.1.0`, which no release is. A pin's comment names a
    release the CHANGELOG dates, or says `unreleased` (a commit newer than every release);
    `pin-examples` writes the release's version at release time."""
    dated = {m.group("version") for m in release.SECTION.finditer(CHANGELOG) if m.group("date")}
    files = [*release.PRIVILEGED_EXAMPLES, *release.PINNED_WORKFLOWS]
    named = {v for f in files for v in release.pin_versions((ROOT / f).read_text())}
    assert named <= dated, f"pins name releases that do not exist: {sorted(named - dated)}"
    assert (
        release.unpinned_uses(
            "uses: gpu-ci-actions/gpu-ci-actions/actions/gpu-gate@" + "a" * 40 + "  # unreleased"
        )
        == []
    )
    assert release.pin_versions(
        "uses: gpu-ci-actions/gpu-ci-actions/actions/gpu-gate@" + "a" * 40 + "  # v1.1.0"
    ) == ["1.1.0"]
