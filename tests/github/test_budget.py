"""The budget's pure rules: units, prices per day, whole minutes, attempts, reservations,
month boundaries (UTC), the billing report's spellings, the ledger and the verdict."""

from __future__ import annotations

from datetime import date, datetime, timezone
from decimal import Decimal

import pytest

from gpu_ci.errors import UsageError
from gpu_ci.github.spend import budget
from gpu_ci.github.spend import ledger as spend_ledger
from gpu_ci.github.spend.budget import GpuMatcher, Month
from gpu_ci.pricing import Price, PriceTable, SkuPrice, load_table

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)
NOV = Month(2026, 11)
GPU = GpuMatcher(frozenset({"self-hosted", "gpu"}))
LINUX_GPU = Price(sku="linux_4_core_gpu")


@pytest.mark.parametrize(
    ("text", "amount", "unit"),
    [
        ("$50", "50", "usd"),
        ("50 USD", "50", "usd"),
        ("$ 12.5", "12.5", "usd"),
        ("3000 minutes", "3000", "minutes"),
        ("3000min", "3000", "minutes"),
        ("50 h", "3000", "minutes"),
        ("0 USD", "0", "usd"),
    ],
)
def test_budget_units(text, amount, unit):
    parsed = budget.parse_budget(text)
    assert (parsed.amount, parsed.unit) == (Decimal(amount), unit)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("50", "no unit"),
        ("-5 USD", "negative"),
        ("$-5", "negative"),
        ("fifty", "write an"),
        ("", "write an"),
        ("$50 minutes", "mixes"),
    ],
)
def test_bad_budgets_say_what_to_write(text, words):
    with pytest.raises(UsageError, match=words) as exc:
        budget.parse_budget(text)
    assert "'$50'" in exc.value.message and "3000 minutes" in exc.value.message
    assert exc.value.exit_code == 2


def test_gpu_price_unknown_sku_and_stale_table_are_usage_errors():
    table = load_table()
    assert (
        budget.parse_gpu_price("linux_4_core_gpu", table, date(2026, 11, 30)).sku
        == "linux_4_core_gpu"
    )
    with pytest.raises(UsageError, match="known GitHub-hosted GPU SKU"):
        budget.parse_gpu_price("linux_8_core_gpu", table, date(2026, 11, 30))
    late = table.checked.replace(year=table.checked.year + 2)
    with pytest.raises(UsageError, match="last checked on .* gpu-price: 0.052"):
        budget.parse_gpu_price("linux_4_core_gpu", table, late)
    # an amount does not depend on the table's age
    assert budget.parse_gpu_price("0.05", table, late).usd_per_minute == Decimal("0.05")


def _run(run_id=1, attempt=1, event="pull_request", pr=7, who="maintainer"):
    return {
        "id": run_id,
        "run_attempt": attempt,
        "event": event,
        "status": "completed",
        "path": ".github/workflows/cuda-ci.yml",
        "name": "CUDA CI",
        "pull_requests": [{"number": pr}] if pr else [],
        "triggering_actor": {"login": who},
        "actor": {"login": "author"},
        "repository": {"id": 1296269, "full_name": "octocat/Hello-World"},
        "head_repository": {"id": 1296269, "full_name": "octocat/Hello-World"},
    }


def _job(
    job_id,
    start,
    end=None,
    *,
    labels=("self-hosted", "gpu"),
    status="completed",
    conclusion="success",
    attempt=1,
    runner="gpu-1",
    group=None,
):
    return {
        "id": job_id,
        "name": "tests",
        "labels": list(labels),
        "status": status,
        "conclusion": conclusion if status == "completed" else None,
        "created_at": start,
        "started_at": start,
        "completed_at": end,
        "runner_name": runner,
        "runner_group_name": group,
        "run_attempt": attempt,
    }


def costs(jobs, *, price=LINUX_GPU, table=None, reserve=30, run=None, matcher=GPU, month=NOV):
    costing = budget.Costing(matcher, price, table or load_table(), reserve, month, NOW)
    return budget.job_costs(run or _run(), jobs, costing)


def test_whole_minutes_never_free_and_non_gpu_jobs_ignored():
    got = costs(
        [
            _job(1, "2026-11-02T10:00:00Z", "2026-11-02T10:00:01Z"),
            _job(2, "2026-11-02T10:00:00Z", "2026-11-02T10:01:01Z"),
            _job(3, "2026-11-02T10:00:00Z", "2026-11-02T12:00:00Z", labels=("ubuntu-latest",)),
        ]
    )
    assert [(c.job_id, c.minutes, c.usd) for c in got] == [(1, 1, "0.052"), (2, 2, "0.104")]
    assert got[0].approver == "maintainer" and got[0].pull_request == "#7"
    assert got[0].workflow == "cuda-ci.yml" and got[0].runner == "gpu,self-hosted"


