"""The CUDA wing: GPUs, driver and frameworks, as three actions use them.

One folder per action; shared facts at the root.

Root (used by several actions)
    :mod:`~gpu_ci.cuda.facts` (what NVML said, as data), :mod:`~gpu_ci.cuda.nvml` (the one
    NVML reader), :mod:`~gpu_ci.cuda.nvml_codes` (NVML's return codes; standard library
    only), :mod:`~gpu_ci.cuda.visibility` (which GPUs a job sees),
    :mod:`~gpu_ci.cuda.require` (the ``require`` grammar and sizes).
``verify/`` (verify-cuda-env)
    ``options`` (inputs) → ``pipeline`` (the run and its JSON report), which reads NVML,
    ``loader`` and the target Python (``probe``, ``frameworks``, ``arch``, ``cudart``),
    then runs ``checks`` (with ``compat`` and the driver ``table``) into ``findings``.
``monitor/`` (gpu-monitor)
    ``control`` starts the detached ``sampler`` and reads its file back; ``report`` turns
    it into numbers, findings and views; ``push`` sends them to a Pushgateway;
    ``right_size`` advises a smaller GPU.
``lease/`` (gpu-lease)
    ``lease`` (the lease directory, the locks, which GPU is fit, the worker map) and the
    detached ``holder``.

Never imports the github or conda wings, nor the wiring (``runtime``, ``inputs``, ``cli``,
``commands``): commands wire it.
"""
