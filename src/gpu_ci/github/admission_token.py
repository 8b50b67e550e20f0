"""The admission hook's token, kept out of the job's reach.

The job-started hook runs as the runner's user, and on ARC's same-container modes the job's
steps run in the runner's own container as that user, inheriting the runner's environment:
a token in ``GPU_CI_ADMISSION_TOKEN`` is every admitted job's too (an approved fork's test
can print it). So the runner pod gets the token as a file: an init container copies the
Secret into an in-memory ``emptyDir`` (the file the runner user's, mode 0400, the directory
writable by it), and the runner container gets only its path,
``GPU_CI_ADMISSION_TOKEN_FILE``. The hook reads the file and unlinks it before anything
else, before any REST call and before the job's first step; any failure refuses the job
(fail closed).
This holds because the pods are ephemeral, one job each: the next job starts on a new pod
with a new copy. A persistent runner cannot hide a token from the jobs of its own user:
there the token comes from ``GPU_CI_ADMISSION_TOKEN``, and SECURITY-MODEL.md says what
that costs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpu_ci.regular_files import read_small

FILE_VARIABLE = "GPU_CI_ADMISSION_TOKEN_FILE"
VARIABLE = "GPU_CI_ADMISSION_TOKEN"
LIMIT = 4096
"""A GitHub token is under 300 characters; a larger file is not one."""
NEEDS = (
    "a token that may read the repository's commit statuses, pull requests, actions and "
    "collaborators (a fine-grained token with 'Commit statuses', 'Pull requests', "
    "'Actions' and 'Metadata': read)"
)


@dataclass(frozen=True)
class Taken:
    """The token, or why there is none (a refusal)."""

    token: str = ""
    problem: str = ""


def take_file(path: Path) -> Taken:
    """Read the token file once, then unlink it.

    It must be a regular file of this user (no link, no FIFO), at most ``LIMIT`` bytes.
    A file that cannot be unlinked refuses too: the job would read it.
    """
    where = f"{FILE_VARIABLE} ({path})"
    try:
        raw = read_small(path, LIMIT + 1, owners={os.geteuid()})
    except FileNotFoundError:
        return Taken(
            problem=f"{where} does not exist: the pod's init container copies it for the one "
            "job of an ephemeral runner pod, and an earlier hook consumed it (is the runner "
            "ephemeral?)."
        )
    except OSError as exc:
        return Taken(problem=f"{where} cannot be read: {exc.strerror or exc}.")
    try:
        os.unlink(path)
    except OSError as exc:
        return Taken(
            problem=f"{where} cannot be removed ({exc.strerror or exc}), so the job could read "
            "it: make its directory writable by the runner's user."
        )
    token = raw.decode("utf-8", "replace").strip()
    if len(raw) > LIMIT or not token or any(c.isspace() for c in token):
        return Taken(problem=f"{where} holds no token: give it {NEEDS}.")
    return Taken(token)


def take(environ: Mapping[str, str]) -> Taken:
    """The hook's token: from the file when one is named, else from the environment."""
    path = environ.get(FILE_VARIABLE, "").strip()
    if path:
        return take_file(Path(path))
    token = environ.get(VARIABLE, "").strip()
    if token:
        return Taken(token)
    return Taken(
        problem=f"{VARIABLE} is not set on this runner (nor {FILE_VARIABLE}): give the "
        f"runner {NEEDS}, as a file on an ephemeral runner (deploy/arc)."
    )