def test_reruns_and_cancelled_jobs_count_what_they_used_skipped_ones_nothing():
    got = costs(
        [
            _job(
                1, "2026-11-02T10:00:00Z", "2026-11-02T10:10:00Z", attempt=1, conclusion="failure"
            ),
            _job(
                2, "2026-11-02T11:00:00Z", "2026-11-02T11:04:30Z", attempt=2, conclusion="cancelled"
            ),
            _job(
                3,
                "2026-11-02T11:00:00Z",
                "2026-11-02T11:00:00Z",
                attempt=2,
                conclusion="skipped",
                runner=None,
            ),
            _job(
                4,
                "2026-11-02T12:00:00Z",
                "2026-11-02T12:00:05Z",
                attempt=3,
                conclusion="cancelled",
                runner=None,
            ),
        ],
        run=_run(attempt=3),
    )
    assert [(c.job_id, c.attempt, c.minutes) for c in got] == [(1, 1, 10), (2, 2, 5)]


def test_running_and_queued_jobs_count_their_reservation_or_more():
    got = costs(
        [
            _job(1, "2026-11-20T11:50:00Z", status="in_progress"),  # 10 min so far
            _job(2, "2026-11-20T10:00:00Z", status="in_progress"),  # 120 min so far
            _job(3, "2026-11-20T11:59:00Z", status="queued", runner=None),
        ]
    )
    assert [(c.minutes, c.state) for c in got] == [
        (30, "reserved"),
        (120, "reserved"),
        (30, "reserved"),
    ]
    assert budget.total(got, "x").reserved_minutes == 180


def test_runner_group_matches_jobs_whatever_their_labels():
    matcher = GpuMatcher.from_runs_on('{"group":"gpu-group","labels":["linux"]}')
    got = costs(
        [
            _job(
                1,
                "2026-11-02T10:00:00Z",
                "2026-11-02T10:05:00Z",
                labels=("big",),
                group="GPU-group",
            ),
            _job(2, "2026-11-02T10:00:00Z", "2026-11-02T10:05:00Z", labels=("big",)),
        ],
        matcher=matcher,
    )
    assert [c.job_id for c in got] == [1] and got[0].runner == "GPU-group"
    assert GpuMatcher.from_runs_on('"gpu"').matches({"labels": ["GPU", "x"]})


def test_month_boundaries_are_utc_days_the_job_started():
    got = costs(
        [
            _job(1, "2026-10-31T23:59:00Z", "2026-11-01T00:30:00Z"),  # October's
            _job(2, "2026-11-01T00:00:00Z", "2026-11-01T00:30:00Z"),
            _job(3, "2026-11-30T23:59:59+00:00", "2026-12-01T01:00:00Z"),
            _job(4, "2026-12-01T00:00:00Z", "2026-12-01T00:10:00Z"),  # December's
            _job(5, "2026-11-01T01:00:00+02:00", "2026-11-01T01:10:00+02:00"),
        ]
    )  # Oct 31
    assert [c.job_id for c in got] == [2, 3]
    assert got[1].minutes == 61


def test_a_price_change_inside_the_month_is_applied_per_job():
    table = PriceTable(
        (
            SkuPrice("linux_4_core_gpu", Decimal("0.07"), date.min, date(2026, 11, 14), "a"),
            SkuPrice("linux_4_core_gpu", Decimal("0.05"), date(2026, 11, 15), None, "b"),
        ),
        date(2026, 11, 30),
    )
    got = costs(
        [
            _job(1, "2026-11-14T23:50:00Z", "2026-11-15T00:00:00Z"),
            _job(2, "2026-11-15T00:00:00Z", "2026-11-15T00:10:00Z"),
        ],
        table=table,
    )
    assert [c.usd for c in got] == ["0.70", "0.50"]
    # and the shipped table's change: 31 December 2025 at $0.07, 1 January 2026 at $0.052
    sku = Price(sku="linux_4_core_gpu")
    dec = costs(
        [_job(1, "2025-12-31T10:00:00Z", "2025-12-31T10:10:00Z")], price=sku, month=Month(2025, 12)
    )
    jan = costs(
        [_job(1, "2026-01-01T10:00:00Z", "2026-01-01T10:10:00Z")], price=sku, month=Month(2026, 1)
    )
    assert (dec[0].usd, jan[0].usd) == ("0.70", "0.520")


