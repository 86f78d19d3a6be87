"""Request/answer plumbing shared by the handlers: JSON bodies in and out, validation
errors as 400s, isolation headers.

Body rules (every route with a JSON body):

* a non-empty body must be ``application/json`` (or ``application/<x>+json``), else 415;
* a body larger than ``GatewaySettings.max_request_bytes`` is 413 (declared
  ``Content-Length`` checked before reading; chunked bodies while reading);
* an empty body means ``{}`` unless the route requires a body (then 400);
* the body must be a JSON object (400 ``malformed_json`` / ``invalid_request``), validated
  by the route's pydantic model (400 ``invalid_request`` naming the field).
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import orjson
from aiohttp import web
from pydantic import BaseModel, ValidationError

from vpq.common.errors import BadRequest, PayloadTooLarge, UnsupportedMediaType
from vpq.gateway.routes_spec import QueryParam
from vpq.isolation.context import IsolationError, PartialContext, parse_isolation_headers

_INT_RE = re.compile(r"-?[0-9]{1,18}")

M = TypeVar("M", bound=BaseModel)

JSON_CONTENT_TYPE = "application/json"


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """A JSON answer encoded with orjson."""
    return web.Response(body=orjson.dumps(data), status=status, content_type=JSON_CONTENT_TYPE, headers=headers)


def is_json_media(content_type: str) -> bool:
    """True for ``application/json`` and ``application/<anything>+json``."""
    ct = content_type.lower()
    return ct == JSON_CONTENT_TYPE or (ct.startswith("application/") and ct.endswith("+json"))


def field_path(loc: tuple[int | str, ...]) -> str:
    """``("messages", 3, "value_b64")`` -> ``"messages[3].value_b64"``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _clean(msg: str) -> str:
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            return msg[len(prefix) :]
    return msg


def describe_errors(exc: ValidationError, drop: int = 0) -> list[dict[str, str]]:
    """``[{"field", "message"}]`` of a pydantic error; ``drop`` leading loc parts removed.
    Inputs are never echoed (they may be large or secret)."""
    out = []
    for err in exc.errors(include_url=False, include_input=False):
        loc = tuple(err.get("loc", ()))[drop:]
        out.append({"field": field_path(loc), "message": _clean(str(err.get("msg", "invalid")))})
    return out


def bad_request_from(exc: ValidationError, what: str = "request body") -> BadRequest:
    """400 ``invalid_request`` naming the first bad field (all of them under ``errors``)."""
    errors = describe_errors(exc)
    first = errors[0] if errors else {"field": "", "message": "invalid"}
    where = first["field"] or what
    return BadRequest("invalid_request", f"{where}: {first['message']}", field=first["field"], errors=errors)


async def read_json_body(request: web.Request, max_bytes: int) -> bytes:
    """The raw request body after the size and media-type rules of this module (an empty
    or blank body is returned as it is; ``parse_json_object`` decides about it)."""
    declared = request.content_length
    if declared is not None and declared > max_bytes:
        raise PayloadTooLarge("payload_too_large", f"request body of {declared} bytes exceeds {max_bytes}", limit=max_bytes)
    if request.body_exists and (declared is None or declared > 0) and not is_json_media(request.content_type):
        raise UnsupportedMediaType(
            "unsupported_media_type", f"the body must be application/json, not {request.content_type}"
        )
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge("payload_too_large", f"request body exceeds {max_bytes} bytes", limit=max_bytes) from None
    if len(raw) > max_bytes:
        raise PayloadTooLarge("payload_too_large", f"request body exceeds {max_bytes} bytes", limit=max_bytes)
    if raw and not raw.isspace() and not is_json_media(request.content_type):
        raise UnsupportedMediaType(
            "unsupported_media_type", f"the body must be application/json, not {request.content_type}"
        )
    return raw


def parse_json_object(raw: bytes, required: bool) -> dict[str, Any]:
    """A body read by ``read_json_body`` as a JSON object (``{}`` when empty and not
    ``required``)."""
    if not raw or raw.isspace():
        if required:
            raise BadRequest("invalid_request", "a JSON body is required")
        return {}
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest("malformed_json", f"the body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest("invalid_request", "the body must be a JSON object")
    return data


async def read_json_object(request: web.Request, max_bytes: int, required: bool) -> dict[str, Any]:
    """The request body as a JSON object, enforcing the body rules of this module."""
    return parse_json_object(await read_json_body(request, max_bytes), required)


def validate(model: type[M], data: dict[str, Any]) -> M:
    """``model.model_validate(data)``, a ValidationError becoming a 400."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise bad_request_from(exc) from None


def isolation_headers(request: web.Request) -> PartialContext:
    """X-Env/X-Set/X-Lane of the request (400 ``invalid_header`` when one is invalid)."""
    try:
        return parse_isolation_headers(request.headers)
    except IsolationError as exc:
        raise BadRequest("invalid_header", str(exc), field=exc.field) from None


def query_int(request: web.Request, param: QueryParam) -> int:
    """The integer query parameter ``param`` of ``request`` (its default when absent);
    400 ``invalid_query`` when it is not an integer within its bounds."""
    raw = request.query.get(param.name)
    if raw is None:
        return param.default
    value = int(raw) if _INT_RE.fullmatch(raw) else None
    if value is None or not param.minimum <= value <= param.maximum:
        raise BadRequest(
            "invalid_query",
            f"{param.name} must be an integer from {param.minimum} to {param.maximum}, got {raw[:40]!r}",
            field=param.name,
        )
    return value
