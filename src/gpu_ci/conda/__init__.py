"""The conda wing: a prefix from a lock file, all or nothing, never with the vendor's conda.

This is setup-conda-from-lock's wing. :mod:`~gpu_ci.conda.options` (inputs, validated once)
→ :mod:`~gpu_ci.conda.pipeline` (the steps in order): :mod:`~gpu_ci.conda.lockfile` (text →
plan; :mod:`~gpu_ci.conda.lockyaml` reads YAML safely; :mod:`~gpu_ci.conda.pixi` plans a
pixi.lock, whose ``__cuda``/``__glibc`` needs :mod:`~gpu_ci.conda.virtual` checks),
:mod:`~gpu_ci.conda.isolation` (the vendor conda, left alone), :mod:`~gpu_ci.conda.miniforge`,
then :mod:`~gpu_ci.conda.install`, which fills the package cache (:mod:`~gpu_ci.conda.fetch`,
through :mod:`~gpu_ci.conda.channels`' mirrors and credentials; :mod:`~gpu_ci.conda.verified`
and :mod:`~gpu_ci.conda.integrity` say what can be trusted), installs the PyPI packages
(:mod:`~gpu_ci.conda.pypi`) and swaps the prefix in under :mod:`~gpu_ci.conda.transaction`'s
locks and journal; :mod:`~gpu_ci.conda.activation` captures what ``conda activate`` would set
for later steps. :mod:`~gpu_ci.conda.cachekey` makes the cache keys, for the action's cache
step and the command alike.

Never imports the github or cuda wings, nor the wiring (``runtime``, ``inputs``, ``cli``,
``commands``): commands wire it.
"""
