"""The one client-side produce path: route, encode one batch per physical partition, append
to the owning write nodes in parallel, retry what a map change or a failover refused.

``Appender.append(queue, messages)`` answers one result dict per message, in request order::

    {"id": encode_message_id(pp, offset), "partition": pp, "offset": offset,
     "virtual_partition": vp}

only once every message is durable. The id is the one read nodes give the message
(``read_nodes.message_id``). Used by the gateway for ``POST /v1/queues/{q}/messages`` and by
read nodes to dead-letter into ``{q}.{g}.dlq``.

How (see ``docs/internals.md``):

1. Route every pending message with the ``ProduceRouter`` (key -> mmh3 key hash, keyless ->
   the per-queue spreader's hash, vp = hash mod V, pp from the cached map, interned context
   id): zero Redis round trips when the queue, the map and the context are cached.
2. Group by pp, keeping request order inside each pp; build ``write_nodes.records`` batches
   (``build_batch(0, records, now_ms)``), splitting a pp's records into several batches when
   they exceed ``AppendPolicy.max_batch_bytes`` (kept in order).
3. Group the batches by the write node that owns their pp and send each node ONE
   multi-partition append (``POST /internal/v1/append``, ``X-Map-Epoch`` = the routing
   epoch; more than one, one after the other, only past ``max_request_bytes``); the nodes
   are called concurrently. The node answers per batch, so a refusal concerns one pp.
4. Messages whose append failed with a retryable error are routed again and retried after a
   short backoff: ``stale_map`` refreshes the map cache first; ``not_owner``,
   ``node_unreachable`` and ``partition_unowned`` make the locator forget the pp's owner;
   ``partition_offline`` just waits. A queue the cache does not know is looked up in Redis
   once before answering 404; a queue not placed yet is retried like the rest.
5. When ``AppendPolicy.budget_s`` is spent: ``Unavailable`` (503, ``produce_unavailable``,
   ``Retry-After``). A non-retryable answer of a write node is a bug in this path:
   ``InternalError`` (``write_node_rejected``).

All or nothing holds per physical partition, not across them: when a retry finally fails,
batches already durable on other partitions stay (the producer's retry may duplicate them:
at-least-once). Messages of one pp are never split by a failure of another.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from common.errors import InternalError, NotFound, Unavailable, VpqError
from metadata.errors import QueueNotFoundError
from read_nodes.message_id import encode_message_id
from virtual_partitions.router import QueueNotPlacedError, Route
from write_nodes.append_frames import Frame
from write_nodes.client import NODE_UNREACHABLE
from write_nodes.records import VALUE_JSON, VALUE_RAW, build_batch

# codes of retryable write-node answers (docs/internals.md)
STALE_MAP = "stale_map"
NOT_OWNER = "not_owner"
PARTITION_OFFLINE = "partition_offline"
PARTITION_UNOWNED = "partition_unowned"
_FORGET_OWNER = frozenset({NOT_OWNER, NODE_UNREACHABLE, PARTITION_UNOWNED})

BATCH_OVERHEAD = 43 + 64
"""Header bytes of a batch plus slack; per-record framing is estimated separately."""
RECORD_OVERHEAD = 40


class OutgoingMessage(Protocol):
    """A message to append (``gateway.backend.ResolvedMessage`` is one). ``value`` holds the
    stored bytes: compact UTF-8 JSON when ``value_is_json``, else raw bytes. ``context`` has
    ``env``, ``set`` and ``lane`` attributes."""

    @property
    def key(self) -> str | None: ...

    @property
    def value(self) -> bytes: ...

    @property
    def value_is_json(self) -> bool: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def context(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class PlainMessage:
    """A ready-made ``OutgoingMessage`` (read nodes dead-letter with it). Header values may
    be ``str`` (stored as UTF-8) or ``bytes``; ``timestamp_ms`` None means "now"."""

    value: bytes
    value_is_json: bool = False
    key: str | None = None
    headers: Mapping[str, str | bytes] = field(default_factory=dict)
    context: Any = ("prod", "", "")
    timestamp_ms: int | None = None


class Router(Protocol):
    async def route_many(self, queue: str, messages: Sequence[tuple[str | None, Any]]) -> list[Route]: ...


class RoutingCache(Protocol):
    async def refresh(self) -> None: ...

    async def refresh_map(self) -> None: ...


class PartitionLocator(Protocol):
    """Finds write nodes (``gateway.node_directory.WriteNodeDirectory`` is one)."""

    async def owner(self, pp: int) -> Any:
        """An object with an ``address`` attribute; ``Unavailable`` when pp has no owner."""
        ...

    def invalidate(self, pp: int) -> None: ...


class AppendClient(Protocol):
    """``write_nodes.client.WriteNodeClient`` is one."""

    async def append_many(
        self, address: str, items: Sequence[Frame], map_epoch: int
    ) -> list[tuple[int, int] | VpqError]: ...


@dataclass(frozen=True, slots=True)
class AppendPolicy:
    """Retry budget and batch size of the produce path."""

    budget_s: float = 5.0
    backoff_initial_s: float = 0.02
    backoff_max_s: float = 0.5
    max_batch_bytes: int = 4 * 1024 * 1024
    max_request_bytes: int = 16 * 1024 * 1024
    retry_after_s: float = 1.0


@dataclass
class AppenderStats:
    """Counters for metrics (monotonic, process-local)."""

    requests: int = 0
    messages: int = 0
    batches: int = 0
    retries: dict[str, int] = field(default_factory=dict)
    failures: int = 0


class _Outgoing:
    """One message on its way to a partition: the fields ``build_batch`` reads of a
    ``Record`` (it only reads attributes). The routing fields are set again on every
    attempt. A plain mutable class on purpose: a frozen dataclass per message (and a
    ``Record`` per message and attempt) cost about a tenth of the gateway's CPU."""

    __slots__ = (
        "value", "value_encoding", "key", "headers", "timestamp_ms",
        "queue_id", "virtual_partition", "key_hash", "context_id", "estimated_size",
    )  # fmt: skip

    def __init__(self, m: OutgoingMessage) -> None:
        key = m.key.encode("utf-8") if m.key is not None else None
        raw = m.headers
        headers = tuple((k, v.encode("utf-8") if isinstance(v, str) else bytes(v)) for k, v in raw.items()) if raw else ()
        value = m.value
        self.value = value
        self.value_encoding = VALUE_JSON if m.value_is_json else VALUE_RAW
        self.key = key
        self.headers = headers
        self.timestamp_ms: int | None = getattr(m, "timestamp_ms", None)
        self.queue_id = self.virtual_partition = self.key_hash = self.context_id = 0
        size = RECORD_OVERHEAD + len(value) + (len(key) if key else 0)
        for k, v in headers:
            size += len(k) * 4 + len(v) + 10
        self.estimated_size = size


