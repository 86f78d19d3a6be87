"""The OpenAPI 3.1 document, built from the route table and the pydantic models (pure).

Schemas come from ``pydantic.json_schema.models_json_schema`` with refs into
``#/components/schemas``; request models in validation mode, response models in
serialization mode. Each operation carries ``x-vpq-access`` (what auth requires, see
``routes_spec.Access``); error answers refer to ``ErrorResponse``; 429/503 document their
``Retry-After`` header.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from gateway.models import ISOLATION_PATTERN, NAME_PATTERN
from gateway.responses import ErrorResponse
from gateway.routes_spec import Access, RouteSpec

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
}

ACCESS_TEXT = {
    Access.OPEN: "Open: no token needed.",
    Access.PRODUCE: "Needs the `produce` scope on the queue (when auth is enabled).",
    Access.CONSUME: "Needs the `consume` scope on the queue (when auth is enabled).",
    Access.ADMIN: "Needs the `admin` scope on the queue (when auth is enabled).",
    Access.ADMIN_GLOBAL: "Needs the `admin` scope on `*` (when auth is enabled).",
    Access.ANY_TOKEN: "Needs any valid token (when auth is enabled); answers only the queues it has a scope on.",
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
    if status in (429, 503):
        out["headers"] = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer", "minimum": 0}}}
    if status == 401:
        out["headers"] = {"WWW-Authenticate": {"schema": {"type": "string"}, "description": "Bearer"}}
    return out


def _error_statuses(spec: RouteSpec) -> list[int]:
    statuses = set(spec.errors)
    if spec.request_model is not None:
        statuses |= {400, 413, 415}
    if spec.path_params or spec.isolation_headers:
        statuses.add(400)
    if spec.access is not Access.OPEN:
        statuses.add(401)
        if spec.access is not Access.ANY_TOKEN:
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


def _operation(spec: RouteSpec, refs: dict[tuple[type[BaseModel], JsonSchemaMode], Any]) -> dict[str, Any]:
    description = "\n\n".join(x for x in (spec.description, ACCESS_TEXT[spec.access]) if x)
    op: dict[str, Any] = {
        "operationId": spec.operation_id,
        "summary": spec.summary,
        "description": description,
        "tags": [spec.tag],
        "x-vpq-access": spec.access.value,
        "security": [] if spec.access is Access.OPEN else [{"bearerAuth": []}],
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


def build_openapi(routes: Sequence[RouteSpec], title: str = "vpq", version: str = "1.0.0") -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``routes``."""
    models = _collect_models(routes)
    refs, top = models_json_schema(models, ref_template=REF_PREFIX + "{model}")
    schemas: dict[str, Any] = dict(sorted(top.get("$defs", {}).items()))
    paths: dict[str, dict[str, Any]] = {}
    for spec in routes:
        paths.setdefault(spec.path, {})[spec.method.lower()] = _operation(spec, refs)
    tags = sorted({spec.tag for spec in routes}, key=[s.tag for s in routes].index)
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": title,
            "version": version,
            "description": "vpq: virtual-partition, read/write-separated message queue. "
            "Errors are {\"error\": {\"code\", \"message\", ...}}; a rejected request changes nothing.",
        },
        "tags": [{"name": t} for t in tags],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
        },
    }
