"""gpu-gate's inputs, checked: the label, roles, events, runner labels.

Every mistake is a :class:`UsageError` that says what to write.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from gpu_ci.errors import UsageError
from gpu_ci.github import comment
from gpu_ci.github.event import PR_EVENTS, TRUSTED_EVENTS
from gpu_ci.github.kinds import RunnerKind, parse_kinds, runs_on_json
from gpu_ci.github.roles import ROLE_RANK as ROLE_RANK  # the gate's name for it

MIN_PERMISSIONS = ("triage", "write", "maintain", "admin")
#: Events that may run without a label (:data:`gpu_ci.github.event.TRUSTED_EVENTS`).
RUN_ON_EVENTS = TRUSTED_EVENTS


@dataclass(frozen=True)
class GateConfig:
    """gpu-gate's checked inputs."""

    label: str
    """Empty: the label path is off (only comments, trusted authors or run-on approve)."""
    min_permission: str
    run_on: frozenset[str]
    require_fresh_head: bool
    paths: tuple[str, ...]
    skip_draft: bool
    gpu_runs_on: str
    """Compact JSON; empty when the workflow names its GPU runners itself."""
    cpu_runs_on: str
    require_approved_review: bool = False
    comment_command: str = ""
    """Empty: comment commands are off."""
    tiers: tuple[str, ...] = ()
    tier_specs: tuple[comment.Tier, ...] = ()
    """The tiers with the runner kinds each selects (``tiers: mini: b200``)."""
    trusted_authors: str = ""
    """The least role of a pull request's author whose own pushes run unapproved; empty: off."""
    trusted_authors_verified: bool = False
    test_merge: bool = False
    """Run a pull request's merge commit (``refs/pull/N/merge``) instead of its head."""
    kinds: tuple[RunnerKind, ...] = ()
    """``gpu-runner-kinds``: named GPU runners, each with its own runs-on and price."""
    relay_bot: str = ""
    """The login whose label relays a comment approval (an App's ``<slug>[bot]``)."""
    relay_label: str = ""
    """The label the relay applies: the gate label unless set (required with the label off)."""
    tiers_file: str = ""
    """A file of the default branch that lists the tiers (``tiers: file:<path>``)."""
    approvers: tuple[str, ...] = ()
    """Logins, and ``@org`` for an organisation's members, who approve below the role."""

    @property
    def relay_label_name(self) -> str:
        """The label a relayed comment approval arrives as."""
        return self.relay_label or self.label

    def selected_kinds(self, named: Sequence[str]) -> tuple[str, ...]:
        """The runner kinds an approval naming the tiers ``named`` runs on.

        Every kind when no tier is named or no tier selects kinds; otherwise the kinds the
        named tiers select, in the order of ``gpu-runner-kinds``."""
        mapped = {t.name: t.kinds for t in self.tier_specs if t.kinds}
        if not named or not mapped:
            return tuple(k.name for k in self.kinds)
        wanted = {kind for tier in named for kind in mapped.get(tier, ())}
        return tuple(k.name for k in self.kinds if k.name in wanted)

    def tier_kinds(self, named: Sequence[str]) -> dict[str, list[str]]:
        """Each named tier and the kinds it selects, for the ``tier-kinds`` output."""
        mapped = {t.name: t.kinds for t in self.tier_specs}
        return {tier: list(mapped.get(tier, ())) for tier in named}

    def ways(self) -> str:
        """How this repository approves a commit, for refusal texts."""
        ways = []
        if self.label:
            ways.append(f"a maintainer applies '{self.label}'")
        if self.comment_command:
            ways.append(f"comments '{self.comment_command} <sha>'")
        if not ways:
            return "only a trusted author's own push runs here."
        return " or ".join(ways) + "."


def parse_run_on(items: Sequence[str]) -> frozenset[str]:
    """``run-on``: only events whose commit needs no approval; anything else is refused."""
    events = {item.strip().lower() for item in items if item.strip()}
    label_path = sorted(events & set(PR_EVENTS))
    if label_path:
        raise UsageError(
            f"input 'run-on' lists {', '.join(label_path)}: pull requests always take the "
            "label path (a maintainer applies the gate label); remove it from run-on."
        )
    unknown = sorted(events - set(RUN_ON_EVENTS))
    if unknown:
        raise UsageError(
            f"input 'run-on' lists {', '.join(repr(e) for e in unknown)}: only "
            f"{', '.join(RUN_ON_EVENTS)} may run without a label (other events, such as "
            "reviews or comments, can be triggered by anyone)."
        )
    return frozenset(events)


@dataclass(frozen=True)
class GateInputs:
    """gpu-gate's inputs as written, one field per input of the action."""

    label: str
    min_permission: str
    run_on: Sequence[str]
    require_fresh_head: bool
    paths: Sequence[str]
    skip_draft: bool
    gpu_runs_on: str
    cpu_runs_on: str
    require_approved_review: bool = False
    comment_command: str = ""
    tiers: Sequence[str] = ()
    trusted_authors: str = ""
    trusted_authors_verified: bool = False
    test_merge: bool = False
    runner_kinds: str = ""
    relay_bot: str = ""
    relay_label: str = ""
    approvers: Sequence[str] = ()


