"""``python -m gpu_ci.commands.runner_admission``: the GPU runner's job-started hook.

Not an action: the runner runs it (``ACTIONS_RUNNER_HOOK_JOB_STARTED`` names
``deploy/runner-hooks/gpu-admission.sh``, which runs this module) before the job's first
step, with the job's default variables. Exit 0 admits the job; any other exit code makes the
runner fail the job without running it. Every error refuses (fail closed). The rules are in
:mod:`gpu_ci.github.admission`; this module reads the runner's variables, makes the REST calls
the rules need (at most four) and says why.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import quote

from gpu_ci.errors import GpuCiError
from gpu_ci.github import admission, admission_token
from gpu_ci.github.client import RestClient, connect
from gpu_ci.github.event import load_event
from gpu_ci.runtime import Runtime

TITLE = "GPU runner admission"


def _config(environ: Mapping[str, str]) -> admission.AdmissionConfig:
    config = admission.parse_config(
        admission.Settings(
            environ.get("GPU_CI_ALLOWED_WORKFLOWS", ""),
            environ.get("GPU_CI_APPROVAL_CONTEXT", ""),
            environ.get("GPU_CI_APPROVAL_CREATORS", ""),
            environ.get("GPU_CI_TRUSTED_EVENTS", ""),
            environ.get("GPU_CI_RELAY_LOGINS", ""),
            environ.get("GPU_CI_RERUN_PERMISSION", ""),
            environ.get("GPU_CI_GATE_LABELS", ""),
        )
    )
    if isinstance(config, str):
        raise GpuCiError(config, title=TITLE)
    return config


def _client(rt: Runtime, token: str) -> RestClient:
    """Only the admin's token: the job's GITHUB_TOKEN is not the runner's to use."""
    environ = {k: v for k, v in rt.environ.items() if k != "GITHUB_TOKEN"}
    return connect(token, environ, rt.mask, needs="statuses, pull-requests, actions: read")


def decide(rt: Runtime, token: str) -> admission.Verdict:
    config = _config(rt.environ)
    job = admission.job_of(rt.environ, load_event(rt.environ).payload)
    if isinstance(job, str):
        raise GpuCiError(job, title=TITLE)
    rest = _client(rt, token)
    if admission.needs_default_branch(job, config):
        branch = str(rest.get(f"/repos/{job.repository}").get("default_branch") or "")
        verdict = admission.by_definition(job, config, branch)
        if verdict is not None:
            return verdict
    if not job.head_sha:
        return admission.refusal(job, config)
    early = admission.before_approval(job, config)
    if early is not None:
        return early
    # newest first; one page (get_pages stops at the limit): an older approval buried under
    # 100 newer statuses of one commit refuses, which is the safe side
    page = rest.get_pages(
        f"/repos/{job.repository}/commits/{job.head_sha}/statuses", limit=admission.STATUS_PAGE
    )
    found = admission.by_approval(job, config, page)
    if isinstance(found, admission.Verdict):
        return found
    pull = rest.get(f"/repos/{job.repository}/pulls/{job.number}")
    run = None if found.runs else rest.get(f"/repos/{job.repository}/actions/runs/{job.run_id}")
    verdict = (
        admission.pull_refusal(job, pull)
        or admission.run_refusal(job, config, found, run, page)
        or admission.actor_refusal(job, config, found, page)
    )
    if verdict is not None:
        return verdict
    login = quote(job.triggering_actor, safe="")
    answer = rest.get(f"/repos/{job.repository}/collaborators/{login}/permission")
    return admission.by_role(job, config, found, (pull, answer))


def main(environ: Mapping[str, str] | None = None) -> int:
    rt = Runtime(environ)
    try:
        # first of all: the token file is gone before anything can fail or wait
        taken = admission_token.take(rt.environ)
        verdict = (
            decide(rt, taken.token) if taken.token else admission.Verdict(False, taken.problem)
        )
    except GpuCiError as exc:
        verdict = admission.Verdict(False, exc.message)
    except Exception as exc:  # fail closed on anything, saying what it was
        verdict = admission.Verdict(
            False, f"the check itself failed ({type(exc).__name__}: {exc})."
        )
    if verdict.admit:
        rt.info(f"gpu-ci admission: admitted: {verdict.reason}")
        return 0
    rt.error(f"this GPU runner refused the job: {verdict.reason}", title=TITLE)
    return 1


if __name__ == "__main__":  # pragma: no cover - run by the hook script
    raise SystemExit(main(os.environ))
