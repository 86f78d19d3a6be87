"""Cluster views, health, readiness, metrics, the OpenAPI document and its human page."""

from __future__ import annotations

import logging

from aiohttp import web

from vpq.common.errors import Unavailable, VpqError
from vpq.gateway.http import json_response, query_int, read_json_object, validate
from vpq.gateway.keys import (
    BACKEND_KEY,
    DOCS_HTML_KEY,
    METRICS_KEY,
    OPENAPI_JSON_KEY,
    SETTINGS_KEY,
    UI_CSP_KEY,
    UI_HTML_KEY,
    WORKER_PEERS_KEY,
)
from vpq.gateway.models import ElectLeaderRequest
from vpq.gateway.routes_spec import QueryParam

HISTORY_LIMIT = QueryParam("limit", "how many epochs, newest first", minimum=1, maximum=1000, default=20)

log = logging.getLogger(__name__)


async def cluster(request: web.Request) -> web.Response:
    """``GET /v1/cluster``: nodes, physical partitions, current map epoch."""
    return json_response(await request.app[BACKEND_KEY].cluster())


async def elect_leader(request: web.Request) -> web.Response:
    """``POST /v1/cluster/partitions/{pp}/leader``: an operator's leader election."""
    raw = await read_json_object(request, request.app[SETTINGS_KEY].max_request_bytes, required=True)
    body = validate(ElectLeaderRequest, raw)
    answer = await request.app[BACKEND_KEY].elect_leader(request.match_info["pp"], body.node, body.unclean)
    return json_response(answer)


async def current_map(request: web.Request) -> web.Response:
    """``GET /v1/maps/current``: the placement map in force."""
    return json_response(await request.app[BACKEND_KEY].current_map())


async def map_history(request: web.Request) -> web.Response:
    """``GET /v1/maps/history?limit=N``: the latest map epochs, newest first."""
    limit = query_int(request, HISTORY_LIMIT)
    return json_response({"epochs": await request.app[BACKEND_KEY].map_history(limit)})


async def healthz(request: web.Request) -> web.Response:
    """``GET /healthz``: 200 while the gateway runs."""
    return json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """``GET /readyz``: 200 once the backend is ready, else 503 ``not_ready``."""
    if await request.app[BACKEND_KEY].ready():
        return json_response({"status": "ready"})
    raise Unavailable("not_ready", "the platform is not ready yet", retry_after=1)


async def metrics(request: web.Request) -> web.Response:
    """``GET /metrics``: the gateway's series (added up over its workers when it has
    several), then the backend's (when it has any)."""
    extra = ""
    try:
        extra = await request.app[BACKEND_KEY].metrics_text()
    except VpqError as exc:
        # node metrics are best effort: the gateway's own series are still served
        log.warning("backend metrics unavailable: %s", exc)
    m = request.app[METRICS_KEY]
    peers = request.app.get(WORKER_PEERS_KEY)
    # several workers: their own series (and counters) added up, then this one's view
    body = m.render() if peers is None else await peers.metrics()
    return web.Response(body=m.render_extra(body, extra), headers={"Content-Type": m.content_type})


async def openapi_json(request: web.Request) -> web.Response:
    """``GET /openapi.json``: the OpenAPI 3.1 document."""
    return web.Response(body=request.app[OPENAPI_JSON_KEY], content_type="application/json")


async def docs_page(request: web.Request) -> web.Response:
    """``GET /docs``: a self-contained HTML page describing every operation."""
    return web.Response(body=request.app[DOCS_HTML_KEY], content_type="text/html", charset="utf-8")


async def ui_page(request: web.Request) -> web.Response:
    """``GET /ui``: the dashboard, one self-contained page (``gateway.ui_page``)."""
    return web.Response(
        body=request.app[UI_HTML_KEY], content_type="text/html", charset="utf-8",
        headers={"Cache-Control": "no-cache", "Content-Security-Policy": request.app[UI_CSP_KEY]},
    )
