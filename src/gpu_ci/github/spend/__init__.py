"""gpu-spend and the gate's budget: what GPU jobs cost this month, and whether one more fits.

:mod:`.budget` holds the rules (budgets, prices, job costs, the verdict), :mod:`.ledger`
the runs already counted and where a trusted ledger is found, :mod:`.month` counts the
month's GPU jobs through the API, :mod:`.billing` reads the organisation's billing report,
:mod:`.check` is the gate's budget verdict, :mod:`.report` the spend report's documents
and :mod:`.idle` idle cost from gpu-monitor reports. This package re-exports the names
``commands/gpu_spend.py`` and ``commands/gpu_gate.py`` use.
"""

from gpu_ci.github.spend.billing import (
    BillingAccessError,
    billing_error,
    billing_items,
    billing_spend,
)
from gpu_ci.github.spend.check import GateBudget, GateRun, gate_budget
from gpu_ci.github.spend.ledger import (
    LEDGER_EVENTS,
    LEDGER_FALLBACK_RUNS,
    LEDGER_FILE,
    LEDGER_MAX_CALLS,
    LEDGER_RUN_CHECKS,
    MAX_LEDGER_BYTES,
    trusted_ledger,
)
from gpu_ci.github.spend.month import (
    APPROVAL_HEADS,
    RERUN_DAYS,
    RUN_SEARCH_CAP,
    Collected,
    Counting,
    Waiting,
    approved_reservations,
    billed_month_spend,
    collect,
    list_runs,
    month_spend,
    run_jobs,
)

__all__ = [
    "APPROVAL_HEADS",
    "LEDGER_EVENTS",
    "LEDGER_FALLBACK_RUNS",
    "LEDGER_FILE",
    "LEDGER_MAX_CALLS",
    "LEDGER_RUN_CHECKS",
    "MAX_LEDGER_BYTES",
    "RERUN_DAYS",
    "RUN_SEARCH_CAP",
    "BillingAccessError",
    "Collected",
    "Counting",
    "GateBudget",
    "GateRun",
    "Waiting",
    "approved_reservations",
    "billed_month_spend",
    "billing_error",
    "billing_items",
    "billing_spend",
    "collect",
    "gate_budget",
    "list_runs",
    "month_spend",
    "run_jobs",
    "trusted_ledger",
]
