"""An in-memory stand-in for the vpq gateway, for SDK tests only.

It implements the API.md endpoints the SDK calls, honestly but simply: queues with
their config, all-or-nothing produce with validation (400 with ``index``, 413 for an
oversize message, 404 for an unknown queue), groups with one shared cursor per group,
in-flight tracking, ack/nack/leave, group info and cluster/map views. Isolation
contexts are recorded but not used for routing. It records every request and can be
told to fail the next matching requests (``fail``) or to hold produce requests
(``hold_produce``) so tests can observe the client mid-request.
"""

from __future__ import annotations

import asyncio
import re
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

import mmh3
import orjson
from aiohttp import web

NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
PARTITIONS = 4
JSON_BODY = web.RequestKey("json", dict)
QUEUE_DEFAULTS: dict[str, Any] = {
    "virtual_partitions": 16,
    "ordering": "key",
    "max_deliveries": 5,
    "visibility_timeout_ms": 30000,
    "retention_ms": 604800000,
    "max_message_bytes": 1024 * 1024,
}


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Fault:
    method: str
    path_re: re.Pattern[str]
    status: int
    code: str
    message: str
    retry_after: str | None
    times: int
    extra: dict[str, Any]


@dataclass
class Group:
    cursor: int = 0
    members: dict[str, dict[str, Any]] = field(default_factory=dict)
    in_flight: dict[str, str] = field(default_factory=dict)  # message id -> consumer id
    redeliver: list[int] = field(default_factory=list)  # log positions
    deliveries: dict[str, int] = field(default_factory=dict)
    acked: set[str] = field(default_factory=set)


def error(status: int, code: str, message: str, retry_after: str | None = None, **extra: Any) -> web.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else None
    body = orjson.dumps({"error": {"code": code, "message": message, **extra}})
    return web.Response(status=status, body=body, content_type="application/json", headers=headers)


