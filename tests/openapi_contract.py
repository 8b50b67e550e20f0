"""GitHub's REST contract, from GitHub's own OpenAPI description, for the test GitHub server.

The test server (``tests/github_server.py``) is only worth its name while it answers what
GitHub answers: an object the product reads but GitHub never sends (or a field GitHub always
sends but the server forgets) lets a test pass against a server that is not GitHub. So every
response the server serves is validated against the response schema of the matching operation
in GitHub's published description (npm ``@octokit/openapi``, installed into
``tests/openapi/node_modules`` by ``make test`` and ``.ci/run``, exactly as ``tests/mermaid``),
and every request must name an operation that exists (an unknown path is a test bug).

OpenAPI 3.0 is not JSON Schema: ``nullable: true`` becomes a union with ``null`` before
validating, ``$ref``s point into ``#/components`` of the whole document (registered once), and
``format`` is not enforced (as GitHub's own clients do not). Where the description is absent
(no npm on the machine) validation is off, with one warning, and the dedicated contract test
skips with the reason.
"""

from __future__ import annotations

import json
import re
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parent / "openapi" / "node_modules" / "@octokit" / "openapi"
DESCRIPTION = PACKAGE / "generated" / "api.github.com.json"
BASE_URI = "urn:github-openapi"
HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
#: Parameters every request may carry though no operation lists them (none today: GitHub's
#: description lists ``per_page``/``page`` on every paginated operation).
ALWAYS_ALLOWED_QUERY: frozenset[str] = frozenset()
#: Path parameters whose values may contain ``/`` (git refs).
SLASHED_PARAMETERS = frozenset({"{basehead}", "{ref}", "{branch}", "{path}"})
#: Where GitHub's answers are known to differ from its description, each with its report:
#: (schema, property) made nullable before validating.
KNOWN_INACCURACIES = {
    # "[Schema Inaccuracy] 'head_repository' on workflow run might also be null" -- once the
    # fork is deleted (github/rest-api-description#1586).
    ("workflow-run", "head_repository"),
}


def missing_reason() -> str | None:
    """Why the description cannot be used here, or None when it can."""
    if not DESCRIPTION.is_file():
        return (f"GitHub's OpenAPI description is not installed ({DESCRIPTION} is missing): run "
                "`npm ci --prefix tests/openapi --no-audit --no-fund --loglevel=error`")
    try:
        import jsonschema  # noqa: F401
        import referencing  # noqa: F401
    except ImportError as exc:  # pragma: no cover - the test extra installs both
        return f"jsonschema is not installed ({exc})"
    return None


@dataclass(frozen=True)
class Operation:
    method: str
    template: str
    """The description's path template, e.g. ``/repos/{owner}/{repo}/actions/runs``."""
    operation_id: str
    pointer: str
    """JSON pointer of the operation object inside the description."""
    query: frozenset[str]
    """Names of the query parameters the operation documents."""


