"""Natural batching of appends per write node: the produce path's accumulator.

``AppendAccumulator.append(address, parts, epoch)`` takes the records one produce call
has for one write node, as one :class:`PartitionPart` (columns) per physical partition,
and answers, per part, its ``(base_offset, last_offset)`` once durable or the error that
refused it (``append_frames.Deduplicated``, each record's offset and vp, when some of
the part's records were duplicates of stored ones).

Up to ``max_in_flight`` requests go to a write node at once (the gateway's
``append_requests_in_flight``, default 1). A call made while they are all out waits;
when one returns, every call that waited meanwhile leaves together in ONE
multi-partition append (``POST /internal/v1/append``), and the parts of all of them that
go to the same partition become ONE magic-2 batch (``codec.columnar``): their
columns are concatenated, not re-encoded record by record. No timer: an idle node gets a
request at once; a busy one gets fewer, bigger requests with fewer, bigger batches (Nagle
without the delay, the way BookKeeper's journal gathers writers behind the fsync in
progress), so the write node's per-batch work (CRC, placement check, submission) is paid
per partition and request, not per partition and produce call.

Bulk: once the calls waiting for a node add up to ``bulk_bytes`` or more, they leave at
once while fewer than ``bulk_in_flight`` requests are out (the gateway's
``append_bulk_bytes`` and ``append_bulk_in_flight``). Big calls are already batched, so
holding them behind the fsync in progress would only leave the write node's disks and
the gateway idle in turn; small calls keep merging as above.

Keeping the guarantees of a lone call:

* each part's records stay together and in order inside its batch, and a call's answer
  for a part is the part's own offset range in that batch;
* a partition's records over ``max_batch_bytes`` go in several batches, one chain
  (``append_frames.Frame.continues``): once one is refused, the node refuses the rest,
  so a part never lands after a later part of the same request that was refused;
* the request carries the highest map epoch of the merged calls; the node checks every
  record against its own map anyway (a refused batch is retried by each of its callers,
  routed again);
* a failure of the whole request (node unreachable, say) is raised to every merged
  caller, exactly as each would have seen it alone.

A caller cancelled while it waits is taken out of the queue; once sent, its records may be
appended (the produce path is at-least-once, as with a timed-out request).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import NamedTuple, Protocol

from vpq.codec.columnar import FIXED_RECORD_BYTES, ColumnarRecords, build_columnar_buffer
from vpq.codec.records import HEADER_SIZE
from vpq.common.errors import Unavailable, VpqError
from vpq.node_rpc.append_frames import FRAME_HEADER, Deduplicated, Frame

Answer = list[tuple[int, int] | Deduplicated | VpqError]


class PartitionPart(NamedTuple):
    """The records of one call for partition ``pp``: ``cols`` (``ts_deltas`` relative to
    ``timestamp_ms``) and their estimated encoded ``size`` in bytes."""

    pp: int
    timestamp_ms: int
    cols: ColumnarRecords
    size: int
    leader_epoch: int = -1  # the leader epoch the pp's owner was found at (-1: not replicated)


def part_size(cols: ColumnarRecords) -> int:
    """The bytes ``cols`` take in a magic-2 batch (columns and data areas)."""
    keys = cols.keys
    size = FIXED_RECORD_BYTES * len(cols.values) + sum(map(len, cols.values))
    size += sum(len(k) for k in keys if k is not None) if None in keys else sum(map(len, keys))  # type: ignore[arg-type]
    if cols.headers is not None:
        size += sum(map(len, cols.headers))
    return size


class MultiAppendClient(Protocol):
    async def append_many(self, address: str, items: Sequence[Frame], map_epoch: int) -> Answer: ...


def merge_parts(parts: Sequence[PartitionPart]) -> tuple[int, ColumnarRecords]:
    """One batch's timestamp and columns from ``parts`` (all of one partition), in order."""
    first = parts[0]
    t0 = first.timestamp_ms
    if len(parts) == 1:
        return t0, first.cols
    cols = [p.cols for p in parts]
    flat = chain.from_iterable
    headers = None
    if any(c.headers is not None for c in cols):
        headers = list(flat(c.headers if c.headers is not None else [b""] * len(c.values) for c in cols))
    deltas = None
    if any(p.timestamp_ms != t0 or p.cols.ts_deltas is not None for p in parts):
        deltas = []
        for p in parts:
            shift = p.timestamp_ms - t0
            own = p.cols.ts_deltas
            deltas.extend([shift] * len(p.cols.values) if own is None else [shift + d for d in own])
    return t0, ColumnarRecords(
        queue_ids=list(flat(c.queue_ids for c in cols)),
        vps=list(flat(c.vps for c in cols)),
        key_hashes=list(flat(c.key_hashes for c in cols)),
        context_ids=list(flat(c.context_ids for c in cols)),
        keys=list(flat(c.keys for c in cols)),
        values=list(flat(c.values for c in cols)),
        encodings=b"".join(bytes(c.encodings) for c in cols),
        headers=headers,
        ts_deltas=deltas,
    )


