"""Redriving a group's dead letters: ``POST /v1/queues/{q}/groups/{g}/dlq/redrive``.

The dead-letter queue ``{q}.{g}.dlq`` (``read_nodes.dead_letters``) is an ordinary
queue: an append-only log. A redrive copies its messages back into ``q`` addressed
to ``g`` alone, then records that they left the dead-letter queue:

1. read the dead-letter queue's records from its *redrive cursor*
   (``metadata.redrive``: per pp, below which offset everything has left) up to the
   pp's durable end as it was when the scan began, straight from the write nodes
   (whole batches; a batch without the queue's records is skipped on its queue-id
   column, other queues' records are skipped);
2. pick at most ``max_messages`` of them, oldest first per pp, in lineage order
   (``read_nodes.lineage_order``: a key's records on an earlier pp of its vp's
   lineage come before those on a later one), so each key keeps its order;
3. produce them to ``q`` through the one produce path, each with the reserved header
   ``:group`` = ``g`` (``codec.system_headers.GROUP``: every other group of ``q``
   skips the record, see ``read_nodes.ingestor``) and ``x-redriven-from`` = the
   dead-letter queue's name; key, value, the producer's headers (``x-original-id``
   included), isolation context and priority are kept. They are new messages of
   ``q``: new ids, ``delivery_count`` starting at 1, after what ``q`` already holds;
4. only once that produce is durable, advance the cursor past them.

A crash (or an error) between 3 and 4 leaves the cursor where it was: the next
redrive produces the same messages again (duplicates, which at-least-once allows),
and a message never leaves the dead-letter queue before its copy is durable in
``q``, so none is lost. Consumers of the dead-letter queue itself (groups of it)
are not affected: a log keeps its records.

Work is done in rounds of at most ``round_size`` messages (each round produced and
recorded before the next is read), so memory stays bounded whatever the backlog.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from vpq.codec.batch_common import VALUE_JSON
from vpq.codec.columnar import MAGIC_COLUMNAR
from vpq.codec.columnar import scan as scan_columns
from vpq.codec.records import Record, iter_batches
from vpq.codec.system_headers import GROUP, PRIORITY, RESERVED_PREFIX
from vpq.common.errors import VpqError
from vpq.isolation.context import IsolationContext
from vpq.metadata.map_cache import MapCache
from vpq.metadata.store import MetadataStore
from vpq.node_rpc.node_directory import WriteNodeDirectory
from vpq.node_rpc.write_node_client import WriteNodeClient
from vpq.produce_path.produce import Appender, PlainMessage
from vpq.read_nodes.dead_letters import dlq_name
from vpq.read_nodes.lineage_order import Decision, LineageOrder

log = logging.getLogger(__name__)

REDRIVEN_FROM_HEADER = "x-redriven-from"
ROUND_SIZE = 10_000
SCAN_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class Letter:
    """One record of the dead-letter queue, at ``(pp, offset)``, of ``vp`` under the
    queue's current V."""

    pp: int
    offset: int
    vp: int
    record: Record
    ctx: IsolationContext


class LetterSource(Protocol):
    async def scan(self, pp: int, queue_id: int, start: int, limit: int, vps: int) -> tuple[list[Letter], int]: ...


def pick(
    order: LineageOrder, vps: int, found: Mapping[int, list[Letter]], ends: Mapping[int, int], limit: int
) -> tuple[list[Letter], dict[int, int]]:
    """At most ``limit`` letters in an order that keeps every key's order (lineage
    order across pps, offset order within one), and the new cursor of each pp: the
    offset of its first letter not taken, else ``ends[pp]`` (how far it was scanned).
    Pure."""
    heads = dict.fromkeys(found, 0)

    def position(pp: int) -> int:
        letters = found.get(pp)
        if letters is None:
            return 0  # a pp outside the scan: an earlier range there is not finished
        i = heads[pp]
        return letters[i].offset if i < len(letters) else ends[pp]

    taken: list[Letter] = []
    progress = True
    while progress and len(taken) < limit:
        progress = False
        for pp in sorted(found):
            letters = found[pp]
            while heads[pp] < len(letters) and len(taken) < limit:
                letter = letters[heads[pp]]
                here = letter.offset
                decision = order.check(letter.vp, vps, pp, here, lambda p, pp=pp, here=here: here if p == pp else position(p))
                if decision is Decision.HOLD:
                    break
                taken.append(letter)
                heads[pp] += 1
                progress = True
    return taken, {pp: position(pp) for pp in found}


def redriven_message(letter: Letter, group: str, dlq: str) -> PlainMessage:
    """The copy of ``letter`` that goes back to the queue, addressed to ``group``."""
    r = letter.record
    headers: dict[str, str | bytes] = {GROUP: group.encode("utf-8")}
    for name, value in r.headers:
        if not name.startswith(RESERVED_PREFIX) or name == PRIORITY:
            headers[name] = value
    headers[REDRIVEN_FROM_HEADER] = dlq
    ctx = letter.ctx
    return PlainMessage(
        value=r.value,
        value_is_json=r.value_encoding == VALUE_JSON,
        key=r.key.decode("utf-8", "replace") if r.key is not None else None,
        headers=headers,
        context=(ctx.env, ctx.set, ctx.lane),
    )


