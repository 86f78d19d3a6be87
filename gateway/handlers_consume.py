"""Consumer handlers: join, poll (the heartbeat), ack, nack, leave, group info, group
delete, dead-letter redrive. Thin: validate, call the backend, count, answer."""

from __future__ import annotations

from aiohttp import web

from vpq.codec.message_id import all_short_ids
from vpq.common.errors import BadRequest
from vpq.common.poll_body import PolledBody
from vpq.gateway.backend import JoinSpec
from vpq.gateway.http import JSON_CONTENT_TYPE, isolation_headers, json_response, read_json_object, validate
from vpq.gateway.keys import BACKEND_KEY, METRICS_KEY, SETTINGS_KEY
from vpq.gateway.models import MAX_IDS, AckRequest, JoinRequest, NackRequest, PollRequest, RedriveRequest
from vpq.isolation.context import IsolationError, PartialContext, resolve


async def join(request: web.Request) -> web.Response:
    """``POST /v1/queues/{queue}/groups/{group}/consumers``: body isolation fields win over
    the X-Lane/X-Env/X-Set headers, which win over the defaults."""
    app = request.app
    mi = request.match_info
    headers = isolation_headers(request)
    body = await read_json_object(request, app[SETTINGS_KEY].max_request_bytes, required=False)
    req = validate(JoinRequest, body)
    try:
        context = resolve(PartialContext(env=req.env, set=req.set_, lane=req.lane), headers)
    except IsolationError as exc:
        raise BadRequest("invalid_request", str(exc), field=exc.field) from None
    spec = JoinSpec(consumer_id=req.consumer_id, context=context, start=req.start)
    return json_response(await app[BACKEND_KEY].join(mi["queue"], mi["group"], spec))


async def poll(request: web.Request) -> web.Response:
    """``POST .../consumers/{consumer_id}/poll``; its ``ack`` ids are acknowledged first."""
    app = request.app
    mi = request.match_info
    body = await read_json_object(request, app[SETTINGS_KEY].max_request_bytes, required=False)
    ack = body.get("ack")
    if all_short_ids(ack) and len(ack) <= MAX_IDS:  # the usual acks: checked at once, not one by one
        req = validate(PollRequest, {name: value for name, value in body.items() if name != "ack"})
        req.ack = ack
    else:
        req = validate(PollRequest, body)
    args = (mi["queue"], mi["group"], mi["consumer_id"], req.max_messages, req.wait_ms)
    got = await app[BACKEND_KEY].poll(*args, req.ack) if req.ack else await app[BACKEND_KEY].poll(*args)
    acked = 0
    if isinstance(got, PolledBody):  # the read node's encoded answer, passed through
        count, acked = got.count, got.acked
        response = web.Response(body=got.body, content_type=JSON_CONTENT_TYPE)
    else:
        count = len(got)
        response = json_response({"messages": got})
    if count:
        app[METRICS_KEY].delivered_to(mi["queue"], mi["group"], count)
    if acked:
        app[METRICS_KEY].acked_by(mi["queue"], mi["group"], acked)
    return response


async def ack(request: web.Request) -> web.Response:
    """``POST .../consumers/{consumer_id}/ack`` -> ``{"acked": n}``."""
    app = request.app
    mi = request.match_info
    body = await read_json_object(request, app[SETTINGS_KEY].max_request_bytes, required=True)
    req = validate(AckRequest, body)
    n = await app[BACKEND_KEY].ack(mi["queue"], mi["group"], mi["consumer_id"], req.ids)
    if n:
        app[METRICS_KEY].acked_by(mi["queue"], mi["group"], n)
    return json_response({"acked": n})


async def nack(request: web.Request) -> web.Response:
    """``POST .../consumers/{consumer_id}/nack`` -> ``{"nacked": n}``."""
    app = request.app
    mi = request.match_info
    body = await read_json_object(request, app[SETTINGS_KEY].max_request_bytes, required=True)
    req = validate(NackRequest, body)
    n = await app[BACKEND_KEY].nack(mi["queue"], mi["group"], mi["consumer_id"], req.ids, req.delay_ms)
    if n:
        app[METRICS_KEY].nacked_by(mi["queue"], mi["group"], n)
    return json_response({"nacked": n})


async def leave(request: web.Request) -> web.Response:
    """``DELETE .../consumers/{consumer_id}``: 204 once the consumer has left."""
    mi = request.match_info
    await request.app[BACKEND_KEY].leave(mi["queue"], mi["group"], mi["consumer_id"])
    return web.Response(status=204)


async def group_info(request: web.Request) -> web.Response:
    """``GET /v1/queues/{queue}/groups/{group}``: members and lag."""
    mi = request.match_info
    return json_response(await request.app[BACKEND_KEY].group_info(mi["queue"], mi["group"]))


async def delete_group(request: web.Request) -> web.Response:
    """``DELETE /v1/queues/{queue}/groups/{group}``: 204 once the group and its state are gone."""
    mi = request.match_info
    await request.app[BACKEND_KEY].delete_group(mi["queue"], mi["group"])
    return web.Response(status=204)


async def redrive(request: web.Request) -> web.Response:
    """``POST /v1/queues/{queue}/groups/{group}/dlq/redrive`` -> ``{"redriven": n}``."""
    app = request.app
    mi = request.match_info
    body = await read_json_object(request, app[SETTINGS_KEY].max_request_bytes, required=False)
    req = validate(RedriveRequest, body)
    return json_response({"redriven": await app[BACKEND_KEY].redrive(mi["queue"], mi["group"], req.max_messages)})
