"""Typed ``web.AppKey``s of the gateway application (the only app-level state)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from vpq.config.settings import GatewaySettings, QueueDefaults
from vpq.gateway.auth import Authorizer
from vpq.gateway.backend import Backend
from vpq.gateway.metrics import GatewayMetrics
from vpq.gateway.routes_spec import RouteIndex
from vpq.gateway.worker_peers import WorkerPeers

SETTINGS_KEY = web.AppKey("vpq_gateway_settings", GatewaySettings)
QUEUE_DEFAULTS_KEY = web.AppKey("vpq_queue_defaults", QueueDefaults)
BACKEND_KEY = web.AppKey("vpq_backend", Backend)
METRICS_KEY = web.AppKey("vpq_metrics", GatewayMetrics)
AUTH_KEY = web.AppKey("vpq_authorizer", Authorizer)
ROUTES_KEY = web.AppKey("vpq_routes", RouteIndex)
OPENAPI_KEY = web.AppKey("vpq_openapi", dict[str, Any])
OPENAPI_JSON_KEY = web.AppKey("vpq_openapi_json", bytes)
DOCS_HTML_KEY = web.AppKey("vpq_docs_html", bytes)
UI_HTML_KEY = web.AppKey("vpq_ui_html", bytes)
UI_CSP_KEY = web.AppKey("vpq_ui_csp", str)
WORKER_PEERS_KEY = web.AppKey("vpq_worker_peers", WorkerPeers)
"""Set when the gateway runs as several workers (``gateway.workers``)."""
