"""The CUDA wing: NVML readings, the driver table, framework discovery and the checks.

Never imports the github or conda wings, nor the runtime: commands wire it.
"""
