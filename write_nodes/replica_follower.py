"""A follower replica of one physical partition: copies the leader's log, fsyncs, reports.

Contract of :class:`Follower` (one per partition this node follows; ``start``/``stop``):

- It holds the partition directory's lock (``PartitionLock``) and its own
  ``PartitionLog`` and ``EpochHistory`` while it runs; ``stop()`` closes them, so the
  node can open the directory as leader.
- Fetch loop: read the leadership record (``PartitionLeaders``), find the leader's
  address, ``POST /internal/v1/replica/fetch`` with ``{pp, leader_epoch, fetch_offset,
  last_epoch, replica, wait_ms}``. ``fetch_offset`` is the follower's log end, and every
  record below it is fsynced (the previous answer's batches were awaited durable through
  the group commit), which is what the leader counts as this replica's durable end.
- An answer with ``X-Diverging`` ``"<epoch> <end>"`` means the follower's log is not a
  prefix of the leader's: it truncates to ``min(end, its own end for that epoch)``
  (``EpochHistory``), closing and reopening its log, and fetches again. When the
  record holds an unclean election newer than the follower's last epoch, the offsets cut
  are added to that truncation event (``PartitionLeaders.note_truncation``).
- Otherwise the body is raw batches appended as they are (same offsets,
  ``PartitionLog.submit_replica``: CRC checked), then the leader's epoch history
  (``X-Epoch-History``) is adopted for what was copied. The leader's log may have gaps
  (its compaction keeps offsets, or retention moved its start): a batch starting past
  the follower's end, or an empty answer with ``X-Skip-To: <offset>`` (nothing is left
  below it), makes the follower continue its own log there (``PartitionLog.skip_to``,
  once what it appended before is durable), so it holds the leader's surviving records
  at the same offsets and reaches the leader's end.
- Any refusal (stale or unknown epoch, not the leader, unreachable) makes it re-read
  the record after a short pause. A follower never serves produce or reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from vpq.codec.errors import CorruptBatchError
from vpq.codec.records import BatchView
from vpq.common.errors import VpqError
from vpq.config.settings import LogSettings
from vpq.metadata.errors import MetadataUnavailable
from vpq.metadata.partition_leaders import LeaderRecord, PartitionLeaders
from vpq.node_rpc.call import call_node
from vpq.write_nodes.errors import LogIOError
from vpq.write_nodes.log import PartitionLog
from vpq.write_nodes.ownership import LogFactory, PartitionBusyError, PartitionLock, partition_dir
from vpq.write_nodes.replica_log import EpochHistory, truncate_log_dir

log = logging.getLogger(__name__)

FETCH_PATH = "/internal/v1/replica/fetch"
DIVERGING_HEADER = "X-Diverging"
HISTORY_HEADER = "X-Epoch-History"
LEADER_EPOCH_HEADER = "X-Leader-Epoch"
HW_HEADER = "X-High-Watermark"
SKIP_HEADER = "X-Skip-To"

Locate = Callable[[int], Awaitable[str | None]]
"""Address of the write node of an index, None when it is not registered."""


class Follower:
    def __init__(
        self,
        pp: int,
        me: int,
        node_id: str,
        partitions_dir: Path,
        log_settings: LogSettings,
        log_factory: LogFactory,
        leaders: PartitionLeaders,
        locate: Locate,
        session: aiohttp.ClientSession,
        wait_ms: int,
        forget: Callable[[int], None] = lambda index: None,
        retry_s: float = 0.2,
    ) -> None:
        self.pp = pp
        self.me = me
        self.node_id = node_id
        self._partitions_dir = partitions_dir
        self._dir = partition_dir(partitions_dir, pp)
        self._settings = log_settings
        self._factory = log_factory
        self._leaders = leaders
        self._locate = locate
        self._session = session
        self._wait_ms = wait_ms
        self._retry_s = retry_s
        self._forget = forget
        self.stop_timeout_s = 2.0
        self._stopping = False
        self._lock: PartitionLock | None = None
        self.log: PartitionLog | None = None
        self.history: EpochHistory | None = None
        self.leader: LeaderRecord | None = None
        self.high_watermark = 0
        self.truncations = 0
        self.error: str | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def end_offset(self) -> int:
        return self.log.end_offset if self.log is not None and self.log.online else 0

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"follower-pp-{self.pp}")

    async def stop(self) -> None:
        self._stopping = True  # a cancellation swallowed below (aiohttp may turn it into a timeout) still ends the loops
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=self.stop_timeout_s)
            if not done:
                buf = io.StringIO()
                task.print_stack(file=buf)
                log.error("follower of partition %d did not stop in %.0fs; its stack:\n%s", self.pp,
                          self.stop_timeout_s, buf.getvalue())
        await self._close_log()

    # ------------------------------------------------------------------ inner
    async def _run(self) -> None:
        while not self._stopping:
            try:
                await self._open()
                await self._follow()
            except asyncio.CancelledError:
                raise
            except PartitionBusyError as exc:
                self.error = str(exc)
            except (LogIOError, OSError, CorruptBatchError, ValueError) as exc:
                self.error = f"{type(exc).__name__}: {exc}"
                log.warning("follower of partition %d: %s; reopening", self.pp, self.error)
                await self._close_log()
            except Exception as exc:
                self.error = repr(exc)
                log.exception("follower of partition %d failed; reopening", self.pp)
                await self._close_log()
            await asyncio.sleep(self._retry_s * 5)

    async def _open(self) -> None:
        if self.log is not None:
            return
        loop = asyncio.get_running_loop()
        if self._lock is None:
            self._lock = await loop.run_in_executor(
                None, PartitionLock.acquire, self._partitions_dir, self.pp, self.node_id, 0
            )
        plog = self._factory(self._dir, self._settings, self.pp)
        await plog.start()
        self.log = plog
        self.history = await loop.run_in_executor(None, EpochHistory.load, self._dir, plog.end_offset, plog.storage)
        self.error = None

    async def _close_log(self) -> None:
        plog, self.log = self.log, None
        if plog is not None:
            with contextlib.suppress(LogIOError):
                await plog.stop()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    async def _follow(self) -> None:
        rec: LeaderRecord | None = None
        while not self._stopping:
            if rec is None:
                try:
                    rec = await self._leaders.get(self.pp)
                except MetadataUnavailable as exc:
                    self.error = f"metadata unavailable: {exc}"
                    await asyncio.sleep(self._retry_s)
                    continue
                self.leader = rec
                if rec is None or rec.leader < 0 or rec.leader == self.me:
                    rec = None
                    await asyncio.sleep(self._retry_s)
                    continue
            address = await self._locate(rec.leader)
            if address is None:
                rec = None
                await asyncio.sleep(self._retry_s)
                continue
            try:
                answer = await self._fetch(address, rec)
            except VpqError as exc:
                self.error = f"{exc.code}: {exc.message}"
                if exc.code == "node_unreachable":
                    self._forget(rec.leader)
                rec = None
                await asyncio.sleep(self._retry_s)
                continue
            self.error = None
            await self._apply(answer)

    async def _fetch(self, address: str, rec: LeaderRecord) -> tuple[bytes, Any]:
        plog, history = self.log, self.history
        assert plog is not None and history is not None
        body = {
            "pp": self.pp,
            "leader_epoch": rec.epoch,
            "fetch_offset": plog.end_offset,
            "last_epoch": history.last_epoch,
            "replica": self.me,
            "wait_ms": self._wait_ms,
        }
        answer = await call_node(
            self._session, "POST", address, FETCH_PATH, role="write", timeout_s=self._wait_ms / 1000.0 + 10.0,
            json_body=body,
        )
        return answer.body, answer.headers

    async def _apply(self, answer: tuple[bytes, Any]) -> None:
        data, headers = answer
        plog, history = self.log, self.history
        assert plog is not None and history is not None
        diverging = headers.get(DIVERGING_HEADER)
        if diverging:
            epoch, end = (int(x) for x in diverging.split(" "))
            mine_epoch, mine_end = history.end_offset_for(epoch, plog.end_offset)
            target = min(end, mine_end) if epoch >= 0 and mine_epoch >= 0 else 0
            await self._truncate(min(target, plog.end_offset))
            return
        with contextlib.suppress(ValueError):
            self.high_watermark = int(headers.get(HW_HEADER, "0"))
        pos, last = 0, None
        while pos < len(data):
            view = BatchView(data, pos)
            batch = data[pos : pos + view.size]
            pos += view.size
            if view.next_offset <= plog.end_offset:
                continue  # already here (the leader answers from the batch holding the offset)
            if view.base_offset > plog.end_offset:  # the leader compacted the range before it away
                if last is not None:
                    await last
                    last = None
                await plog.skip_to(view.base_offset)
            last = plog.submit_replica(batch)
        if last is not None:
            await last
        skip = headers.get(SKIP_HEADER)
        if not data and skip and skip.isdigit() and int(skip) > plog.end_offset:
            await plog.skip_to(int(skip))
        entries = [tuple(e) for e in orjson.loads(headers.get(HISTORY_HEADER, "[]"))]
        if history.adopt(entries, plog.end_offset):
            await asyncio.get_running_loop().run_in_executor(None, history.save)

    async def _truncate(self, offset: int) -> None:
        plog, history = self.log, self.history
        assert plog is not None and history is not None
        before = plog.end_offset
        last_epoch = history.last_epoch
        log.warning("partition %d: truncating the follower log from %d to %d (diverged from the leader)", self.pp, before, offset)
        await plog.stop()
        self.log = None
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(
            None, truncate_log_dir, self._dir, offset, self._settings.index_interval_bytes,
            time.time_ns() // 1_000_000, plog.storage,
        )
        history.truncate(offset)
        await loop.run_in_executor(None, history.save)
        self.truncations += 1
        new = self._factory(self._dir, self._settings, self.pp)
        await new.start()
        self.log = new
        self.history = EpochHistory(self._dir, [(e, s) for e, s in history.entries if s <= new.end_offset], new.storage)
        await self._note_unclean(last_epoch, before - new.end_offset)

    async def _note_unclean(self, last_epoch: int, cut: int) -> None:
        event = self.leader.unclean if self.leader is not None else None
        if cut <= 0 or event is None or not isinstance(event.get("epoch"), int) or event["epoch"] <= last_epoch:
            return
        log.warning("partition %d: %d offsets truncated by the unclean election of epoch %d", self.pp, cut, event["epoch"])
        try:
            await self._leaders.note_truncation(self.pp, event["epoch"], self.node_id, cut)
        except MetadataUnavailable as exc:
            log.warning("partition %d: cannot report the truncation: %s", self.pp, exc)

    def snapshot(self) -> dict[str, Any]:
        plog = self.log
        rec = self.leader
        return {
            "id": self.pp,
            "role": "follower",
            "end_offset": plog.end_offset if plog is not None and plog.online else None,
            "leader": rec.leader if rec is not None else None,
            "leader_epoch": rec.epoch if rec is not None else None,
            "high_watermark": self.high_watermark,
            "truncations": self.truncations,
            "error": self.error,
        }