def test_verdict_refuses_when_spend_plus_reservation_exceeds():
    b = budget.parse_budget("$10")
    spent = budget.Spend(180, Decimal("9.36"), "jobs")
    ok = budget.check(b, spent, 10, Decimal("0.052"))  # 9.36 + 0.52 = 9.88
    no = budget.check(b, spent, 20, Decimal("0.052"))  # 9.36 + 1.04 = 10.40
    assert ok.ok and not no.ok
    assert no.left == Decimal("0.64") and "over the budget" in no.reason
    assert "$9.36 of $10.00" in no.reason
    exact = budget.check(budget.parse_budget("200 minutes"), spent, 20, None)
    assert exact.ok and exact.left == 20  # 180 + 20 == 200: still within


def test_billing_report_spellings_repository_and_month():
    items = [
        {
            "date": "2026-11-03T00:00:00Z",
            "product": "actions",
            "sku": "Actions Linux 4-core GPU",
            "quantity": 100,
            "unitType": "minutes",
            "netAmount": 5.2,
            "repositoryName": "octo-org/octo-repo",
        },
        {
            "date": "2026-11-04T00:00:00Z",
            "product": "actions",
            "sku": "actions_linux_4_core_gpu",
            "quantity": 10,
            "unitType": "Minutes",
            "netAmount": 0.52,
            "repositoryName": "octo-repo",
        },
        {
            "date": "2026-11-04T00:00:00Z",
            "product": "actions",
            "sku": "linux_4_core_gpu",
            "quantity": 50,
            "unitType": "minutes",
            "netAmount": 2.6,
            "repositoryName": "other",
        },
        {
            "date": "2026-11-04T00:00:00Z",
            "product": "actions",
            "sku": "Actions Linux",
            "quantity": 999,
            "unitType": "minutes",
            "netAmount": 7.99,
            "repositoryName": "octo-repo",
        },
        {
            "date": "2026-10-31T00:00:00Z",
            "product": "actions",
            "sku": "linux_4_core_gpu",
            "quantity": 77,
            "unitType": "minutes",
            "netAmount": 4.0,
            "repositoryName": "octo-repo",
        },
    ]
    repo = budget.billing_spend(items, ["linux_4_core_gpu"], "octo-org/octo-repo", NOV)
    org = budget.billing_spend(items, ["linux_4_core_gpu"], None, NOV)
    assert (repo.minutes, repo.usd) == (110, Decimal("5.72"))
    assert (org.minutes, org.usd) == (160, Decimal("8.32"))


def test_ledger_round_trip_and_what_it_vouches_for():
    runs = [
        dict(_run(1), status="completed", created_at="2026-11-02T10:00:00Z"),
        dict(_run(2), status="in_progress", created_at="2026-11-19T23:00:00Z"),
    ]
    jobs = costs([_job(1, "2026-11-02T10:00:00Z", "2026-11-02T10:05:00Z")])
    key = spend_ledger.ledger_key(GPU, ["cuda-ci.yml"])
    ledger = spend_ledger.build_ledger("o/r", NOV, key, NOW, runs, jobs)
    # the run still going since yesterday keeps the ledger's horizon at its creation
    assert ledger.runs == {"1": 1} and ledger.through == "2026-11-19T23:00:00Z"
    assert (
        spend_ledger.build_ledger("o/r", NOV, key, NOW, runs[:1], jobs).through
        == "2026-11-20T12:00:00Z"
    )
    again = spend_ledger.Ledger.from_json(ledger.to_json())
    assert again == ledger and again.usable("O/R", NOV, GPU, ["cuda-ci.yml"])
    assert not again.usable("o/r", Month(2026, 10), GPU, ["cuda-ci.yml"])
    assert not again.usable("o/r", NOV, GpuMatcher(frozenset({"gpu"})), ["cuda-ci.yml"])
    # a ledger of one workflow would miss the other's runs: not reused
    assert not again.usable("o/r", NOV, GPU, ["cuda-ci.yml", "nightly.yml"])
    assert not again.usable("o/r", NOV, GPU, [])
    assert again.counted({"id": 1, "run_attempt": 1, "status": "completed"})
    assert not again.counted({"id": 1, "run_attempt": 2, "status": "completed"})  # re-run
    assert not again.counted({"id": 1, "run_attempt": 1, "status": "in_progress"})
    bad_cost = dict(ledger.to_json(), jobs=[dict(jobs[0].to_json(), usd="free")])
    # Decimal reads "NaN" and "Infinity": a NaN cost makes every budget comparison raise
    # (or pass), an infinite one refuses every job
    not_finite = [
        dict(ledger.to_json(), jobs=[dict(jobs[0].to_json(), usd=usd)])
        for usd in ("NaN", "sNaN", "Infinity", "-Infinity", float("nan"))
    ]
    for junk in ({}, {"version": 99}, {"version": 1, "runs": "x"}, bad_cost, *not_finite):
        assert spend_ledger.Ledger.from_json(junk) is None


