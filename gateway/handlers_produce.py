"""The produce handler: validate the whole batch (all or nothing), resolve each message's
isolation context, hand the batch to the backend as columns (``OutgoingBatch``), answer
the results in request order.

A plain body (``gateway.produce_decode``) is decoded straight into columns; any other
body, and every invalid one, goes through orjson and the pydantic models, which give the
400s."""

from __future__ import annotations

import time
from typing import Any

import orjson
from aiohttp import web
from pydantic import ValidationError

from vpq.codec.system_headers import attribute_headers
from vpq.common.errors import BadRequest, InternalError
from vpq.gateway.backend import ResolvedMessage
from vpq.gateway.http import (
    JSON_CONTENT_TYPE,
    bad_request_from,
    describe_errors,
    isolation_headers,
    parse_json_object,
    read_json_body,
)
from vpq.gateway.keys import BACKEND_KEY, METRICS_KEY, SETTINGS_KEY
from vpq.gateway.models import ProduceMessage, ProduceRequest
from vpq.gateway.produce_decode import decode_plain
from vpq.isolation.context import IsolationContext, IsolationError, PartialContext, resolve
from vpq.produce_path.outgoing import OutgoingBatch, ProduceResults


def time_ms() -> int:
    """The wall clock in Unix ms (what a message's delay counts from)."""
    return time.time_ns() // 1_000_000


def batch_error(exc: ValidationError) -> BadRequest:
    """The 400 for an invalid produce body. When messages are at fault: code
    ``invalid_message`` with ``index`` = the first bad message and its errors; otherwise
    (missing/empty/oversized list, unknown top-level field) ``invalid_request``."""
    first: int | None = None
    for err in exc.errors(include_url=False, include_input=False):
        loc = err.get("loc", ())
        if len(loc) >= 2 and loc[0] == "messages" and isinstance(loc[1], int):
            first = loc[1] if first is None else min(first, loc[1])
        else:
            return bad_request_from(exc)
    if first is None:
        return bad_request_from(exc)
    errors = [e for e in describe_errors(exc) if e["field"].startswith(f"messages[{first}]")]
    head = errors[0] if errors else {"field": f"messages[{first}]", "message": "invalid"}
    return BadRequest(
        "invalid_message",
        f"{head['field']}: {head['message']}",
        index=first,
        field=head["field"],
        errors=errors,
    )


def resolve_message(
    index: int,
    message: ProduceMessage,
    headers: PartialContext,
    cache: dict[tuple[str | None, str | None, str | None], IsolationContext] | None = None,
    now_ms: int | None = None,
) -> ResolvedMessage:
    """The backend's view of one validated message (400 ``invalid_message`` if its context
    cannot be resolved or its ``deliver_at_ms`` is too far away). ``cache`` (per request)
    reuses contexts of identical fields; ``now_ms`` is the request's receipt time (default:
    now). The message's platform attributes (due time, priority, dedup id) become reserved
    headers placed before its own (``codec.system_headers``)."""
    fields = (message.env, message.set_, message.lane)
    context = cache.get(fields) if cache is not None else None
    if context is None:
        try:
            context = resolve(PartialContext(env=fields[0], set=fields[1], lane=fields[2]), headers)
        except IsolationError as exc:
            raise BadRequest(
                "invalid_message", f"messages[{index}]: {exc}", index=index, field=f"messages[{index}].{exc.field}"
            ) from None
        if cache is not None:
            cache[fields] = context
    is_json = message.is_json
    value = orjson.dumps(message.value) if is_json else message.payload()
    try:
        due = message.deliver_at(time_ms() if now_ms is None else now_ms)
    except ValueError as exc:
        raise BadRequest(
            "invalid_message", f"messages[{index}].deliver_at_ms: {exc}", index=index,
            field=f"messages[{index}].deliver_at_ms",
        ) from None
    own: dict[str, str] = message.headers
    reserved = attribute_headers(due, message.priority, message.dedup_id)
    if reserved:
        own = {name: raw.decode("utf-8") for name, raw in reserved} | own
    return ResolvedMessage(key=message.key, value=value, value_is_json=is_json, headers=own, context=context)


def model_batch(raw: bytes, headers: PartialContext, now_ms: int | None = None) -> OutgoingBatch:
    """The columns of any produce body, validated by the pydantic models (the 400s)."""
    body = parse_json_object(raw, required=True)
    try:
        batch = ProduceRequest.model_validate(body)
    except ValidationError as exc:
        raise batch_error(exc) from None
    cache: dict[tuple[str | None, str | None, str | None], IsolationContext] = {}
    now = time_ms() if now_ms is None else now_ms
    return OutgoingBatch.from_messages(
        [resolve_message(i, m, headers, cache, now) for i, m in enumerate(batch.messages)]
    )


def results_body(results: ProduceResults | list[dict[str, Any]]) -> bytes:
    """``{"results": [...]}``: a backend answers ``ProduceResults`` or plain dicts."""
    if isinstance(results, ProduceResults):
        return results.json()
    return orjson.dumps({"results": results})


async def produce(request: web.Request) -> web.Response:
    """``POST /v1/queues/{queue}/messages``."""
    app = request.app
    queue = request.match_info["queue"]
    headers = isolation_headers(request)
    raw = await read_json_body(request, app[SETTINGS_KEY].max_request_bytes)
    now = time_ms()
    batch = decode_plain(raw, headers, now) if raw else None
    if batch is None:
        batch = model_batch(raw, headers, now)
    results = await app[BACKEND_KEY].produce(queue, batch)
    if len(results) != len(batch):
        raise InternalError("internal_error", f"backend answered {len(results)} results for {len(batch)} messages")
    app[METRICS_KEY].produced(queue, len(batch), batch.value_bytes())
    return web.Response(body=results_body(results), content_type=JSON_CONTENT_TYPE)
