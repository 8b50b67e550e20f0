"""The names and tags that mark what gpu-cloud-runner made.

A runner's name is its only label: ``gpu-ci-<run>-<attempt>-<epoch>-<nonce>-<job key>``. Run
ids are public, so the random nonce is what makes the label unguessable; the epoch dates the
registration, which GitHub does not (the reaper's grace period needs it).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from gpu_ci.cloud.provider import MANAGED, NAME_PREFIX

REPOSITORY = "gpu-ci:repository"
RUN_ID = "gpu-ci:run-id"
RUN_ATTEMPT = "gpu-ci:run-attempt"
JOB_KEY = "gpu-ci:job-key"
RUNNER_ID = "gpu-ci:runner-id"
EXPIRES_AT = "gpu-ci:expires-at"
MARKET = "gpu-ci:market"
PRICE = "gpu-ci:usd-per-hour"

JOB_KEY_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{0,15}")
_NAME = re.compile(
    re.escape(NAME_PREFIX) + r"(?P<run>[0-9]+)-(?P<attempt>[0-9]+)-(?P<epoch>[0-9]+)-"
    r"(?P<nonce>[0-9a-f]{16})-(?P<key>" + JOB_KEY_PATTERN.pattern + ")"
)


@dataclass(frozen=True)
class RunnerName:
    run_id: int
    attempt: int
    created: datetime
    nonce: str
    job_key: str

    @classmethod
    def new(cls, run_id: int, attempt: int, job_key: str, now: datetime) -> RunnerName:
        return cls(run_id, attempt, now.replace(microsecond=0), secrets.token_hex(8), job_key)

    def __str__(self) -> str:
        epoch = int(self.created.timestamp())
        return f"{NAME_PREFIX}{self.run_id}-{self.attempt}-{epoch}-{self.nonce}-{self.job_key}"

    @classmethod
    def parse(cls, text: str) -> RunnerName | None:
        """The parts of a name we made; None for any other runner's."""
        match = _NAME.fullmatch(text)
        if not match:
            return None
        created = datetime.fromtimestamp(int(match.group("epoch")), timezone.utc)
        return cls(
            int(match.group("run")),
            int(match.group("attempt")),
            created,
            match.group("nonce"),
            match.group("key"),
        )


@dataclass(frozen=True)
class Owner:
    """Whose VM it is: the run attempt and job that asked for it."""

    repository: str
    run_id: int
    attempt: int
    job_key: str

    def tags(self) -> dict[str, str]:
        """The tags every search of this job's VMs filters on."""
        return {
            MANAGED: "true",
            REPOSITORY: self.repository,
            RUN_ID: str(self.run_id),
            RUN_ATTEMPT: str(self.attempt),
            JOB_KEY: self.job_key,
        }

    def owns(self, name: RunnerName | None) -> bool:
        return name is not None and (name.run_id, name.attempt, name.job_key) == (
            self.run_id,
            self.attempt,
            self.job_key,
        )


def parse_time(text: str) -> datetime | None:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def tag(tags: Mapping[str, str], key: str) -> str:
    return str(tags.get(key, ""))
