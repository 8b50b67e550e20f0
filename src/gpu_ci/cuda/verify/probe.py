"""Collect raw framework facts from the target interpreter and the CUDA toolkit.

One short subprocess in the target interpreter lists its distributions (the names of the
``*.dist-info`` directories on its ``sys.path``) and reads two small files; it imports no
framework. ``deep`` mode is
a second, optional subprocess that does import them (with a timeout).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpu_ci.cuda.verify.arch import read_arch_list
from gpu_ci.cuda.verify.cudart import read_static_cudart_version
from gpu_ci.cuda.verify.frameworks import (
    BINARIES,
    CONDA_CUDA,
    FILES,
    ProbeFacts,
    wants_arch_list,
)

# Runs in the target interpreter (any Python >= 3.8): standard library only, no imports of
# the frameworks themselves.
PROBE = r"""
import json, os, re, sys
# Installed distributions from the *.dist-info / *.egg-info directory names on sys.path:
# a directory listing instead of importlib.metadata, which parses every METADATA file
# (100+ ms in an environment with torch).
dists = {}
for entry in sys.path:
    try:
        names = os.listdir(entry or ".")
    except OSError:
        continue
    for name in names:
        for suffix in (".dist-info", ".egg-info"):
            if name.endswith(suffix):
                stem = name[:-len(suffix)]
                project, _, version = stem.partition("-")
                version = version.split("-py")[0] if suffix == ".egg-info" else version
                if project and version:
                    dists.setdefault(re.sub(r"[-_.]+", "-", project).lower(), version)
files = {}
for rel in json.loads(sys.argv[1]):
    for entry in sys.path:
        path = os.path.join(entry or ".", rel)
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as handle:
                files[rel] = handle.read(65536)
            break
binaries = {}
for rel in json.loads(sys.argv[2]):
    for entry in sys.path:
        path = os.path.join(entry or ".", rel)
        if os.path.isfile(path):
            binaries[rel] = os.path.abspath(path)
            break
# CuPy's runtime module (its name carries the ABI tag) holds its statically linked cudart.
static_cudart = {}
for entry in sys.path:
    folder = os.path.join(entry or ".", "cupy_backends", "cuda", "api")
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        continue
    for name in names:
        if name.startswith("runtime.") and name.endswith(".so"):
            static_cudart["cupy"] = os.path.abspath(os.path.join(folder, name))
            break
    break
print(json.dumps({"python": sys.executable, "prefix": sys.prefix,
                  "base_prefix": getattr(sys, "base_prefix", sys.prefix), "dists": dists,
                  "files": files, "binaries": binaries, "static_cudart": static_cudart}))
"""

DEEP = r"""
import json, sys
wanted = set(sys.argv[1].split(","))
count = int(sys.argv[2])
results = []

def record(name, fn):
    entry = {"name": name, "ok": True, "arch_list": None, "error": "", "computations": []}
    try:
        fn(entry)
    except BaseException as exc:  # report, never crash the probe
        entry["ok"] = False
        entry["error"] = "%s: %s" % (type(exc).__name__, exc)
    results.append(entry)

def torch_probe(entry):
    import torch
    entry["version"] = torch.__version__
    entry["arch_list"] = list(torch.cuda.get_arch_list())
    if not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False")
    for i in range(torch.cuda.device_count()):
        try:
            value = float((torch.ones(4, device="cuda:%d" % i) * 2).sum().item())
            entry["computations"].append({"gpu": i, "ok": value == 8.0, "error": ""})
        except Exception as exc:
            entry["computations"].append({"gpu": i, "ok": False, "error": str(exc)})

def cupy_probe(entry):
    import cupy
    entry["version"] = cupy.__version__
    for i in range(cupy.cuda.runtime.getDeviceCount()):
        try:
            with cupy.cuda.Device(i):
                value = float(cupy.arange(4).sum())
            entry["computations"].append({"gpu": i, "ok": value == 6.0, "error": ""})
        except Exception as exc:
            entry["computations"].append({"gpu": i, "ok": False, "error": str(exc)})

