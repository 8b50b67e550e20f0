"""``gpu-ci gpu-gate``: fetch what the decision needs, decide, report. Fails closed."""

from __future__ import annotations

import base64
import functools
import json
from dataclasses import replace
from typing import Any
from urllib.parse import quote

from gpu_ci.errors import GpuCiError, UsageError
from gpu_ci.github import gate, jobs, spend
from gpu_ci.github import status as statuses
from gpu_ci.github.client import ApiError, Rest, call_api, connect, describe_api_failure
from gpu_ci.github.event import load_event
from gpu_ci.github.spend import budget
from gpu_ci.github.spend import kinds as spend_kinds
from gpu_ci.inputs import Inputs
from gpu_ci.markdown import link
from gpu_ci.pricing import load_table
from gpu_ci.runtime import Runtime, markdown_table


def config_from(inputs: Inputs) -> gate.GateConfig:
    return gate.make_config(
        gate.GateInputs(
            label=inputs["label"],
            min_permission=inputs["min-permission"],
            run_on=inputs.items("run-on"),
            require_fresh_head=inputs.boolean("require-fresh-head"),
            paths=inputs.lines("paths"),
            skip_draft=inputs.boolean("skip-draft"),
            gpu_runs_on=inputs["gpu-runs-on"],
            cpu_runs_on=inputs["cpu-runs-on"],
            require_approved_review=inputs.boolean("require-approved-review"),
            comment_command=inputs["comment-command"],
            tiers=inputs.items("tiers"),
            trusted_authors=inputs["trusted-authors"],
            trusted_authors_verified=inputs.boolean("trusted-authors-verified"),
            test_merge=inputs.boolean("test-merge"),
            runner_kinds=inputs["gpu-runner-kinds"],
            relay_bot=inputs["relay-bot"],
            relay_label=inputs["relay-label"],
            approvers=inputs.items("approvers"),
        )
    )


def _permission(rest: Rest, repo: str, login: str) -> dict[str, Any]:
    path = f"/repos/{repo}/collaborators/{quote(login, safe='')}/permission"
    try:
        return rest.get(path)
    except ApiError as exc:
        if exc.status == 404:  # not a collaborator / not a user (e.g. an app's bot account)
            return {"permission": "none", "role_name": "none"}
        raise


def evaluate(inputs: Inputs, rt: Runtime) -> tuple[gate.Decision, gate.GateConfig, int]:
    config = config_from(inputs)
    ctx = load_event(rt.environ)
    rest = connect(inputs["github-token"], rt.environ, rt.mask) if config.tiers_file else None
    if rest is not None:
        config = _read_tiers(rest, ctx.repository, ctx.payload, config)
    # the comment relay runs no job: its tiers may name kinds it was not given
    problem = (
        ""
        if ctx.name == "issue_comment"
        else gate.unknown_tier_kinds(config.tier_specs, config.kinds)
    )
    if problem and config.tiers_file:
        raise GpuCiError(f"the tiers file {config.tiers_file} {problem}")
    if problem:
        raise UsageError(f"input 'tiers' {problem}")
    step = gate.triage(ctx.name, ctx.payload, config, ctx.sha)
    if isinstance(step, gate.Decision):
        return step, config, rest.calls if rest is not None else 0
    rest = rest or connect(inputs["github-token"], rt.environ, rt.mask)
    if isinstance(step, gate.PushCheck):
        files = call_api(
            "the push's changed files",
            lambda: rest.get_pages(
                f"/repos/{ctx.repository}/compare/{step.before}...{step.after}", key="files"
            ),
        )
        return gate.decide_push(step, config, [f["filename"] for f in files]), config, rest.calls
    if isinstance(step, gate.CommentCheck):
        decision, login, answer = _decide_comment(rest, ctx.repository, step, config)
    elif isinstance(step, gate.RelayCheck):
        decision, login, answer = _decide_relay(rest, ctx.repository, step, config)
    elif isinstance(step, gate.TrustedCheck):
        decision, login, answer = _decide_trusted(rest, ctx.repository, step, config)
    else:
        decision, login, answer = _decide_label(rest, ctx.repository, step, config)
    if decision.run and config.require_approved_review:  # every approval path, not only labels
        decision = _review_pinning(rest, ctx.repository, config, (login, answer), decision)
    if isinstance(step, gate.CommentCheck):  # a comment never runs PR code: it is relayed
        decision, calls = _relay(decision, config, inputs["relay-token"], ctx.repository, rt)
        return decision, config, rest.calls + calls
    if decision.run and config.test_merge:
        decision = _merge_commit(rest, ctx.repository, decision)
    return decision, config, rest.calls


