"""`gpu-ci verify-cuda-env`: not implemented in this release."""

from __future__ import annotations

from gpu_ci.errors import NotImplementedYet
from gpu_ci.inputs import Inputs
from gpu_ci.runtime import Runtime


def run(inputs: Inputs, rt: Runtime) -> int:
    raise NotImplementedYet("gpu-ci verify-cuda-env is not implemented yet in this version.")
