"""An approved fork run reserves (issue 25 item 3): a GPU job of a fork's ``pull_request`` run
that waits for a runner reserves budget when that run holds its head's current approval (the
"GPU CI" status a trusted creator wrote, bound to the run as gpu-status binds it), read with
one call per fork head, at most ``spend.APPROVAL_HEADS`` heads per count. An unapproved
flood, a forged approval, a run the approval did not start, or a head beyond the bound
reserves nothing."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from gpu_ci.github import spend
from gpu_ci.github.client import ClientSettings, RestClient
from gpu_ci.github.jobs import GpuMatcher
from gpu_ci.github.spend import budget
from gpu_ci.pricing import Price, load_table
from testkit.github.approvals import checks_url, post, queued
from testkit.github.runs import REPO, api_calls, gate, gpu_run, iso
from testkit.github_server import Job, WorkflowRun
from testkit.shared import ROOT

FORK = "mallory/Hello-World"
NOW = datetime(2026, 11, 30, 14, 0, tzinfo=timezone.utc)
CREATED = datetime(2026, 11, 30, 13, 0, tzinfo=timezone.utc)
GPU = GpuMatcher(frozenset({"self-hosted", "gpu"}))
PRICE = Price(sku="linux_4_core_gpu")
WORKFLOWS = ["cuda-ci.yml"]
BUDGET = ["--gpu-price", "linux_4_core_gpu", "--reserve-minutes", "60"]
BUDGET += ["--gpu-workflows", "cuda-ci.yml"]


def _budget_config():
    """A $50 monthly budget on linux_4_core_gpu that refuses past it."""
    written = budget.BudgetInputs(
        "$50", "linux_4_core_gpu", "60", "refuse", "repository", WORKFLOWS, ""
    )
    cfg = budget.make_budget_config(written, load_table(), NOW.date())
    assert cfg is not None
    return cfg


def _client(gh) -> RestClient:
    return RestClient("ghs_secret", ClientSettings(gh.url, timeout=5, retries=0, backoff=0))


def _fork_run(gh, sha, *, who="Codertocat", jobs=1, created=CREATED, labels=("self-hosted", "gpu")):
    """A fork's ``pull_request`` run of its own workflow, triggered by ``who`` (a label
    applied by a maintainer: the maintainer), with ``jobs`` GPU jobs waiting for a runner."""
    if FORK not in gh.repos:
        gh.add_repo(FORK)
    run = WorkflowRun(
        gh.next_id(),
        "CUDA CI",
        ".github/workflows/cuda-ci.yml",
        sha,
        status="queued",
        created_at=iso(created),
        head_repo=FORK,
        head_branch="main",
        actor=who,
        triggering_actor=who,
    )
    for n in range(jobs):
        run.jobs.append(Job(gh.next_id(), f"tests {n}", list(labels), created_at=iso(created)))
    return gh.add_run(REPO, run)


def _status(gh, sha, description, *, at, creator="github-actions[bot]", url=None, context=None):
    """A commit status on ``sha``, newest first, as ``creator`` wrote it at ``at``."""
    url = url or checks_url(7)
    context = context or "GPU CI"
    post(gh, description, sha=sha, url=url, creator=creator, context=context, created_at=iso(at))


def _approve(gh, sha, *, by="Codertocat", at=CREATED + timedelta(minutes=2), **kw):
    _status(gh, sha, queued(by, sha), at=at, **kw)


def _collect(gh):
    rest = _client(gh)
    before = len(gh.log)
    got = spend.collect(
        rest, spend.Counting(REPO, WORKFLOWS, GPU, PRICE, load_table(), 60, NOV, NOW)
    )
    reads = [r.path for r in api_calls(gh, before) if r.path.endswith("/statuses")]
    return got, reads


NOV = budget.Month(2026, 11)


def _reserved(got, run):
    return [(c.job_id, c.minutes, c.state) for c in got.costs if c.run_id == run.id]


def test_an_approved_fork_runs_waiting_job_reserves(github):
    github.add_repo(REPO)
    run = _fork_run(github, "a" * 40)
    _approve(github, "a" * 40)
    got, reads = _collect(github)
    assert _reserved(got, run) == [(run.jobs[0].id, 60, "reserved")]
    assert reads == [f"/repos/{REPO}/commits/{'a' * 40}/statuses"]  # one call for the head
    assert got.notes == []


def test_its_record_keeps_the_reservation_and_another_runs_record_takes_it(github):
    """Once the status workflow recorded the run ("in progress", linking it), that run holds
    the approval; a second run the approver's other label started in the window does not."""
    github.add_repo(REPO)
    mine = _fork_run(github, "b" * 40)
    other = _fork_run(github, "b" * 40, created=CREATED + timedelta(seconds=30))
    _approve(github, "b" * 40)
    link = f"https://github.com/{REPO}/actions/runs/{mine.id}/attempts/1"
    _status(
        github,
        "b" * 40,
        "Approved by @Codertocat: GPU run in progress.",
        at=CREATED + timedelta(minutes=3),
        url=link,
    )
    got, reads = _collect(github)
    assert _reserved(got, mine) == [(mine.jobs[0].id, 60, "reserved")]
    assert _reserved(got, other) == []
    assert len(reads) == 1  # one head, one call for both runs