class _Slot(NamedTuple):
    """Where one part went: its frame and its first record's index in that batch."""

    frame: int
    start: int
    count: int


def build_frames(calls: Sequence[Sequence[PartitionPart]], max_batch_bytes: int) -> tuple[list[Frame], list[list[_Slot]]]:
    """The frames of one request carrying ``calls`` (each a list of parts), and for each
    call the slot of each of its parts. Parts of one partition share batches, in call
    order, cut (between parts) at ``max_batch_bytes``; a partition's batches form one
    chain, each frame carrying the parts' leader epoch (parts of one partition found at
    different epochs go in separate chains)."""
    by_pp: dict[tuple[int, int], list[tuple[int, int, PartitionPart]]] = {}
    for ci, parts in enumerate(calls):
        for pi, part in enumerate(parts):
            by_pp.setdefault((part.pp, part.leader_epoch), []).append((ci, pi, part))
    frames: list[Frame] = []
    slots: list[list[_Slot | None]] = [[None] * len(parts) for parts in calls]
    for (pp, leader_epoch), entries in by_pp.items():
        runs: list[list[tuple[int, int, PartitionPart]]] = []
        run: list[tuple[int, int, PartitionPart]] = []
        total = HEADER_SIZE
        for entry in entries:
            if run and total + entry[2].size > max_batch_bytes:
                runs.append(run)
                run, total = [], HEADER_SIZE
            run.append(entry)
            total += entry[2].size
        runs.append(run)
        for k, run in enumerate(runs):
            ts, cols = merge_parts([e[2] for e in run])
            frame = len(frames)
            frames.append(Frame(pp, build_columnar_buffer(0, ts, cols), k > 0, leader_epoch))
            start = 0
            for ci, pi, part in run:
                n = len(part.cols.values)
                slots[ci][pi] = _Slot(frame, start, n)
                start += n
    return frames, slots  # type: ignore[return-value]  # every slot is filled


def answers_for(slots: Sequence[_Slot], frame_answers: Answer) -> Answer:
    """A call's answer per part from the answers per frame."""
    out: Answer = []
    for slot in slots:
        a = frame_answers[slot.frame]
        if isinstance(a, VpqError):
            out.append(a)
        elif isinstance(a, Deduplicated):
            out.append(a.part(slot.start, slot.count))
        else:
            base = a[0] + slot.start
            out.append((base, base + slot.count - 1))
    return out


@dataclass(slots=True)
class _Call:
    parts: Sequence[PartitionPart]
    epoch: int
    size: int
    future: asyncio.Future[Answer]


@dataclass(slots=True)
class _Node:
    in_flight: int = 0
    waiting: deque[_Call] = field(default_factory=deque)
    waiting_bytes: int = 0


@dataclass
class AccumulatorStats:
    """Counters for metrics and benchmarks (monotonic, process-local)."""

    calls: int = 0
    requests: int = 0
    merged_calls: int = 0  # calls that went in a request together with others
    batches: int = 0
    bulk_requests: int = 0  # requests that left beside another under the bulk rule


