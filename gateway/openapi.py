"""The OpenAPI 3.1 document, built from the route table and the pydantic models (pure).

Schemas come from ``pydantic.json_schema.models_json_schema`` with refs into
``#/components/schemas``; request models in validation mode, response models in
serialization mode. Each operation carries ``x-vpq-access`` (what auth requires, see
``routes_spec.Access``); error answers refer to ``ErrorResponse``; 429/503 document their
``Retry-After`` header.

The document describes the server that serves it: with auth disabled (the local default)
no operation requires a token (``security: []``), so a client or fuzzer reading it does not
expect 401s that cannot happen; ``x-vpq-access`` still tells what auth would require.
Likewise ``max_virtual_partitions`` narrows the documented ``virtual_partitions`` values to
the platform's limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from vpq.gateway.models import ISOLATION_PATTERN, NAME_PATTERN
from vpq.gateway.responses import ErrorResponse
from vpq.gateway.routes_spec import Access, RouteSpec

OPENAPI_VERSION = "3.1.0"
REF_PREFIX = "#/components/schemas/"

STATUS_TEXT = {
    200: "OK",
    201: "Created",
    204: "No Content",
    400: "Malformed or invalid request; nothing changed",
    401: "Missing or invalid bearer token",
    403: "The token lacks the scope",
    404: "Unknown queue, group or consumer",
    405: "Method not allowed",
    409: "Conflicts with the current state",
    413: "Request or message too large",
    415: "The body must be application/json",
    429: "Overloaded: retry after Retry-After seconds",
    503: "Unavailable: retry after Retry-After seconds",
    507: "Insufficient storage: nothing was appended; retry after Retry-After seconds",
}

ACCESS_TEXT = {
    Access.OPEN: "Open: no token needed.",
    Access.PRODUCE: "Needs the `produce` scope on the queue (when auth is enabled).",
    Access.CONSUME: "Needs the `consume` scope on the queue (when auth is enabled).",
    Access.ADMIN: "Needs the `admin` scope on the queue (when auth is enabled).",
    Access.ADMIN_GLOBAL: "Needs the `admin` scope on `*` (when auth is enabled).",
    Access.ANY_TOKEN: "Needs any valid token (when auth is enabled); answers only the queues it has a scope on.",
    Access.VALID_TOKEN: "Needs any valid token (when auth is enabled), with or without scopes.",
}

_PARAM_TEXT = {
    "queue": "queue name",
    "group": "consumer group name",
    "consumer_id": "consumer id (from the join answer)",
}

_ISOLATION_HEADERS = (
    ("X-Lane", "lane of messages (or the consumer) that carry none; default \"\" (backbone)"),
    ("X-Env", "env of messages (or the consumer) that carry none; default prod"),
    ("X-Set", "set of messages (or the consumer) that carry none; default \"\""),
)


def _collect_models(routes: Sequence[RouteSpec]) -> list[tuple[type[BaseModel], JsonSchemaMode]]:
    seen: dict[tuple[type[BaseModel], JsonSchemaMode], None] = {(ErrorResponse, "serialization"): None}
    for spec in routes:
        if spec.request_model is not None:
            seen[(spec.request_model, "validation")] = None
        if spec.response_model is not None:
            seen[(spec.response_model, "serialization")] = None
    return list(seen)


def _error_response(status: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "description": STATUS_TEXT.get(status, "Error"),
        "content": {"application/json": {"schema": {"$ref": REF_PREFIX + "ErrorResponse"}}},
    }
    if status in (429, 503, 507):
        out["headers"] = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer", "minimum": 0}}}
    if status == 401:
        out["headers"] = {"WWW-Authenticate": {"schema": {"type": "string"}, "description": "Bearer"}}
    return out


def _error_statuses(spec: RouteSpec) -> list[int]:
    statuses = set(spec.errors)
    if spec.request_model is not None:
        statuses |= {400, 413, 415}
    if spec.path_params or spec.isolation_headers or spec.query:
        statuses.add(400)
    if spec.access is not Access.OPEN:
        statuses.add(401)
        if spec.access not in (Access.ANY_TOKEN, Access.VALID_TOKEN):
            statuses.add(403)
    return sorted(statuses)


def _parameters(spec: RouteSpec) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "description": _PARAM_TEXT.get(name, name),
            "schema": {"type": "string", "pattern": NAME_PATTERN},
        }
        for name in spec.path_params
    ]
    for q in spec.query:
        params.append(
            {
                "name": q.name,
                "in": "query",
                "required": False,
                "description": q.description,
                "schema": {"type": "integer", "minimum": q.minimum, "maximum": q.maximum, "default": q.default},
            }
        )
    if spec.isolation_headers:
        for header, text in _ISOLATION_HEADERS:
            params.append(
                {
                    "name": header,
                    "in": "header",
                    "required": False,
                    "description": text,
                    "schema": {"type": "string", "pattern": ISOLATION_PATTERN},
                }
            )
    return params


def _operation(
    spec: RouteSpec, refs: dict[tuple[type[BaseModel], JsonSchemaMode], Any], auth_enabled: bool
) -> dict[str, Any]:
    description = "\n\n".join(x for x in (spec.description, ACCESS_TEXT[spec.access]) if x)
    secured = auth_enabled and spec.access is not Access.OPEN
    op: dict[str, Any] = {
        "operationId": spec.operation_id,
        "summary": spec.summary,
        "description": description,
        "tags": [spec.tag],
        "x-vpq-access": spec.access.value,
        "security": [{"bearerAuth": []}] if secured else [],
    }
    params = _parameters(spec)
    if params:
        op["parameters"] = params
    if spec.request_model is not None:
        op["requestBody"] = {
            "required": spec.request_required,
            "content": {"application/json": {"schema": refs[(spec.request_model, "validation")]}},
        }
    responses: dict[str, Any] = {}
    for status in (spec.status, *spec.alt_statuses):
        resp: dict[str, Any] = {"description": STATUS_TEXT.get(status, "OK")}
        if status != 204:
            if spec.response_model is not None:
                resp["content"] = {spec.response_media: {"schema": refs[(spec.response_model, "serialization")]}}
            elif spec.response_media == "application/json":
                resp["content"] = {spec.response_media: {"schema": {"type": "object"}}}
            else:
                resp["content"] = {spec.response_media: {"schema": {"type": "string"}}}
        responses[str(status)] = resp
    for status in _error_statuses(spec):
        responses[str(status)] = _error_response(status)
    responses["default"] = {
        "description": "Unexpected error (a 5xx is a bug)",
        "content": {"application/json": {"schema": {"$ref": REF_PREFIX + "ErrorResponse"}}},
    }
    op["responses"] = responses
    return op


def _limit_enums(node: Any, prop: str, limit: int) -> None:
    """Drop the values above ``limit`` from every integer ``enum`` of property ``prop``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict) and isinstance(value.get(prop), dict):
                _cap(value[prop], limit)
            _limit_enums(value, prop, limit)
    elif isinstance(node, list):
        for value in node:
            _limit_enums(value, prop, limit)


