"""Gateway middlewares, outermost first in ``create_app``:

1. ``metrics_middleware``: counts and times every answer (by method, route template, status);
2. ``error_middleware``: every failure becomes the JSON error answer
   ``{"error": {"code", "message", ...}}``:

   * a ``VpqError`` -> its status, JSON and headers (``Retry-After`` on 429/503,
     ``WWW-Authenticate`` on 401);
   * a pydantic ``ValidationError`` -> 400 ``invalid_request`` naming the field;
   * aiohttp's own HTTP errors -> JSON: unknown route 404 ``not_found``, 405
     ``method_not_allowed`` (with ``Allow``), body over ``client_max_size`` 413, ...;
   * anything else -> 500 ``internal_error``, logged with its traceback (a 5xx is a bug);
3. the auth middleware (``gateway/auth.py``);
4. ``params_middleware``: the ``{queue}``/``{group}``/``{consumer_id}`` path parameters must
   be names ``[A-Za-z0-9._-]{1,128}`` other than ``.`` and ``..`` (400 ``invalid_name``
   otherwise).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web
from pydantic import ValidationError

from vpq.common.errors import (
    BadRequest,
    InternalError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    Unavailable,
    UnsupportedMediaType,
    VpqError,
)
from vpq.gateway.http import bad_request_from, json_response
from vpq.gateway.metrics import UNMATCHED_ROUTE, GatewayMetrics
from vpq.gateway.models import NAME_RULE, is_valid_name

log = logging.getLogger(__name__)

HandlerT = Callable[[web.Request], Awaitable[web.StreamResponse]]
Middleware = Callable[[web.Request, HandlerT], Awaitable[web.StreamResponse]]

KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
NAME_PARAMS = ("queue", "group", "consumer_id")
CLIENT_CLOSED = 499


def error_response(err: VpqError) -> web.Response:
    """The JSON answer of an error."""
    return json_response(err.to_dict(), status=err.status, headers=err.headers())


def from_http_exception(exc: web.HTTPException, request: web.Request) -> VpqError:
    """aiohttp's HTTP errors in vpq's error hierarchy."""
    status = exc.status
    if status == 404:
        return NotFound("not_found", f"no such route: {request.method} {request.path}")
    if status == 405:
        allowed = sorted(getattr(exc, "allowed_methods", ()) or ())
        return MethodNotAllowed("method_not_allowed", f"{request.method} is not allowed on {request.path}", allowed=allowed)
    if status == 413:
        return PayloadTooLarge("payload_too_large", "the request body is too large")
    if status == 415:
        return UnsupportedMediaType("unsupported_media_type", "the body must be application/json")
    if status == 503:
        return Unavailable("unavailable", exc.reason or "unavailable")
    if 400 <= status < 500:
        return VpqError(f"http_{status}", exc.reason or f"HTTP {status}", status)
    return InternalError("internal_error", "internal error")


def route_label(request: web.Request) -> str:
    """The path template of the matched route, ``unmatched`` otherwise (bounded labels)."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else UNMATCHED_ROUTE


def metrics_middleware(metrics: GatewayMetrics) -> Middleware:
    @web.middleware
    async def _metrics(request: web.Request, handler: HandlerT) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        metrics.in_flight.inc()
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        except asyncio.CancelledError:
            status = CLIENT_CLOSED
            raise
        finally:
            metrics.in_flight.dec()
            method = request.method if request.method in KNOWN_METHODS else "OTHER"
            metrics.observe_request(method, route_label(request), status, time.perf_counter() - started)

    return _metrics


@web.middleware
async def error_middleware(request: web.Request, handler: HandlerT) -> web.StreamResponse:
    try:
        return await handler(request)
    except VpqError as err:
        if err.status >= 500 and not err.retryable:
            log.error("%s %s failed: %r", request.method, request.path, err)
        return error_response(err)
    except ValidationError as exc:
        return error_response(bad_request_from(exc))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(from_http_exception(exc, request))
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return error_response(InternalError("internal_error", "internal error; see the gateway log"))


def check_names(params: Mapping[str, str]) -> None:
    """400 ``invalid_name`` for the first path name (queue, group, consumer id) that breaks
    the naming rule."""
    for param in NAME_PARAMS:
        value = params.get(param)
        if value is not None and not is_valid_name(value):
            raise BadRequest(
                "invalid_name",
                f"{param} {value[:140]!r} must match {NAME_RULE}",
                field=param,
            )


@web.middleware
async def params_middleware(request: web.Request, handler: HandlerT) -> web.StreamResponse:
    check_names(request.match_info)
    return await handler(request)