def group_by_partition(pps: Sequence[int]) -> dict[int, list[int]]:
    """Positions of ``pps`` grouped by value, each group in ascending position order; the
    groups in order of first appearance."""
    out: dict[int, list[int]] = {}
    for i, pp in enumerate(pps):
        out.setdefault(pp, []).append(i)
    return out


def split_chunks(positions: Sequence[int], sizes: Sequence[int], max_bytes: int) -> list[list[int]]:
    """``positions`` cut, in order, into runs whose ``sizes`` sum to at most ``max_bytes``
    (a single oversized item gets a run of its own). Never returns an empty run."""
    chunks: list[list[int]] = []
    cur: list[int] = []
    total = 0
    for pos in positions:
        s = sizes[pos]
        if cur and total + s > max_bytes:
            chunks.append(cur)
            cur, total = [], 0
        cur.append(pos)
        total += s
    if cur:
        chunks.append(cur)
    return chunks


@dataclass(slots=True)
class _PartitionOutcome:
    pp: int
    done: list[tuple[int, int]]  # (position in this attempt, offset)
    failed: list[int]  # positions in this attempt
    error: VpqError | None


class Appender:
    """See the module docstring. ``clock_ms`` stamps records without their own time."""

    def __init__(
        self,
        map_cache: RoutingCache,
        router: Router,
        locator: PartitionLocator,
        client: AppendClient,
        policy: AppendPolicy | None = None,
        *,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self._cache = map_cache
        self._router = router
        self._locator = locator
        self._client = client
        self._policy = policy or AppendPolicy()
        self._clock_ms = clock_ms
        self.stats = AppenderStats()

    async def append(self, queue: str, messages: Sequence[OutgoingMessage]) -> list[dict[str, Any]]:
        """Append ``messages`` (non-empty) to ``queue``; see the module docstring."""
        if not messages:
            raise ValueError("append needs at least one message")
        self.stats.requests += 1
        prepared = [_Outgoing(m) for m in messages]
        pairs = [(m.key, m.context) for m in messages]
        results: list[dict[str, Any] | None] = [None] * len(messages)
        pending = list(range(len(messages)))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._policy.budget_s
        backoff = self._policy.backoff_initial_s
        looked_up_unknown = False
        while True:
            last: VpqError | None = None
            refresh_map = False
            try:
                routes = await self._router.route_many(queue, [pairs[i] for i in pending])
            except QueueNotFoundError:
                if looked_up_unknown:
                    raise NotFound("queue_not_found", f"queue {queue!r} does not exist", queue=queue) from None
                looked_up_unknown = True
                await self._cache.refresh()
                continue
            except QueueNotPlacedError as exc:
                last = Unavailable("queue_not_placed", str(exc), retry_after=self._policy.retry_after_s)
                refresh_map = True
                self._count_retry("queue_not_placed")
            else:
                outcomes = await self._append_routed(queue, routes, [prepared[i] for i in pending])
                still: list[int] = []
                for out in outcomes:
                    for pos, offset in out.done:
                        r = routes[pos]
                        results[pending[pos]] = {
                            "id": encode_message_id(r.pp, offset),
                            "partition": r.pp,
                            "offset": offset,
                            "virtual_partition": r.vp,
                        }
                    if out.error is None:
                        continue
                    still.extend(pending[pos] for pos in out.failed)
                    err = out.error
                    if not err.retryable:
                        self.stats.failures += 1
                        raise InternalError(
                            "write_node_rejected",
                            f"write node refused a batch for partition {out.pp}: {err.message} ({err.code})",
                        ) from err
                    last = err
                    self._count_retry(err.code)
                    if err.code == STALE_MAP:
                        refresh_map = True
                    elif err.code in _FORGET_OWNER:
                        self._locator.invalidate(out.pp)
                if not still:
                    self.stats.messages += len(messages)
                    return results  # type: ignore[return-value]  # every slot is filled
                pending = sorted(still)
            if loop.time() + backoff > deadline:
                self.stats.failures += 1
                raise Unavailable(
                    "produce_unavailable",
                    f"could not append to queue {queue!r} in time: {last.message if last else 'unknown error'}",
                    retry_after=self._policy.retry_after_s,
                    cause=last.code if last else None,
                ) from last
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self._policy.backoff_max_s)
            if refresh_map:
                await self._cache.refresh_map()

    def _count_retry(self, reason: str) -> None:
        self.stats.retries[reason] = self.stats.retries.get(reason, 0) + 1

    async def _append_routed(
        self, queue: str, routes: list[Route], outgoing: list[_Outgoing]
    ) -> list[_PartitionOutcome]:
        now = self._clock_ms()
        for r, o in zip(routes, outgoing, strict=True):
            o.queue_id, o.virtual_partition, o.key_hash, o.context_id = r.queue_id, r.vp, r.key_hash, r.ctx_id
        sizes = [o.estimated_size for o in outgoing]
        groups = group_by_partition([r.pp for r in routes])
        epoch = routes[0].epoch
        budget = max(self._policy.max_batch_bytes - BATCH_OVERHEAD, 1)
        outcomes: dict[int, _PartitionOutcome] = {}
        by_node: dict[str, list[tuple[int, list[int]]]] = {}
        for pp, positions in groups.items():
            out = outcomes[pp] = _PartitionOutcome(pp, [], [], None)
            try:
                node = await self._locator.owner(pp)
            except VpqError as err:
                out.error, out.failed = err, list(positions)
                continue
            frames = by_node.setdefault(node.address, [])
            frames.extend((pp, chunk) for chunk in split_chunks(positions, sizes, budget))
        tasks = [self._append_node(addr, frames, outgoing, epoch, now, outcomes) for addr, frames in by_node.items()]
        if len(tasks) == 1:
            await tasks[0]
        elif tasks:
            await asyncio.gather(*tasks)
        return list(outcomes.values())

    async def _append_node(
        self,
        address: str,
        frames: list[tuple[int, list[int]]],
        records: list[_Outgoing],
        epoch: int,
        now_ms: int,
        outcomes: dict[int, _PartitionOutcome],
    ) -> None:
        """Every frame bound for one write node, in as few requests as fit
        ``max_request_bytes``, sent one after the other so a partition's frames stay in
        order; a partition stops at its first refused frame."""
        built = [(pp, chunk, build_batch(0, [records[i] for i in chunk], now_ms)) for pp, chunk in frames]
        for request in _requests(built, self._policy.max_request_bytes):
            items: list[tuple[int, list[int], bytes]] = []
            for pp, chunk, batch in request:
                out = outcomes[pp]
                if out.error is not None:
                    out.failed.extend(chunk)
                else:
                    items.append((pp, chunk, batch))
            if not items:
                continue
            sent: set[int] = set()
            body: list[Frame] = []
            for pp, _, b in items:  # a pp's later chunks continue its chain (kept in order)
                body.append(Frame(pp, b, pp in sent))
                sent.add(pp)
            try:
                answers = await self._client.append_many(address, body, epoch)
            except VpqError as err:
                for pp, chunk, _ in items:
                    out = outcomes[pp]
                    out.error = out.error or err
                    out.failed.extend(chunk)
                continue
            for (pp, chunk, _), answer in zip(items, answers, strict=True):
                out = outcomes[pp]
                if isinstance(answer, VpqError):
                    out.error = out.error or answer
                    out.failed.extend(chunk)
                    continue
                base, last = answer
                if last - base + 1 != len(chunk):
                    raise InternalError(
                        "bad_node_answer", f"write node answered {last - base + 1} offsets for {len(chunk)} records"
                    )
                self.stats.batches += 1
                out.done.extend((pos, base + k) for k, pos in enumerate(chunk))


def _requests(
    built: list[tuple[int, list[int], bytes]], max_bytes: int
) -> list[list[tuple[int, list[int], bytes]]]:
    """``built`` cut, in order, into runs of at most ``max_bytes`` of frames (a frame
    larger than that goes alone)."""
    sizes = [len(batch) + 8 for _, _, batch in built]
    return [[built[i] for i in run] for run in split_chunks(range(len(built)), sizes, max_bytes)]
