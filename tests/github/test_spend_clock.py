"""The month's run listing reads the clock its caller passes (GPU_CI_NOW's), not the host's."""

from __future__ import annotations

from datetime import date, datetime, timezone

from gpu_ci.github import spend
from gpu_ci.github.client import ClientSettings, RestClient
from testkit.github_server import FakeGitHub, WorkflowRun

REPO = "Codertocat/Hello-World"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


def _windows(gh: FakeGitHub) -> list[str]:
    return [q for r in gh.log for q in r.query.get("created", []) if ".." in q]


def test_an_open_window_is_split_up_to_the_callers_now_not_the_hosts():
    with FakeGitHub(run_search_cap=5) as gh:
        gh.add_repo(REPO)
        for day in range(1, 9):
            run = WorkflowRun(
                gh.next_id(),
                "CUDA CI",
                ".github/workflows/cuda-ci.yml",
                HEAD,
                conclusion="success",
                created_at=f"2026-11-{day:02d}T10:00:00Z",
            )
            gh.add_run(REPO, run)
        rest = RestClient("ghs_secret", ClientSettings(gh.url, timeout=5, retries=0, backoff=0))
        runs = spend.list_runs(rest, REPO, ["cuda-ci.yml"], date(2026, 11, 1), now=NOW)
        assert len(runs) == 8
        # the open window ends a day after NOW and is halved at Nov 16 06:00; the host's
        # clock (any other day) would cut it elsewhere
        windows = _windows(gh)
        assert "2026-11-16T06:00:01Z..2026-12-01T12:00:00Z" in windows, windows
        assert "2026-11-01T00:00:00Z..2026-11-16T06:00:00Z" in windows, windows
