"""What a route is: one ``RouteSpec`` feeds the router, the auth check, the metrics label
and the OpenAPI document, so they cannot drift apart. Pure data, no I/O."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from enum import Enum

from aiohttp import web
from pydantic import BaseModel

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_PARAM_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class Access(str, Enum):
    """What a caller needs for a route when auth is enabled.

    * ``OPEN``: nothing (health, readiness, OpenAPI, docs).
    * ``PRODUCE`` / ``CONSUME`` / ``ADMIN``: that scope on a pattern matching ``{queue}``.
    * ``ADMIN_GLOBAL``: the ``admin`` scope with the pattern ``*`` (cluster-wide views:
      they reveal every queue and node).
    * ``ANY_TOKEN``: any valid token; the answer is filtered to the queues the token has
      some scope on (``GET /v1/queues``).
    * ``VALID_TOKEN``: any valid token, whatever its scopes (one with no scope at all is
      enough, e.g. a Prometheus scraper's); the answer is not filtered (``GET /metrics``).
    """

    OPEN = "open"
    PRODUCE = "produce"
    CONSUME = "consume"
    ADMIN = "admin"
    ADMIN_GLOBAL = "admin_global"
    ANY_TOKEN = "any_token"
    VALID_TOKEN = "valid_token"


@dataclass(frozen=True)
class QueryParam:
    """An optional integer query parameter (``?name=N``) with its bounds and default."""

    name: str
    description: str
    minimum: int
    maximum: int
    default: int


@dataclass(frozen=True)
class RouteSpec:
    """One operation of the public API.

    ``status`` is the usual success status; ``alt_statuses`` other success statuses (e.g. 201
    on create); ``errors`` the documented error statuses. ``request_model``/``response_model``
    are the JSON bodies (None: no JSON body); ``response_media`` the media type when the
    answer is not JSON. ``isolation_headers``: the route reads X-Lane/X-Env/X-Set.
    ``request_required``: the JSON body must be given (otherwise an empty body means ``{}``).
    ``query``: the integer query parameters it reads (``http.query_int`` parses them).
    """

    method: str
    path: str
    handler: Handler
    operation_id: str
    summary: str
    tag: str
    access: Access
    request_model: type[BaseModel] | None = None
    response_model: type[BaseModel] | None = None
    status: int = 200
    alt_statuses: tuple[int, ...] = ()
    errors: tuple[int, ...] = ()
    isolation_headers: bool = False
    response_media: str = "application/json"
    description: str = ""
    request_required: bool = False
    query: tuple[QueryParam, ...] = ()

    @property
    def path_params(self) -> tuple[str, ...]:
        """Names of the ``{placeholders}`` of ``path``, in order."""
        return tuple(_PARAM_RE.findall(self.path))


class RouteIndex:
    """Finds the ``RouteSpec`` of a matched request by (method, path template)."""

    def __init__(self, specs: Iterable[RouteSpec]) -> None:
        self.specs: tuple[RouteSpec, ...] = tuple(specs)
        self._by_key: dict[tuple[str, str], RouteSpec] = {}
        for spec in self.specs:
            key = (spec.method, spec.path)
            if key in self._by_key:
                raise ValueError(f"duplicate route {spec.method} {spec.path}")
            self._by_key[key] = spec
        ops = [s.operation_id for s in self.specs]
        if len(set(ops)) != len(ops):
            raise ValueError("duplicate operation_id in the route table")

    def find(self, method: str, path_template: str) -> RouteSpec | None:
        return self._by_key.get((method, path_template))

    def for_request(self, request: web.Request) -> RouteSpec | None:
        """The spec of the route aiohttp matched for ``request``, None when unmatched."""
        resource = request.match_info.route.resource
        if resource is None:
            return None
        return self.find(request.method, resource.canonical)
