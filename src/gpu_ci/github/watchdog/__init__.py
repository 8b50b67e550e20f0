"""gpu-watchdog: cancel GPU jobs no runner takes; re-run runs lost to infrastructure.

``timeout-minutes`` does not limit time in the queue: a self-hosted job waits up to 24 hours
when no runner with its labels comes. The watchdog runs on a schedule with the repository's
own token (``actions: write``), which needs no admin scope and works with scale-to-zero
pools (it looks at jobs, not at registered runners).

:mod:`.queue` is the queue sweep, :mod:`.retry` the infrastructure re-runs and
:mod:`.infra` their evidence rules; :mod:`.result` holds the records both keep,
:mod:`.calls` the counted REST calls and :mod:`.config` the inputs. This package
re-exports the names ``commands/gpu_watchdog.py`` uses.
"""

from gpu_ci.github.monitor_artifact import read_monitor_report
from gpu_ci.github.watchdog import infra, retry
from gpu_ci.github.watchdog.config import (
    RETRY_WINDOW_MAX_HOURS,
    WatchdogConfig,
    WatchdogInputs,
    cron_interval_minutes,
    make_config,
    schedule_warning,
)
from gpu_ci.github.watchdog.queue import stale_jobs, sweep
from gpu_ci.github.watchdog.result import (
    INFRA_SCHEMA,
    SCHEMA,
    BudgetExhausted,
    InfraRecord,
    JobRecord,
    RetryBudget,
    RetryRecord,
    Sweep,
    infra_json,
    queue_times,
    record_of,
)

__all__ = [
    "infra",
    "retry",
    "INFRA_SCHEMA",
    "RETRY_WINDOW_MAX_HOURS",
    "SCHEMA",
    "BudgetExhausted",
    "InfraRecord",
    "JobRecord",
    "RetryBudget",
    "RetryRecord",
    "Sweep",
    "WatchdogConfig",
    "WatchdogInputs",
    "cron_interval_minutes",
    "infra_json",
    "make_config",
    "queue_times",
    "read_monitor_report",
    "record_of",
    "schedule_warning",
    "stale_jobs",
    "sweep",
]
