"""The GitHub wing: the REST seam, the event, and the GitHub-facing actions' rules.

Shared facts sit at the root; several features import them:

* ``client``: the only module that imports PyGithub; :func:`~gpu_ci.github.client.connect`
  (every token), the ``Rest`` protocol, and ``ApiError``, which every failed call raises.
* ``event``: the triggering event, from GitHub's variables; the pull request events and
  the gate-label check.
* ``jobs``: GitHub's times, the clock, and which jobs are GPU jobs.
* ``commit_status``: a commit status, its limits, and the lists GitHub returns.
* ``approval``: a maintainer's approval of one commit, and every reading of it.
* ``comment``: the comment command and the commit rules a comment approval needs.
* ``monitor_artifact``: gpu-monitor's report read out of an artifact zip, validated.
* ``steps``: the running job's steps, for gpu-monitor.
* ``admission``: the runner admission hook's rules (its whole core, one module).

One folder per feature, the core of one action each:

* ``gate/``: gpu-gate (``config``, ``checks``, ``decide``, ``paths``) and remove-label
  (``labels``).
* ``status/``: gpu-status, one module per event family (``pull_request``,
  ``workflow_run``, ``issue_comment``), and the pull request comment (``pr_comment``).
* ``watchdog/``: gpu-watchdog's queue sweep (``queue``), its infrastructure re-runs
  (``retry``, ``infra``), and the records both keep (``result``).
* ``spend/``: the budget (``budget``, ``check``), the month's spend (``month``,
  ``ledger``, ``billing``), the spend report (``report``) and idle cost (``idle``).

A feature's ``__init__`` re-exports what its command module uses. Feature folders import
the root, never each other, except ``watchdog/retry``, which checks the budget in
``spend/``. Pure where it can be (decisions on plain dictionaries); the wing never
imports the conda or cuda wings, nor the runtime: commands wire it.
"""
