"""The write node's side of a remap cut-over (``docs/internals.md``, "Remap cut-over").

Two pieces for ``write_nodes/service.py`` to wire in:

- ``FenceView`` (``start()``/``stop()``): the node's copy of the remap fence
  (``metadata.fences``), read atomically with the map epoch it belongs to and
  reloaded on every newer ``map`` announcement (and ``resync``). It never goes back
  to an older epoch. ``check(map_epoch, pairs)`` is called in the append handler
  right after the placement check, in the same stretch without awaits as the hand-off
  to the log: it raises ``Unavailable`` ``stale_map`` (retryable, details ``epoch``,
  ``moving: true``) for a fenced (queue, vp), and for everything while the view is
  newer than the node's map (``map_epoch``), because the map the node checked
  placements against may predate the fence's removal.
- ``FenceEndpoint``: ``POST /internal/v1/partitions/{pp}/fence`` with
  ``{"epoch": E, "timeout_ms": T}`` (T default 10000, at most 30000). Answers
  ``{"partition", "epoch", "end_offset"}`` once (1) the view's epoch is >= E
  (reloading it if needed; ``refresh_map(E)`` is awaited too, so the node's map
  catches up), (2) every append admitted before that is durable: ``end_offset`` is
  the partition's next offset (appends in flight included) read after (1), returned
  only when the durable end reached it. Every record of a vp fenced at E on this
  partition lies below ``end_offset``. Errors: ``common.errors`` JSON
  (``not_owner``/``partition_offline`` from ``partitions.serving(pp)``, 503
  ``fence_pending`` when Redis's map is older than E, 503 ``fence_timeout`` when the
  durable end did not get there within T, 400 ``invalid_request``).

``wire_fence(app, view, partitions, refresh_map)`` registers the route.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

import orjson
from aiohttp import web

from vpq.common.errors import BadRequest, Unavailable, VpqError
from vpq.metadata.events import EventListener
from vpq.metadata.fences import Fence, FenceStore

log = logging.getLogger(__name__)

STALE_MAP = "stale_map"
DEFAULT_TIMEOUT_MS = 10_000
MAX_TIMEOUT_MS = 30_000
FENCE_ROUTE = r"/internal/v1/partitions/{pp:\d{1,9}}/fence"


class FencedLog(Protocol):
    """What the endpoint needs of a partition log (``write_nodes.log.PartitionLog``)."""

    @property
    def end_offset(self) -> int: ...

    @property
    def durable_end_offset(self) -> int: ...

    async def wait_for(self, offset: int, timeout_s: float) -> bool: ...


class PartitionSource(Protocol):
    """``write_nodes.ownership.PartitionOwnership``: ``serving(pp).log`` or ``Unavailable``."""

    def serving(self, pp: int) -> Any: ...


class FenceView:
    """See the module docstring."""

    def __init__(self, store: FenceStore, listener: EventListener | None = None) -> None:
        self._store = store
        self._listener = listener
        self._epoch = -1
        self._fence: Fence | None = None
        self._lock = asyncio.Lock()
        self._started = False

    async def start(self) -> None:
        """Register for announcements, then load (so no change after start is missed)."""
        if self._started:
            return
        if self._listener is not None:
            self._listener.add_callback(self._on_event)
        self._started = True
        try:
            await self.refresh()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        if self._started and self._listener is not None:
            self._listener.remove_callback(self._on_event)
        self._started = False

    @property
    def epoch(self) -> int:
        """The map epoch the view was read at (-1 before the first load)."""
        return self._epoch

    @property
    def fence(self) -> Fence | None:
        return self._fence

    async def refresh(self) -> None:
        """Reload (map epoch, fence) atomically; keeps the newer of old and new."""
        async with self._lock:
            snap = await self._store.snapshot()
            if snap.map_epoch >= self._epoch:
                self._epoch, self._fence = snap.map_epoch, snap.fence

    async def refresh_to(self, epoch: int) -> None:
        """Reload unless the view is already at ``epoch`` or newer."""
        if self._epoch < epoch:
            await self.refresh()

    async def _on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "resync" or (kind == "map" and int(event.get("epoch", 0)) > self._epoch):
            await self.refresh()

    def check(self, map_epoch: int, pairs: Iterable[tuple[str, int]]) -> None:
        """Refuse the append when any (queue name, vp) is fenced; see the module doc. No I/O."""
        if self._epoch > map_epoch:
            raise Unavailable(
                STALE_MAP, f"stale map: the node's map (epoch {map_epoch}) is older than its remap fence view "
                f"(epoch {self._epoch})", retry_after=0.0, epoch=map_epoch,
            )
        fence = self._fence
        if fence is None:
            return
        for queue, vp in pairs:
            if fence.fenced(queue, vp):
                raise Unavailable(
                    STALE_MAP, f"queue {queue!r} vp {vp} is moving (remap fence of epoch {fence.epoch}); retry shortly",
                    retry_after=0.05, epoch=map_epoch, moving=True,
                )


def _error(err: VpqError) -> web.Response:
    resp = web.Response(body=orjson.dumps(err.to_dict()), status=err.status, content_type="application/json")
    resp.headers.update(err.headers())
    return resp


def _int_field(body: Any, name: str, default: int | None, maximum: int | None = None) -> int:
    value = body.get(name, default) if isinstance(body, dict) else None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadRequest("invalid_request", f"{name!r} must be an integer >= 0", field=name)
    return min(value, maximum) if maximum is not None else value


class FenceEndpoint:
    """The ``POST .../fence`` handler; see the module docstring."""

    def __init__(
        self,
        view: FenceView,
        partitions: PartitionSource,
        refresh_map: Callable[[int], Awaitable[None]] | None = None,
    ) -> None:
        self._view = view
        self._partitions = partitions
        self._refresh_map = refresh_map

    async def handle(self, request: web.Request) -> web.Response:
        try:
            return await self._handle(request)
        except VpqError as err:
            return _error(err)

    async def _handle(self, request: web.Request) -> web.Response:
        pp = int(request.match_info["pp"])
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            raise BadRequest("invalid_request", "the body must be a JSON object") from None
        epoch = _int_field(body, "epoch", None)
        timeout_ms = _int_field(body, "timeout_ms", DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS)
        self._partitions.serving(pp)  # fail fast when not the owner
        await self._view.refresh_to(epoch)
        if self._view.epoch < epoch:
            raise Unavailable("fence_pending", f"map epoch {epoch} is not published yet (Redis has {self._view.epoch})",
                              retry_after=0.1, epoch=self._view.epoch)
        if self._refresh_map is not None:
            await self._refresh_map(epoch)
        plog: FencedLog = self._partitions.serving(pp).log
        target = plog.end_offset  # every append admitted under an older view is below it
        if plog.durable_end_offset < target and not await plog.wait_for(target - 1, timeout_ms / 1000.0):
            self._partitions.serving(pp)  # lost or offline while waiting: say so
            raise Unavailable("fence_timeout", f"partition {pp}: appends in flight not durable within {timeout_ms} ms",
                              retry_after=0.1, partition=pp)
        log.info("partition %d fenced for map epoch %d at offset %d", pp, epoch, target)
        return web.json_response({"partition": pp, "epoch": self._view.epoch, "end_offset": target})


def wire_fence(
    app: web.Application,
    view: FenceView,
    partitions: PartitionSource,
    refresh_map: Callable[[int], Awaitable[None]] | None = None,
) -> FenceEndpoint:
    """Register ``POST /internal/v1/partitions/{pp}/fence`` on ``app``."""
    endpoint = FenceEndpoint(view, partitions, refresh_map)
    app.router.add_post(FENCE_ROUTE, endpoint.handle)
    return endpoint
