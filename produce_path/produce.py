"""The one client-side produce path: route, cut the messages into one part per physical
partition, append them through the write nodes' accumulator, retry what a map change or a
failover refused.

``Appender.append(queue, batch)`` takes an ``OutgoingBatch`` (``produce_path.outgoing``:
the request's messages as columns; a list of message objects is adapted) and answers a
``ProduceResults`` (partition, offset and vp of every message, in request order) only
once every message is durable. A message the write node found already stored (same
queue and ``dedup_id`` within the queue's ``dedup_window_ms``) gets the stored copy's
offset and vp. The message id is ``"<pp>-<offset>"``, the one read nodes
give the message (``codec.message_id``). Used by the gateway for
``POST /v1/queues/{q}/messages`` and by read nodes to dead-letter into ``{q}.{g}.dlq``.

How (see ``docs/internals.md``):

1. Route the pending messages with ``ProduceRouter.route_batch`` (key -> mmh3 key hash,
   keyless -> the per-queue spreader's hash, vp = hash mod V, pp from the cached map, the
   interned context id), column by column: zero Redis round trips when the queue, the
   map and the context are cached.
2. Group the positions by pp (request order kept inside each pp) and cut each pp's
   positions into parts of at most ``AppendPolicy.max_batch_bytes`` (kept in order).
3. Hand each write node its parts in ONE call of the ``AppendAccumulator``
   (``produce_path.append_accumulator``), which merges concurrent calls into one request
   per node and one magic-2 batch per partition; ``X-Map-Epoch`` is the routing epoch.
   The nodes are called concurrently. The answer is per part, so a refusal concerns one
   pp.
4. Messages whose append failed with a retryable error are routed again and retried after a
   short backoff: ``stale_map`` refreshes the map cache first; ``not_owner``,
   ``node_unreachable``, ``partition_unowned`` and ``stale_leader_epoch`` (the node leads
   the pp at another leader epoch than the locator's) make the locator forget the pp's owner;
   ``partition_offline`` just waits. A queue the cache does not know is looked up in Redis
   once before answering 404; a queue not placed yet is retried like the rest.
   ``insufficient_storage`` (507, a write node short of disk) is not retried: it is
   answered at once, with its ``Retry-After``.
5. When ``AppendPolicy.budget_s`` is spent: ``Unavailable`` (503, ``produce_unavailable``,
   ``Retry-After``). A non-retryable answer of a write node is a bug in this path:
   ``InternalError`` (``write_node_rejected``).

All or nothing holds per physical partition, not across them: when a retry finally fails,
parts already durable on other partitions stay (the producer's retry stores them again
unless they carry dedup ids: at-least-once otherwise). Messages of one pp are never split
by a failure of another.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Protocol

from vpq.codec.columnar import FIXED_RECORD_BYTES, ColumnarRecords
from vpq.codec.records import HEADER_SIZE
from vpq.common.errors import InternalError, NotFound, Unavailable, VpqError
from vpq.metadata.errors import QueueNotFoundError
from vpq.node_rpc.append_frames import STALE_LEADER_EPOCH, Deduplicated
from vpq.node_rpc.call import NODE_UNREACHABLE
from vpq.produce_path.append_accumulator import PartitionPart, part_size
from vpq.produce_path.outgoing import OutgoingBatch, OutgoingMessage, ProduceResults
from vpq.virtual_partitions.router import QueueNotPlacedError, RoutedBatch

if TYPE_CHECKING:
    from vpq.config.settings import ProduceSettings

# codes of retryable write-node answers (docs/internals.md)
STALE_MAP = "stale_map"
NOT_OWNER = "not_owner"
PARTITION_OFFLINE = "partition_offline"
PARTITION_UNOWNED = "partition_unowned"
INSUFFICIENT_STORAGE = "insufficient_storage"
_FORGET_OWNER = frozenset({NOT_OWNER, NODE_UNREACHABLE, PARTITION_UNOWNED, STALE_LEADER_EPOCH})


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
    async def route_batch(
        self,
        queue: str,
        keys: list[bytes | None],
        context: Any = None,
        contexts: list[Any] | None = None,
        spread_keys: list[bytes | None] | None = None,
    ) -> RoutedBatch: ...


class RoutingCache(Protocol):
    async def refresh(self, names: Iterable[str] = (), ids: Iterable[int] = (), *, sync: bool = True) -> None: ...

    async def refresh_map(self) -> None: ...


class PartitionLocator(Protocol):
    """Finds write nodes (``node_rpc.node_directory.WriteNodeDirectory`` is one)."""

    async def owner(self, pp: int) -> Any:
        """An object with an ``address`` attribute (and ``leader_epoch``, the epoch it leads
        the pp at, -1 or absent when not replicated: appends carry it); ``Unavailable``
        when pp has no owner."""
        ...

    def invalidate(self, pp: int) -> None: ...


class PartAppender(Protocol):
    """``produce_path.append_accumulator.AppendAccumulator`` is one."""

    async def append(
        self, address: str, parts: Sequence[PartitionPart], map_epoch: int
    ) -> list[tuple[int, int] | Deduplicated | VpqError]: ...


@dataclass(frozen=True, slots=True)
class AppendPolicy:
    """Retry budget and batch size of the produce path (``max_request_bytes``: how much
    the accumulator merges into one request to a node)."""

    budget_s: float = 5.0
    backoff_initial_s: float = 0.02
    backoff_max_s: float = 0.5
    max_batch_bytes: int = 4 * 1024 * 1024
    max_request_bytes: int = 16 * 1024 * 1024
    retry_after_s: float = 1.0

    @classmethod
    def from_settings(cls, section: ProduceSettings) -> AppendPolicy:
        """The policy of the ``[produce]`` settings section (same field names)."""
        return cls(**section.model_dump())


@dataclass
class AppenderStats:
    """Counters for metrics (monotonic, process-local)."""

    requests: int = 0
    messages: int = 0
    batches: int = 0  # parts appended (one partition's records of one request)
    retries: dict[str, int] = field(default_factory=dict)
    failures: int = 0


def group_by_partition(pps: Sequence[int]) -> dict[int, list[int]]:
    """Positions of ``pps`` grouped by value, each group in ascending position order; the
    groups in order of first appearance."""
    order = sorted(range(len(pps)), key=pps.__getitem__)  # stable: positions ascend within a value
    ranked = list(map(pps.__getitem__, order))
    out: dict[int, list[int]] = {}
    for pp in dict.fromkeys(pps):
        lo = bisect_left(ranked, pp)
        out[pp] = order[lo : bisect_right(ranked, pp, lo)]
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


def _pick(column: Sequence[Any], positions: Sequence[int], whole: bool) -> list[Any]:
    if whole:
        return column if isinstance(column, list) else list(column)
    if len(positions) == 1:
        return [column[positions[0]]]
    return list(itemgetter(*positions)(column))


def _chunk_columns(batch: OutgoingBatch, routed: RoutedBatch, chunks: list[list[int]]) -> list[ColumnarRecords]:
    """The columns of each run of positions in ``chunks`` (non-empty runs), each column
    picked once for all of them and then cut."""
    order = list(chain.from_iterable(chunks))
    if len(order) == 1:
        return [_part_columns(batch, routed, order, False)]
    get = itemgetter(*order)
    qid, ctx = routed.queue_id, routed.ctx_ids
    vps, hashes, keys, values = get(routed.vps), get(routed.key_hashes), get(batch.keys), get(batch.values)
    encodings = bytes(get(batch.encodings))
    ctxs = None if isinstance(ctx, int) else get(ctx)
    headers = None if batch.headers is None else get(batch.headers)
    out: list[ColumnarRecords] = []
    start = 0
    for chunk in chunks:
        n = len(chunk)
        end = start + n
        out.append(
            ColumnarRecords(
                queue_ids=[qid] * n,
                vps=vps[start:end],
                key_hashes=hashes[start:end],
                context_ids=[ctx] * n if ctxs is None else ctxs[start:end],
                keys=keys[start:end],
                values=values[start:end],
                encodings=encodings[start:end],
                headers=None if headers is None else headers[start:end],
                ts_deltas=None,
            )
        )
        start = end
    return out


def _part_columns(batch: OutgoingBatch, routed: RoutedBatch, positions: list[int], whole: bool) -> ColumnarRecords:
    """The columns of the messages at ``positions`` (``whole``: every message, in order)."""
    n = len(positions)
    ctx = routed.ctx_ids
    enc = batch.encodings
    return ColumnarRecords(
        queue_ids=[routed.queue_id] * n,
        vps=_pick(routed.vps, positions, whole),
        key_hashes=_pick(routed.key_hashes, positions, whole),
        context_ids=[ctx] * n if isinstance(ctx, int) else _pick(ctx, positions, whole),
        keys=_pick(batch.keys, positions, whole),
        values=_pick(batch.values, positions, whole),
        encodings=enc if whole else bytes(_pick(enc, positions, False)),
        headers=None if batch.headers is None else _pick(batch.headers, positions, whole),
        ts_deltas=None,
    )


@dataclass(slots=True)
class _PartOutcome:
    pp: int
    positions: list[int]  # positions in this attempt
    base: int = -1
    error: VpqError | None = None
    dedup: Deduplicated | None = None  # when some were duplicates: every record's offset and vp


class Appender:
    """See the module docstring. ``clock_ms`` stamps records without their own time."""

    def __init__(
        self,
        map_cache: RoutingCache,
        router: Router,
        locator: PartitionLocator,
        parts: PartAppender,
        policy: AppendPolicy | None = None,
        *,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self._cache = map_cache
        self._router = router
        self._locator = locator
        self._parts = parts
        self._policy = policy or AppendPolicy()
        self._clock_ms = clock_ms
        self.stats = AppenderStats()

    async def append(self, queue: str, messages: OutgoingBatch | Sequence[OutgoingMessage]) -> ProduceResults:
        """Append ``messages`` (non-empty) to ``queue``; see the module docstring."""
        batch = messages if isinstance(messages, OutgoingBatch) else OutgoingBatch.from_messages(messages)
        n = len(batch)
        self.stats.requests += 1
        pps = [0] * n
        offsets = [-1] * n
        vps = [0] * n
        pending: list[int] | None = None  # None: every message (the first attempt)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._policy.budget_s
        backoff = self._policy.backoff_initial_s
        looked_up_unknown = False
        while True:
            last: VpqError | None = None
            refresh_map = False
            sub = batch if pending is None else batch.take(pending)
            try:
                routed = await self._router.route_batch(queue, sub.keys, sub.context, sub.contexts, sub.spread_keys)
            except QueueNotFoundError:
                if looked_up_unknown:
                    raise NotFound("queue_not_found", f"queue {queue!r} does not exist", queue=queue) from None
                looked_up_unknown = True
                await self._cache.refresh([queue], sync=False)
                continue
            except QueueNotPlacedError as exc:
                last = Unavailable("queue_not_placed", str(exc), retry_after=self._policy.retry_after_s)
                refresh_map = True
                self._count_retry("queue_not_placed")
            else:
                outcomes = await self._append_routed(sub, routed)
                still: list[int] = []
                rvps = routed.vps
                for out in outcomes:
                    if out.error is None:
                        base = out.base
                        pp = out.pp
                        if out.dedup is not None:
                            for k, pos in enumerate(out.positions):
                                i = pos if pending is None else pending[pos]
                                pps[i] = pp
                                offsets[i] = out.dedup.offsets[k]
                                vps[i] = out.dedup.vps[k]
                            continue
                        for k, pos in enumerate(out.positions):
                            i = pos if pending is None else pending[pos]
                            pps[i] = pp
                            offsets[i] = base + k
                            vps[i] = rvps[pos]
                        continue
                    still.extend(out.positions if pending is None else [pending[p] for p in out.positions])
                    err = out.error
                    if err.code == INSUFFICIENT_STORAGE:
                        self.stats.failures += 1
                        raise err
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
                    self.stats.messages += n
                    return ProduceResults(pps, offsets, vps)
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

    def _cutter(self, batch: OutgoingBatch) -> Callable[[list[int]], list[list[int]]] | None:
        """None when the whole batch fits ``max_batch_bytes`` once encoded (then no
        partition's share needs cutting), else a function cutting one pp's positions into
        runs that fit."""
        budget = max(self._policy.max_batch_bytes - HEADER_SIZE, 1)
        if batch.encoded_bytes(FIXED_RECORD_BYTES) <= budget:
            return None
        sizes = batch.encoded_sizes(FIXED_RECORD_BYTES)
        return lambda positions: split_chunks(positions, sizes, budget)

    async def _append_routed(self, batch: OutgoingBatch, routed: RoutedBatch) -> list[_PartOutcome]:
        now = self._clock_ms()
        groups = group_by_partition(routed.pps)
        whole = len(groups) == 1
        stamps = batch.timestamps
        cut = self._cutter(batch)
        outcomes: list[_PartOutcome] = []
        by_node: dict[str, tuple[list[PartitionPart], list[_PartOutcome]]] = {}
        placed: list[tuple[Any, _PartOutcome]] = []  # each chunk's owner and outcome, in order
        for pp, positions in groups.items():
            try:
                node = await self._locator.owner(pp)
            except VpqError as err:
                outcomes.append(_PartOutcome(pp, positions, error=err))
                continue
            for chunk in [positions] if cut is None else cut(positions):
                out = _PartOutcome(pp, chunk)
                placed.append((node, out))
                outcomes.append(out)
        if whole and len(placed) == 1:
            columns = [_part_columns(batch, routed, placed[0][1].positions, True)]
        else:
            columns = _chunk_columns(batch, routed, [out.positions for _, out in placed]) if placed else []
        for (node, out), cols in zip(placed, columns):
            parts, outs = by_node.setdefault(node.address, ([], []))
            if stamps is not None:  # records with a time of their own (dead letters keep theirs)
                cols = cols._replace(ts_deltas=[0 if stamps[i] is None else stamps[i] - now for i in out.positions])
            parts.append(PartitionPart(out.pp, now, cols, part_size(cols), getattr(node, "leader_epoch", -1)))
            outs.append(out)
        epoch = routed.epoch
        calls = [self._append_node(addr, parts, outs, epoch) for addr, (parts, outs) in by_node.items()]
        if len(calls) == 1:
            await calls[0]
        elif calls:
            await asyncio.gather(*calls)
        return outcomes

    async def _append_node(self, address: str, parts: list[PartitionPart], outs: list[_PartOutcome], epoch: int) -> None:
        """Every part bound for one write node, in one accumulator call (the node refuses
        every later part of a partition once one is refused: one chain per partition)."""
        try:
            answers = await self._parts.append(address, parts, epoch)
        except VpqError as err:
            for out in outs:
                out.error = err
            return
        for part, out, answer in zip(parts, outs, answers, strict=True):
            if isinstance(answer, VpqError):
                out.error = answer
                continue
            if isinstance(answer, Deduplicated):
                if len(answer.offsets) != len(part.cols.values):
                    raise InternalError(
                        "bad_node_answer",
                        f"write node answered {len(answer.offsets)} offsets for {len(part.cols.values)} records",
                    )
                self.stats.batches += 1
                out.dedup = answer
                continue
            base, last = answer
            if last - base + 1 != len(part.cols.values):
                raise InternalError(
                    "bad_node_answer", f"write node answered {last - base + 1} offsets for {len(part.cols.values)} records"
                )
            self.stats.batches += 1
            out.base = base
