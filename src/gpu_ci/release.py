"""Release checks and plans, called by .github/workflows/release.yml.

``python -m gpu_ci.release check --tag v1.2.3`` verifies that the tag is a plain
``vX.Y.Z``, equals the package version, and that CHANGELOG.md has a dated section for it;
it prints ``tag=``/``version=`` lines for ``$GITHUB_OUTPUT``. ``notes`` prints that
section (the GitHub release body); ``moving-tags`` prints the major and minor tags that
must follow the release (``v1``, ``v1.2``), so that ``@v2`` always means the newest 2.x.
``pin-examples --version 1.2.3 --sha <commit>`` rewrites the privileged examples' ``uses:``
of our own actions, and the reusable workflow's nested ones, to that release commit's full
SHA with a ``# v1.2.3`` comment (run after a release; ``--check`` exits 1 when a file is not
pinned that way). The reusable workflow is pinned too: a caller who pins ``gpu-ci.yml`` by
SHA must not run whatever ``v1`` points at, gate included.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from gpu_ci import __version__

TAG = re.compile(r"^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")
SECTION = re.compile(
    r"^## \[(?P<version>[^\]]+)\](?: - (?P<date>\d{4}-\d{2}-\d{2}))?\s*$", re.MULTILINE
)


@dataclass(frozen=True)
class ReleaseCheck:
    tag: str
    version: str
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def changelog_sections(text: str) -> dict[str, tuple[str, str]]:
    """The changelog's sections by version: (date or '', body)."""
    matches = list(SECTION.finditer(text))
    out = {}
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        body = text[match.end() : end].strip()
        # drop link reference definitions that trail the last section
        body = "\n".join(
            line for line in body.splitlines() if not re.match(r"^\[[^\]]+\]: \S+", line)
        ).strip()
        out[match.group("version")] = (match.group("date") or "", body)
    return out


def check(tag: str, package_version: str, changelog: str) -> ReleaseCheck:
    problems = []
    match = TAG.match(tag)
    version = tag[1:] if match else ""
    if not match:
        problems.append(f"tag {tag!r} is not vMAJOR.MINOR.PATCH (e.g. v1.2.3).")
    elif version != package_version:
        problems.append(
            f"tag {tag} does not match the package version {package_version} "
            "(src/gpu_ci/__init__.py): bump the version, or tag the right commit."
        )
    if version:
        section = changelog_sections(changelog).get(version)
        if section is None:
            problems.append(f"CHANGELOG.md has no '## [{version}] - YYYY-MM-DD' section.")
        elif not section[0]:
            problems.append(f"CHANGELOG.md's section for {version} has no release date.")
        elif not section[1]:
            problems.append(f"CHANGELOG.md's section for {version} is empty.")
    return ReleaseCheck(tag, version, tuple(problems))


def moving_tags(version: str) -> list[str]:
    """The tags that follow a release: major always, minor too (v1, v1.2)."""
    major, minor, _ = version.split(".")
    return [f"v{major}", f"v{major}.{minor}"]


#: Examples that run with a write token (``pull_request_target``): our own actions in them
#: are pinned to a release commit, not a moving tag.
#: Workflows whose tokens can write (pull_request_target, workflow_run, a cancelling schedule):
#: our actions there are pinned to a release commit, so that moving a tag cannot change what
#: runs with a write token.
PRIVILEGED_EXAMPLES = (
    "examples/cuda-ci-comment.yml",  # issue_comment: the relay App's token can write labels
    "examples/cuda-ci-remove-label.yml",
    "examples/cuda-ci-status.yml",
    "examples/cuda-ci-watchdog.yml",
    "examples/gpu-cloud-runner.yml",  # the cloud role (OIDC) and the App token
    "examples/gpu-cloud-runner-reap.yml",
    "examples/port-cupy-ci-trigger.yml",  # issue_comment: the relay App's token
    "examples/port-scikit-learn-label-remover.yml",
)
#: Workflows of this repository that others call: their nested ``uses:`` are pinned alike.
PINNED_WORKFLOWS = (".github/workflows/gpu-ci.yml",)
OWN_USES = re.compile(
    r"(?P<head>uses: gpu-ci-actions/gpu-ci-actions/actions/[\w-]+(?:/[\w-]+)*)"
    r"@(?P<ref>[\w./-]+)"
    r"(?P<comment>[ \t]+#[^\n]*)?"
)
SHA = re.compile(r"^[0-9a-f]{40}$")


def pin_uses(text: str, version: str, sha: str) -> str:
    """``text`` with our actions' ``uses:`` pinned to ``sha`` and a version comment."""
    if not SHA.match(sha):
        raise ValueError(f"not a full commit SHA: {sha!r}")
    if not TAG.match(f"v{version}"):
        raise ValueError(f"not a MAJOR.MINOR.PATCH version: {version!r}")
    return OWN_USES.sub(lambda m: f"{m.group('head')}@{sha}  # v{version}", text)


#: The comment of a pin to a commit that no release contains yet (e.g. an action newer than
#: the last release): saying a version would name a release that does not exist.
UNRELEASED = "unreleased"


def unpinned_uses(text: str) -> list[str]:
    """Our actions' ``uses:`` that lack a full SHA and a version comment.

    The comment is ``# vX.Y.Z`` or ``# unreleased``."""
    bad = []
    for match in OWN_USES.finditer(text):
        comment = (match.group("comment") or "").strip().lstrip("# ")
        if not SHA.match(match.group("ref")) or not (TAG.match(comment) or comment == UNRELEASED):
            bad.append(match.group(0))
    return bad


def pin_versions(text: str) -> list[str]:
    """The versions (``X.Y.Z``) the pins' comments in ``text`` name (not ``unreleased``)."""
    out = []
    for match in OWN_USES.finditer(text):
        comment = (match.group("comment") or "").strip().lstrip("# ")
        if TAG.match(comment):
            out.append(comment[1:])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_ci.release")
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("--tag", required=True)
    c.add_argument("--changelog", default="CHANGELOG.md")
    n = sub.add_parser("notes")
    n.add_argument("--version", required=True)
    n.add_argument("--changelog", default="CHANGELOG.md")
    m = sub.add_parser("moving-tags")
    m.add_argument("--version", required=True)
    p = sub.add_parser("pin-examples")
    p.add_argument("--version")
    p.add_argument("--sha")
    p.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    if args.cmd == "pin-examples":
        status = 0
        for name in PRIVILEGED_EXAMPLES + PINNED_WORKFLOWS:
            path = Path(name)
            text = path.read_text(encoding="utf-8")
            if args.check:
                for use in unpinned_uses(text):
                    print(
                        f"::error title=release pin::{name}: '{use}' is not pinned to a "
                        "release commit: run python -m gpu_ci.release pin-examples."
                    )
                    status = 1
            else:
                path.write_text(pin_uses(text, args.version, args.sha), encoding="utf-8")
        return status
    if args.cmd == "moving-tags":
        print("\n".join(moving_tags(args.version)))
        return 0
    text = Path(args.changelog).read_text(encoding="utf-8")
    if args.cmd == "notes":
        section = changelog_sections(text).get(args.version)
        if section is None:
            print(f"::error::CHANGELOG.md has no section for {args.version}")
            return 1
        print(section[1])
        return 0
    result = check(args.tag, __version__, text)
    for problem in result.problems:
        print(f"::error title=release check::{problem}")
    if not result.ok:
        return 1
    print(f"tag={result.tag}\nversion={result.version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
