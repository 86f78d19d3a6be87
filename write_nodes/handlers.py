"""The write node's internal HTTP API, server side (``docs/internals.md``, "Write node").

- ``POST /internal/v1/append``: several partitions' batches in one body
  (``node_rpc.append_frames``), ``X-Map-Epoch`` header. Each frame must be exactly one
  valid magic-2 (columnar) batch, CRC and columns checked (400 ``corrupt_batch``
  otherwise: a magic-1 batch is refused, the platform only writes magic 2); every
  record's (queue, vp) must be placed on the frame's partition by the node's current
  map (refreshed first when the sender's epoch is newer, or when a queue id is
  unknown), else 503 ``stale_map`` with detail ``epoch``. One answer entry per frame,
  ``{"base_offset", "last_offset"}`` once durable or the frame's error; a chain stops
  at its first refused frame. When a record's queue deduplicates (``dedup_window_ms``
  > 0) and it carries a dedup id already stored in the partition, it is not appended
  again and the frame's entry is ``{"offsets", "vps"}`` (``write_nodes.dedup_log``).
  The final placement checks and the submissions to the
  logs run without yielding to the event loop, so every record below a partition's
  ``next_offset`` was checked against a map no newer than the one the node reports in
  ``GET /partitions``.
- ``GET /internal/v1/partitions/{pp}/read?offset=&max_bytes=&wait_ms=``: whole raw
  durable batches from the batch holding ``offset`` (the log start when below it),
  long-polling up to ``wait_ms`` (at most 30000) when there is nothing yet; headers
  ``X-Start-Offset`` and ``X-End-Offset``.
- ``GET /internal/v1/partitions``: ``{"node_id", "map_epoch", "partitions": [...]}``, and
  ``"disk": {"free_bytes", "total_bytes"}`` of the data directory when the node has one.
- ``GET /internal/v1/metrics``: Prometheus text (``write_nodes.metrics``).

With a cluster secret, a call without it is 401 ``cluster_secret_required`` or
``bad_cluster_secret`` before any handler runs (``node_rpc.cluster_auth``).

Errors are ``common.errors`` JSON with the error's status (``error_middleware``):
ownership answers come from ``PartitionOwnership.serving``; an I/O error of the log
takes the partition offline (503 ``partition_offline``). Disk (``write_nodes.disk_guard``):
an append that would eat into the headroom is refused whole, every frame answered
507 ``insufficient_storage`` and nothing appended; a log write that fails with ENOSPC
anyway answers its frames 507 too: the log undoes it (and what was queued behind it)
and stays online (``write_nodes.group_commit``); only an ENOSPC elsewhere (an fsync,
a segment roll) takes the partition offline, to be reopened without growing backoff. Reads and the listing never depend on free space.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import orjson
from aiohttp import web

from vpq.codec.columnar import MAGIC_COLUMNAR, TrafficKey, summarize
from vpq.codec.errors import CorruptBatchError
from vpq.codec.records import BatchView
from vpq.common.errors import (
    BadRequest,
    InsufficientStorage,
    InternalError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    Unavailable,
    VpqError,
)
from vpq.metadata.errors import MetadataUnavailable
from vpq.metadata.map_cache import MapCache
from vpq.metadata.queue_config import dedup_window_of
from vpq.node_rpc.append_frames import (
    STALE_LEADER_EPOCH,
    ChainGate,
    Deduplicated,
    Frame,
    FrameError,
    decode_frames,
    dedup_entry,
    error_entry,
    ok_entry,
)
from vpq.node_rpc.cluster_auth import cluster_secret_middlewares
from vpq.write_nodes import dedup_log
from vpq.write_nodes.disk_guard import DiskGuard
from vpq.write_nodes.errors import DiskFullError, LogIOError, OffsetOutOfRangeError
from vpq.write_nodes.fence import FenceView
from vpq.write_nodes.log import PartitionLog, wall_clock_ms
from vpq.write_nodes.metrics import WriteNodeMetrics
from vpq.write_nodes.ownership import NOT_OWNER, PARTITION_OFFLINE, OwnedPartition, PartitionOwnership, State
from vpq.write_nodes.replica_leader import LeaderState
from vpq.write_nodes.replica_log import trim_batches
from vpq.write_nodes.replication import ReplicaManager

log = logging.getLogger(__name__)

MAP_EPOCH_HEADER = "X-Map-Epoch"
START_OFFSET_HEADER = "X-Start-Offset"
END_OFFSET_HEADER = "X-End-Offset"
MAX_WAIT_MS = 30_000
DEFAULT_READ_BYTES = 1 << 20
MAX_READ_BYTES = 64 << 20
DISK_RETRY_AFTER_S = 1.0
STALE_MAP = "stale_map"
CORRUPT_BATCH = "corrupt_batch"



class TrafficSink(Protocol):
    def count_batch(self, summary: Mapping[TrafficKey, Sequence[int]], queues: Mapping[int, tuple[str, int]]) -> None:
        """Count one appended batch: its summary ((queue id, vp, context id) -> [messages,
        value bytes]) with ``queues`` (id -> (name, V)) as ``PlacementGuard.check`` answers."""


# ------------------------------------------------------------------ pure helpers
def check_batch(body: bytes) -> tuple[BatchView, dict[TrafficKey, list[int]]]:
    """The header view and the routing summary (``codec.columnar.summarize``) of
    ``body``, which must be exactly one valid magic-2 batch (CRC and columns included);
    ``BadRequest`` (``corrupt_batch``) otherwise."""
    try:
        view = BatchView(body, 0)
        if view.size != len(body):
            raise CorruptBatchError(f"expected exactly one batch: {len(body)} bytes for a {view.size}-byte batch")
        if view.magic != MAGIC_COLUMNAR:
            raise CorruptBatchError(f"magic {view.magic}: the write node takes magic-{MAGIC_COLUMNAR} batches only")
        if not view.verify_crc():
            raise CorruptBatchError("CRC mismatch")
        return view, summarize(view)
    except CorruptBatchError as exc:
        raise BadRequest(CORRUPT_BATCH, f"corrupt record batch: {exc}") from None


def _pp(request: web.Request) -> int:
    return int(request.match_info["pp"])


def _int_value(raw: str | None, name: str, default: int | None, minimum: int) -> int:
    if raw is None or raw == "":
        if default is None:
            raise BadRequest("invalid_request", f"query parameter {name!r} is required", field=name)
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest("invalid_request", f"{name!r} must be an integer, got {raw[:40]!r}", field=name) from None
    if value < minimum:
        raise BadRequest("invalid_request", f"{name!r} must be >= {minimum}, got {value}", field=name)
    return value


def _epoch(request: web.Request) -> int:
    return map_epoch(request.headers.get(MAP_EPOCH_HEADER))


def map_epoch(raw: str | None) -> int:
    """The sender's map epoch from ``X-Map-Epoch`` (0 when absent); 400 when invalid."""
    if raw is None:
        return 0
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise BadRequest("invalid_header", f"{MAP_EPOCH_HEADER} must be an integer >= 0", header=MAP_EPOCH_HEADER)
    return value


