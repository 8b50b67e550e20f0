"""The GitHub wing: REST client, event payloads, the gate's and labels' rules.

Never imports the conda or cuda wings, nor the runtime: commands wire it.
"""
