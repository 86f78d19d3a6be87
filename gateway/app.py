"""The gateway application factory: ``create_app(settings, backend)``.

The app is stateless apart from its typed ``AppKey``s (``gateway/keys.py``): settings, the
backend, the metrics registry, the authoriser, the route index and the pre-rendered
OpenAPI document, docs page and dashboard (``gateway/ui_page.py``). Requests go through the middlewares of
``gateway/middleware.py`` (metrics, JSON errors, auth, path-name checks) to the thin
handlers of the route table (``gateway/routes.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
from aiohttp import web

from vpq.config.settings import GatewaySettings, QueueDefaults
from vpq.gateway.auth import Authorizer, auth_middleware
from vpq.gateway.backend import Backend
from vpq.gateway.docs_page import render_docs
from vpq.gateway.keys import (
    AUTH_KEY,
    BACKEND_KEY,
    DOCS_HTML_KEY,
    METRICS_KEY,
    OPENAPI_JSON_KEY,
    OPENAPI_KEY,
    QUEUE_DEFAULTS_KEY,
    ROUTES_KEY,
    SETTINGS_KEY,
    UI_CSP_KEY,
    UI_HTML_KEY,
)
from vpq.gateway.metrics import GatewayMetrics
from vpq.gateway.middleware import error_middleware, metrics_middleware, params_middleware
from vpq.gateway.openapi import build_openapi
from vpq.gateway.routes import ROUTES, add_routes
from vpq.gateway.routes_spec import RouteIndex
from vpq.gateway.ui_page import render_ui


async def _backend_lifecycle(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx: start the backend before serving, stop it on shutdown."""
    backend = app[BACKEND_KEY]
    await backend.start()
    try:
        yield
    finally:
        await backend.stop()


def create_app(
    settings: GatewaySettings,
    backend: Backend,
    *,
    queue_defaults: QueueDefaults | None = None,
    manage_backend: bool = True,
) -> web.Application:
    """Build the gateway's aiohttp application.

    ``settings`` gives the body limit (``max_request_bytes``, enforced as aiohttp's
    ``client_max_size`` and answered 413 JSON) and auth; ``queue_defaults`` the platform
    limits checked before the backend is called (``max_virtual_partitions``). With
    ``manage_backend`` (default) the app calls ``backend.start()`` on startup and
    ``backend.stop()`` on cleanup; pass False when the caller owns the backend's lifecycle.
    """
    routes = RouteIndex(ROUTES)
    authorizer = Authorizer(settings)
    metrics = GatewayMetrics()
    app = web.Application(
        client_max_size=settings.max_request_bytes,
        middlewares=[
            metrics_middleware(metrics),
            error_middleware,
            auth_middleware(authorizer, routes.for_request),
            params_middleware,
        ],
    )
    app[SETTINGS_KEY] = settings
    defaults = app[QUEUE_DEFAULTS_KEY] = queue_defaults or QueueDefaults()
    app[BACKEND_KEY] = backend
    app[METRICS_KEY] = metrics
    app[AUTH_KEY] = authorizer
    app[ROUTES_KEY] = routes
    document = build_openapi(
        routes.specs, auth_enabled=settings.auth_enabled, max_virtual_partitions=defaults.max_virtual_partitions
    )
    app[OPENAPI_KEY] = document
    app[OPENAPI_JSON_KEY] = orjson.dumps(document)
    app[DOCS_HTML_KEY] = render_docs(document).encode()
    app[UI_HTML_KEY], app[UI_CSP_KEY] = render_ui(settings.auth_enabled)
    add_routes(app, routes.specs)
    if manage_backend:
        app.cleanup_ctx.append(_backend_lifecycle)
    return app