def test_config_validates_every_budget_input():
    table, today = load_table(), date(2026, 11, 30)

    def make(**kw):
        args = dict(
            monthly_budget="$50",
            gpu_price="linux_4_core_gpu",
            reserve_minutes="60",
            on_unknown="refuse",
            scope="repository",
            workflows=["cuda-ci.yml"],
            ledger_artifact="gpu-spend-ledger",
        )
        args.update(kw)
        return budget.make_budget_config(budget.BudgetInputs(**args), table, today)

    assert make(monthly_budget="") is None
    assert make().reserve_minutes == 60
    assert make(monthly_budget="3000 minutes", gpu_price="").price is None
    for kw, words in [
        ({"gpu_price": ""}, "'gpu-price' is needed"),
        ({"reserve_minutes": "0"}, "timeout-minutes"),
        ({"reserve_minutes": "1h"}, "timeout-minutes"),
        ({"on_unknown": "maybe"}, "refuse or run"),
        ({"scope": "enterprise"}, "repository or organization"),
        ({"workflows": [".github/workflows/x.yml"]}, "file names"),
        ({"gpu_price": "mac_gpu"}, "known GitHub-hosted GPU SKU"),
    ]:
        with pytest.raises(UsageError, match=words):
            make(**kw)


def test_breakdown_and_cumulative_days():
    got = costs(
        [
            _job(1, "2026-11-02T10:00:00Z", "2026-11-02T10:10:00Z"),
            _job(2, "2026-11-04T10:00:00Z", "2026-11-04T10:05:00Z"),
        ],
        run=_run(pr=0, event="push"),
    )
    got += costs(
        [_job(3, "2026-11-04T10:00:00Z", "2026-11-04T10:20:00Z")], run=_run(run_id=2, who="other")
    )
    by_pr = budget.breakdown(got, "pull_request")
    assert [(r.key, r.minutes, r.jobs) for r in by_pr] == [("#7", 20, 1), ("(push)", 15, 2)]
    by_who = budget.breakdown(got, "approver")
    assert [(r.key, r.minutes) for r in by_who] == [("other", 20), ("maintainer", 15)]
    days = budget.cumulative(got, NOV, date(2026, 11, 5), "minutes")
    assert [int(v) for _, v in days] == [0, 10, 10, 35, 35]


def test_a_re_run_keeps_the_first_attempts_approver():
    """gpu-watchdog's retry (rerun-failed-jobs) makes the token's user the run's
    ``triggering_actor`` (GitHub records the re-runner): the run's cost, both attempts, stays
    with its approver (the first attempt's actor), as gpu-status binds it."""
    run = {**_run(attempt=2), "triggering_actor": {"login": "github-actions[bot]"}}
    run["actor"] = {"login": "maintainer"}
    got = costs(
        [
            _job(1, "2026-11-02T10:00:00Z", "2026-11-02T10:10:00Z", conclusion="failure"),
            _job(2, "2026-11-02T10:20:00Z", "2026-11-02T10:30:00Z", attempt=2),
        ],
        run=run,
    )
    assert [c.approver for c in got] == ["maintainer", "maintainer"]


def test_a_job_that_leaves_out_the_generic_labels_still_counts():
    """Red team (issue 44): ``gpu-runs-on: [self-hosted, gpu]``, and a fork's job asks for
    ``runs-on: gpu`` (or ``[linux, gpu]``): GitHub gives it the same GPU runner, whose
    ``self-hosted`` and ``linux`` labels a job need not name. Every distinctive label of
    ``gpu-runs-on`` is asked for, so it is a GPU job. A ``runs-on: self-hosted`` job may
    land on the GPU runner too (red team 44b), so it counts; a job asking for a label the
    GPU runner lacks (``cpu``) does not."""
    got = costs(
        [
            _job(1, "2026-11-02T10:00:00Z", "2026-11-02T12:00:00Z", labels=("gpu",)),
            _job(2, "2026-11-02T10:00:00Z", "2026-11-02T12:00:00Z", labels=("Linux", "GPU")),
            _job(3, "2026-11-02T10:00:00Z", "2026-11-02T12:00:00Z", labels=("self-hosted",)),
            _job(4, "2026-11-02T10:00:00Z", "2026-11-02T12:00:00Z", labels=("self-hosted", "cpu")),
        ]
    )
    assert [(c.job_id, c.minutes) for c in got] == [(1, 120), (2, 120), (3, 120)]
