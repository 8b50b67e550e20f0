"""``gpu-ci remove-label``: one DELETE per label; absent labels are fine, errors explained."""

from __future__ import annotations

import json
from urllib.parse import quote

from gpu_ci.errors import GpuCiError
from gpu_ci.github.client import ApiError, Rest, connect, unanswered
from gpu_ci.github.event import load_event
from gpu_ci.github.gate import labels
from gpu_ci.inputs import Inputs
from gpu_ci.runtime import Runtime, markdown_table
from gpu_ci.runtime import repository as repository_of


def target(inputs: Inputs, rt: Runtime) -> tuple[str, int]:
    """(repository, number) from the inputs, else from the event."""
    # the input when given (one rule: runtime.repository), else the event's repository
    repository = inputs["repository"].strip() and repository_of(inputs["repository"], {})
    number = labels.parse_number(inputs["number"]) if inputs["number"] else None
    if number is None or not repository:
        ctx = load_event(rt.environ, need_repository=not repository)
        repository = repository or ctx.repository
        if number is None:
            number = labels.number_from_event(ctx.name, ctx.payload)
        if number is None:
            raise GpuCiError(
                f"the '{ctx.name}' event has no pull request or issue number (looked at "
                "pull_request.number, issue.number, workflow_run.pull_requests[0].number): "
                "set the 'number' input.",
                title="remove-label",
            )
    return repository, number


def delete(rest: Rest, repository: str, number: int, label: str) -> labels.Outcome:
    path = f"/repos/{repository}/issues/{number}/labels/{quote(label, safe='')}"
    try:
        rest.delete(path)
    except ApiError as exc:
        if exc.status is None:  # no answer after retries
            return labels.Outcome(
                label,
                labels.Result.FAILED,
                unanswered(f"removing '{label}' from #{number}", exc.kind, exc.reason),
            )
        return labels.outcome_of(label, exc.status, exc.message, number, repository)
    return labels.outcome_of(label, 200, "", number, repository)


def run(inputs: Inputs, rt: Runtime) -> int:
    names = labels.parse_labels(inputs.items("labels"))
    fail = inputs.boolean("fail-on-error")
    repository, number = target(inputs, rt)
    rest = connect(inputs["github-token"], rt.environ, rt.mask)

    outcomes: list[labels.Outcome] = []
    for name in names:
        if outcomes and outcomes[-1].result is labels.Result.FORBIDDEN:
            outcomes.append(
                labels.Outcome(
                    name, labels.Result.SKIPPED, "not attempted after a permission error."
                )
            )
            continue
        outcomes.append(delete(rest, repository, number, name))

    removed = [o.label for o in outcomes if o.result is labels.Result.REMOVED]
    absent = [o.label for o in outcomes if o.result is labels.Result.ABSENT]
    rt.set_output("removed", json.dumps(removed))
    rt.set_output("absent", json.dumps(absent))
    for outcome in outcomes:
        if outcome.result is labels.Result.REMOVED:
            rt.info(f"remove-label: removed '{outcome.label}' from {repository}#{number}")
        elif outcome.result is labels.Result.ABSENT:
            rt.notice(outcome.detail, title="remove-label")
    errors = [o for o in outcomes if o.is_error and o.result is not labels.Result.SKIPPED]
    rt.summary(
        "### remove-label\n\n"
        + markdown_table(
            ["label", f"{repository}#{number}", "detail"],
            [(o.label, o.result.value, o.detail) for o in outcomes],
        )
    )
    for outcome in errors:
        if fail:
            rt.error(outcome.detail, title="remove-label")
        else:
            rt.warning(outcome.detail, title="remove-label")
    return 1 if errors and fail else 0
