"""``environment_problems``: what makes ``reused: true`` a true statement, over a real prefix
(installed from the loopback channel of real packages), each kind of damage named."""

from __future__ import annotations

import json
import os

from gpu_ci.conda.integrity import environment_problems
from testkit.conda.jobs import SMALL, job


def test_environment_problems_name_each_damage(channel, locks, tmp_path):
    prefix = tmp_path / "env"
    assert job(locks["small"], prefix, tmp_path / "pkgs")[0] == 0
    assert environment_problems(prefix, len(SMALL)) == []
    meta = prefix / "conda-meta"
    record = meta / "hello-2.1-h1_3.json"
    original = record.read_bytes()
    data = json.loads(original)
    listed = [e["_path"] for e in data["paths_data"]["paths"]]
    assert "bin/hello" in listed

    assert environment_problems(prefix, len(SMALL) + 1) == [
        f"conda-meta has {len(SMALL)} package records, the lock {len(SMALL) + 1}"
    ]

    hello = prefix / "bin" / "hello"
    content = hello.read_bytes()
    hello.write_bytes(content + b"#")  # one byte more than its record
    assert environment_problems(prefix) == [
        f"bin/hello (of hello-2.1-h1_3) has {len(content) + 1} bytes, its record {len(content)}"
    ]
    hello.unlink()
    assert environment_problems(prefix) == ["bin/hello (of hello-2.1-h1_3) is missing"]
    hello.write_bytes(content)
    assert environment_problems(prefix) == []

    for damaged in (
        original[: len(original) // 2],
        b"[]",
        b'{"paths_data": ["bin/hello"]}',
        json.dumps({**data, "paths_data": {"paths": listed}}).encode(),
    ):
        record.write_bytes(damaged)  # truncated, not an object, paths not objects
        assert environment_problems(prefix) == [f"{record} cannot be read"], damaged[:40]
    record.write_bytes(original)

    # every file of every record is checked, and the report stops at `limit`
    for name in os.listdir(meta):
        if name.endswith(".json") and name != "gpu-ci-lock.json":
            for entry in json.loads((meta / name).read_bytes())["paths_data"]["paths"]:
                (prefix / entry["_path"]).unlink()
    assert len(environment_problems(prefix, limit=2)) == 2
    assert len(environment_problems(prefix, limit=100)) == sum(
        len(json.loads((meta / n).read_bytes())["paths_data"]["paths"])
        for n in os.listdir(meta)
        if n.endswith(".json") and n != "gpu-ci-lock.json"
    )
