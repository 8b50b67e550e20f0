"""The GitHub wing: the REST seam, event payloads, and the rules of the GitHub-facing actions.

* ``client``: the only module that imports PyGithub; :func:`~gpu_ci.github.client.connect`
  (every token), the ``Rest`` protocol, and ``ApiError``, which every failed call raises.
* ``event``: the triggering event, from GitHub's variables. ``jobs``: GitHub's times, the
  clock, and the rules of what a GPU job is (shared by gate, budget, spend, status, watchdog).
* ``gate`` and ``paths`` (gpu-gate's decision), ``labels`` (remove-label), ``statuses``
  (gpu-status's state machine), ``watchdog`` (gpu-watchdog's sweep and the queue-times
  document), ``budget``/``spend``/``spend_report``/``idle`` (the GPU budget, the month's spend,
  the spend report's documents, idle cost from gpu-monitor reports), ``steps`` (the running
  job's steps, for gpu-monitor).

Pure where it can be (decisions on plain dictionaries); never imports the conda or cuda wings,
nor the runtime: commands wire it.
"""
