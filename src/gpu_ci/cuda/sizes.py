"""Byte units of the sizes inputs and options take, by lower-case name.

Standard library only: the pytest plugin imports it in the job's own Python.
"""

from __future__ import annotations

BYTE_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