class WriteNodeLetters:
    """Reads a queue's records of one pp from its write node (``LetterSource``)."""

    def __init__(
        self,
        writers: WriteNodeDirectory,
        reader: WriteNodeClient,
        resolve_context: Callable[[int], Awaitable[IsolationContext]],
        scan_bytes: int = SCAN_BYTES,
    ) -> None:
        self._writers = writers
        self._reader = reader
        self._resolve = resolve_context
        self._scan_bytes = scan_bytes

    async def scan(self, pp: int, queue_id: int, start: int, limit: int, vps: int) -> tuple[list[Letter], int]:
        """Up to ``limit`` records of queue ``queue_id`` in ``pp`` from ``start`` (or the
        log start, when retention removed what was below it) to the durable end seen by
        the first read; and where the scan stopped: the offset of the first record of
        the queue not returned, else that end."""
        mask = vps - 1
        out: list[Letter] = []
        offset = start
        end: int | None = None
        while end is None or offset < end:
            address = (await self._writers.owner(pp)).address
            try:
                res = await self._reader.read(address, pp, offset, self._scan_bytes, 0)
            except VpqError:
                self._writers.invalidate(pp)
                raise
            if end is None:
                end = res.end_offset
                offset = max(offset, res.start_offset)
            if not res.data:
                break
            for view in iter_batches(res.data, verify=True):
                if view.base_offset >= end:
                    return out, max(offset, end)
                if view.next_offset <= offset:
                    continue
                if view.magic == MAGIC_COLUMNAR and queue_id not in scan_columns(view).queue_ids:
                    offset = view.next_offset  # none of the queue's: skipped on its columns alone
                    continue
                for r in view.records():
                    if r.offset < offset or r.queue_id != queue_id:
                        continue
                    if len(out) >= limit:
                        return out, r.offset
                    ctx = await self._resolve(r.context_id)
                    out.append(Letter(pp, r.offset, r.key_hash & mask, r, ctx))
                offset = view.next_offset
        return out, max(offset, end or offset)


class Redriver:
    """See the module docstring. ``redrive`` must not run twice at once for one group
    (the read node serialises it): two would produce the same messages twice."""

    def __init__(
        self,
        md: MetadataStore,
        map_cache: MapCache,
        letters: LetterSource,
        appender: Appender,
        *,
        round_size: int = ROUND_SIZE,
    ) -> None:
        self._md = md
        self._cache = map_cache
        self._letters = letters
        self._appender = appender
        self._round = round_size
        self.redriven = 0

    async def redrive(self, queue: str, group: str, max_messages: int | None) -> int:
        """Redrive up to ``max_messages`` (None: all) of the group's dead letters; how many."""
        dlq = dlq_name(queue, group)
        total = 0
        while max_messages is None or total < max_messages:
            want = self._round if max_messages is None else min(self._round, max_messages - total)
            n = await self._one_round(queue, group, dlq, want)
            total += n
            if n == 0:
                break
        return total

    async def _one_round(self, queue: str, group: str, dlq: str, want: int) -> int:
        md = self._md
        rec = self._cache.queue(dlq) or await md.queues.get(dlq)
        if rec is None:
            return 0  # nothing was ever dead-lettered
        entry = self._cache.entry(dlq)
        if entry is None:  # the node holds only queues it used: load the DLQ's placement
            await self._cache.refresh(names=[dlq], sync=False)
            entry = self._cache.entry(dlq)
        vps = entry.virtual_partitions if entry is not None else rec.virtual_partitions
        placement = entry.placement if entry is not None and entry.placement is not None else ()
        order = LineageOrder(await md.maps.lineage_all(dlq))
        first = order.first_offsets()
        cursors = await md.redrive.cursors(dlq, rec.id)
        found: dict[int, list[Letter]] = {}
        ends: dict[int, int] = {}
        for pp in sorted(order.pps() | set(placement)):
            start = max(cursors.get(pp, 0), first.get(pp, 0))
            found[pp], ends[pp] = await self._letters.scan(pp, rec.id, start, want, vps)
        taken, positions = pick(order, vps, found, ends, want)
        if taken:
            await self._appender.append(queue, [redriven_message(t, group, dlq) for t in taken])
            self.redriven += len(taken)
        moved = {pp: off for pp, off in positions.items() if off > cursors.get(pp, -1)}
        await md.redrive.advance(dlq, rec.id, moved)
        if taken:
            log.info("redrove %d dead letters of %s/%s from %s", len(taken), queue, group, dlq)
        return len(taken)
