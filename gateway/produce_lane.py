"""The gateway's fast lane (``common.http_lane``) for ``POST /v1/queues/{queue}/messages``.

It answers every produce request whose path has no query or percent-escapes and whose
``Content-Type`` is JSON, including those it must refuse, and does what the middlewares
and the handler do, in their order: auth (401/403), the queue name (400
``invalid_name``), the isolation headers (400 ``invalid_header``), the body
(``decode_plain``, else the pydantic models' ``model_batch`` and their 400s), the backend
call and its errors, the same results body, the same JSON error answers with their headers
(``Retry-After``...), and the same metrics (``requests_total`` and ``request_seconds``
under the route's template, ``in_flight_requests``, ``produced_*``). Other produce requests
(escapes, a query, another content type, a body over ``max_request_bytes``) and all other
routes go to the aiohttp application, for good on that connection (``common.http_lane``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import Any

from aiohttp import web

from vpq.common.errors import BadRequest, InternalError, VpqError
from vpq.common.http1 import RequestHead
from vpq.common.http_lane import LaneAnswer, error_answer
from vpq.gateway.backend import Backend
from vpq.gateway.handlers_produce import model_batch, results_body, time_ms
from vpq.gateway.http import is_json_media
from vpq.gateway.keys import AUTH_KEY, BACKEND_KEY, METRICS_KEY, ROUTES_KEY, SETTINGS_KEY
from vpq.gateway.middleware import CLIENT_CLOSED, check_names
from vpq.gateway.produce_decode import decode_plain
from vpq.isolation.context import IsolationError, parse_isolation_headers
from vpq.produce_path.outgoing import OutgoingBatch

log = logging.getLogger(__name__)

ROUTE = "/v1/queues/{queue}/messages"
_PREFIX = "/v1/queues/"
_SUFFIX = "/messages"


class ProduceLane:
    """The produce route of one gateway app (built from its ``AppKey``s)."""

    def __init__(self, app: web.Application) -> None:
        self.max_body_bytes = app[SETTINGS_KEY].max_request_bytes
        self._backend: Backend = app[BACKEND_KEY]
        self._metrics = app[METRICS_KEY]
        self._auth = app[AUTH_KEY]
        spec = app[ROUTES_KEY].find("POST", ROUTE)
        if spec is None:
            raise ValueError(f"the route table has no POST {ROUTE}")
        self._spec = spec

    def wants(self, head: RequestHead) -> bool:
        target = head.target
        return head.method == "POST" and target.startswith(_PREFIX) and target.endswith(_SUFFIX)

    def take(self, head: RequestHead, body: bytes) -> Coroutine[Any, Any, LaneAnswer] | None:
        queue = head.target[len(_PREFIX) : -len(_SUFFIX)]
        content_type = head.headers.get("content-type", "").partition(";")[0].strip()
        if "%" in queue or "/" in queue or not queue or not is_json_media(content_type):
            return None  # escapes and the 415s are aiohttp's
        try:
            batch = self._batch(head, queue, body)
        except VpqError as err:
            return self._produce(queue, err)
        return self._produce(queue, batch)

    def _batch(self, head: RequestHead, queue: str, body: bytes) -> OutgoingBatch:
        """The request's batch after the checks of the middlewares and the handler, in
        their order (auth, path names, isolation headers, body); raises their errors."""
        if self._auth.enabled:
            self._auth.check(self._spec, head.headers.get("authorization"), queue)
        check_names({"queue": queue})
        try:
            context = parse_isolation_headers(head.headers)
        except IsolationError as exc:
            raise BadRequest("invalid_header", str(exc), field=exc.field) from None
        now = time_ms()
        batch = decode_plain(body, context, now) if body else None
        return batch if batch is not None else model_batch(body, context, now)

    async def _produce(self, queue: str, batch: OutgoingBatch | VpqError) -> LaneAnswer:
        metrics = self._metrics
        started = time.perf_counter()
        status = 500
        metrics.in_flight.inc()
        try:
            answer = await self._answer(queue, batch)
            status = answer.status
            return answer
        except asyncio.CancelledError:
            status = CLIENT_CLOSED
            raise
        finally:
            metrics.in_flight.dec()
            metrics.observe_request("POST", ROUTE, status, time.perf_counter() - started)

    async def _answer(self, queue: str, batch: OutgoingBatch | VpqError) -> LaneAnswer:
        if isinstance(batch, VpqError):
            return error_answer(batch)
        try:
            results = await self._backend.produce(queue, batch)
            if len(results) != len(batch):
                raise InternalError("internal_error", f"backend answered {len(results)} results for {len(batch)} messages")
        except VpqError as err:
            if err.status >= 500 and not err.retryable:
                log.error("POST /v1/queues/%s/messages failed: %r", queue, err)
            return error_answer(err)
        except Exception:
            log.exception("unhandled error in POST /v1/queues/%s/messages", queue)
            return error_answer(InternalError("internal_error", "internal error; see the gateway log"))
        self._metrics.produced(queue, len(batch), batch.value_bytes())
        return LaneAnswer(200, results_body(results))