def _nullable_to_union(node: Any) -> Any:
    """OpenAPI 3.0 schema -> JSON Schema: ``nullable: true`` as ``anyOf [null, schema]``."""
    if isinstance(node, list):
        return [_nullable_to_union(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _nullable_to_union(value) for key, value in node.items()}
    if out.pop("nullable", False) is True:
        return {"anyOf": [{"type": "null"}, out]}
    return out


def _absolute_refs(node: Any) -> Any:
    """``#/components/...`` in an operation's own schema -> the registered components."""
    if isinstance(node, list):
        return [_absolute_refs(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _absolute_refs(value) for key, value in node.items()}
    ref = out.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        out["$ref"] = BASE_URI + ref
    return out


def _escape(segment: str) -> str:
    return segment.replace("~", "~0").replace("/", "~1")


class Contract:
    """The operations of GitHub's description, and validators for their responses."""

    def __init__(self, document: dict[str, Any]) -> None:
        from jsonschema import Draft4Validator
        from referencing import Registry
        from referencing.jsonschema import DRAFT4

        self._document = document
        components = json.loads(json.dumps(document.get("components", {})))
        for schema, prop in KNOWN_INACCURACIES:
            components["schemas"][schema]["properties"][prop]["nullable"] = True
        components = _nullable_to_union(components)
        self._registry = Registry().with_resource(
            BASE_URI, DRAFT4.create_resource({"components": components}))
        self._validator_class = Draft4Validator
        self._validators: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()
        self._templates: list[tuple[re.Pattern[str], re.Pattern[str], str, dict[str, Any]]] = []
        for template, item in document["paths"].items():
            segments = template.strip("/").split("/")
            strict = "/".join("[^/]+" if s.startswith("{") else re.escape(s) for s in segments)
            # A last parameter that names refs may hold slashes (compare's ``base...head``
            # with branch names); no other parameter may.
            loose = "/".join([("[^/]+" if s.startswith("{") else re.escape(s))
                               for s in segments[:-1]]
                              + [(".+" if segments[-1] in SLASHED_PARAMETERS
                                  else "[^/]+" if segments[-1].startswith("{")
                                  else re.escape(segments[-1]))])
            self._templates.append((re.compile(f"/{strict}"), re.compile(f"/{loose}"),
                                    template, item))
        # Literal segments beat parameters, left to right: ``/runs/{id}/jobs`` before a
        # template whose third segment is a parameter.
        self._templates.sort(key=lambda t: [s.startswith("{") for s in
                                            t[2].strip("/").split("/")])
        # The loose pass: the longest template first, so ``compare/{basehead}`` wins over
        # ``/repos/{owner}/{repo}`` swallowing the rest.
        self._loose = sorted(self._templates, key=lambda t: -t[2].count("/"))

    # -- requests --------------------------------------------------------------------------
    def operation(self, method: str, path: str) -> Operation | None:
        """The operation serving ``method path`` (an ``/api/v3`` prefix is GHES's, dropped)."""
        if path.startswith("/api/v3/"):
            path = path[len("/api/v3"):]
        path = path.rstrip("/") or "/"
        for which, entries in ((0, self._templates), (1, self._loose)):
            for entry in entries:
                if not entry[which].fullmatch(path):
                    continue
                template, item = entry[2], entry[3]
                op = item.get(method.lower())
                if op is None:
                    continue
                params = list(item.get("parameters", [])) + list(op.get("parameters", []))
                names = frozenset(self._param(p)["name"] for p in params
                                  if self._param(p).get("in") == "query")
                return Operation(method.upper(), template, op.get("operationId", ""),
                                 f"/paths/{_escape(template)}/{method.lower()}", names)
        return None

    def _param(self, param: dict[str, Any]) -> dict[str, Any]:
        ref = param.get("$ref")
        if not ref:
            return param
        node: Any = self._document
        for part in ref.lstrip("#/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node  # type: ignore[no-any-return]

    def check_request(self, method: str, path: str, query: dict[str, list[str]]) -> list[str]:
        """What is wrong with a request (nothing: [])."""
        op = self.operation(method, path)
        if op is None:
            return [f"{method} {path}: no operation in GitHub's REST API has this method and path"]
        unknown = sorted(set(query) - op.query - ALWAYS_ALLOWED_QUERY)
        if unknown:
            return [f"{method} {path} ({op.operation_id}): query parameter(s) {unknown} are not "
                    f"documented (documented: {sorted(op.query)})"]
        return []

    # -- responses -------------------------------------------------------------------------
    def _response_schema(self, op: Operation, status: int) -> tuple[str, Any] | None:
        """(where, schema) for a JSON answer with ``status``; None when it has no body."""
        node: Any = self._document
        for part in op.pointer.strip("/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        responses = node.get("responses", {})
        key = next((k for k in (str(status), f"{str(status)[0]}XX", "default")
                    if k in responses), None)
        if key is None:
            if status >= 400:  # GitHub documents the usual error shape once, as basic-error
                return "components/schemas/basic-error", {
                    "$ref": "#/components/schemas/basic-error"}
            raise LookupError(f"status {status} is not documented for {op.operation_id} "
                              f"(documented: {sorted(responses)})")
        response = self._param(responses[key])
        content = response.get("content") or {}
        media = next((m for m in content if "json" in m), None)
        if media is None:
            return None
        return f"{op.operation_id} {key} {media}", content[media].get("schema", {})

    def _validator(self, op: Operation, status: int) -> tuple[str, Any] | None:
        cache_key = (op.pointer, str(status))
        with self._lock:
            if cache_key in self._validators:
                return self._validators[cache_key]  # type: ignore[no-any-return]
        found = self._response_schema(op, status)
        value = None
        if found is not None:
            where, schema = found
            schema = _nullable_to_union(schema)
            schema = _absolute_refs(schema)
            value = (where, self._validator_class(schema, registry=self._registry))
        with self._lock:
            self._validators[cache_key] = value
        return value

    def check_response(self, method: str, path: str, status: int, body: Any) -> list[str]:
        """What is wrong with a response (nothing: []), each naming the field and the rule."""
        op = self.operation(method, path)
        if op is None:
            return []  # reported by check_request
        try:
            found = self._validator(op, status)
        except LookupError as exc:
            return [f"{method} {path}: {exc}"]
        if found is None:
            if body not in (None, b"", {}, ""):
                return [f"{method} {path} ({op.operation_id} {status}): GitHub documents no JSON "
                        "body for this answer"]
            return []
        where, validator = found
        problems = []
        for error in sorted(validator.iter_errors(body), key=lambda e: list(e.absolute_path)):
            field = "/".join(str(p) for p in error.absolute_path) or "(the body)"
            problems.append(f"{method} {path} ({where}): at {field}: {error.message[:300]}")
        return problems[:20]


_CONTRACT: Contract | None = None
_LOADED = False
_LOAD_LOCK = threading.Lock()


def contract() -> Contract | None:
    """The description, loaded once per session; None (one warning) where it is absent."""
    global _CONTRACT, _LOADED
    with _LOAD_LOCK:
        if not _LOADED:
            _LOADED = True
            reason = missing_reason()
            if reason is None:
                with open(DESCRIPTION, encoding="utf-8") as handle:
                    _CONTRACT = Contract(json.load(handle))
            else:
                warnings.warn(f"the test GitHub server is not validated against GitHub's "
                              f"REST contract: {reason}", stacklevel=2)
        return _CONTRACT