def jax_probe(entry):
    import jax, jax.numpy as jnp
    entry["version"] = jax.__version__
    devices = [d for d in jax.devices() if d.platform == "gpu"]
    if not devices:
        raise RuntimeError("jax sees no GPU device (platforms: %s)"
                           % sorted({d.platform for d in jax.devices()}))
    for i, device in enumerate(devices):
        try:
            value = float(jax.device_put(jnp.ones(4), device).sum())
            entry["computations"].append({"gpu": i, "ok": value == 4.0, "error": ""})
        except Exception as exc:
            entry["computations"].append({"gpu": i, "ok": False, "error": str(exc)})

for name, fn in (("torch", torch_probe), ("cupy", cupy_probe), ("jax", jax_probe)):
    if name in wanted:
        record(name, fn)
print(json.dumps(results))
"""


def resolve_python(value: str, environ: Mapping[str, str]) -> str | None:
    if value:
        found = shutil.which(value, path=environ.get("PATH"))
        return found or (value if os.path.isfile(value) else None)
    for name in ("python", "python3"):
        found = shutil.which(name, path=environ.get("PATH"))
        if found:
            return found
    return None


def _clean_env(environ: Mapping[str, str]) -> dict[str, str]:
    # Our own interpreter's settings must not leak into the target's.
    return {k: v for k, v in environ.items() if k not in ("PYTHONHOME", "PYTHONNOUSERSITE")}


def probe_python(
    python: str, environ: Mapping[str, str], timeout: float = 20.0
) -> tuple[dict[str, Any] | None, str]:
    """(facts, error) from one subprocess in the target interpreter."""
    try:
        proc = subprocess.run(
            [python, "-c", PROBE, json.dumps(FILES), json.dumps(BINARIES)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_clean_env(environ),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{python} could not be run ({exc})"
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return None, f"{python} exited {proc.returncode}: {tail[0]}"
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1]), ""
    except (json.JSONDecodeError, IndexError):
        return None, f"{python} printed no readable JSON"


def conda_meta(prefix: str) -> list[str]:
    meta = Path(prefix) / "conda-meta"
    try:
        return sorted(p.name for p in meta.glob("*.json"))
    except OSError:
        return []


def conda_records(prefix: str, names: list[str]) -> dict[str, dict[str, str]]:
    """What conda recorded for the CUDA packages, by file name.

    Only the few ``conda-meta`` files whose name starts with a CUDA package are opened; a
    record that cannot be read leaves its file name as the only evidence.
    """
    out: dict[str, dict[str, str]] = {}
    for filename in names:
        if not filename.startswith(CONDA_CUDA):
            continue
        path = Path(prefix) / "conda-meta" / filename
        if not path.is_file():  # a FIFO or folder planted under the name would block or fail
            continue
        try:
            with open(path, encoding="utf-8") as handle:
                doc = json.load(handle)
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and isinstance(doc.get("name"), str):
            out[filename] = {"name": doc["name"], "version": str(doc.get("version") or "")}
    return out


def conda_prefix(raw: Mapping[str, Any], environ: Mapping[str, str]) -> str:
    """The conda environment the tests load: the interpreter's, else the active one.

    The target interpreter's prefix, then its base (a venv made from a conda Python), then
    CONDA_PREFIX: the first that holds a ``conda-meta`` folder; else the interpreter's.
    """
    candidates = [str(raw.get(k) or "") for k in ("prefix", "base_prefix")]
    candidates.append(environ.get("CONDA_PREFIX", ""))
    for prefix in candidates:
        if prefix and (Path(prefix) / "conda-meta").is_dir():
            return prefix
    return candidates[0] or candidates[2]


def _inside(path: Path, prefix: str) -> bool:
    try:
        return bool(prefix) and path.resolve().is_relative_to(Path(prefix).resolve())
    except (OSError, ValueError):
        return False


def find_nvcc(environ: Mapping[str, str], prefix: str = "") -> dict[str, str]:
    """The system CUDA toolkit's nvcc: on PATH, else under CUDA_HOME or CUDA_PATH.

    An nvcc inside the job's conda environment (``prefix``) is the environment's own
    (conda's cuda-nvcc, whose record says its version), never the system toolkit.
    """
    candidates = []
    on_path = shutil.which("nvcc", path=environ.get("PATH"))
    if on_path:
        candidates.append(Path(on_path))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if environ.get(var):
            candidates.append(Path(environ[var]) / "bin" / "nvcc")
    for nvcc in candidates:
        if not nvcc.is_file() or _inside(nvcc, prefix):
            continue
        info = {"path": str(nvcc)}
        version_json = nvcc.resolve().parent.parent / "version.json"
        if version_json.is_file():
            info["version_json"] = version_json.read_text(encoding="utf-8", errors="replace")
        else:
            try:
                proc = subprocess.run(
                    [str(nvcc), "--version"], capture_output=True, text=True, timeout=10
                )
                info["nvcc_output"] = proc.stdout
            except (OSError, subprocess.TimeoutExpired):
                pass
        return info
    return {}


def collect(python: str | None, environ: Mapping[str, str]) -> tuple[ProbeFacts, str]:
    raw: dict[str, Any] = {}
    error = ""
    if python:
        got, error = probe_python(python, environ)
        raw = got or {}
    prefix = conda_prefix(raw, environ)
    arch_lists: dict[str, list[str]] = {}
    for rel, path in (raw.get("binaries") or {}).items():
        if not wants_arch_list(rel, raw.get("files") or {}):
            continue
        found, _why = read_arch_list(path)
        if found is not None:  # unreadable: the build's arch stays unknown, as before
            arch_lists[rel] = found
    dists = raw.get("dists") or {}
    meta = conda_meta(prefix) if prefix else []
    facts = ProbeFacts(
        python=str(raw.get("python") or python or ""),
        prefix=prefix,
        dists=dists,
        files=raw.get("files") or {},
        conda_meta=meta,
        conda_records=conda_records(prefix, meta),
        nvcc=find_nvcc(environ, prefix),
        arch_lists=arch_lists,
        runtime_versions=static_runtimes(raw.get("static_cudart") or {}, dists),
    )
    return facts, error


def static_runtimes(paths: Mapping[str, str], dists: Mapping[str, str]) -> dict[str, int]:
    """CuPy's statically linked CUDA runtime version.

    CuPy's statically linked CUDART_VERSION, by the one ``cupy-cuda*`` distribution that installed
    ``cupy_backends`` (two of them share that folder: then nothing is claimed).
    """
    cupies = [name for name in dists if re.fullmatch(r"cupy-cuda\d+x?", name)]
    path = paths.get("cupy")
    if not path or len(cupies) != 1:
        return {}
    version, _why = read_static_cudart_version(path)
    return {cupies[0]: version} if version else {}


def deep_probe(
    python: str,
    families: list[str],
    gpu_count: int,
    environ: Mapping[str, str],
    timeout: float = 120.0,
) -> tuple[list[dict[str, Any]], str]:
    try:
        proc = subprocess.run(
            [python, "-c", DEEP, ",".join(families), str(gpu_count)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_clean_env(environ),
        )
    except subprocess.TimeoutExpired:
        return [], f"the deep check did not finish within {timeout:.0f} s"
    except OSError as exc:
        return [], f"{python} could not be run ({exc})"
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1]), ""
    except (json.JSONDecodeError, IndexError):
        tail = (proc.stderr or "").strip().splitlines()[-1:] or ["no output"]
        return [], f"the deep check printed no readable result ({tail[0]})"