def _read_tiers(
    rest: Rest, repo: str, payload: dict[str, Any], config: gate.GateConfig
) -> gate.GateConfig:
    """The tiers ``tiers: file:<path>`` lists on the default branch.

    Never the pull request's copy.

    Entries as the input writes them (``mini``, ``full: b200 h100x8``), separated by
    commas or lines; ``#`` starts a comment."""
    branch = str((payload.get("repository") or {}).get("default_branch") or "")
    if not branch:
        raise UsageError("'tiers: file:' needs repository.default_branch in the event payload.")
    path = f"/repos/{repo}/contents/{quote(config.tiers_file)}?ref={quote(branch, safe='')}"
    answer = call_api(f"the tiers file {config.tiers_file} on {branch}", lambda: rest.get(path))
    try:
        text = base64.b64decode(str(answer.get("content") or "")).decode("utf-8")
    except ValueError:
        raise GpuCiError(f"the tiers file {config.tiers_file} is not UTF-8 text.") from None
    entries = [e for line in text.splitlines() for e in line.split("#", 1)[0].split(",")]
    where = f"the tiers file {config.tiers_file} on {branch}"
    try:
        specs = gate.parse_tier_specs([e for e in entries if e.strip()])
    except UsageError as exc:  # the file is data read at run time: fail closed, exit 1
        raise GpuCiError(f"{where} {exc.message.removeprefix(_TIERS_INPUT)}") from None
    problem = gate.unknown_tier_kinds(specs, config.kinds) if config.kinds else ""
    if problem:
        raise GpuCiError(f"{where} {problem}")
    return replace(config, tiers=tuple(t.name for t in specs), tier_specs=specs)


_TIERS_INPUT = "input 'tiers' "

Approver = tuple[gate.Decision, str, dict[str, Any]]  # the decision, who approved, their role


def _decide_label(rest: Rest, repo: str, step: gate.PullCheck, config: gate.GateConfig) -> Approver:
    answer = _role(rest, repo, step.labeller, config)
    refused = gate.refuse_role(step, config, answer)
    if refused is not None:
        return refused, step.labeller, answer
    pull = _pull(rest, repo, step.number)
    files = _files(rest, repo, step.number, config)
    return gate.decide_pull(step, config, answer, pull, files), step.labeller, answer


def _role(
    rest: Rest, repo: str, login: str, config: gate.GateConfig | None = None
) -> dict[str, Any]:
    """The account's permission answer; with ``config``, marked when ``approvers`` lists it.

    ``approvers`` is read only for an account below the role: a login listed, then each
    ``@org`` whose membership the API confirms (one call per organisation)."""
    answer: dict[str, Any] = call_api(
        f"the role of {login}", functools.partial(_permission, rest, repo, login)
    )
    if config is None or not config.approvers or gate.qualifies(answer, config):
        return answer
    for entry in config.approvers:
        if not entry.startswith("@") and entry.casefold() == login.casefold():
            return {**answer, gate.ALLOWED_BY: entry}
    for entry in config.approvers:
        if entry.startswith("@") and _member(rest, entry[1:], login):
            return {**answer, gate.ALLOWED_BY: f"{entry} member"}
    return answer