def test_a_forks_flood_on_an_approved_head_reserves_nothing(github):
    """The issue's 20 jobs on a label no runner has, in a run the fork's author started: not
    the approval's run (the approver did not trigger it), so nothing, approved head or not."""
    github.add_repo(REPO)
    flood = _fork_run(
        github, "c" * 40, who="mallory", jobs=20, labels=("self-hosted", "gpu", "no-such-runner")
    )
    bare = _fork_run(github, "d" * 40, who="mallory", jobs=20)
    _approve(github, "c" * 40)
    got, _ = _collect(github)
    assert _reserved(got, flood) == [] and _reserved(got, bare) == []
    assert got.costs == []


def test_an_approval_forged_by_another_writer_does_not_count(github):
    """The same words, written by someone outside trusted-creators (a CI app a pull request
    can steer, or the fork's author with a token of their own): as if not there."""
    github.add_repo(REPO)
    run = _fork_run(github, "e" * 40)
    _approve(github, "e" * 40, creator="mallory")
    got, reads = _collect(github)
    assert _reserved(got, run) == [] and len(reads) == 1


def test_a_revoked_or_stale_approval_reserves_nothing(github):
    github.add_repo(REPO)
    revoked = _fork_run(github, "f" * 40)
    _approve(github, "f" * 40)
    _status(
        github,
        "f" * 40,
        "Waiting for approval: someone with write access or higher applies the 'CUDA CI' label.",
        at=CREATED + timedelta(minutes=5),
    )
    late = _fork_run(github, "1" * 40, created=CREATED + timedelta(minutes=10))
    _approve(github, "1" * 40)  # posted 8 minutes before the run: not its approval
    got, _ = _collect(github)
    assert _reserved(got, revoked) == [] and _reserved(got, late) == []


def test_at_most_ten_fork_heads_are_read_newest_first(github):
    """12 approved fork heads with a waiting GPU job each: the newest 10 are read and
    reserve, the 2 oldest reserve nothing, and the count says so."""
    github.add_repo(REPO)
    runs = []
    for n in range(12):
        sha = f"{n:x}" * 40
        at = CREATED - timedelta(minutes=40) + timedelta(minutes=3 * n)
        runs.append(_fork_run(github, sha, created=at))
        _approve(github, sha, at=at + timedelta(minutes=1))
    got, reads = _collect(github)
    assert len(reads) == spend.APPROVAL_HEADS == 10
    assert [bool(_reserved(got, r)) for r in runs] == [False] * 2 + [True] * 10
    assert any(
        "12 fork heads have GPU jobs waiting" in n
        and "the 2 older ones (2 runs) reserve nothing" in n
        for n in got.notes
    ), got.notes


def test_the_billing_path_adds_an_approved_fork_runs_waiting_job(github):
    """With a billing-token, the report never shows a waiting job: the GPU jobs of the runs
    in progress are added, an approved fork run's waiting one among them."""
    github.add_repo(REPO)
    run = _fork_run(github, "2" * 40)
    run.status = "in_progress"
    _approve(github, "2" * 40)
    github.add_org("Codertocat")
    cfg = _budget_config()
    assert cfg is not None
    counting = spend.Counting.for_budget(REPO, cfg, GPU, load_table(), NOW)
    spent, _ = spend.billed_month_spend(_client(github), _client(github), counting, cfg, None)
    assert [(c.run_id, c.minutes, c.state) for c in spent.jobs] == [(run.id, 60, "reserved")]


