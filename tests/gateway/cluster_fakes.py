"""Tiny, honest in-process fakes of the node wire formats (docs/internals.md), for the
client and cluster-backend tests: an aiohttp write node that really decodes, CRC-checks,
stamps and stores batches, and an aiohttp read node that records what it is asked.

Failures can be injected per partition (``FakeWriteNode.fail[pp]``: a list of errors
answered one per append, before anything is stored) and per call (``FakeReadNode.not_owner``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

from vpq.codec.errors import CorruptBatchError
from vpq.codec.records import Record, decode_batches, iter_batches, restamp_base_offset
from vpq.common.errors import BadRequest, NotFound, Unavailable, VpqError
from vpq.node_rpc.append_frames import ChainGate, FrameError, decode_frames


def error_response(err: VpqError) -> web.Response:
    return web.json_response(err.to_dict(), status=err.status, headers=err.headers())


@dataclass
class StoredBatch:
    base: int
    last: int
    raw: bytes
    epoch: int


@dataclass
class FakeWriteNode:
    """Owns ``owned`` pps. ``placement(queue_id, vp)`` (optional) is the node's map: records
    it does not place on the target pp are refused with 503 ``stale_map``."""

    node_id: str = "w1"
    owned: set[int] = field(default_factory=set)
    epoch: int = 0
    placement: Callable[[int, int], int | None] | None = None
    fail: dict[int, list[VpqError]] = field(default_factory=dict)
    append_delay_s: float = 0.0
    batches: dict[int, list[StoredBatch]] = field(default_factory=dict)
    requests: list[tuple[str, int]] = field(default_factory=list)
    server: TestServer | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def address(self) -> str:
        assert self.server is not None
        return f"{self.server.host}:{self.server.port}"

    def records(self, pp: int) -> list[Record]:
        """Every stored record of ``pp`` with its offset."""
        out: list[Record] = []
        for b in self.batches.get(pp, []):
            out.extend(decode_batches(b.raw))
        return out

    def end_offset(self, pp: int) -> int:
        stored = self.batches.get(pp)
        return stored[-1].last + 1 if stored else 0

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/internal/v1/partitions/{pp}/append", self._append)
        app.router.add_post("/internal/v1/append", self._append_many)
        app.router.add_get("/internal/v1/partitions/{pp}/read", self._read)
        app.router.add_get("/internal/v1/partitions", self._partitions)
        app.router.add_get("/text-error", self._text_error)
        return app

    async def start(self) -> None:
        self.server = TestServer(self.app(), host="127.0.0.1")
        await self.server.start_server()

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.close()

    async def _text_error(self, request: web.Request) -> web.Response:
        return web.Response(status=502, text="bad gateway")

    def _pp(self, request: web.Request) -> int:
        return int(request.match_info["pp"])

    async def _append(self, request: web.Request) -> web.Response:
        pp = self._pp(request)
        epoch = int(request.headers.get("X-Map-Epoch", "-1"))
        body = await request.read()
        if self.append_delay_s:
            await asyncio.sleep(self.append_delay_s)
        try:
            base, last = self._append_one(pp, body, epoch)
        except VpqError as err:
            return error_response(err)
        return web.json_response({"base_offset": base, "last_offset": last})

    async def _append_many(self, request: web.Request) -> web.Response:
        """``POST /internal/v1/append``: per frame as ``_append``; a chain stops at its first refusal."""
        epoch = int(request.headers.get("X-Map-Epoch", "-1"))
        body = await request.read()
        if self.append_delay_s:
            await asyncio.sleep(self.append_delay_s)
        try:
            frames = decode_frames(body)
        except FrameError as exc:
            return error_response(BadRequest("corrupt_batch", str(exc)))
        gate = ChainGate()
        results: list[dict[str, Any]] = []
        for frame in frames:
            try:
                refused = gate.refused(frame)
                if refused is not None:
                    raise refused
                base, last = self._append_one(frame.pp, frame.batch, epoch)
                results.append({"base_offset": base, "last_offset": last})
            except VpqError as err:
                gate.record(frame, err)
                results.append({"error": err.to_dict()["error"], "status": err.status})
        return web.json_response({"results": results})

    def _append_one(self, pp: int, body: bytes, epoch: int) -> tuple[int, int]:
        self.requests.append(("append", pp))
        if pp not in self.owned:
            raise Unavailable("not_owner", f"{self.node_id} does not own partition {pp}")
        queued = self.fail.get(pp)
        if queued:
            raise queued.pop(0)
        try:
            views = list(iter_batches(body, verify=True))
            if len(views) != 1 or views[0].size != len(body):
                raise CorruptBatchError("expected exactly one batch")
            records = views[0].records()
        except (CorruptBatchError, ValueError) as exc:
            raise BadRequest("corrupt_batch", f"bad batch: {exc}") from None
        if self.placement is not None:
            for r in records:
                if self.placement(r.queue_id, r.virtual_partition) != pp:
                    raise Unavailable("stale_map", f"vp {r.virtual_partition} is not on partition {pp}", epoch=self.epoch)
        base = self.end_offset(pp)
        last = base + len(records) - 1
        self.batches.setdefault(pp, []).append(StoredBatch(base, last, restamp_base_offset(body, base), epoch))
        self._changed.set()
        self._changed = asyncio.Event()
        return base, last

    async def _read(self, request: web.Request) -> web.Response:
        pp = self._pp(request)
        if pp not in self.owned:
            return error_response(Unavailable("not_owner", f"{self.node_id} does not own partition {pp}"))
        offset = int(request.query["offset"])
        max_bytes = int(request.query["max_bytes"])
        wait_ms = min(int(request.query.get("wait_ms", "0")), 30000)
        if self.end_offset(pp) <= offset and wait_ms > 0:
            try:
                await asyncio.wait_for(self._changed.wait(), wait_ms / 1000)
            except asyncio.TimeoutError:
                pass
        out: list[bytes] = []
        size = 0
        for b in self.batches.get(pp, []):
            if b.last < offset:
                continue
            if out and size + len(b.raw) > max_bytes:
                break
            out.append(b.raw)
            size += len(b.raw)
        return web.Response(
            body=b"".join(out),
            content_type="application/octet-stream",
            headers={"X-Start-Offset": "0", "X-End-Offset": str(self.end_offset(pp))},
        )

    async def _partitions(self, request: web.Request) -> web.Response:
        parts = [
            {
                "id": pp,
                "start_offset": 0,
                "end_offset": self.end_offset(pp),
                "bytes": sum(len(b.raw) for b in self.batches.get(pp, [])),
                "online": True,
            }
            for pp in sorted(self.owned)
        ]
        return web.json_response({"node_id": self.node_id, "partitions": parts})


@dataclass
class FakeReadNode:
    """Answers the read-node endpoints from memory and records every call as
    ``(method, path, json body or None)``. ``not_owner`` (owner id) makes every call 409."""

    node_id: str = "r1"
    not_owner: str | None = None
    calls: list[tuple[str, str, Any]] = field(default_factory=list)
    consumers: set[str] = field(default_factory=set)
    server: TestServer | None = None

    @property
    def address(self) -> str:
        assert self.server is not None
        return f"{self.server.host}:{self.server.port}"

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/internal/v1/{tail:.*}", self._handle)
        return app

    async def start(self) -> None:
        self.server = TestServer(self.app(), host="127.0.0.1")
        await self.server.start_server()

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json() if request.can_read_body else None
        self.calls.append((request.method, request.path, body))
        if self.not_owner is not None:
            return error_response(
                VpqError.from_dict({"error": {"code": "not_owner", "message": "held elsewhere", "owner": self.not_owner}}, 409)
            )
        parts = request.path.split("/")  # '', internal, v1, queues, q, groups, g, [consumers, cid, op]
        queue, group = parts[4], parts[6]
        rest = parts[7:]
        if request.method == "GET" and not rest:
            return web.json_response(
                {"queue": queue, "group": group, "members": [], "lag": {"total": 0, "by_lane": {}, "by_env": {}, "by_set": {}}, "served_by": self.node_id}
            )
        if request.method == "POST" and rest == ["consumers"]:
            cid = body.get("consumer_id") or f"c-{len(self.consumers) + 1}"
            self.consumers.add(cid)
            return web.json_response({"consumer_id": cid, "session_timeout_ms": 10000, "served_by": self.node_id})
        cid = rest[1]
        if cid not in self.consumers:
            return error_response(NotFound("consumer_not_found", f"no consumer {cid!r}"))
        if request.method == "DELETE":
            self.consumers.discard(cid)
            return web.Response(status=204)
        op = rest[2]
        if op == "poll":
            return web.json_response({"messages": []})
        if op == "ack":
            return web.json_response({"acked": len(body["ids"])})
        if op == "nack":
            return web.json_response({"nacked": len(body["ids"])})
        return error_response(NotFound("not_found", "no such route"))
