"""The gpu-monitor report inside an artifact's zip: found, read, validated.

The artifact is the job's to write, so a pull request can upload anything under the
monitor's name. One reader checks every report against gpu-monitor's own schema
(``gpu_ci/data/monitor-report.schema.json``, a copy of the action's, tested equal) before
the spend report's idle column or gpu-watchdog's evidence reads it.
"""

from __future__ import annotations

import functools
import io
import json
import math
import zipfile
import zlib
from collections.abc import Mapping
from typing import Any

MAX_REPORT_BYTES = 2 * 1024 * 1024
"""A gpu-monitor report is a few kB per GPU; a larger artifact or member is skipped."""

_KNOWN = {
    "$schema",
    "$id",
    "title",
    "description",
    "type",
    "required",
    "properties",
    "additionalProperties",
    "items",
    "const",
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
}


@functools.lru_cache(maxsize=1)
def _schema() -> dict[str, Any]:
    from importlib.resources import files

    text = files("gpu_ci").joinpath("data/monitor-report.schema.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def _versions() -> str:
    return " or ".join(str(v) for v in report_versions())


def report_versions() -> tuple[int, ...]:
    """The gpu-monitor report versions this package reads: the schema's ``schema_version``
    enum, the one place that says (the idle column, the watchdog's GPU-lost evidence)."""
    return tuple(_schema()["properties"]["schema_version"]["enum"])


def _type_ok(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    kinds: dict[str, Any] = {
        "string": str,
        "boolean": bool,
        "object": dict,
        "array": list,
        "null": type(None),
    }
    return isinstance(value, kinds[name])


def schema_errors(value: Any, schema: Mapping[str, Any], where: str = "$") -> list[str]:
    """Where ``value`` breaks ``schema``: the JSON Schema keywords report.schema.json uses
    (see ``_KNOWN``; any other keyword raises, so a schema change cannot pass unchecked).
    Hand-written because jsonschema would add five packages, one compiled, to every
    github-group action (the gate included) for eleven keywords; the tests check it agrees
    with jsonschema on good and broken reports."""
    unknown = set(schema) - _KNOWN
    if unknown:
        raise ValueError(f"report schema keyword(s) not supported: {sorted(unknown)}")
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_type_ok(value, n) for n in names):
            return [f"{where}: not {' or '.join(names)}"]
    if "const" in schema and value != schema["const"]:
        return [f"{where}: must be {schema['const']!r}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{where}: must be one of {schema['enum']}"]
    errors: list[str] = []
    if _type_ok(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{where}: below {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{where}: above {schema['maximum']}")
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            errors.append(f"{where}: not above {schema['exclusiveMinimum']}")
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        errors += [f"{where}: {k} missing" for k in schema.get("required") or [] if k not in value]
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in props:
                errors += schema_errors(item, props[key], f"{where}.{key}")
            elif extra is False:
                errors.append(f"{where}: unexpected {key}")
            elif isinstance(extra, dict):
                errors += schema_errors(item, extra, f"{where}.{key}")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            errors += schema_errors(item, schema["items"], f"{where}[{i}]")
    return errors


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):  # RFC 8259 numbers, but too large for a float: 1e999
        raise ValueError(f"{text} is not a finite number")
    return number


def load_json(raw: bytes) -> Any:
    """A report's JSON as RFC 8259 has it: Python's json also reads NaN and Infinity, which
    pass every minimum/maximum of the schema (no comparison with NaN fails) and made a
    month's idle sum NaN; here they are a ValueError (an unreadable report), and so is a
    number such as ``1e999`` that ``float`` reads as infinity (it passes a ``minimum``)."""
    return json.loads(raw, parse_constant=_no_constant, parse_float=_finite_float)


def read_json_artifact(blob: bytes) -> tuple[Any, str]:
    """The JSON report in an artifact's zip, or None and why not.

    The report is ``report.json``, or the zip's only JSON file; at most
    :data:`MAX_REPORT_BYTES`, and RFC 8259 JSON (:func:`load_json`). The caller checks its
    schema."""
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as archive:
            members = [i for i in archive.infolist() if i.filename.endswith(".json")]
            pick = [i for i in members if i.filename.rsplit("/", 1)[-1] == "report.json"]
            if len(pick) != 1 and len(members) != 1:
                return None, "no report.json (nor a single .json file) in it"
            info = (pick or members)[0]
            if info.file_size > MAX_REPORT_BYTES:
                return None, f"{info.filename} is over {MAX_REPORT_BYTES} bytes"
            return load_json(archive.read(info)), ""
    except (
        zipfile.BadZipFile,
        ValueError,
        OSError,
        RuntimeError,
        EOFError,
        zlib.error,
    ) as exc:  # RuntimeError: RecursionError, unsupported compression
        return None, f"not a readable zip of JSON ({exc})"


def read_monitor_report(blob: bytes) -> tuple[dict[str, Any] | None, str]:
    """gpu-monitor's report in an artifact's zip, or None and why not.

    Read by :func:`read_json_artifact`, then checked against the report schema."""
    data, why = read_json_artifact(blob)
    if why:
        return None, why
    errors = schema_errors(data, _schema())
    if errors:
        return None, (
            f"not a gpu-monitor report (schema_version {_versions()}): " + "; ".join(errors[:3])
        )
    return data, ""
