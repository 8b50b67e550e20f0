"""GitHub's REST contract, from its OpenAPI description, for the test server.

The test server (``testkit/github_server.py``) is only worth its name while it answers what
GitHub answers: an object the product reads but GitHub never sends (or a field GitHub always
sends but the server forgets) lets a test pass against a server that is not GitHub. So every
response the server serves is validated against the response schema of the matching operation
in GitHub's published description (npm ``@octokit/openapi``, installed into
``tests/openapi/node_modules`` by ``make test`` and ``.ci/run``, exactly as ``tests/mermaid``),
and every request must name an operation that exists (an unknown path is a test bug).

OpenAPI 3.0 is not JSON Schema: ``nullable: true`` becomes a union with ``null`` before
validating, ``$ref``s point into ``#/components`` of the whole document, and ``format`` and
``uniqueItems`` are not enforced (as GitHub's own clients do not). The validator is a small
compiled one (``_Compiler``) over the keywords GitHub's description uses: ``jsonschema`` took
over a second for a page of 100 runs, longer than the product's test timeouts. Where the
description is absent
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
from typing import Any, Callable

PACKAGE = (
    Path(__file__).resolve().parent.parent
    / "tests"
    / "openapi"
    / "node_modules"
    / "@octokit"
    / "openapi"
)
DESCRIPTION = PACKAGE / "generated" / "api.github.com.json"
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
        return (
            f"GitHub's OpenAPI description is not installed ({DESCRIPTION} is missing): run "
            "`npm ci --prefix tests/openapi --no-audit --no-fund --loglevel=error`"
        )
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


def _escape(segment: str) -> str:
    return segment.replace("~", "~0").replace("/", "~1")


class Contract:
    """The operations of GitHub's description, and validators for their responses."""

    def __init__(self, document: dict[str, Any]) -> None:
        self._document = document
        components = json.loads(json.dumps(document.get("components", {})))
        for schema, prop in KNOWN_INACCURACIES:
            components["schemas"][schema]["properties"][prop]["nullable"] = True
        self._compiler = _Compiler({"components": _nullable_to_union(components)})
        self._validators: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()
        self._templates: list[tuple[re.Pattern[str], re.Pattern[str], str, dict[str, Any]]] = []
        for template, item in document["paths"].items():
            segments = template.strip("/").split("/")
            strict = "/".join("[^/]+" if s.startswith("{") else re.escape(s) for s in segments)
            # A last parameter that names refs may hold slashes (compare's ``base...head``
            # with branch names); no other parameter may.
            loose = "/".join(
                [("[^/]+" if s.startswith("{") else re.escape(s)) for s in segments[:-1]]
                + [
                    (
                        ".+"
                        if segments[-1] in SLASHED_PARAMETERS
                        else "[^/]+"
                        if segments[-1].startswith("{")
                        else re.escape(segments[-1])
                    )
                ]
            )
            self._templates.append(
                (re.compile(f"/{strict}"), re.compile(f"/{loose}"), template, item)
            )
        # Literal segments beat parameters, left to right: ``/runs/{id}/jobs`` before a
        # template whose third segment is a parameter.
        self._templates.sort(key=lambda t: [s.startswith("{") for s in t[2].strip("/").split("/")])
        # The loose pass: the longest template first, so ``compare/{basehead}`` wins over
        # ``/repos/{owner}/{repo}`` swallowing the rest.
        self._loose = sorted(self._templates, key=lambda t: -t[2].count("/"))

    # -- requests --------------------------------------------------------------------------
    def operation(self, method: str, path: str) -> Operation | None:
        """The operation serving ``method path`` (an ``/api/v3`` prefix is GHES's, dropped)."""
        if path.startswith("/api/v3/"):
            path = path[len("/api/v3") :]
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
                names = frozenset(
                    self._param(p)["name"] for p in params if self._param(p).get("in") == "query"
                )
                return Operation(
                    method.upper(),
                    template,
                    op.get("operationId", ""),
                    f"/paths/{_escape(template)}/{method.lower()}",
                    names,
                )
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
            return [
                f"{method} {path} ({op.operation_id}): query parameter(s) {unknown} are not "
                f"documented (documented: {sorted(op.query)})"
            ]
        return []

    # -- responses -------------------------------------------------------------------------
    def _response_schema(self, op: Operation, status: int) -> tuple[str, Any] | None:
        """(where, schema) of a JSON answer with ``status``.

        None when the answer has no body."""
        node: Any = self._document
        for part in op.pointer.strip("/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        responses = node.get("responses", {})
        key = next(
            (k for k in (str(status), f"{str(status)[0]}XX", "default") if k in responses), None
        )
        if key is None:
            if status >= 400:  # GitHub documents the usual error shape once, as basic-error
                return "components/schemas/basic-error", {
                    "$ref": "#/components/schemas/basic-error"
                }
            raise LookupError(
                f"status {status} is not documented for {op.operation_id} "
                f"(documented: {sorted(responses)})"
            )
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
            value = (where, self._compiler.compile(_nullable_to_union(schema)))
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
                return [
                    f"{method} {path} ({op.operation_id} {status}): GitHub documents no JSON "
                    "body for this answer"
                ]
            return []
        where, validate = found
        errors: list[tuple[str, str]] = []
        validate(body, "", errors)
        return [
            f"{method} {path} ({where}): at {field or '(the body)'}: {message[:300]}"
            for field, message in errors[:20]
        ]


Check = Callable[[Any, str, "list[tuple[str, str]]"], None]
_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


class _Compiler:
    """Compiles OpenAPI schemas into checks that list each violation.

    The schemas are JSON-Schema-translated; each check appends ``(field, message)``. Keywords:
    $ref, type, required, properties, additionalProperties, items, enum, allOf, anyOf, oneOf,
    min/maxItems, min/maxLength, minimum/maximum, pattern, maxProperties. Compiled once per
    schema object (refs lazily, so recursive schemas work)."""

    def __init__(self, root: dict[str, Any]) -> None:
        self._root = root
        self._compiled: dict[int, Check] = {}
        self._keep: list[Any] = []  # the schemas whose id() keys _compiled stay alive
        self._lock = threading.RLock()  # the server's threads compile refs lazily

    def _resolve(self, ref: str) -> Any:
        node: Any = self._root
        for part in ref.lstrip("#/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def compile(self, schema: Any) -> Check:
        with self._lock:
            return self._compile(schema)

    def _compile(self, schema: Any) -> Check:
        key = id(schema)
        if key in self._compiled:
            return self._compiled[key]
        self._keep.append(schema)
        slot: list[Check] = []
        self._compiled[key] = lambda v, at, errs: slot[0](v, at, errs)  # for recursion
        check = self._build(schema)
        slot.append(check)
        self._compiled[key] = check
        return check

    def _build(self, schema: Any) -> Check:
        if not isinstance(schema, dict):
            return lambda v, at, errs: None
        checks: list[Check] = []
        if "$ref" in schema:
            target = self._resolve(schema["$ref"])
            ref_check: list[Check] = []

            def by_ref(v: Any, at: str, errs: list[tuple[str, str]]) -> None:
                if not ref_check:
                    ref_check.append(self.compile(target))
                ref_check[0](v, at, errs)

            return by_ref
        kind = schema.get("type")
        if kind is not None:
            kinds = kind if isinstance(kind, list) else [kind]
            tests = [_TYPES[k] for k in kinds]

            def typed(v: Any, at: str, errs: list[tuple[str, str]]) -> None:
                if not any(t(v) for t in tests):
                    errs.append(
                        (at, f"{v!r:.80} is not of type " + ", ".join(repr(k) for k in kinds))
                    )

            checks.append(typed)
        if "enum" in schema:
            allowed = schema["enum"]

            def enum(v: Any, at: str, errs: list[tuple[str, str]]) -> None:
                if v not in allowed:
                    errs.append((at, f"{v!r:.80} is not one of {allowed!r:.200}"))

            checks.append(enum)
        props = {name: self.compile(sub) for name, sub in schema.get("properties", {}).items()}
        required = list(schema.get("required", []))
        extra = schema.get("additionalProperties", True)
        extra_check = self.compile(extra) if isinstance(extra, dict) else None
        if props or required or extra is not True or "maxProperties" in schema:
            most = schema.get("maxProperties")

            def obj(v: Any, at: str, errs: list[tuple[str, str]]) -> None:
                if not isinstance(v, dict):
                    return
                for name in required:
                    if name not in v:
                        errs.append((at, f"{name!r} is a required property"))
                for name, value in v.items():
                    where = f"{at}/{name}" if at else str(name)
                    if name in props:
                        props[name](value, where, errs)
                    elif extra is False:
                        errs.append((at, f"additional property {name!r} is not allowed"))
                    elif extra_check is not None:
                        extra_check(value, where, errs)
                if most is not None and len(v) > most:
                    errs.append((at, f"has more than {most} properties"))

            checks.append(obj)
        if "items" in schema:
            item = self.compile(schema["items"])

            def items(v: Any, at: str, errs: list[tuple[str, str]]) -> None:
                if isinstance(v, list):
                    for i, value in enumerate(v):
                        item(value, f"{at}/{i}" if at else str(i), errs)

            checks.append(items)
        for name, test, text in (
            ("minItems", lambda v, n: not isinstance(v, list) or len(v) >= n, "fewer items"),
            ("maxItems", lambda v, n: not isinstance(v, list) or len(v) <= n, "more items"),
            ("minLength", lambda v, n: not isinstance(v, str) or len(v) >= n, "shorter"),
            ("maxLength", lambda v, n: not isinstance(v, str) or len(v) <= n, "longer"),
            ("minimum", lambda v, n: not _TYPES["number"](v) or v >= n, "smaller"),
            ("maximum", lambda v, n: not _TYPES["number"](v) or v <= n, "larger"),
        ):
            if name in schema:
                checks.append(_bound(name, schema[name], test, text))
        if "pattern" in schema:
            pattern = re.compile(schema["pattern"])

            def matches(v: Any, at: str, errs: list[tuple[str, str]]) -> None:
                if isinstance(v, str) and not pattern.search(v):
                    errs.append((at, f"{v!r:.80} does not match {pattern.pattern!r}"))

            checks.append(matches)
        for sub in schema.get("allOf", []):
            checks.append(self.compile(sub))
        for word in ("anyOf", "oneOf"):
            if word in schema:
                checks.append(_alternatives(word, [self.compile(sub) for sub in schema[word]]))

        def every(v: Any, at: str, errs: list[tuple[str, str]]) -> None:
            for check in checks:
                check(v, at, errs)

        return every


def _bound(name: str, limit: Any, test: Callable[[Any, Any], bool], text: str) -> Check:
    def check(v: Any, at: str, errs: list[tuple[str, str]]) -> None:
        if not test(v, limit):
            errs.append((at, f"{v!r:.80} is {text} than {name} {limit!r} allows"))

    return check


def _alternatives(word: str, options: list[Check]) -> Check:
    def check(v: Any, at: str, errs: list[tuple[str, str]]) -> None:
        results = []
        for option in options:
            found: list[tuple[str, str]] = []
            option(v, at, found)
            results.append(found)
        passing = sum(not found for found in results)
        if passing == 0:
            closest = min(results, key=len)  # the alternative it nearly is, named
            errs.append(
                (
                    at,
                    f"{v!r:.80} is not valid under any of the given schemas "
                    f"({word}; closest: {closest[0][0] or '(here)'}: {closest[0][1]})",
                )
            )
        elif word == "oneOf" and passing > 1:
            errs.append((at, f"{v!r:.80} is valid under {passing} of the oneOf schemas"))

    return check


_CONTRACT: Contract | None = None
_LOADED = False
_LOAD_LOCK = threading.Lock()


def contract() -> Contract | None:
    """The description, loaded once per session.

    None, with one warning, where it is absent."""
    global _CONTRACT, _LOADED
    with _LOAD_LOCK:
        if not _LOADED:
            _LOADED = True
            reason = missing_reason()
            if reason is None:
                with open(DESCRIPTION, encoding="utf-8") as handle:
                    _CONTRACT = Contract(json.load(handle))
            else:
                warnings.warn(
                    f"the test GitHub server is not validated against GitHub's "
                    f"REST contract: {reason}",
                    stacklevel=2,
                )
        return _CONTRACT