def ok(data: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json")


class FakeGateway:
    def __init__(self) -> None:
        self.queues: dict[str, dict[str, Any]] = {}
        self.logs: dict[str, list[dict[str, Any]]] = {}
        self.groups: dict[tuple[str, str], Group] = {}
        self.requests: list[Recorded] = []
        self.faults: list[Fault] = []
        self.ready = True
        self.session_timeout_ms = 10000
        self.epoch = 1
        self._offsets = [0] * PARTITIONS
        self._hold: asyncio.Event | None = None
        self.produce_arrived: asyncio.Event | None = None
        self.ack_delay_s = 0.0  # how long an ack takes to answer (a loaded server)

    # -- test controls -------------------------------------------------------------

    def fail(
        self,
        method: str,
        path_re: str,
        status: int,
        code: str,
        message: str = "injected failure",
        retry_after: str | None = None,
        times: int = 1,
        **extra: Any,
    ) -> None:
        """Answer the next ``times`` requests matching ``method`` and ``path_re`` with this error."""
        self.faults.append(Fault(method, re.compile(path_re), status, code, message, retry_after, times, extra))

    def hold_produce(self) -> None:
        """Produce requests wait (after being recorded) until ``release_produce``."""
        self._hold = asyncio.Event()
        self.produce_arrived = asyncio.Event()

    def release_produce(self) -> None:
        assert self._hold is not None
        self._hold.set()

    def requests_to(self, method: str, suffix: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method and r.path.endswith(suffix)]

    def values(self, queue: str) -> list[Any]:
        return [m.get("value", m.get("value_b64")) for m in self.logs.get(queue, [])]

    # -- app -----------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware])
        r = app.router
        r.add_get("/healthz", self.healthz)
        r.add_get("/readyz", self.readyz)
        r.add_get("/v1/queues", self.list_queues)
        r.add_put("/v1/queues/{queue}", self.put_queue)
        r.add_get("/v1/queues/{queue}", self.get_queue)
        r.add_delete("/v1/queues/{queue}", self.delete_queue)
        r.add_post("/v1/queues/{queue}/messages", self.produce)
        r.add_post("/v1/queues/{queue}/groups/{group}/consumers", self.join)
        r.add_post("/v1/queues/{queue}/groups/{group}/consumers/{cid}/poll", self.poll)
        r.add_post("/v1/queues/{queue}/groups/{group}/consumers/{cid}/ack", self.ack)
        r.add_post("/v1/queues/{queue}/groups/{group}/consumers/{cid}/nack", self.nack)
        r.add_delete("/v1/queues/{queue}/groups/{group}/consumers/{cid}", self.leave)
        r.add_get("/v1/queues/{queue}/groups/{group}", self.group_info)
        r.add_get("/v1/cluster", self.cluster)
        r.add_get("/v1/maps/current", self.current_map)
        return app

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        raw = await request.read()
        if raw and request.content_type != "application/json":
            return error(415, "unsupported_media_type", "expected application/json")
        try:
            body = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            return error(400, "malformed_json", "body is not JSON")
        self.requests.append(Recorded(request.method, request.path, dict(request.headers), body))
        for fault in self.faults:
            if fault.times > 0 and fault.method == request.method and fault.path_re.search(request.path):
                fault.times -= 1
                return error(fault.status, fault.code, fault.message, fault.retry_after, **fault.extra)
        request[JSON_BODY] = body if body is not None else {}
        return await handler(request)

    # -- handlers ------------------------------------------------------------------

    async def healthz(self, request: web.Request) -> web.Response:
        return ok({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        return ok({"status": "ready"}) if self.ready else error(503, "not_ready", "nodes joining")

    def _queue_view(self, name: str) -> dict[str, Any]:
        cfg = self.queues[name]
        v = cfg["virtual_partitions"]
        log = self.logs[name]
        return {
            "name": name,
            **cfg,
            "epoch": self.epoch,
            "placement": [vp % PARTITIONS for vp in range(v)],
            "traffic": {
                "messages_total": len(log),
                "bytes_total": sum(len(orjson.dumps(m.get("value", m.get("value_b64")))) for m in log),
                "messages_per_s": 0.0,
                "bytes_per_s": 0.0,
            },
        }

    async def list_queues(self, request: web.Request) -> web.Response:
        return ok({"queues": [self._queue_view(n) for n in sorted(self.queues)]})

    async def put_queue(self, request: web.Request) -> web.Response:
        name = request.match_info["queue"]
        body = request[JSON_BODY]
        if not NAME_RE.match(name):
            return error(400, "invalid_name", f"bad queue name {name!r}")
        unknown = set(body) - set(QUEUE_DEFAULTS)
        if unknown:
            return error(400, "invalid_config", f"unknown fields {sorted(unknown)}")
        v = body.get("virtual_partitions")
        if v is not None and (not isinstance(v, int) or v < 1 or v & (v - 1)):
            return error(400, "invalid_config", "virtual_partitions must be a power of two")
        existing = self.queues.get(name)
        if existing is not None and v is not None and v < existing["virtual_partitions"]:
            return error(409, "shrink_refused", "virtual_partitions may only grow", current=existing["virtual_partitions"])
        created = existing is None
        cfg = dict(QUEUE_DEFAULTS) if created else dict(existing)
        cfg.update(body)
        self.queues[name] = cfg
        self.logs.setdefault(name, [])
        return ok(self._queue_view(name), status=201 if created else 200)

    async def get_queue(self, request: web.Request) -> web.Response:
        name = request.match_info["queue"]
        if name not in self.queues:
            return error(404, "queue_not_found", f"queue {name!r} does not exist")
        return ok(self._queue_view(name))

    async def delete_queue(self, request: web.Request) -> web.Response:
        name = request.match_info["queue"]
        if self.queues.pop(name, None) is None:
            return error(404, "queue_not_found", f"queue {name!r} does not exist")
        del self.logs[name]
        return web.Response(status=204)

    async def produce(self, request: web.Request) -> web.Response:
        name = request.match_info["queue"]
        if name not in self.queues:
            return error(404, "queue_not_found", f"queue {name!r} does not exist")
        if self._hold is not None:
            assert self.produce_arrived is not None
            self.produce_arrived.set()
            await self._hold.wait()
        cfg = self.queues[name]
        msgs = request[JSON_BODY].get("messages")
        if not isinstance(msgs, list) or not msgs:
            return error(400, "invalid_request", "messages must be a non-empty list")
        ctx = {h: request.headers.get(f"X-{h.capitalize()}") for h in ("lane", "env", "set")}
        stored = []
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or ("value" in m) == ("value_b64" in m):
                return error(400, "invalid_message", "each message needs exactly one of value, value_b64", index=i)
            if len(orjson.dumps(m)) > cfg["max_message_bytes"]:
                return error(413, "message_too_large", f"message {i} exceeds max_message_bytes", index=i)
            stored.append(
                {
                    "key": m.get("key"),
                    **({"value": m["value"]} if "value" in m else {"value_b64": m["value_b64"]}),
                    "headers": m.get("headers") or {},
                    "lane": m.get("lane", ctx["lane"] or ""),
                    "env": m.get("env", ctx["env"] or "prod"),
                    "set": m.get("set", ctx["set"] or ""),
                }
            )
        results = []
        for m in stored:
            vp = (mmh3.hash(m["key"] or "", signed=False)) % cfg["virtual_partitions"]
            pp = vp % PARTITIONS
            offset = self._offsets[pp]
            self._offsets[pp] += 1
            m.update(id=uuid.uuid4().hex, queue=name, partition=pp, offset=offset, virtual_partition=vp, timestamp_ms=1)
            self.logs[name].append(m)
            results.append({"id": m["id"], "partition": pp, "offset": offset, "virtual_partition": vp})
        return ok({"results": results})

    def _group(self, request: web.Request) -> tuple[Group | None, web.Response | None]:
        name = request.match_info["queue"]
        if name not in self.queues:
            return None, error(404, "queue_not_found", f"queue {name!r} does not exist")
        key = (name, request.match_info["group"])
        return self.groups.get(key), None

    def _member(self, request: web.Request) -> tuple[Group | None, web.Response | None]:
        group, err = self._group(request)
        if err is not None:
            return None, err
        cid = request.match_info["cid"]
        if group is None or cid not in group.members:
            return None, error(404, "consumer_not_found", f"consumer {cid!r} is not a member")
        return group, None

    async def join(self, request: web.Request) -> web.Response:
        group, err = self._group(request)
        if err is not None:
            return err
        name, gname = request.match_info["queue"], request.match_info["group"]
        body = request[JSON_BODY]
        if group is None:
            group = self.groups[(name, gname)] = Group()
            if body.get("start") == "latest":
                group.cursor = len(self.logs[name])
        cid = body.get("consumer_id") or uuid.uuid4().hex[:12]
        group.members[cid] = {k: body.get(k, d) for k, d in (("lane", ""), ("env", "prod"), ("set", ""))}
        return ok({"consumer_id": cid, "session_timeout_ms": self.session_timeout_ms})

    async def poll(self, request: web.Request) -> web.Response:
        group, err = self._member(request)
        if err is not None:
            return err
        assert group is not None
        log = self.logs[request.match_info["queue"]]
        cid = request.match_info["cid"]
        want = int(request[JSON_BODY].get("max_messages", 100))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + int(request[JSON_BODY].get("wait_ms", 0)) / 1000.0
        out: list[dict[str, Any]] = []
        while True:
            while group.redeliver and len(out) < want:
                out.append(log[group.redeliver.pop(0)])
            while group.cursor < len(log) and len(out) < want:
                out.append(log[group.cursor])
                group.cursor += 1
            transport = request.transport
            if out or loop.time() >= deadline or transport is None or transport.is_closing():
                break
            await asyncio.sleep(0.01)  # long poll: look again until wait_ms is over
        if cid not in group.members:  # left while waiting: give the messages back
            positions = {m["id"]: i for i, m in enumerate(log)}
            group.redeliver.extend(positions[m["id"]] for m in out)
            return error(404, "consumer_not_found", f"consumer {cid!r} is not a member")
        answer = []
        for m in out:
            group.in_flight[m["id"]] = cid
            group.deliveries[m["id"]] = group.deliveries.get(m["id"], 0) + 1
            answer.append({**m, "delivery_count": group.deliveries[m["id"]]})
        return ok({"messages": answer})

    async def ack(self, request: web.Request) -> web.Response:
        group, err = self._member(request)
        if err is not None:
            return err
        assert group is not None
        if self.ack_delay_s:
            await asyncio.sleep(self.ack_delay_s)
        n = 0
        for mid in request[JSON_BODY].get("ids", []):
            if group.in_flight.pop(mid, None) is not None:
                group.acked.add(mid)
                n += 1
        return ok({"acked": n})

    async def nack(self, request: web.Request) -> web.Response:
        group, err = self._member(request)
        if err is not None:
            return err
        assert group is not None
        log = self.logs[request.match_info["queue"]]
        positions = {m["id"]: i for i, m in enumerate(log)}
        n = 0
        for mid in request[JSON_BODY].get("ids", []):
            if group.in_flight.pop(mid, None) is not None:
                group.redeliver.append(positions[mid])
                n += 1
        return ok({"nacked": n})

    async def leave(self, request: web.Request) -> web.Response:
        group, err = self._member(request)
        if err is not None:
            return err
        assert group is not None
        cid = request.match_info["cid"]
        del group.members[cid]
        log = self.logs[request.match_info["queue"]]
        positions = {m["id"]: i for i, m in enumerate(log)}
        for mid, owner in list(group.in_flight.items()):
            if owner == cid:
                del group.in_flight[mid]
                group.redeliver.append(positions[mid])
        return web.Response(status=204)

    async def group_info(self, request: web.Request) -> web.Response:
        group, err = self._group(request)
        if err is not None:
            return err
        if group is None:
            return error(404, "group_not_found", f"group {request.match_info['group']!r} does not exist")
        log = self.logs[request.match_info["queue"]]
        pending = [m for m in log if m["id"] not in group.acked]
        members = [
            {
                "consumer_id": cid,
                **ctx,
                "virtual_partitions": list(range(0, 16, max(1, len(group.members)))),
                "in_flight": sum(1 for o in group.in_flight.values() if o == cid),
            }
            for cid, ctx in group.members.items()
        ]

        def by(field_name: str) -> dict[str, int]:
            out: dict[str, int] = {}
            for m in pending:
                out[m[field_name]] = out.get(m[field_name], 0) + 1
            return out

        lag = {"total": len(pending), "by_lane": by("lane"), "by_env": by("env"), "by_set": by("set")}
        return ok({"queue": request.match_info["queue"], "group": request.match_info["group"], "members": members, "lag": lag})

    async def cluster(self, request: web.Request) -> web.Response:
        return ok(
            {
                "epoch": self.epoch,
                "write_nodes": [{"id": "w0", "address": "127.0.0.1:9001", "partitions": list(range(PARTITIONS))}],
                "read_nodes": [{"id": "r0", "address": "127.0.0.1:9101"}],
                "physical_partitions": [
                    {"id": pp, "owner": "w0", "end_offset": self._offsets[pp], "bytes": 100 * self._offsets[pp]}
                    for pp in range(PARTITIONS)
                ],
            }
        )

    async def current_map(self, request: web.Request) -> web.Response:
        queues = {
            n: {"virtual_partitions": c["virtual_partitions"], "placement": [vp % PARTITIONS for vp in range(c["virtual_partitions"])]}
            for n, c in self.queues.items()
        }
        return ok({"epoch": self.epoch, "queues": queues})


class GatewayThread:
    """Serves a FakeGateway on a free loopback port from a background thread (for sync
    code: the sync client and the CLI, which run their own event loops)."""

    def __init__(self, gateway: FakeGateway) -> None:
        self.gateway = gateway
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    def start(self) -> str:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self.url

    async def _start(self) -> None:
        self._runner = web.AppRunner(self.gateway.app())
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    def call(self, fn: Any) -> Any:
        """Run ``fn()`` on the server's loop (to touch gateway state safely)."""

        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
