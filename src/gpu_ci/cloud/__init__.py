"""The cloud wing: ephemeral GPU VMs for gpu-cloud-runner, behind a small provider interface.

``provider`` says what a cloud offers (launch one candidate, find by tags, terminate, prices);
``aws`` is the one implementation (boto3). ``launch`` walks the candidates, ``budget`` refuses
before any call, ``userdata`` writes the VM's first script, ``reap`` decides what a leak is.
Nothing here imports the github wing: commands compose the two.
"""
