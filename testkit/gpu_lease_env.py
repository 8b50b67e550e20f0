"""Building blocks for gpu-lease tests and the demo: a fake multi-GPU host.

The fake ``libnvidia-ml.so.1`` (testkit/fake_nvml/fake_nvml.c) plays the host's GPUs; a GPU
may run "foreign" compute processes (``busy``: index -> count), as a GPU that another
runner or a zombie of an earlier job holds does.
"""

from __future__ import annotations

from pathlib import Path

from testkit.cuda_env import build_fake_nvml, gpu_config, nvml_config, write_config

UUIDS = tuple(f"GPU-{i:08d}-aaaa-bbbb-cccc-{i:012d}" for i in range(16))


def fake_host_env(
    root: Path, *, gpus: int = 8, busy: dict[int, int] | None = None, mig: tuple[int, ...] = ()
) -> dict[str, str]:
    """Environment for ``gpu-ci gpu-lease`` on a fake host of ``gpus`` H200s.

    verify-cuda-env and gpu-monitor run in it too. The lease directory is under ``root``; the
    GPUs in ``mig`` have MIG mode on (one 1g.18gb instance)."""
    lib = build_fake_nvml(root / "nvml")

    def extra(i: int) -> dict[str, object]:
        out: dict[str, object] = {"processes": busy[i]} if busy and i in busy else {}
        if i in mig:
            out.update(
                {
                    "mig": 1,
                    "mig__count": 1,
                    "mig__0__uuid": f"MIG-{i:08d}-0000",
                    "mig__0__name": "NVIDIA H200 MIG 1g.18gb",
                    "mig__0__memory_mib": 16384,
                }
            )
        return out

    config = write_config(
        root / "nvml.cfg",
        nvml_config(*[gpu_config(i, uuid=UUIDS[i], **extra(i)) for i in range(gpus)]),
    )
    return {
        "LD_LIBRARY_PATH": str(lib),
        "FAKE_NVML_CONFIG": str(config),
        "GPU_CI_LEASE_DIR": str(root / "leases"),
    }