def _member(rest: Rest, org: str, login: str) -> bool:
    """Whether ``login`` is a member of ``org`` (``GET /orgs/{org}/members/{username}``).

    GitHub answers 204 for a member, 404 otherwise; a token outside the organisation is
    redirected to its public members."""
    path = f"/orgs/{quote(org, safe='')}/members/{quote(login, safe='')}"
    try:
        rest.download(path, 4096)  # a 204 has no JSON body for get() to read
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise describe_api_failure(exc, f"whether {login} is a member of {org}") from None
    return True


def _pull(rest: Rest, repo: str, number: int) -> dict[str, Any]:
    pull: dict[str, Any] = call_api(
        f"pull request #{number}", lambda: rest.get(f"/repos/{repo}/pulls/{number}")
    )
    return pull


def _files(rest: Rest, repo: str, number: int, config: gate.GateConfig) -> list[str] | None:
    """The pull request's changed files, fetched only when ``paths`` is set."""
    if not config.paths:
        return None
    return [
        f["filename"]
        for f in call_api(
            f"the files of pull request #{number}",
            lambda: rest.get_pages(f"/repos/{repo}/pulls/{number}/files"),
        )
    ]


def _decide_comment(
    rest: Rest, repo: str, step: gate.CommentCheck, config: gate.GateConfig
) -> Approver:
    """The API answers a comment command needs.

    The commenter's role (a refusal stops there), the pull request, its files for paths."""
    answer = _role(rest, repo, step.commenter, config)
    pull: dict[str, Any] = {}
    if gate.qualifies(answer, config):
        pull = _pull(rest, repo, step.number)
    files = _files(rest, repo, step.number, config) if pull.get("state") == "open" else None
    if config.paths and files is None:
        files = []  # refused before the paths rule: the files are never read
    return gate.decide_comment(step, config, answer, pull, files), step.commenter, answer


def _decide_trusted(
    rest: Rest, repo: str, step: gate.TrustedCheck, config: gate.GateConfig
) -> Approver:
    """The API answers a trusted author's push needs.

    The author's role, then the pull request and the head commit (who made it)."""
    answer = _role(rest, repo, step.author)
    refused = gate.refuse_trusted(step, config, answer)
    if refused is not None:
        return refused, step.author, answer
    pull = _pull(rest, repo, step.number)
    try:
        commit = rest.get(f"/repos/{repo}/commits/{step.head_sha}")
    except ApiError as exc:
        if exc.status != 404:
            raise describe_api_failure(exc, f"the head commit {step.head_sha[:12]}") from None
        why = f"HTTP 404{': ' + exc.message if exc.message else ''}"
        role = gate.role_of(answer)[0]
        return gate.refuse_unreadable(step, config, role, why), step.author, answer
    files = _files(rest, repo, step.number, config)
    decision = gate.decide_trusted(step, config, answer, pull, commit, files)
    return decision, step.author, answer


def _merge_commit(rest: Rest, repo: str, decision: gate.Decision) -> gate.Decision:
    """``test-merge``: the pull request as it is now, then its merge commit's parents."""
    pull = _pull(rest, repo, int(decision.pr_number))
    merge_sha = gate.merge_sha_of(pull)
    commit = (
        call_api(
            f"the merge commit {merge_sha[:12]}",
            lambda: rest.get(f"/repos/{repo}/commits/{merge_sha}"),
        )
        if merge_sha
        else None
    )
    return gate.decide_merge(decision, pull, commit)