class AppendAccumulator:
    """See the module docstring. ``start()``/``stop()``: ``stop`` cancels the requests in
    flight and fails every waiting call with a retryable 503."""

    def __init__(
        self,
        client: MultiAppendClient,
        *,
        max_in_flight: int = 1,
        max_request_bytes: int = 16 << 20,
        max_batch_bytes: int = 4 << 20,
        bulk_in_flight: int = 1,
        bulk_bytes: int = 512 << 10,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        if bulk_bytes < 1:
            raise ValueError("bulk_bytes must be >= 1")
        self._client = client
        self._max_in_flight = max_in_flight
        self._bulk_in_flight = max(bulk_in_flight, max_in_flight)
        self._bulk_bytes = bulk_bytes
        self._max_bytes = max_request_bytes
        self._max_batch_bytes = max_batch_bytes
        self._nodes: dict[str, _Node] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopped = False
        self.stats = AccumulatorStats()

    async def start(self) -> None:
        self._stopped = False

    async def stop(self) -> None:
        self._stopped = True
        for node in self._nodes.values():
            while node.waiting:
                call = node.waiting.popleft()
                if not call.future.done():
                    call.future.set_exception(_stopping())
            node.waiting_bytes = 0
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def append(self, address: str, parts: Sequence[PartitionPart], map_epoch: int) -> Answer:
        """Append ``parts`` (one call's records for the write node at ``address``); one
        answer per part, in order (see the module docstring)."""
        if self._stopped:
            raise _stopping()
        self.stats.calls += 1
        node = self._nodes.get(address)
        if node is None:
            node = self._nodes[address] = _Node()
        size = sum(p.size for p in parts) + (HEADER_SIZE + FRAME_HEADER.size) * len(parts)
        if node.in_flight < self._max_in_flight and not node.waiting:
            node.in_flight += 1
            try:
                return (await self._request(address, [parts], map_epoch))[0]
            finally:
                self._release(address, node)
        call = _Call(parts, map_epoch, size, asyncio.get_running_loop().create_future())
        node.waiting.append(call)
        node.waiting_bytes += size
        if self._bulk_ready(node):
            self.stats.bulk_requests += 1
            self._launch(address, node)
        try:
            return await call.future
        except asyncio.CancelledError:
            if call in node.waiting:
                node.waiting.remove(call)
                node.waiting_bytes -= call.size
            raise

    async def _request(self, address: str, calls: list[Sequence[PartitionPart]], epoch: int) -> list[Answer]:
        self.stats.requests += 1
        frames, slots = build_frames(calls, self._max_batch_bytes)
        self.stats.batches += len(frames)
        answers = await self._client.append_many(address, frames, epoch)
        return [answers_for(s, answers) for s in slots]

    def _release(self, address: str, node: _Node) -> None:
        node.in_flight -= 1
        if not node.waiting or self._stopped:
            return
        while node.waiting:
            if node.in_flight < self._max_in_flight:
                self._launch(address, node)
            elif self._bulk_ready(node):
                self.stats.bulk_requests += 1
                self._launch(address, node)
            else:
                return

    def _bulk_ready(self, node: _Node) -> bool:
        """The calls waiting for ``node`` may leave beside the requests out (the bulk rule)."""
        return node.waiting_bytes >= self._bulk_bytes and node.in_flight < self._bulk_in_flight

    def _launch(self, address: str, node: _Node) -> None:
        """Send the calls at the head of ``node.waiting`` (up to ``max_request_bytes``)
        as one request, from a task of its own."""
        calls = [node.waiting.popleft()]
        total = calls[0].size
        while node.waiting and total + node.waiting[0].size <= self._max_bytes:
            call = node.waiting.popleft()
            total += call.size
            calls.append(call)
        node.waiting_bytes -= total
        node.in_flight += 1
        if len(calls) > 1:
            self.stats.merged_calls += len(calls)
        task = asyncio.create_task(self._send(address, node, calls), name=f"append-batch-{address}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, address: str, node: _Node, calls: list[_Call]) -> None:
        try:
            epoch = max(c.epoch for c in calls)
            try:
                answers = await self._request(address, [c.parts for c in calls], epoch)
            except Exception as exc:  # what each caller would have seen alone
                _fail(calls, exc)
                return
            except BaseException:
                _fail(calls, _stopping())
                raise
            for c, answer in zip(calls, answers, strict=True):
                if not c.future.done():
                    c.future.set_result(answer)
        finally:
            self._release(address, node)


def _fail(calls: list[_Call], exc: Exception) -> None:
    for c in calls:
        if not c.future.done():
            c.future.set_exception(exc)
            c.future.exception()  # a caller may be gone: no "never retrieved" warning


def _stopping() -> VpqError:
    return Unavailable("gateway_stopping", "the gateway is stopping", retry_after=1.0)
