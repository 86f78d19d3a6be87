"""The read node's internal HTTP API (``docs/internals.md``, "Read node").

The public consumer endpoints one to one under ``/internal/v1``, with the
isolation context already resolved by the gateway:

=========================================================  =========================================
``POST /internal/v1/queues/{q}/groups/{g}/consumers``      ``{"consumer_id", "env", "set", "lane", "start"}``
                                                           -> ``{"consumer_id", "session_timeout_ms"}``
``POST .../consumers/{cid}/poll``                          ``{"max_messages", "wait_ms", "ack"}`` -> ``{"messages": [...]}``
                                                           (exactly the public answer; header
                                                           ``X-Vpq-Messages``: how many it holds;
                                                           ``ack`` (optional) ids acknowledged first,
                                                           header ``X-Vpq-Acked``: how many)
``POST .../consumers/{cid}/ack``                           ``{"ids"}`` -> ``{"acked": n}``
``POST .../consumers/{cid}/nack``                          ``{"ids", "delay_ms"}`` -> ``{"nacked": n}``
``DELETE .../consumers/{cid}``                             -> 204
``GET /internal/v1/queues/{q}/groups/{g}``                 -> the public group answer
``DELETE /internal/v1/queues/{q}/groups/{g}``              -> 204 (the group and its state deleted)
``POST .../groups/{g}/dlq/redrive``                        ``{"max_messages"}`` (optional) -> ``{"redriven": n}``
``GET /internal/v1/status``                                -> this node's groups and tailers (operations)
``GET /internal/v1/metrics``                               -> Prometheus text (``read_nodes.metrics``)
=========================================================  =========================================

Bodies are validated like the public API's (same limits: ``max_messages``
1..1000 default 100 for a poll, 1..1,000,000 and optional for a redrive, ``wait_ms`` 0..30000 default 0, ``delay_ms``
0..86,400,000 default 0, ``start`` earliest|latest). Every error is
``common.errors`` JSON with its status, so it reaches the user unchanged
through the gateway; a group held by another live node is 409 ``not_owner``
with detail ``owner``; Redis trouble is 503 ``metadata_unavailable`` (retryable).
With a cluster secret, a call without it is 401 ``cluster_secret_required`` or
``bad_cluster_secret`` before any handler runs (``node_rpc.cluster_auth``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
from aiohttp import web

from vpq.common.errors import BadRequest, InternalError, MethodNotAllowed, NotFound, Unavailable, VpqError
from vpq.isolation.context import IsolationContext, IsolationError
from vpq.metadata.errors import MetadataUnavailable
from vpq.metadata.names import check_name
from vpq.node_rpc.cluster_auth import cluster_secret_middlewares
from vpq.node_rpc.read_node_client import ACKED_COUNT_HEADER, MESSAGE_COUNT_HEADER
from vpq.read_nodes.messages import poll_body

if TYPE_CHECKING:
    from vpq.read_nodes.group_host import GroupHost
    from vpq.read_nodes.service import ReadNodeService

T = TypeVar("T")

log = logging.getLogger(__name__)

SERVICE_KEY: web.AppKey[ReadNodeService] = web.AppKey("read_node_service")
MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_MESSAGES = 1000
MAX_WAIT_MS = 30_000
MAX_DELAY_MS = 86_400_000
MAX_REDRIVE = 1_000_000
GROUP_MOVING = "group_moving"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def error_response(err: VpqError) -> web.Response:
    return web.Response(
        body=orjson.dumps(err.to_dict()), status=err.status, content_type="application/json", headers=err.headers()
    )


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except VpqError as err:
        return error_response(err)
    except MetadataUnavailable as exc:
        log.warning("metadata store error on %s %s: %s", request.method, request.path, exc)
        return error_response(Unavailable("metadata_unavailable", f"the metadata store is unavailable: {exc}"))
    except web.HTTPMethodNotAllowed as exc:
        return error_response(MethodNotAllowed(message=f"{request.method} not allowed", allowed=sorted(exc.allowed_methods)))
    except web.HTTPNotFound:
        return error_response(NotFound("not_found", f"no route {request.path}"))
    except web.HTTPException:
        raise
    except Exception:
        log.exception("internal error on %s %s", request.method, request.path)
        return error_response(InternalError(message="internal error in the read node"))


async def _body(request: web.Request, required: bool) -> dict[str, Any]:
    raw = await request.read()
    if not raw:
        if required:
            raise BadRequest("invalid_request", "a JSON body is required")
        return {}
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise BadRequest("malformed_json", "the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise BadRequest("invalid_request", "the body must be a JSON object")
    return data


def _int(data: dict[str, Any], name: str, default: int, lo: int, hi: int) -> int:
    value = data.get(name)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise BadRequest("invalid_request", f"{name} must be an integer in [{lo}, {hi}]", field=name)
    return value


def _ids(data: dict[str, Any], name: str = "ids") -> list[str]:
    ids = data.get(name)
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise BadRequest("invalid_request", f"{name} must be a list of message id strings", field=name)
    return ids


def _names(request: web.Request) -> tuple[str, str]:
    mi = request.match_info
    try:
        return check_name("queue", mi["queue"]), check_name("group", mi["group"])
    except ValueError as exc:
        raise BadRequest("invalid_name", str(exc)) from None


def _service(request: web.Request) -> ReadNodeService:
    return request.app[SERVICE_KEY]


async def _on_host(
    request: web.Request,
    queue: str,
    group: str,
    call: Callable[[GroupHost], Awaitable[T]],
    create_start: str | None = None,
) -> T:
    """``call`` on the hosted group, once more when the host closed under it because
    this node re-hosted the group (a config change): a call that fails with
    ``group_moving`` has changed nothing. A group lost to another node then answers
    409 ``not_owner`` from ``ReadNodeService.host``."""
    service = _service(request)
    host = await service.host(queue, group, create_start=create_start)
    try:
        return await call(host)
    except Unavailable as exc:
        if exc.code != GROUP_MOVING:
            raise
    return await call(await service.host(queue, group, create_start=create_start))


async def join(request: web.Request) -> web.Response:
    queue, group = _names(request)
    data = await _body(request, required=False)
    cid = data.get("consumer_id")
    if cid is not None and not isinstance(cid, str):
        raise BadRequest("invalid_request", "consumer_id must be a string or null", field="consumer_id")
    start = data.get("start") or "earliest"
    if start not in ("earliest", "latest"):
        raise BadRequest("invalid_request", "start must be 'earliest' or 'latest'", field="start")
    fields = {}
    for name in ("env", "set", "lane"):
        value = data.get(name)
        if value is not None and not isinstance(value, str):
            raise BadRequest("invalid_request", f"{name} must be a string", field=name)
        fields[name] = value or ""
    try:
        ctx = IsolationContext(fields["env"], fields["set"], fields["lane"])
    except IsolationError as exc:
        raise BadRequest("invalid_request", str(exc), field=exc.field) from None
    return json_response(await _on_host(request, queue, group, lambda h: h.join(cid, ctx, start), start))


async def poll(request: web.Request) -> web.Response:
    queue, group = _names(request)
    data = await _body(request, required=False)
    max_messages = _int(data, "max_messages", 100, 1, MAX_MESSAGES)
    wait_ms = _int(data, "wait_ms", 0, 0, MAX_WAIT_MS)
    ack_ids = _ids(data, "ack") if "ack" in data else []
    cid = request.match_info["consumer_id"]
    acked = [0]

    async def call(h: GroupHost) -> list[bytes]:
        if ack_ids:
            acked[0] += await h.ack(cid, ack_ids)
        return await h.poll(cid, max_messages, wait_ms)

    messages = await _on_host(request, queue, group, call)
    headers = {MESSAGE_COUNT_HEADER: str(len(messages))}
    if ack_ids:
        headers[ACKED_COUNT_HEADER] = str(acked[0])
    return web.Response(body=poll_body(messages), content_type="application/json", headers=headers)


async def ack(request: web.Request) -> web.Response:
    queue, group = _names(request)
    ids = _ids(await _body(request, required=True))
    cid = request.match_info["consumer_id"]
    return json_response({"acked": await _on_host(request, queue, group, lambda h: h.ack(cid, ids))})


async def nack(request: web.Request) -> web.Response:
    queue, group = _names(request)
    data = await _body(request, required=True)
    ids = _ids(data)
    delay_ms = _int(data, "delay_ms", 0, 0, MAX_DELAY_MS)
    cid = request.match_info["consumer_id"]
    return json_response({"nacked": await _on_host(request, queue, group, lambda h: h.nack(cid, ids, delay_ms))})


async def leave(request: web.Request) -> web.Response:
    queue, group = _names(request)
    cid = request.match_info["consumer_id"]
    await _on_host(request, queue, group, lambda h: h.leave(cid))
    return web.Response(status=204)


async def group_info(request: web.Request) -> web.Response:
    queue, group = _names(request)
    return json_response(await _on_host(request, queue, group, lambda h: h.info()))


async def delete_group(request: web.Request) -> web.Response:
    queue, group = _names(request)
    await _service(request).delete_group(queue, group)
    return web.Response(status=204)


async def redrive(request: web.Request) -> web.Response:
    queue, group = _names(request)
    data = await _body(request, required=False)
    limit = data.get("max_messages")
    max_messages = None if limit is None else _int(data, "max_messages", 0, 1, MAX_REDRIVE)
    return json_response({"redriven": await _service(request).redrive(queue, group, max_messages)})


async def status(request: web.Request) -> web.Response:
    return json_response(_service(request).status())


async def metrics(request: web.Request) -> web.Response:
    service = _service(request)
    text = await service.metrics.scrape(service.hosted().values(), service.status())
    return web.Response(body=text, headers={"Content-Type": service.metrics.content_type})


def build_app(service: ReadNodeService, cluster_secret: str | None = None) -> web.Application:
    """The aiohttp application of the read node's internal API; with ``cluster_secret``
    every call must carry it (``node_rpc.cluster_auth``)."""
    middlewares = [error_middleware, *cluster_secret_middlewares(cluster_secret)]
    app = web.Application(middlewares=middlewares, client_max_size=MAX_BODY_BYTES)
    app[SERVICE_KEY] = service
    base = "/internal/v1/queues/{queue}/groups/{group}"
    app.router.add_post(f"{base}/consumers", join)
    app.router.add_post(f"{base}/consumers/{{consumer_id}}/poll", poll)
    app.router.add_post(f"{base}/consumers/{{consumer_id}}/ack", ack)
    app.router.add_post(f"{base}/consumers/{{consumer_id}}/nack", nack)
    app.router.add_delete(f"{base}/consumers/{{consumer_id}}", leave)
    app.router.add_get(base, group_info)
    app.router.add_delete(base, delete_group)
    app.router.add_post(f"{base}/dlq/redrive", redrive)
    app.router.add_get("/internal/v1/status", status)
    app.router.add_get("/internal/v1/metrics", metrics)
    return app
