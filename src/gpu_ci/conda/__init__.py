"""The conda wing: lock files, installing a prefix from them, Miniforge, activation.

Never imports the github or cuda wings, nor the runtime: commands wire it.
"""
