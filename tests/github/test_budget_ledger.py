"""The ledger found and reused (issue 25 item 4): the gate finds the newest trusted
``gpu-spend-ledger`` however many same-name artifacts pull requests upload, within
``spend.LEDGER_MAX_CALLS``; absent repository ids are untrusted."""

from __future__ import annotations

import json

from gpu_ci.github import spend
from gpu_ci.github.client import ClientSettings, RestClient
from gpu_ci.github.spend import ledger as spend_ledger
from testkit.github.runs import REPO, upload_ledger

LEDGER = spend_ledger.Ledger(REPO, "2026-11", "k", "2026-11-30T12:00:00Z", {"1": 1}, ())
FAKE = spend_ledger.Ledger(REPO, "2026-11", "k", "2026-11-30T13:00:00Z", {}, ())


def _client(gh) -> RestClient:
    return RestClient("ghs_secret", ClientSettings(gh.url, timeout=5, retries=0, backoff=0))


def _bytes(ledger: spend_ledger.Ledger) -> bytes:
    return json.dumps(ledger.to_json()).encode()


def _poison(gh, n: int, **kw) -> None:
    for i in range(n):
        gh.add_artifact(
            REPO,
            "gpu-spend-ledger",
            {"gpu-spend-ledger.json": _bytes(FAKE)},
            created_at=f"2026-11-30T13:{i // 60:02d}:{i % 60:02d}Z",
            **kw,
        )


def _find(gh):
    rest = _client(gh)
    before = len(gh.log)
    got = spend.trusted_ledger(rest, REPO, "gpu-spend-ledger", "master")
    calls = [r for r in gh.log[before:] if not r.path.startswith("/_blobs/")]
    return got, calls


def test_150_pull_request_uploads_do_not_hide_the_trusted_ledger(server):
    trusted = upload_ledger(server, _bytes(LEDGER))
    _poison(server, 150, head_branch="feature")  # newer, from a pull request's branch
    (ledger, note), calls = _find(server)
    assert ledger == LEDGER and f"#{trusted.id}" in note
    assert len(calls) <= spend.LEDGER_MAX_CALLS == 18, [c.path for c in calls]  # the README's
    assert calls[-1].path.endswith(f"/artifacts/{trusted.id}/zip")


def test_a_same_branch_artifact_of_a_pull_request_run_is_not_trusted(server):
    """A pull request whose head branch is named like the default branch (a fork's, or this
    repository's own ``master`` opened against another branch): its run's event decides."""
    upload_ledger(server, _bytes(LEDGER), created_at="2026-11-30T11:00:00Z")
    upload_ledger(server, _bytes(FAKE), event="pull_request")
    (ledger, _), calls = _find(server)
    assert ledger == LEDGER
    assert len(calls) == 4  # listing, two runs read for their event, download


def test_absent_repository_ids_mean_untrusted(server):
    art = upload_ledger(server, _bytes(FAKE))
    art.workflow_run.pop("repository_id")
    art.workflow_run.pop("head_repository_id")
    (ledger, note), calls = _find(server)
    assert ledger is None and "no artifact 'gpu-spend-ledger'" in note
    assert len(calls) == 1


def test_no_trusted_ledger_at_all_costs_a_bounded_number_of_calls(server):
    _poison(server, 120, head_branch="master", fork=True)
    (ledger, note), calls = _find(server)
    assert ledger is None and "newest 10" in note
    assert len(calls) <= spend.LEDGER_MAX_CALLS


def test_a_ledger_keeps_job_windows_and_reads_one_written_without():
    with_windows = spend_ledger.Ledger(REPO, "2026-11", "k", "t", {"1": 1}, (), {"7": (1.0, 61.0)})
    assert spend_ledger.Ledger.from_json(with_windows.to_json()) == with_windows
    older = LEDGER.to_json()
    del older["windows"]
    assert spend_ledger.Ledger.from_json(older) == LEDGER
