"""Fakes and builders that the tests, the demo and the benchmarks share.

Not shipped: the wheel packages ``src/`` only. Each module stands in for one real thing
(GitHub's REST API, NVML, a conda channel, a Debian root) and stays as strict as it.
"""
