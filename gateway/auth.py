"""Bearer-token authorisation: tokens with scopes on queue-name glob patterns.

Configured by ``GatewaySettings.auth_enabled`` and ``GatewaySettings.tokens`` (each an
``AuthToken(token, scopes={"produce"|"consume"|"admin": [glob, ...]})``; globs are
``fnmatch`` patterns matched case-sensitively against the queue name). Disabled by default:
then every request is allowed.

When enabled (see ``routes_spec.Access`` for what each route needs):

* no ``Authorization: Bearer <token>`` header, or an unknown token: 401
  ``unauthorized`` / ``invalid_token`` with ``WWW-Authenticate: Bearer``;
* a known token without the needed scope on the queue: 403 ``forbidden``.

``GET /metrics`` needs a valid token with any scopes or none (``Access.VALID_TOKEN``): a
scraper can hold a token with ``scopes = {}``, which opens nothing else.

Scopes are independent: ``admin`` does not imply ``produce`` or ``consume``. A group's
dead-letter queue ``{queue}.{group}.dlq`` is a queue like any other: a pattern such as
``orders*`` covers it.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from fnmatch import fnmatchcase

from aiohttp import web

from vpq.common.errors import Forbidden, Unauthorized
from vpq.config.settings import AuthToken, GatewaySettings
from vpq.gateway.routes_spec import Access, RouteSpec

SCOPES = ("produce", "consume", "admin")
PRINCIPAL_KEY = web.RequestKey("vpq_principal", AuthToken)


class Authorizer:
    """Decides who may do what. Pure: no I/O; built once from the settings."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.enabled = settings.auth_enabled
        self._tokens: list[AuthToken] = list(settings.tokens)
        for tok in self._tokens:
            unknown = set(tok.scopes) - set(SCOPES)
            if unknown:
                raise ValueError(f"unknown auth scope(s) {sorted(unknown)}; use {list(SCOPES)}")
            if not tok.token:
                raise ValueError("an auth token must not be empty")

    def authenticate(self, authorization: str | None) -> AuthToken:
        """The token named by an ``Authorization`` header value, else Unauthorized."""
        if not authorization:
            raise Unauthorized("unauthorized", "an 'Authorization: Bearer <token>' header is required")
        scheme, _, credentials = authorization.strip().partition(" ")
        credentials = credentials.strip()
        if scheme.lower() != "bearer" or not credentials:
            raise Unauthorized("unauthorized", "the Authorization header must be 'Bearer <token>'")
        given = credentials.encode()
        found: AuthToken | None = None
        for tok in self._tokens:
            # compare against every token so timing does not reveal which one matched
            if hmac.compare_digest(tok.token.encode(), given):
                found = tok
        if found is None:
            raise Unauthorized("invalid_token", "the bearer token is not valid")
        return found

    @staticmethod
    def allows(token: AuthToken, scope: str, queue: str) -> bool:
        """True when ``token`` has ``scope`` on a pattern matching ``queue``."""
        return any(fnmatchcase(queue, pat) for pat in token.scopes.get(scope, ()))

    @staticmethod
    def can_see(token: AuthToken, queue: str) -> bool:
        """True when ``token`` has any scope on ``queue`` (used to filter queue lists)."""
        return any(fnmatchcase(queue, pat) for pats in token.scopes.values() for pat in pats)

    def check(self, spec: RouteSpec, authorization: str | None, queue: str | None) -> AuthToken | None:
        """Authorise a request to ``spec``; answers the caller's token (None when auth is
        disabled or the route is open). Raises Unauthorized / Forbidden."""
        if not self.enabled or spec.access is Access.OPEN:
            return None
        token = self.authenticate(authorization)
        access = spec.access
        if access in (Access.ANY_TOKEN, Access.VALID_TOKEN):
            return token
        if access is Access.ADMIN_GLOBAL:
            if "*" not in token.scopes.get("admin", ()):
                raise Forbidden("forbidden", "this operation needs the 'admin' scope on '*'")
            return token
        if queue is None:
            raise ValueError(f"route {spec.method} {spec.path} needs a {{queue}} parameter for auth")
        scope = access.value
        if not self.allows(token, scope, queue):
            raise Forbidden("forbidden", f"the token has no {scope!r} scope on queue {queue!r}", scope=scope)
        return token


def principal(request: web.Request) -> AuthToken | None:
    """The authenticated token of the request (None when auth is off or the route is open)."""
    return request.get(PRINCIPAL_KEY)


def auth_middleware(
    authorizer: Authorizer, lookup: Callable[[web.Request], RouteSpec | None]
) -> Callable[[web.Request, Callable[[web.Request], Awaitable[web.StreamResponse]]], Awaitable[web.StreamResponse]]:
    """Middleware checking every matched route; unmatched requests pass (they become 404/405)."""

    @web.middleware
    async def _auth(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        spec = lookup(request)
        if spec is not None:
            token = authorizer.check(spec, request.headers.get("Authorization"), request.match_info.get("queue"))
            if token is not None:
                request[PRINCIPAL_KEY] = token
        return await handler(request)

    return _auth
