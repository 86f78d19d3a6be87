"""``GroupHost``: one consumer group of one queue, served by this read node.

A host exists only while the node holds the group's lease (``group:{q}:{g}``)
under ``token``. It wraps the pure ``GroupDelivery`` with everything that needs
I/O or time:

- **restore** (``open``): the persisted ack state (``metadata.acks``),
  the group's start offsets, its lineage and its members; every message not done
  there is delivered again (delivery counts restart), nothing done is;
- **ingestion** (``read_nodes.ingestor``): a task woken by the tailers of the
  queue's pps (and by acks, which may make room), in lineage order, in steps of
  about ``ingest_batch`` records (waiting polls are woken after each step, and
  requests are served in between);
- **consumer calls**: join, poll (long poll woken, only when it can get
  something, by new messages, acks that free a key, membership changes; and by
  its next timeout or nack delay), ack, nack, leave, info;
- **delayed messages**: a timer task wakes ingestion when the earliest delayed
  message comes due (``GroupDelivery.next_delayed_ms``, Unix ms), so it is
  ingested (and waiting polls woken) at its due time, not at the next tick;
- **housekeeping** every ``tick_ms``: visibility timeouts and nack delays,
  members past their session, dead letters (produced to the DLQ, then
  confirmed), lineage reloads (map epoch changed, or a record outside the cached
  lineage), adopting a larger V (someone split the queue), growing the queue
  when the assignment needs more vps, and persisting the ack state when it
  changed (at most every ``persist_interval_ms``, fenced by the lease token: a
  refused save means the lease is gone and the host closes);
- **close**: stops the tasks, persists a last time when asked (graceful stop),
  and wakes waiting polls, which then answer 503 ``group_moving``.

Retention: with the queue's ``retention_ms`` > 0, a message older than that (by
its record timestamp, wall clock) is never delivered: ingestion skips it, and a
message that grew too old while it waited is acked in its place when a poll takes
it. Both, and messages the log removed before the group read them, count in the
group's ``expired`` (kept in the group record, ``GroupStore.add_expired``, so it
survives a move to another read node; ``info`` answers it; metric
``vpq_expired_messages``). A change of ``retention_ms`` applies at once.

A change of the queue's delivery config (ordering, max_deliveries,
visibility_timeout_ms) is not applied in place: ``needs_reload`` turns True and
the service re-hosts the group (persist, then restore: messages in flight are
delivered again, at-least-once). A deleted queue sets ``gone``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from vpq.codec.message_id import MessageIdError, decode_message_ids
from vpq.common.errors import BadRequest, Conflict, NotFound, Unavailable, VpqError
from vpq.common.waits import wait_event
from vpq.isolation.context import IsolationContext
from vpq.metadata.aio import cancel_and_wait
from vpq.metadata.errors import MetadataUnavailable
from vpq.metadata.names import check_id
from vpq.metadata.queues import QueueRecord
from vpq.read_nodes.ack_persistence import AckSnapshots, restored_states
from vpq.read_nodes.delivery import GroupDelivery
from vpq.read_nodes.delivery_types import DeadLetter, Delivery, DeliveryConfig, UnknownConsumer, stream_pp
from vpq.read_nodes.expiry import GroupExpiry
from vpq.read_nodes.group_members import GroupMembers, new_consumer_id
from vpq.read_nodes.ingestor import Ingestor
from vpq.read_nodes.lag_report import group_info, oldest_unacked_by_context
from vpq.read_nodes.lineage_order import LineageOrder
from vpq.read_nodes.messages import MessageRenderer, TailedRecord
from vpq.read_nodes.metrics import DeliveryCounters, NoCounters
from vpq.read_nodes.node_parts import NodeParts, monotonic_ms, wall_ms

log = logging.getLogger(__name__)

CONFIG_FIELDS = ("ordering", "max_deliveries", "visibility_timeout_ms")


def delivery_config(
    record: QueueRecord, virtual_partitions: int, max_unacked: int, steal_when_idle: bool = True,
    key_read_ahead: int = 1000, blocked_read_ahead: int = 20_000,
) -> DeliveryConfig:
    """The delivery settings of a group on ``record``'s queue (compact ack persistence:
    no cap on the pair form's window)."""
    c = record.config
    return DeliveryConfig(
        ordering=c["ordering"],
        max_deliveries=int(c["max_deliveries"]),
        visibility_timeout_ms=int(c["visibility_timeout_ms"]),
        max_unacked=max_unacked,
        max_acked_above=None,
        virtual_partitions=virtual_partitions,
        steal_when_idle=steal_when_idle,
        key_read_ahead=key_read_ahead,
        blocked_read_ahead=blocked_read_ahead,
    )