def _relay(
    decision: gate.Decision, config: gate.GateConfig, token: str, repo: str, rt: Runtime
) -> tuple[gate.Decision, int]:
    """A valid command becomes the relay label, applied with ``token``.

    GitHub runs an ``issue_comment`` workflow from the default branch, so the pull
    request's code never runs in it: the label starts a ``pull_request`` run instead,
    which only a token other than GITHUB_TOKEN can do. Returns the decision (never a run)
    and the API calls made."""
    if not decision.run:
        return decision, 0
    label = config.relay_label_name
    if not token:
        why = gate.relay_unset(decision, label)
        rt.warning(why, title="gpu-gate")
        return replace(decision, run=False, reason=why), 0
    writer = connect(token, rt.environ, rt.mask)
    path = f"/repos/{repo}/issues/{decision.pr_number}/labels"
    try:  # a label already on the pull request would start nothing: take it off first
        writer.delete(f"{path}/{quote(label, safe='')}")
    except ApiError as exc:
        if exc.status != 404:
            raise describe_api_failure(exc, f"removing '{label}' before relaying") from None
    call_api(f"applying '{label}' with relay-token", lambda: writer.post(path, {"labels": [label]}))
    return gate.relayed(decision, label, config.relay_bot), writer.calls


#: How many commenters' roles one relay decision reads at most (newest commands first).
RELAY_ROLE_LOOKUPS = 10


def _decide_relay(
    rest: Rest, repo: str, step: gate.RelayCheck, config: gate.GateConfig
) -> Approver:
    """The API answers the relay bot's label needs.

    The pull request, its comments, then the commenters' roles, newest command first, until
    one has the role."""
    pull = _pull(rest, repo, step.number)
    comments = call_api(
        f"the comments of pull request #{step.number}",
        lambda: rest.get_pages(f"/repos/{repo}/issues/{step.number}/comments", limit=10000),
    )
    found: list[tuple[gate.Candidate, dict[str, Any]]] = []
    roles: dict[str, dict[str, Any]] = {}
    for candidate in gate.relay_candidates(comments, config, step.head_sha, step.fork):
        if candidate.login not in roles:
            if len(roles) == RELAY_ROLE_LOOKUPS:
                break
            roles[candidate.login] = _role(rest, repo, candidate.login, config)
        answer = roles[candidate.login]
        found.append((candidate, answer))
        if gate.qualifies(answer, config):
            break
    files = _files(rest, repo, step.number, config) if pull.get("state") == "open" else []
    decision = gate.decide_relay(step, config, pull, found, files)
    login = decision.labeled_by
    return decision, login, roles.get(login, {"permission": "none", "role_name": "none"})


def _review_pinning(
    rest: Rest,
    repo: str,
    config: gate.GateConfig,
    known: tuple[str, dict[str, Any]],
    decision: gate.Decision,
) -> gate.Decision:
    """The reviews' approvers, until one has the role.

    One page of reviews (per 100), then one role lookup per approver until one qualifies.

    ``known`` is the approver whose role the decision already read (labeller, commenter or
    trusted author): their own approving review costs no second lookup."""
    number = decision.pr_number
    reviews = call_api(
        f"the reviews of pull request #{number}",
        lambda: rest.get_pages(f"/repos/{repo}/pulls/{number}/reviews"),
    )
    for login in gate.approvers_of(reviews, decision.sha):
        role_answer = (
            known[1]
            if login == known[0]
            else call_api(f"the role of {login}", functools.partial(_permission, rest, repo, login))
        )
        role, _ = gate.role_of(role_answer)
        if gate.ROLE_RANK[role] >= gate.ROLE_RANK[config.min_permission]:
            return gate.decide_review(decision, config, login, role)
    return gate.decide_review(decision, config, None, "")


def summarize(decision: gate.Decision, config: gate.GateConfig) -> str:
    fork = {None: "", True: "yes", False: "no"}[decision.fork]
    approval = {
        "comment": link("comment", decision.comment_url),
        "trusted-author": "trusted author",
    }.get(decision.approval, f"label {decision.label or config.label}")
    rows = [
        ("event", decision.event),
        ("approval", approval),
        ("approver" if decision.approval != "label" else "labeller", decision.labeled_by),
        ("role", decision.permission),
        (
            "SHA in the comment" if decision.approval == "comment" else "head SHA at label time",
            decision.head_at_label,
        ),
        ("current head", decision.current_head),
        ("tested commit", _tested(decision, config)),
        ("fork?", fork),
        ("paths matched", decision.paths_matched if config.paths else "(no paths filter)"),
        ("approved review", "required" if config.require_approved_review else "not required"),
        ("tiers", " ".join(decision.tiers) if config.tiers else "(no tiers configured)"),
        ("relayed as label", decision.relayed or "-"),
        ("decision", "**run**" if decision.run else "skip"),
        ("reason", decision.reason),
    ]
    return "### gpu-gate\n\n" + markdown_table(["", ""], rows)


