"""Queue administration handlers: create/update, describe, list, delete. Thin: validate,
call the backend, answer."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from vpq.common.errors import BadRequest
from vpq.gateway.auth import principal
from vpq.gateway.http import json_response, read_json_object, validate
from vpq.gateway.keys import AUTH_KEY, BACKEND_KEY, QUEUE_DEFAULTS_KEY, SETTINGS_KEY, WORKER_PEERS_KEY
from vpq.gateway.models import QueueConfigRequest


async def put_queue(request: web.Request) -> web.Response:
    """``PUT /v1/queues/{queue}``: 201 with the queue when created, 200 when updated."""
    app = request.app
    name = request.match_info["queue"]
    body = await read_json_object(request, app[SETTINGS_KEY].max_request_bytes, required=False)
    config = validate(QueueConfigRequest, body)
    limit = app[QUEUE_DEFAULTS_KEY].max_virtual_partitions
    if config.virtual_partitions is not None and config.virtual_partitions > limit:
        raise BadRequest(
            "invalid_request",
            f"virtual_partitions: at most {limit} on this platform",
            field="virtual_partitions",
        )
    queue, created = await app[BACKEND_KEY].put_queue(name, config.given())
    return json_response(queue, status=201 if created else 200)


async def list_queues(request: web.Request) -> web.Response:
    """``GET /v1/queues``: every queue the caller may see (all when auth is off)."""
    queues = await _with_all_workers_traffic(request, await request.app[BACKEND_KEY].list_queues())
    token = principal(request)
    if token is not None:
        authorizer = request.app[AUTH_KEY]
        queues = [q for q in queues if authorizer.can_see(token, str(q.get("name", "")))]
    return json_response({"queues": queues})


async def get_queue(request: web.Request) -> web.Response:
    """``GET /v1/queues/{queue}``: config, placement and traffic."""
    queue = await request.app[BACKEND_KEY].get_queue(request.match_info["queue"])
    return json_response((await _with_all_workers_traffic(request, [queue]))[0])


async def delete_queue(request: web.Request) -> web.Response:
    """``DELETE /v1/queues/{queue}``: 204 once deleted."""
    await request.app[BACKEND_KEY].delete_queue(request.match_info["queue"])
    return web.Response(status=204)


async def _with_all_workers_traffic(request: web.Request, queues: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``queues`` with their ``traffic`` added up over the gateway's workers (as they are
    when the gateway is one process)."""
    peers = request.app.get(WORKER_PEERS_KEY)
    if peers is None or not queues:
        return queues
    totals = await peers.traffic()
    for q in queues:
        figures = totals.get(str(q.get("name", "")))
        if figures is not None and "traffic" in q:
            q["traffic"] = figures
    return queues