def _cap(schema: dict[str, Any], limit: int) -> None:
    if isinstance(schema.get("enum"), list):
        schema["enum"] = [v for v in schema["enum"] if not isinstance(v, int) or v <= limit]
    for alt in schema.get("anyOf", ()):
        if isinstance(alt, dict):
            _cap(alt, limit)


def build_openapi(
    routes: Sequence[RouteSpec],
    title: str = "vpq",
    version: str = "1.0.0",
    *,
    auth_enabled: bool = True,
    max_virtual_partitions: int | None = None,
) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``routes``. ``auth_enabled`` False: no operation needs a
    token (what a server with auth disabled answers). ``max_virtual_partitions``: the
    platform's limit on a queue's ``virtual_partitions`` (None: the models' own bound)."""
    models = _collect_models(routes)
    refs, top = models_json_schema(models, ref_template=REF_PREFIX + "{model}")
    schemas: dict[str, Any] = dict(sorted(top.get("$defs", {}).items()))
    if max_virtual_partitions is not None:
        _limit_enums(schemas, "virtual_partitions", max_virtual_partitions)
    paths: dict[str, dict[str, Any]] = {}
    for spec in routes:
        paths.setdefault(spec.path, {})[spec.method.lower()] = _operation(spec, refs, auth_enabled)
    tags = sorted({spec.tag for spec in routes}, key=[s.tag for s in routes].index)
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": title,
            "version": version,
            "description": "vpq: virtual-partition, read/write-separated message queue. "
            "Errors are {\"error\": {\"code\", \"message\", ...}}; a rejected request changes nothing."
            + ("" if auth_enabled else " Authentication is disabled on this server."),
        },
        "tags": [{"name": t} for t in tags],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
        },
    }