def _tested(decision: gate.Decision, config: gate.GateConfig) -> str:
    """The summary's row: the merge commit and its head, or the head alone."""
    if decision.head_sha and decision.run:
        return f"merge commit {decision.sha} of the head {decision.head_sha}"
    return "the merge commit (test-merge)" if config.test_merge else "the head (no test-merge)"


def run(inputs: Inputs, rt: Runtime) -> int:
    try:
        # bad budget inputs: exit 2 before any call
        budgeted = bool(inputs["monthly-budget"].strip())
        matcher = gpu_matcher(config_from(inputs), rt) if budgeted else None
        budget_cfg = budget_config(inputs, rt)
        decision, config, calls = evaluate(inputs, rt)
        budget_rows: list[tuple[str, str]] = []
        if budget_cfg is not None and matcher is not None and decision.run:
            selected = config.selected_kinds(decision.tiers)
            decision, budget_rows, more = apply_budget(
                budget_cfg, matcher, decision, inputs, rt, selected
            )
            calls += more
    except GpuCiError as exc:
        if exc.exit_code == 1:  # fail closed: whatever else happens, never run=true
            rt.set_output("run", "false")
            rt.set_output("reason", exc.message)
        raise
    rt.set_output("run", "true" if decision.run else "false")
    rt.set_output("reason", decision.reason)
    rt.set_output("sha", decision.sha)
    rt.set_output("head-sha", decision.head_sha or (decision.sha if decision.pr_number else ""))
    rt.set_output("pr-number", decision.pr_number)
    rt.set_output("labeled-by", decision.labeled_by)
    rt.set_output("permission", decision.permission)
    rt.set_output("approval", decision.approval if decision.run else "")
    rt.set_output("tiers", json.dumps(list(decision.tiers) if decision.run else []))
    rt.set_output("runs-on", decision.runs_on(config))
    _kind_outputs(decision, config, rt)
    rt.set_output("relayed", decision.relayed)
    rt.set_output("base-ref", _base_ref(load_event(rt.environ).payload))
    verdict = "run the GPU job" if decision.run else "skip the GPU job"
    rt.info(f"gpu-gate: {verdict}: {decision.reason} ({calls} API calls)")
    if decision.run and not config.gpu_runs_on and not config.kinds:
        rt.notice(
            "gpu-runs-on is not set, so the runs-on output is empty: set it to your GPU "
            "runners' labels or group to use that output.",
            title="gpu-gate",
        )
    if decision.fork:
        rt.notice(f"pull request #{decision.pr_number} comes from a fork.", title="gpu-gate")
    summary = summarize(decision, config)
    if budget_rows:
        summary += "\n#### GPU budget\n\n" + markdown_table(["", ""], budget_rows)
    rt.summary(summary)
    return 0


def _kind_outputs(decision: gate.Decision, config: gate.GateConfig, rt: Runtime) -> None:
    """The runner kinds' outputs: every kind, and those the approved tiers select."""
    run = decision.run
    if config.kinds:
        rt.set_output("kinds", json.dumps([k.name for k in config.kinds]))
        rt.set_output("runs-on-kinds", gate.kinds_json(config.kinds, run, config.cpu_runs_on))
        selected = config.selected_kinds(decision.tiers) if run else ()
        rt.set_output("selected-kinds", json.dumps(list(selected)))
        rt.set_output("matrix", gate.kinds_matrix(config.kinds, selected))
    rt.set_output("tier-kinds", json.dumps(config.tier_kinds(decision.tiers) if run else {}))