def make_config(given: GateInputs) -> GateConfig:
    """The checked config."""
    perm = _role_input("min-permission", given.min_permission)
    trusted = given.trusted_authors.strip().lower()
    trusted = "" if trusted in ("", "false", "none", "off") else trusted
    if trusted:
        trusted = _role_input("trusted-authors", trusted)
    tiers_file = _tiers_file(given.tiers)
    label = given.label.strip()
    gate_label = "" if label.casefold() in ("", "none") else label
    command = comment.parse_command_setting(given.comment_command)
    relay = _relay_inputs(gate_label, command, given.relay_bot, given.relay_label)
    if not (gate_label or command or trusted):
        raise UsageError(
            "input 'label' is none and neither comment-command nor trusted-authors is set: "
            "nothing could approve a pull request. Name the gate label, or set comment-command."
        )
    kinds = parse_kinds(given.runner_kinds)
    specs = () if tiers_file else comment.parse_tier_specs(given.tiers)
    problem = unknown_tier_kinds(specs, kinds) if kinds else ""  # else: see the shell
    if problem:
        raise UsageError(f"input 'tiers' {problem}")
    return GateConfig(
        label=gate_label,
        min_permission=perm,
        run_on=parse_run_on(given.run_on),
        require_fresh_head=given.require_fresh_head,
        paths=tuple(given.paths),
        skip_draft=given.skip_draft,
        # no default: a default naming self-hosted labels would send jobs to whatever
        # runner happens to carry them
        gpu_runs_on=(
            runs_on_json("gpu-runs-on", given.gpu_runs_on) if given.gpu_runs_on.strip() else ""
        ),
        cpu_runs_on=runs_on_json("cpu-runs-on", given.cpu_runs_on),
        require_approved_review=given.require_approved_review,
        comment_command=command,
        tiers=tuple(t.name for t in specs),
        tier_specs=specs,
        tiers_file=tiers_file,
        trusted_authors=trusted,
        trusted_authors_verified=given.trusted_authors_verified,
        test_merge=given.test_merge,
        kinds=kinds,
        relay_bot=relay[0],
        relay_label=relay[1],
        approvers=_approvers(given.approvers),
    )


def unknown_tier_kinds(specs: Sequence[comment.Tier], kinds: Sequence[RunnerKind]) -> str:
    """Why a tier selects a kind that ``gpu-runner-kinds`` lacks, or ""."""
    names = [k.name for k in kinds]
    mapping = any(tier.kinds for tier in specs)
    for tier in specs:
        if mapping and tier.name in names and not tier.kinds:
            return (
                f"lists '{tier.name}', a runner kind, as a tier: separate a tier's kinds by "
                f"spaces after a colon, e.g. 'full: {' '.join(names[:2])}'."
            )
        missing = [k for k in tier.kinds if k not in names]
        if missing:
            known = ", ".join(names) if names else "none: gpu-runner-kinds is empty"
            return (
                f"gives the tier '{tier.name}' the runner kind '{missing[0]}', which "
                f"gpu-runner-kinds does not name (its kinds: {known}): add the kind to "
                "gpu-runner-kinds or correct the tier."
            )
    return ""


def _tiers_file(items: Sequence[str]) -> str:
    """The path of ``tiers: file:<path>``, or "" for a list of words."""
    files = [item.strip()[5:].strip() for item in items if item.strip().startswith("file:")]
    if not files:
        return ""
    if len(files) != 1 or len(items) != 1 or not files[0] or files[0].startswith("/"):
        raise UsageError(
            "input 'tiers' names a file: write exactly one 'file:<path>', the path relative to "
            f"the repository root (read from the default branch); got {', '.join(items)!r}."
        )
    return files[0]


_LOGIN = re.compile(r"@?[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})")


def _approvers(items: Sequence[str]) -> tuple[str, ...]:
    """``approvers``: logins and ``@org`` names, as GitHub spells them."""
    out: list[str] = []
    for item in (w for text in items for w in text.replace(",", " ").split()):
        if not _LOGIN.fullmatch(item):
            raise UsageError(
                f"input 'approvers' lists {item!r}: give GitHub logins (alice) or "
                "organisations as @org (their members approve), separated by commas or spaces."
            )
        if item.casefold() not in (o.casefold() for o in out):
            out.append(item)
    return tuple(out)


def _relay_inputs(label: str, command: str, bot: str, relay_label: str) -> tuple[str, str]:
    """(relay-bot, relay-label), checked against the label and the comment command."""
    bot, relay_label = bot.strip(), relay_label.strip()
    if relay_label.casefold() == "none":
        relay_label = ""
    if not command:
        return "", ""
    if not bot:
        raise UsageError(
            "input 'comment-command' needs 'relay-bot': the comment workflow relays a valid "
            "command as a label applied with an App's token, and the gate accepts that label "
            "only from that account (e.g. 'my-gpu-ci-app[bot]')."
        )
    if not (relay_label or label):
        raise UsageError(
            "input 'label' is none, so comment approvals need a 'relay-label' of their own "
            "(e.g. 'gpu-ci: comment'): the label the relay applies and only it may apply."
        )
    if relay_label.casefold() == label.casefold():
        relay_label = ""
    return bot, relay_label


def _role_input(name: str, value: str) -> str:
    """A role input, lower-cased; anything but a known role is refused."""
    role = value.strip().lower()
    if role not in MIN_PERMISSIONS:
        off = " (or empty to turn trusted authors off)" if name == "trusted-authors" else ""
        raise UsageError(
            f"input '{name}' must be one of {', '.join(MIN_PERMISSIONS)}{off}; got {value!r}."
        )
    return role