def test_the_gate_counts_an_approved_fork_runs_waiting_job(run_cli, server):
    """Through the CLI: 10 runs ($6.24), an approved fork run's GPU job waiting for a runner
    ($3.12 reserved) and a fork's unapproved flood of 20; a $9 budget refuses the next run."""
    for n in range(10):
        gpu_run(server, datetime(2026, 11, 2 + n, 10, tzinfo=timezone.utc), 11.5)
    _fork_run(server, "3" * 40)
    _approve(server, "3" * 40)
    _fork_run(server, "4" * 40, who="mallory", jobs=20, labels=("self-hosted", "gpu", "x"))
    before = len(server.log)
    result = gate(run_cli, server, ["--monthly-budget", "$50", *BUDGET])
    assert result.outputs["budget-spent"] == "9.36", result.stdout
    assert result.outputs["run"] == "true"
    reads = [r.path for r in api_calls(server, before) if r.path.endswith("/statuses")]
    assert sorted(reads) == [f"/repos/{REPO}/commits/{c * 40}/statuses" for c in "34"]
    refused = gate(run_cli, server, ["--monthly-budget", "$9", *BUDGET])
    assert refused.outputs["run"] == "false", refused.stdout


def test_the_decision_says_which_fork_heads_were_not_read(github):
    """11 fork heads with waiting GPU jobs: the gate's ledger row names the one not read."""
    github.add_repo(REPO)
    for n in range(11):
        _fork_run(github, f"{n:x}" * 40, created=CREATED + timedelta(minutes=n))
    cfg = _budget_config()
    assert cfg is not None
    run = spend.GateRun(REPO, NOW, "master")
    got = spend.gate_budget(_client(github), None, cfg, GPU, load_table(), run)
    rows = dict(got.rows)
    assert "11 fork heads have GPU jobs waiting" in rows["ledger"], rows
    assert "the 1 older one (1 run) reserve nothing" in rows["ledger"], rows
    assert got.ok


def test_the_readme_states_the_calls_per_fork_head_and_the_bound():
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "1 REST call per fork head with GPU jobs waiting for a runner" in readme
    assert f"for at most {spend.APPROVAL_HEADS} fork heads per decision" in readme


def test_a_retried_attempt_reserves_only_as_the_watchdogs_retry(github):
    """Attempt 2 of the approval's run reserves when gpu-watchdog's retry record of that very
    attempt lies above the approval (rule 7), not when someone re-ran it by hand."""
    github.add_repo(REPO)
    retried = _fork_run(github, "5" * 40)
    by_hand = _fork_run(github, "6" * 40)
    for run in (retried, by_hand):
        run.run_attempt, run.triggering_actor = 2, "github-actions[bot]"
        for job in run.jobs:
            job.run_attempt = 2
        _approve(github, run.head_sha)
    _status(
        github,
        "5" * 40,
        "GPU run retried after the runner was lost (attempt 2).",
        at=CREATED + timedelta(minutes=20),
        url=f"https://github.com/{REPO}/actions/runs/{retried.id}/attempts/2",
    )
    got, _ = _collect(github)
    assert _reserved(got, retried) == [(retried.jobs[0].id, 60, "reserved")]
    assert _reserved(got, by_hand) == []


def test_the_budget_reads_gpu_status_default_context_without_regard_to_case(github):
    """The approval in ``gpu ci`` counts (GitHub does not tell contexts apart by case); the
    same words in another context do not (the README: the budget reads the defaults)."""
    github.add_repo(REPO)
    lower = _fork_run(github, "7" * 40)
    other = _fork_run(github, "8" * 40)
    _approve(github, "7" * 40, context="gpu ci")
    _approve(github, "8" * 40, context="CUDA CI")
    got, _ = _collect(github)
    assert _reserved(got, lower) == [(lower.jobs[0].id, 60, "reserved")]
    assert _reserved(got, other) == []


def test_the_gate_reads_approvals_in_its_context_by_its_trusted_creators(run_cli, server):
    """A repository whose gpu-status posts "CUDA CI" with an App token: the gate takes the
    same ``context`` and ``trusted-creators`` (else its approved fork runs reserve nothing);
    the approval of any other writer still does not count."""
    for n in range(10):
        gpu_run(server, datetime(2026, 11, 2 + n, 10, tzinfo=timezone.utc), 11.5)
    _fork_run(server, "5" * 40)
    _approve(server, "5" * 40, context="CUDA CI", creator="my-app[bot]")
    _fork_run(server, "6" * 40)
    _approve(server, "6" * 40, context="CUDA CI")  # github-actions[bot]: not trusted here
    ours = ["--context", "CUDA CI", "--trusted-creators", "my-app[bot]"]
    result = gate(run_cli, server, ["--monthly-budget", "$50", *BUDGET, *ours])
    assert result.outputs["budget-spent"] == "9.36", result.stdout  # $6.24 + one reservation
    default = gate(run_cli, server, ["--monthly-budget", "$50", *BUDGET])
    assert default.outputs["budget-spent"] == "6.24", default.stdout