def _not_found(consumer_id: str) -> NotFound:
    return NotFound("consumer_not_found", f"consumer {consumer_id!r} is not a member of the group", consumer_id=consumer_id)


class GroupHost:
    def __init__(
        self,
        parts: NodeParts,
        record: QueueRecord,
        group: str,
        token: int,
        on_fenced: Callable[[GroupHost], Awaitable[None]],
        counters: DeliveryCounters | None = None,
    ) -> None:
        """``counters`` counts deliveries, acks, nacks and dead letters (metrics)."""
        self.parts = parts
        self._counters: DeliveryCounters = counters or NoCounters()
        self.record = record
        self.queue = record.name
        self.group = group
        self.token = token
        self._on_fenced = on_fenced
        o = parts.options
        self._opt = o
        self.delivery = GroupDelivery(delivery_config(
            record, self._queue_vps(), o.max_unacked, o.steal_when_idle, o.key_read_ahead, o.blocked_read_ahead,
        ))
        self.ingestor = Ingestor(
            record.id, self.delivery, parts.pool, self, self._on_data, batch=o.ingest_batch,
            unknown_grace_ms=o.unknown_grace_ms, group=group,
        )
        self.members = GroupMembers(
            parts.md, self.queue, group, self.delivery,
            session_timeout_ms=parts.session_timeout_ms, heartbeat_interval_ms=o.heartbeat_interval_ms,
            max_vps=parts.settings.queues.max_virtual_partitions,
        )
        self.snapshots = AckSnapshots(record.id)
        self._renderer = MessageRenderer(self.queue)
        self._starts: dict[int, int] = {}
        self._waiting: dict[str, list[asyncio.Event]] = {}
        self._wake = asyncio.Event()
        self._delay_kick = asyncio.Event()  # the earliest delayed message may have changed
        self._tasks: list[asyncio.Task[None]] = []
        self._dead: list[DeadLetter] = []
        self._lineage_epoch = -1
        self._lineage_wanted = False
        self._lineage_at = 0
        self._last_persist = 0
        self._persist_lock = asyncio.Lock()  # one save at a time, each of the state when it starts
        self._changes = 1  # bumped by every change of the ack state; persisted up to _saved
        self._saved = 0
        self._retry_ingest = True
        self.closed = False
        self.needs_reload = False
        self.gone = False
        self.expiry = GroupExpiry(
            parts.md.groups, self.queue, group, int(record.config.get("retention_ms", -1)), self._counters
        )

    def __repr__(self) -> str:
        return f"GroupHost({self.queue!r}, {self.group!r}, token={self.token})"

    # ---------------------------------------------------------------- lifecycle
    def _queue_vps(self) -> int:
        entry = self.parts.map_cache.entry(self.queue)
        v = entry.virtual_partitions if entry is not None else self.record.virtual_partitions
        return max(v, self.record.virtual_partitions)

    async def open(self, start_offsets: Mapping[int, int]) -> None:
        """Restore the group (see the module docstring) and start its tasks."""
        restored = restored_states(await self.parts.acks.load(self.queue, self.group, self.record.id))
        self.delivery.restore(restored)
        self.snapshots = AckSnapshots(self.record.id, restored)
        self._starts = dict(start_offsets)
        resume: dict[int, int] = {}
        for stream, st in restored.items():
            pp = stream_pp(stream)
            resume[pp] = min(resume.get(pp, st.low_watermark), st.low_watermark)
        for pp, lw in sorted(resume.items()):
            self.ingestor.add_pp(pp, max(self._starts.get(pp, 0), lw))
        await self._load_lineage()
        now = monotonic_ms()
        await self.members.load(self._queue_vps(), now)
        self._tasks = [
            asyncio.create_task(self._ingest_loop(), name=f"vpq-ingest-{self.queue}-{self.group}"),
            asyncio.create_task(self._tick_loop(), name=f"vpq-tick-{self.queue}-{self.group}"),
            asyncio.create_task(self._delay_loop(), name=f"vpq-delay-{self.queue}-{self.group}"),
        ]
        self._wake.set()
        log.info("hosting %s/%s (token %d): %d pps restored, %d members", self.queue, self.group, self.token,
                 len(restored), len(self.members.members))

    async def close(self, persist: bool) -> None:
        """Stop serving; ``persist`` saves the ack state a last time (graceful stop)."""
        if self.closed:
            return
        self.closed = True
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            await cancel_and_wait(task)
        if persist:
            try:
                await self._persist(force=True)
            except (MetadataUnavailable, OSError) as exc:
                log.warning("%s/%s: final ack persist failed: %s", self.queue, self.group, exc)
        await self.ingestor.close()
        self._notify()

    def _check_open(self) -> None:
        if self.closed:
            raise Unavailable(
                "group_moving", f"group {self.group!r} of queue {self.queue!r} is moving; retry", retry_after=1.0
            )

    # ------------------------------------------------------------------ events
    def _notify(self) -> None:
        """Wake the waiting polls that can now get something (or must end: the host
        closed, the consumer left); the others keep waiting, so one ack does not wake
        every consumer of a big group."""
        if not self._waiting:
            return
        members = self.members.members
        for cid, events in self._waiting.items():
            if self.closed or cid not in members or self.delivery.has_ready(cid):
                for ev in events:
                    ev.set()

    def _on_data(self, _pp: int) -> None:
        self._wake.set()

    # ----------------------------------------------------------------- lineage
    async def _load_lineage(self) -> None:
        epoch = self.parts.map_cache.epoch
        lineage = await self.parts.md.maps.lineage_all(self.queue)
        order = LineageOrder(lineage)
        self._lineage_epoch = epoch
        self._lineage_at = monotonic_ms()
        self.ingestor.set_lineage(order, self._lineage_at)
        first = order.first_offsets()
        entry = self.parts.map_cache.entry(self.queue)
        pps = set(first) | set(self._starts)
        if entry is not None and entry.placement is not None:
            pps.update(entry.placement)
        for pp in sorted(pps):
            self.ingestor.add_pp(pp, self._starts.get(pp, first.get(pp, 0)))
        self._wake.set()

    # -------------------------------------------------------------- ingestion
    async def _ingest_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                self.ingestor.expire_before = self.expiry.cutoff()
                res = await self.ingestor.step(monotonic_ms(), budget=self._opt.ingest_batch)
                self.expiry.add(self.ingestor.expired)
                self.ingestor.expired = 0
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s/%s: ingestion failed", self.queue, self.group)
                self._retry_ingest = True
                await asyncio.sleep(self._opt.retry_ms / 1000.0)
                continue
            if res.moved:
                self._changes += 1
            if res.ingested:
                self._notify()
            if res.deferred or res.released:
                self._delay_kick.set()
            if res.unknown:
                self._lineage_wanted = True
            self._retry_ingest = res.blocked or res.unknown or res.held or res.nobody
            if res.more:
                # bounded steps: let polls and acks in between (Event.wait does not yield when set)
                self._wake.set()
                await asyncio.sleep(0)

    async def _delay_loop(self) -> None:
        """Wake ingestion when the earliest delayed message comes due. One that is due
        but could not be ingested (no live consumer for it, ``max_unacked`` reached)
        is retried at the tick's pace."""
        tick = self._opt.tick_ms / 1000.0
        kick = self._delay_kick
        while True:
            kick.clear()
            due = self.delivery.next_delayed_ms()
            timeout: float | None = None
            if due is not None:
                timeout = (due - wall_ms()) / 1000.0
                if timeout <= 0:
                    self._wake.set()
                    timeout = tick
            await wait_event(kick, timeout)

    # ------------------------------------------------------------ housekeeping
    async def _tick_loop(self) -> None:
        interval = self._opt.tick_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except (MetadataUnavailable, OSError, VpqError) as exc:
                log.warning("%s/%s: housekeeping: %s", self.queue, self.group, exc)
            except Exception:
                log.exception("%s/%s: housekeeping failed", self.queue, self.group)

    async def tick(self) -> None:
        """One round of housekeeping (see the module docstring)."""
        if self.closed:
            return
        now = monotonic_ms()
        if self.delivery.expire(now):
            self._notify()
        await self.members.refresh_polling(now)
        for cid in self.members.idle(now):
            log.info("%s/%s: consumer %s timed out", self.queue, self.group, cid)
            await self.members.remove(cid, self._queue_vps(), now)
            self._notify()
        await self._check_queue()
        await self.expiry.flush()
        await self._dead_letters()
        await self._follow_map(now)
        await self._grow()
        if self._retry_ingest:
            self._wake.set()
        if self._changes != self._saved and now - self._last_persist >= self._opt.persist_interval_ms:
            await self._persist()

    async def _check_queue(self) -> None:
        rec = self.parts.map_cache.queue(self.queue)
        if rec is None:  # not held (dropped from the cache's LRU): hold it again
            await self.parts.map_cache.refresh([self.queue], sync=False)
            rec = self.parts.map_cache.queue(self.queue)
        if rec is None or rec.id != self.record.id:
            rec = await self.parts.md.queues.get(self.queue)  # the cache may lag behind Redis
            if rec is None or rec.id != self.record.id:
                self.gone = True
                return
        self.expiry.retention_ms = int(rec.config.get("retention_ms", -1))
        if any(rec.config.get(f) != self.record.config.get(f) for f in CONFIG_FIELDS):
            self.needs_reload = True

    async def _dead_letters(self) -> None:
        self._dead.extend(self.delivery.take_dead_letters())
        if not self._dead:
            return
        letters = self._dead
        handled = await self.parts.dead_letters.produce(self.queue, self.group, letters)
        done = set(handled)
        for d in letters:
            if d.message_id in done:
                self.snapshots.note_done(d.entry.stream, d.entry.offset)
        self.delivery.confirm_dead_letters(handled)
        self._counters.dead_lettered(self.queue, self.group, len(handled))
        self._dead = [d for d in letters if d.message_id not in done]
        if handled:
            self._changes += 1
            self._wake.set()

    async def _follow_map(self, now: int) -> None:
        v = self._queue_vps()
        if v > self.delivery.virtual_partitions:
            self.members.reassign(v, now)
            self._notify()
        due = now - self._lineage_at >= self._opt.lineage_reload_ms
        if self.parts.map_cache.epoch != self._lineage_epoch or (self._lineage_wanted and due):
            self._lineage_wanted = False
            await self._load_lineage()

    async def _grow(self) -> None:
        target = self.members.split_target
        if target is None:
            return
        if target > self._queue_vps():
            log.info("%s/%s: growing queue %s to %d virtual partitions", self.queue, self.group, self.queue, target)
            try:
                await self.parts.admin.grow(self.queue, self.record.id, target)
            except Conflict:
                pass  # someone grew it further meanwhile
            except NotFound:
                self.gone = True  # deleted (maybe created again): never bring it back
        self.members.split_target = None

    async def _persist(self, force: bool = False) -> None:
        """Save the ack state as it is now. Saves never overlap: one that starts while
        another is out waits for it, so an older state can never land after a newer one
        (a periodic save under way when ``persist_now`` is called, say)."""
        async with self._persist_lock:
            self._last_persist = monotonic_ms()
            version = self._changes
            blobs = self.snapshots.changes(self.delivery.compact_ack_state(), self.token)
            if not blobs:
                self._saved = version
                return
            if await self.parts.acks.save(self.queue, self.group, self.token, blobs):
                self.snapshots.mark_saved(blobs)
                self._saved = version
                return
        log.warning("%s/%s: ack state save fenced off (token %d): the lease is lost", self.queue, self.group, self.token)
        if not force:
            await self._on_fenced(self)

    async def persist_now(self) -> None:
        await self._persist(force=True)

    # -------------------------------------------------------------- consumers
    async def join(self, consumer_id: str | None, ctx: IsolationContext, start: str) -> dict[str, Any]:
        self._check_open()
        cid = consumer_id if consumer_id is not None else new_consumer_id()
        try:
            check_id("consumer id", cid)
        except ValueError as exc:
            raise BadRequest("invalid_request", str(exc), field="consumer_id") from None
        await self.members.join(cid, ctx, start, self._queue_vps(), monotonic_ms())
        self._notify()
        self._wake.set()  # a stream no live consumer could take may flow now
        return {"consumer_id": cid, "session_timeout_ms": self.members.session_timeout_ms}

    def _require_member(self, consumer_id: str) -> None:
        self._check_open()
        if consumer_id not in self.members.members:
            raise _not_found(consumer_id)

    async def poll(self, consumer_id: str, max_messages: int, wait_ms: int) -> list[bytes]:
        """The messages delivered, each as the JSON bytes of its public object
        (``messages.MessageRenderer``)."""
        self._require_member(consumer_id)
        await self.members.heartbeat(consumer_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000.0
        self.members.poll_started(consumer_id)
        try:
            while True:
                self._require_member(consumer_id)
                got = self.delivery.poll(consumer_id, max_messages, monotonic_ms())
                if got:
                    out, skipped = await self._render(consumer_id, got)
                    if out or skipped < len(got):
                        break
                    continue  # every message taken had expired or vanished: poll again
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return []
                due = self.delivery.next_due_ms()
                if due is not None:
                    remaining = min(remaining, max(due - monotonic_ms(), 1) / 1000.0)
                await self._wait(consumer_id, remaining)
        except UnknownConsumer:
            raise _not_found(consumer_id) from None
        finally:
            self.members.poll_ended(consumer_id)
        self._counters.delivered(self.queue, self.group, len(out), sum(1 for d in got if d.delivery_count > 1))
        return out

    async def _wait(self, consumer_id: str, timeout_s: float) -> None:
        """Sleep until ``_notify`` wakes this consumer or ``timeout_s`` passed."""
        ev = asyncio.Event()
        events = self._waiting.setdefault(consumer_id, [])
        events.append(ev)
        try:
            await wait_event(ev, timeout_s)
        finally:
            events.remove(ev)
            if not events:
                del self._waiting[consumer_id]

    async def _render(self, consumer_id: str, got: list[Delivery]) -> tuple[list[bytes], int]:
        """The messages of ``got`` to answer, and how many were acked in their place
        instead (expired or vanished)."""
        source = self.parts.source
        cutoff = self.expiry.cutoff()
        # RecordSource.cached of each, in one call
        cached = source.cache.get_many([(d.pp, d.offset) for d in got])
        if cutoff is None and None not in cached:  # all in memory, nothing expires: render them all at once
            return self._renderer.render_many(cached, [d.vp for d in got], [d.delivery_count for d in got]), 0
        records: list[TailedRecord] = []
        append = records.append
        vps: list[int] = []
        counts: list[int] = []
        gone: list[str] = []
        failed: list[str] = []
        for d, tailed in zip(got, cached):
            if tailed is None:
                try:
                    tailed = await source.get(d.pp, d.offset)
                except VpqError as exc:
                    log.info("%s/%s: cannot read %s now: %s", self.queue, self.group, d.message_id, exc)
                    failed.append(d.message_id)
                    continue
                if tailed is None:
                    gone.append(d.message_id)
                    continue
            ts = tailed.timestamp_ms
            if cutoff is not None and ts is not None and ts < cutoff:
                gone.append(d.message_id)
                continue
            append(tailed)
            vps.append(d.vp)
            counts.append(d.delivery_count)
        if gone:
            self.delivery.ack_positions(consumer_id, decode_message_ids(gone), self.snapshots.note_done)
            self._changes += 1
            self.expiry.add(len(gone))
        if failed:
            self.delivery.nack(consumer_id, failed, self._opt.retry_ms * 5, monotonic_ms())
        return self._renderer.render_many(records, vps, counts), len(gone)

    async def ack(self, consumer_id: str, ids: list[str]) -> int:
        self._require_member(consumer_id)
        try:
            n = self.delivery.ack_ids(consumer_id, ids, self.snapshots.note_done)
        except MessageIdError as exc:
            raise BadRequest("invalid_request", str(exc), field="ids") from None
        except UnknownConsumer:
            raise _not_found(consumer_id) from None
        if n:
            self._changes += 1
            self._notify()
            self._wake.set()
        self._counters.acked(self.queue, self.group, n)
        return n

    async def nack(self, consumer_id: str, ids: list[str], delay_ms: int) -> int:
        self._require_member(consumer_id)
        try:
            n = self.delivery.nack(consumer_id, ids, delay_ms, monotonic_ms())
        except MessageIdError as exc:
            raise BadRequest("invalid_request", str(exc), field="ids") from None
        except UnknownConsumer:
            raise _not_found(consumer_id) from None
        if n:
            self._notify()
            self._wake.set()
        self._counters.nacked(self.queue, self.group, n)
        return n

    async def leave(self, consumer_id: str) -> None:
        self._require_member(consumer_id)
        await self.members.remove(consumer_id, self._queue_vps(), monotonic_ms())
        self._notify()

    async def info(self) -> dict[str, Any]:
        """The group's public answer (``lag_report.group_info``)."""
        self._check_open()
        return await group_info(self)

    async def oldest_unacked_by_context(self) -> dict[IsolationContext, int]:
        """Per message context, the timestamp of the group's oldest message not acked
        nor dead-lettered (``lag_report.oldest_unacked_by_context``)."""
        return await oldest_unacked_by_context(self)

    def stats(self) -> dict[str, int]:
        s = self.delivery.stats()
        s["members"] = len(self.members.members)
        s["dead_letters_pending"] = len(self._dead)
        return s