def _base_ref(payload: dict[str, Any]) -> str:
    """The branch a pull request targets (``pull_request.base.ref``), or ""."""
    return str(((payload.get("pull_request") or {}).get("base") or {}).get("ref") or "")


# -- budget (logic in gpu_ci.github.spend.budget / .spend) -----------------------------------------


def budget_config(inputs: Inputs, rt: Runtime) -> budget.BudgetConfig | None:
    if not inputs["monthly-budget"].strip():
        return None
    kinds = gate.parse_kinds(inputs["gpu-runner-kinds"])
    if not inputs["gpu-runs-on"].strip() and not kinds:
        raise UsageError(
            "input 'monthly-budget' needs 'gpu-runs-on' or 'gpu-runner-kinds': the budget "
            "counts the jobs that ran on your GPU runners, so name their labels or group."
        )
    written = budget.BudgetInputs(
        inputs["monthly-budget"],
        spend_kinds.default_price(inputs["gpu-price"], inputs["gpu-runs-on"], kinds),
        inputs["reserve-minutes"],
        inputs["budget-on-unknown"],
        inputs["budget-scope"],
        inputs.items("gpu-workflows"),
        inputs["budget-ledger"],
    )
    cfg = budget.make_budget_config(written, load_table(), jobs.now(rt.environ).date())
    if cfg is None:
        return None
    if inputs.items("gpu-workflows"):
        rt.warning(budget.EVERY_WORKFLOW, title="gpu-gate budget")
    approvals = statuses.approval_config(
        statuses.validate_context(inputs["context"]),
        inputs.items("trusted-creators"),
        inputs.items("relay-bot"),
    )
    return replace(cfg, approvals=approvals)


def gpu_matcher(config: gate.GateConfig, rt: Runtime) -> jobs.GpuMatcher:
    """The budget's GPU jobs: ``gpu-runs-on`` and each runner kind at its price."""
    today = jobs.now(rt.environ).date()
    return spend_kinds.priced_matcher(config.gpu_runs_on, config.kinds, load_table(), today)


def apply_budget(
    cfg: budget.BudgetConfig,
    matcher: jobs.GpuMatcher,
    decision: gate.Decision,
    inputs: Inputs,
    rt: Runtime,
    kinds: tuple[str, ...] | None = None,
) -> tuple[gate.Decision, list[tuple[str, str]], int]:
    """The budget's verdict on this run.

    Refuse a run that would take the month's GPU spend over the budget. ``kinds``: the
    runner kinds the approved tiers select (None: every kind), the ones reserved for."""
    ctx = load_event(rt.environ)
    rest = connect(inputs["github-token"], rt.environ, rt.mask)
    billing = (
        connect(inputs["billing-token"], rt.environ, rt.mask) if inputs["billing-token"] else None
    )
    run_id = rt.environ.get("GITHUB_RUN_ID", "")
    attempt = rt.environ.get("GITHUB_RUN_ATTEMPT", "1")
    skip = (int(run_id), int(attempt)) if run_id.isdigit() and attempt.isdigit() else None
    gate_run = spend.GateRun(
        ctx.repository,
        jobs.now(rt.environ),
        str((ctx.payload.get("repository") or {}).get("default_branch") or ""),
        skip,
        kinds,
    )
    result = spend.gate_budget(rest, billing, cfg, matcher, load_table(), gate_run)
    calls = rest.calls + (billing.calls if billing else 0)
    if result.spent:
        rt.set_output("budget-spent", result.spent)
        rt.set_output("budget-left", result.left)
    if result.warning:
        rt.warning(result.warning, title="gpu-gate budget")
    if result.ok:
        return decision, list(result.rows), calls
    return replace(decision, run=False, reason=result.reason), list(result.rows), calls