def json_response(obj: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


def error_response(err: VpqError) -> web.Response:
    resp = json_response(err.to_dict(), err.status)
    resp.headers.update(err.headers())
    return resp


@web.middleware
async def error_middleware(request: web.Request, handler: web.RequestHandler) -> web.StreamResponse:
    """Every failure becomes ``common.errors`` JSON; unexpected exceptions are 500s (logged)."""
    try:
        return await handler(request)
    except VpqError as err:
        return error_response(err)
    except web.HTTPException as exc:
        if exc.status == 404:
            return error_response(NotFound("not_found", f"no route {request.method} {request.path}"))
        if exc.status == 405:
            allowed = sorted(getattr(exc, "allowed_methods", ()) or ())
            return error_response(MethodNotAllowed(message=f"{request.method} not allowed here", allowed=allowed))
        if exc.status == 413:
            return error_response(PayloadTooLarge(message=exc.text or "request body too large"))
        if exc.status >= 400:
            return error_response(VpqError(f"http_{exc.status}", exc.reason, exc.status))
        raise
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("unexpected error in %s %s", request.method, request.path)
        return error_response(InternalError(message="internal error in the write node"))


# --------------------------------------------------------------- map checking
class PlacementGuard:
    """Checks records against the node's cached placement map (see module doc)."""

    def __init__(self, cache: MapCache) -> None:
        self._cache = cache

    @property
    def epoch(self) -> int:
        return self._cache.epoch

    async def refresh_if_needed(self, sender_epoch: int, queue_ids: Iterable[int]) -> None:
        """Bring the map up to date when the sender routed with a newer epoch, and load
        the queue ids unknown here. Concurrent callers share reads (``MapCache``)."""
        cache = self._cache
        unknown = [q for q in dict.fromkeys(queue_ids) if cache.queue_by_id(q) is None]
        sync = sender_epoch > cache.epoch
        if not unknown and not sync:
            return
        try:
            await cache.refresh(ids=unknown, sync=sync)
        except (MetadataUnavailable, OSError) as exc:
            raise Unavailable("metadata_unavailable", f"cannot reload the placement map: {exc}") from exc

    def check(self, pp: int, keys: Iterable[Sequence[int]]) -> dict[int, tuple[str, int]]:
        """queue id -> (queue name, V of the map) when every key's (queue id, vp), its
        first two items (a summary's (queue id, vp, context id) keys will do), is placed
        on ``pp``; ``Unavailable`` (``stale_map``, detail ``epoch``) otherwise. A queue's
        placement is looked up once however many of its keys there are. No I/O."""
        cache = self._cache
        queues: dict[int, tuple[str, int]] = {}
        placements: dict[int, Sequence[int]] = {}
        for key in keys:
            qid, vp = key[0], key[1]
            placement = placements.get(qid)
            if placement is None:
                rec = cache.queue_by_id(qid)
                entry = cache.entry(rec.name) if rec is not None else None
                if rec is None or entry is None or entry.placement is None:
                    what = f"queue id {qid} is unknown" if rec is None else f"queue {rec.name!r} is not placed"
                    raise self._stale(f"{what} in map epoch {cache.epoch}")
                placement = placements[qid] = entry.placement
                queues[qid] = (rec.name, entry.virtual_partitions)
            if vp >= len(placement) or placement[vp] != pp:
                where = f"on partition {placement[vp]}" if vp < len(placement) else f"out of range (V={len(placement)})"
                raise self._stale(
                    f"queue {queues[qid][0]!r} vp {vp} is {where}, not {pp}, in map epoch {cache.epoch}"
                )
        return queues

    def dedup_window_ms(self, queue_id: int) -> int:
        """The queue's ``dedup_window_ms`` in the cached registry (0 for an unknown queue)."""
        rec = self._cache.queue_by_id(queue_id)
        return dedup_window_of(rec.config) if rec is not None else 0

    def _stale(self, why: str) -> Unavailable:
        return Unavailable(STALE_MAP, f"stale map: {why}", retry_after=0.0, epoch=self._cache.epoch)


# -------------------------------------------------------------------- handlers
class _Frame:
    """One batch on its way into a partition's log."""

    __slots__ = ("pp", "batch", "view", "summary", "part", "queues", "leader_epoch")

    def __init__(
        self, pp: int, batch: bytes, view: BatchView, summary: dict[TrafficKey, list[int]], leader_epoch: int = -1
    ) -> None:
        self.pp = pp
        self.leader_epoch = leader_epoch
        self.batch = batch
        self.view = view
        self.summary = summary
        self.part: OwnedPartition | None = None
        self.queues: dict[int, tuple[str, int]] = {}


class WriteNodeHandlers:
    def __init__(
        self,
        node_id: str,
        ownership: PartitionOwnership,
        guard: PlacementGuard,
        traffic: TrafficSink | None = None,
        metrics: WriteNodeMetrics | None = None,
        fence: FenceView | None = None,
        data_dir: Path | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
        disk: DiskGuard | None = None,
        replication: ReplicaManager | None = None,
    ) -> None:
        self._clock_ms = clock_ms
        self._node_id = node_id
        self._replication = replication
        self._disk = disk
        self._data_dir = data_dir
        self._fence = fence
        self._ownership = ownership
        self._guard = guard
        self._traffic = traffic
        self._metrics = metrics or WriteNodeMetrics()

    async def append_many(self, request: web.Request) -> web.Response:
        """``POST /internal/v1/append``: the frames of ``node_rpc.append_frames``, each
        checked (``check_batch``, the map, the fence) and appended in body order; one
        answer entry per frame (``append_frames``)."""
        sender_epoch = _epoch(request)
        with self._ownership.track():
            body = await request.read()
            try:
                raw = decode_frames(body)
            except FrameError as exc:
                raise BadRequest(CORRUPT_BATCH, f"malformed append frames: {exc}") from None
            entries = await self.append_frames(raw, sender_epoch)
        return json_response({"results": entries})

    async def append_frames(self, raw: Sequence[Frame], sender_epoch: int) -> list[dict[str, object]]:
        """Check and append ``raw`` in order; one answer entry per frame. A frame that
        continues a chain whose earlier frame was refused gets the same error and is not
        appended, so a chain never lands out of order."""
        own = self._ownership
        if self._disk is not None:
            try:
                self._disk.check(sum(len(f.batch) for f in raw))
            except VpqError as short:
                entry = error_entry(short.to_dict()["error"], short.status)
                return [entry for _ in raw]
        with own.track():
            frames: list[_Frame | VpqError] = []
            for pp, batch, _, leader_epoch in raw:
                try:
                    own.serving(pp)
                    frames.append(_Frame(pp, batch, *check_batch(batch), leader_epoch))
                except VpqError as err:
                    frames.append(err)
            ids = {k[0] for f in frames if isinstance(f, _Frame) for k in f.summary}
            await self._guard.refresh_if_needed(sender_epoch, ids)
            started = time.perf_counter()
            # from here until every frame is submitted nothing yields to the event loop
            gate = ChainGate()
            waiters: list[Awaitable[tuple[int, int] | Deduplicated] | VpqError] = []
            for frame, f in zip(raw, frames, strict=True):
                err = gate.refused(frame)
                if err is None and isinstance(f, _Frame):
                    try:
                        waiters.append(self._admit(f))
                        continue
                    except LogIOError as exc:
                        assert f.part is not None
                        err = self._log_failure(f.pp, f.part, exc)
                    except VpqError as exc:
                        err = exc
                elif err is None:
                    assert isinstance(f, VpqError)
                    err = f
                gate.record(frame, err)
                waiters.append(err)
            entries: list[dict[str, object]] = []
            for f, w in zip(frames, waiters, strict=True):
                if isinstance(w, VpqError):
                    entries.append(error_entry(w.to_dict()["error"], w.status))
                    continue
                assert isinstance(f, _Frame) and f.part is not None
                try:
                    answer = await w
                except LogIOError as exc:
                    err = self._log_failure(f.pp, f.part, exc)
                    entries.append(error_entry(err.to_dict()["error"], err.status))
                    continue
                except VpqError as err:
                    entries.append(error_entry(err.to_dict()["error"], err.status))
                    continue
                self._count(f, time.perf_counter() - started)
                if isinstance(answer, Deduplicated):
                    entries.append(dedup_entry(answer))
                else:
                    entries.append(ok_entry(*answer))
        return entries

    def _admit(self, frame: _Frame) -> Awaitable[tuple[int, int] | Deduplicated]:
        """Check ``frame`` against the map and the fence and submit it to its log, without
        yielding; await the result for its offsets once durable."""
        pp, summary = frame.pp, frame.summary
        queues = self._guard.check(pp, summary)
        if self._fence is not None:  # vps being moved by a remap take no writes (retryable)
            self._fence.check(self._guard.epoch, ((queues[k[0]][0], k[1]) for k in summary))
        part = self._ownership.serving(pp)
        assert part.log is not None
        state = self._replication.state(pp) if self._replication is not None else None
        if state is not None:
            state.check_insync()
            if frame.leader_epoch >= 0 and frame.leader_epoch != state.epoch:
                raise Unavailable(
                    STALE_LEADER_EPOCH,
                    f"write node {self._node_id} leads partition {pp} at leader epoch {state.epoch}, "
                    f"the append names {frame.leader_epoch}",
                    partition=pp,
                    leader_epoch=state.epoch,
                )
        frame.part, frame.queues = part, queues
        try:
            window_of = self._guard.dedup_window_ms
            if part.dedup is not None and any(window_of(qid) > 0 for qid in queues):
                durable = dedup_log.admit(part.log, part.dedup, frame.batch, frame.view, self._clock_ms(), window_of)
            else:
                durable = part.log.submit_checked(frame.batch, frame.view)
        except ValueError as exc:
            raise BadRequest(CORRUPT_BATCH, f"corrupt record batch: {exc}") from None
        return durable if state is None else _replicated(durable, state)

    def _count(self, frame: _Frame, elapsed_s: float) -> None:
        if self._traffic is not None:
            self._traffic.count_batch(frame.summary, frame.queues)
        self._metrics.appended(frame.pp, len(frame.batch), frame.summary, frame.queues, elapsed_s)

    async def read(self, request: web.Request) -> web.Response:
        data, headers = await self.read_query(_pp(request), request.query.get)
        return web.Response(body=data, content_type="application/octet-stream", headers=headers)

    async def read_query(self, pp: int, query: Callable[[str], str | None]) -> tuple[bytes, dict[str, str]]:
        """The body and headers of ``GET .../partitions/{pp}/read``; ``query`` gives a
        query parameter's (first) value, None when absent. Raises the route's errors."""
        offset = _int_value(query("offset"), "offset", None, 0)
        max_bytes = min(_int_value(query("max_bytes"), "max_bytes", DEFAULT_READ_BYTES, 1), MAX_READ_BYTES)
        wait_ms = min(_int_value(query("wait_ms"), "wait_ms", 0, 0), MAX_WAIT_MS)
        part = self._ownership.serving(pp)
        plog = part.log
        assert plog is not None
        state = self._replication.state(pp) if self._replication is not None else None
        if wait_ms > 0 and _visible_end(plog, state) <= max(offset, plog.start_offset):
            if state is None:
                await plog.wait_for(max(offset, plog.start_offset), wait_ms / 1000.0)
            else:
                await state.wait_past(max(offset, plog.start_offset) + 1, wait_ms / 1000.0)
            part = self._ownership.serving(pp)  # lost, closed or offline while waiting?
            plog = part.log
            assert plog is not None
            state = self._replication.state(pp) if self._replication is not None else None
        pos = max(offset, plog.start_offset)
        end = _visible_end(plog, state)
        data = b""
        if pos < end:
            try:
                data = plog.read(pos, max_bytes)
                if state is not None:
                    data = trim_batches(data, end)
            except OffsetOutOfRangeError:
                data = b""
            except LogIOError as exc:
                raise self._log_failure(pp, part, exc) from exc
        return data, {START_OFFSET_HEADER: str(plog.start_offset), END_OFFSET_HEADER: str(end)}

    async def partitions(self, request: web.Request) -> web.Response:
        rows = self._ownership.snapshot()
        body: dict[str, Any] = {"node_id": self._node_id, "map_epoch": self._guard.epoch, "partitions": rows}
        if self._replication is not None:
            for row in rows:
                row.update(self._replication.leader_row(row["id"]))
            body["followers"] = self._replication.follower_rows()
        if self._data_dir is not None:
            try:
                usage = shutil.disk_usage(self._data_dir)
                body["disk"] = {"free_bytes": usage.free, "total_bytes": usage.total}
            except OSError:
                pass  # best effort: the listing stands without it
        return json_response(body)

    async def metrics(self, request: web.Request) -> web.Response:
        rows = self._ownership.snapshot()
        counters = None
        if self._replication is not None:
            for row in rows:
                row.update(self._replication.leader_row(row["id"]))
            counters = self._replication.counters()
        text = self._metrics.render(rows, self._guard.epoch, counters)
        return web.Response(body=text, headers={"Content-Type": self._metrics.content_type})

    def _log_failure(self, pp: int, part: OwnedPartition, exc: LogIOError) -> VpqError:
        if isinstance(exc, DiskFullError):  # undone by the log, which stays online
            return InsufficientStorage(
                message=f"partition {pp}: the write node's disk is full; nothing was appended",
                retry_after=DISK_RETRY_AFTER_S, partition=pp,
            )
        if part.state is State.CLOSING:
            return Unavailable(NOT_OWNER, f"write node {self._node_id} is giving partition {pp} up", partition=pp, node=self._node_id)
        self._ownership.mark_offline(part, exc)
        full = self._disk.storage_error(exc) if self._disk is not None else None
        if full is not None:
            return full
        return Unavailable(PARTITION_OFFLINE, f"partition {pp} is offline: {exc}", partition=pp, state="offline")


def _visible_end(plog: PartitionLog, state: LeaderState | None) -> int:
    """What readers may see: the durable end, or the high watermark when replicated."""
    return plog.durable_end_offset if state is None else min(plog.durable_end_offset, state.high_watermark)


async def _replicated(
    durable: Awaitable[tuple[int, int] | Deduplicated], state: LeaderState
) -> tuple[int, int] | Deduplicated:
    """The answer once every in-sync replica has fsynced what it names (for duplicates,
    the records stored before)."""
    answer = await durable
    last = max(answer.offsets, default=-1) if isinstance(answer, Deduplicated) else answer[1]
    await state.wait_past(last + 1)
    return answer


def build_app(
    handlers: WriteNodeHandlers, *, client_max_size: int, cluster_secret: str | None = None
) -> web.Application:
    """The aiohttp application of the write node's internal API; with ``cluster_secret``
    every call must carry it (``node_rpc.cluster_auth``)."""
    app = web.Application(
        middlewares=[error_middleware, *cluster_secret_middlewares(cluster_secret)], client_max_size=client_max_size
    )
    app.router.add_post("/internal/v1/append", handlers.append_many)
    app.router.add_get(r"/internal/v1/partitions/{pp:\d{1,9}}/read", handlers.read)
    app.router.add_get("/internal/v1/partitions", handlers.partitions)
    app.router.add_get("/internal/v1/metrics", handlers.metrics)
    return app

