"""The trusted spend ledger: found among the artifacts of default-branch runs.

``gpu-spend`` writes the ledger on a trusted event (schedule or push on the default
branch) and uploads it; the gate reads it, checking where it came from. A ledger a pull
request could write would let it claim a lower spend.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from gpu_ci.github.client import ApiError, Rest
from gpu_ci.github.monitor_artifact import load_json
from gpu_ci.github.spend import budget

LEDGER_FILE = "gpu-spend-ledger.json"
MAX_LEDGER_BYTES = 32 * 1024 * 1024

#: The events whose runs may write the ledger: a pull request's run is none of them.
LEDGER_EVENTS = ("schedule", "push", "workflow_dispatch")
#: Newest same-name artifacts whose run is read to check its event, at most.
LEDGER_RUN_CHECKS = 3
#: Newest successful default-branch runs per event whose artifacts are looked through when
#: pull requests' uploads push the trusted ledger off the first listing page.
LEDGER_FALLBACK_RUNS = 10
#: The most REST calls finding the ledger may take: 1 listing, LEDGER_RUN_CHECKS runs read,
#: one run listing per event, LEDGER_FALLBACK_RUNS runs' artifacts, 1 download.
LEDGER_MAX_CALLS = 1 + LEDGER_RUN_CHECKS + len(LEDGER_EVENTS) + LEDGER_FALLBACK_RUNS + 1


def _trusted_run(run: Mapping[str, Any], default_branch: str) -> bool:
    return (
        run.get("event") in LEDGER_EVENTS
        and run.get("head_branch") == default_branch
        and budget.run_reserves(run)
    )


def trusted_ledger(
    rest: Rest, repo: str, name: str, default_branch: str
) -> tuple[budget.Ledger | None, str]:
    """The newest unexpired artifact ``name`` made by a run of this repository itself, on its
    default branch, of a trusted event (:data:`LEDGER_EVENTS`), and its ledger; at most
    :data:`LEDGER_MAX_CALLS` REST calls however many same-name artifacts pull requests
    upload (a ledger a pull request wrote could claim a lower spend).

    First the newest 100 artifacts of that name: those whose ``workflow_run`` is on the
    default branch with equal repository ids, newest first, up to :data:`LEDGER_RUN_CHECKS`
    of them, have their run read for its event. When none passes and the listing holds more
    than one page (pull requests' uploads may hide the trusted one), the newest successful
    default-branch runs of each trusted event are listed instead and their own artifacts of
    that name looked through, newest run first."""
    listing = rest.get(f"/repos/{repo}/actions/artifacts?name={quote(name, safe='')}&per_page=100")
    arts = [
        a
        for a in listing.get("artifacts") or []
        if a.get("name") == name
        and not a.get("expired")
        and (a.get("workflow_run") or {}).get("head_branch") == default_branch
        and isinstance((a.get("workflow_run") or {}).get("id"), int)
        and budget.same_repository(
            (a.get("workflow_run") or {}).get("repository_id"),
            (a.get("workflow_run") or {}).get("head_repository_id"),
        )
    ]
    arts.sort(key=lambda a: (str(a.get("created_at") or ""), int(a["id"])), reverse=True)
    for art in arts[:LEDGER_RUN_CHECKS]:
        run_id = int(art["workflow_run"]["id"])
        try:
            run = rest.get(f"/repos/{repo}/actions/runs/{run_id}")
        except ApiError as exc:
            if exc.status != 404:
                raise
            continue  # the run is gone: its artifact cannot be shown to be trusted
        if _trusted_run(run, default_branch):
            return _read_ledger(rest, repo, name, art)
    if int(listing.get("total_count") or 0) <= 100 and not arts[LEDGER_RUN_CHECKS:]:
        return None, (
            f"no artifact '{name}' from a {'/'.join(LEDGER_EVENTS)} run of the default "
            f"branch ({default_branch})"
        )
    art = _ledger_of_trusted_runs(rest, repo, name, default_branch)
    if art is None:
        return None, (
            f"no artifact '{name}' among the newest {LEDGER_FALLBACK_RUNS} successful "
            f"{'/'.join(LEDGER_EVENTS)} runs of the default branch ({default_branch})"
        )
    return _read_ledger(rest, repo, name, art)


def _ledger_of_trusted_runs(
    rest: Rest, repo: str, name: str, default_branch: str
) -> dict[str, Any] | None:
    runs: list[dict[str, Any]] = []
    for event in LEDGER_EVENTS:
        answer = rest.get(
            f"/repos/{repo}/actions/runs?branch={quote(default_branch, safe='')}"
            f"&event={event}&status=success&per_page={LEDGER_FALLBACK_RUNS}"
        )
        runs += [r for r in answer.get("workflow_runs") or [] if _trusted_run(r, default_branch)]
    runs.sort(key=lambda r: (str(r.get("created_at") or ""), int(r["id"])), reverse=True)
    for run in runs[:LEDGER_FALLBACK_RUNS]:
        answer = rest.get(
            f"/repos/{repo}/actions/runs/{int(run['id'])}/artifacts"
            f"?name={quote(name, safe='')}&per_page=10"
        )
        for art in answer.get("artifacts") or []:
            if art.get("name") == name and not art.get("expired"):
                return dict(art)
    return None


def _read_ledger(
    rest: Rest, repo: str, name: str, art: Mapping[str, Any]
) -> tuple[budget.Ledger | None, str]:
    blob = rest.download(f"/repos/{repo}/actions/artifacts/{art['id']}/zip", MAX_LEDGER_BYTES)
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as archive:
            info = archive.getinfo(LEDGER_FILE)
            if info.file_size > MAX_LEDGER_BYTES:
                return None, f"artifact '{name}' holds an oversized ledger"
            data = load_json(archive.read(info))
    except (zipfile.BadZipFile, KeyError, ValueError) as exc:
        return None, f"artifact '{name}' #{art['id']} holds no readable {LEDGER_FILE} ({exc})"
    ledger = budget.Ledger.from_json(data) if isinstance(data, dict) else None
    if ledger is None:
        return None, f"artifact '{name}' #{art['id']} is not a ledger of this version"
    return ledger, f"ledger artifact #{art['id']} written {ledger.through}"
