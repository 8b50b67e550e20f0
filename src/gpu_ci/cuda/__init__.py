"""The CUDA wing: what the driver, the GPUs and the installed frameworks are, and whether CUDA
code will run on them (verify-cuda-env); what the GPUs did during a job (gpu-monitor).

verify-cuda-env
    :mod:`~gpu_ci.cuda.options` (inputs, validated once) → :mod:`~gpu_ci.cuda.verify` (the
    pipeline and its JSON report), which reads :mod:`~gpu_ci.cuda.nvml` (into
    :mod:`~gpu_ci.cuda.facts`), :mod:`~gpu_ci.cuda.visibility`, :mod:`~gpu_ci.cuda.loader` and
    the target Python (:mod:`~gpu_ci.cuda.probe`, :mod:`~gpu_ci.cuda.frameworks`,
    :mod:`~gpu_ci.cuda.arch`), then runs :mod:`~gpu_ci.cuda.checks` (with
    :mod:`~gpu_ci.cuda.compat`, :mod:`~gpu_ci.cuda.require` and the driver table
    :mod:`~gpu_ci.cuda.table`) into :mod:`~gpu_ci.cuda.findings`.
gpu-monitor
    :mod:`~gpu_ci.cuda.monitor_control` starts the sampler :mod:`~gpu_ci.cuda.monitor` and
    reads its file back; :mod:`~gpu_ci.cuda.monitor_report` turns it into numbers, findings and
    views; :mod:`~gpu_ci.cuda.monitor_push` sends them to a Pushgateway.

gpu-lease
    :mod:`~gpu_ci.cuda.lease` (the lease directory, the locks, which GPU is fit, the worker
    map) and the detached holder :mod:`~gpu_ci.cuda.lease_holder`.
Never imports the github or conda wings, nor the wiring (``runtime``, ``inputs``, ``cli``,
``commands``): commands wire it.
"""
