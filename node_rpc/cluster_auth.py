"""The cluster secret on node-to-node calls, both sides (``docs/internals.md``,
"Cluster secret").

- Callers: ``client_headers(secret)`` are the default headers of the
  ``aiohttp.ClientSession`` a process uses to call nodes, so every request it sends to
  a node carries ``X-Vpq-Cluster-Secret`` (nothing when ``secret`` is None).
- Nodes: ``cluster_secret_middlewares(secret)`` go into a node app's middleware list,
  after its error middleware. Every request must carry the secret, whatever its path
  (unknown paths included), except those in ``OPEN_PATHS`` (health checks, should a node
  serve any): else 401 ``cluster_secret_required`` (no header) or ``bad_cluster_secret``
  (another value), raised as ``Unauthorized`` before the handler runs, so a refused
  call reads no body and changes nothing. The comparison is ``hmac.compare_digest``.
  With ``secret`` None the list is empty: every call is accepted.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from aiohttp import web

from vpq.common.errors import Unauthorized

CLUSTER_SECRET_HEADER = "X-Vpq-Cluster-Secret"
"""The header carrying the cluster secret on every node-to-node call."""

CLUSTER_SECRET_REQUIRED = "cluster_secret_required"
BAD_CLUSTER_SECRET = "bad_cluster_secret"
OPEN_PATHS = frozenset({"/healthz", "/readyz"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Middleware = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]


def client_headers(secret: str | None) -> dict[str, str]:
    """Default headers of a session that calls nodes."""
    return {} if secret is None else {CLUSTER_SECRET_HEADER: secret}


def check_cluster_secret(expected: str, presented: str | None) -> None:
    """Nothing when ``presented`` is ``expected``; ``Unauthorized`` otherwise."""
    if presented is None:
        raise Unauthorized(CLUSTER_SECRET_REQUIRED, f"node-to-node calls need the {CLUSTER_SECRET_HEADER} header")
    if not hmac.compare_digest(expected.encode(), presented.encode()):
        raise Unauthorized(BAD_CLUSTER_SECRET, "the cluster secret is not valid")


def cluster_secret_middlewares(secret: str | None) -> list[Middleware]:
    """The middlewares enforcing ``secret`` (none for None)."""
    if secret is None:
        return []

    @web.middleware
    async def _require_secret(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path not in OPEN_PATHS:
            check_cluster_secret(secret, request.headers.get(CLUSTER_SECRET_HEADER))
        return await handler(request)

    return [_require_secret]
