"""Which physical partitions this write node serves, and every transition between states.

A physical partition ``pp`` is served by the holder of the lease ``pp:{pp}``
(``metadata.leases``), renewed by the node's ``LeaseKeeper``. Its *home* node is the
one with ``pp % write_nodes == node_index``. Contract of :class:`PartitionOwnership`:

- ``start()`` runs one maintenance round (acquires and opens the home partitions
  whose lease is free or is still this node id's own from before a restart), then
  repeats the round every ``interval_s`` in the background.
- A maintenance round (``tick()``, public for tests):
  1. retries partitions waiting to open and reopens offline ones after a backoff
     (doubling up to ``max_reopen_backoff_s``);
  2. acquires free home partitions; acquires a free *foreign* partition (a dead
     sibling's) once the node has been up for one lease TTL and the partition has
     been unowned for 2 rounds in a row (6 when its home node is registered: it is
     expected to take it back itself);
  3. hands a foreign partition back (closes it and releases the lease) once its home
     node has been registered for 2 rounds in a row, so a restarted sibling gets its
     partitions back (preferred-owner balancing).
- Opening a partition: lease first, then the directory lock (:class:`PartitionLock`:
  ``flock`` of ``<partitions>/pp-NNNNN.lock``; two processes can never write one
  directory, and a crashed owner's lock dies with it), then
  ``PartitionLog.start()`` (recovery). While the lock is held elsewhere (a zombie
  that has not noticed its lost lease yet) the partition stays *opening* and the
  lease is kept: the zombie's next renewal is refused, it closes, the next round
  opens. An I/O error while opening makes it *offline* (lease and lock kept).
- ``serving(pp)`` is the synchronous per-request check: the partition is online and
  this node still holds its lease under the token it was opened with (a renewal
  refused by Redis is noticed at once, through the keeper). Otherwise it raises
  ``Unavailable``: ``not_owner`` (not held, lost, closing, node stopping) or
  ``partition_offline`` (opening, or the log hit an I/O error).
- ``on_lost(resource, token)`` (the keeper's callback) stops serving at once and
  closes the log in the background; ``mark_offline`` records an I/O error.
- ``stop(release)``: no new requests are served; waits (bounded) for in-flight
  appends (``track()``), closes every log (flush, fsync, checkpoint) and lock, and
  with ``release=True`` gives the leases up. ``release=False`` leaves the leases to
  expire, as a crash would (used to test takeover).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import fcntl
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from vpq.common.errors import Unavailable
from vpq.common.lifecycle import run_rounds
from vpq.config.settings import LogSettings
from vpq.metadata.aio import cancel_and_wait
from vpq.metadata.errors import MetadataUnavailable
from vpq.metadata.lease_keeper import LeaseKeeper
from vpq.metadata.leases import LeaseManager, NodeRegistry, pp_resource
from vpq.write_nodes.disk_guard import is_disk_full
from vpq.write_nodes.errors import LogIOError
from vpq.write_nodes.log import PartitionLog
from vpq.write_nodes.recovery import RecoveryReport

log = logging.getLogger(__name__)

WRITE_ROLE = "write"
NOT_OWNER = "not_owner"
PARTITION_OFFLINE = "partition_offline"

LogFactory = Callable[[Path, LogSettings, int], PartitionLog]
"""Builds the (not started) log of one partition: ``(directory, settings, pp)``."""


def default_log_factory(directory: Path, settings: LogSettings, pp: int) -> PartitionLog:
    return PartitionLog(directory, settings, pp)


def partition_dir(partitions_dir: Path, pp: int) -> Path:
    """The log directory of ``pp``: ``<data_dir>/partitions/pp-00003``."""
    return partitions_dir / f"pp-{pp:05d}"


class ReplicationHooks(Protocol):
    """What ownership asks the replica manager (``write_nodes.replication``) when
    partitions are replicated: leadership is taken only by an eligible replica and won
    by epoch compare-and-swap; the manager learns when a log opens and closes."""

    def is_replica(self, pp: int) -> bool: ...

    async def eligible(self, pp: int) -> bool: ...

    async def claim(self, pp: int) -> bool: ...

    async def opened(self, pp: int, plog: PartitionLog) -> None: ...

    def closed(self, pp: int) -> None: ...


class PartitionBusyError(RuntimeError):
    """Another live process holds the directory lock of the partition."""


class PartitionLock:
    """Exclusive hold of one partition directory by this process (see module doc).

    The lock file is never replaced (a rename would leave the lock on a dead inode);
    its content names the holder (node id, pid, lease token) for operators."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd

    @classmethod
    def acquire(cls, partitions_dir: Path, pp: int, node_id: str, token: int) -> PartitionLock:
        """Take the lock (blocking file I/O: call from an executor). ``PartitionBusyError``
        when another open file description holds it, in this process or another."""
        partitions_dir.mkdir(parents=True, exist_ok=True)
        path = partitions_dir / f"pp-{pp:05d}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            with contextlib.suppress(OSError):
                holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip()
            os.close(fd)
            raise PartitionBusyError(f"partition {pp} directory is locked by {holder or 'another process'}") from None
        except BaseException:
            os.close(fd)
            raise
        info = json.dumps({"node_id": node_id, "pid": os.getpid(), "token": token}).encode()
        with contextlib.suppress(OSError):  # informational only
            os.ftruncate(fd, 0)
            os.pwrite(fd, info + b"\n", 0)
        return cls(path, fd)

    def release(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            with contextlib.suppress(OSError):
                os.close(fd)


class State(enum.Enum):
    OPENING = "opening"
    ONLINE = "online"
    OFFLINE = "offline"
    CLOSING = "closing"


@dataclass(eq=False)
class OwnedPartition:
    """One partition this node holds the lease of."""

    pp: int
    token: int
    resource: str
    state: State = State.OPENING
    log: PartitionLog | None = None
    lock: PartitionLock | None = None
    report: RecoveryReport | None = None
    error: str | None = None
    retry_at: float = 0.0
    backoff_s: float = 0.0
    closed: bool = False
    busy_logged: bool = False
    dedup: Any = None  # the partition's write_nodes.dedup.DedupIndex, set by the open hook
    mutex: asyncio.Lock = field(default_factory=asyncio.Lock)


class PartitionOwnership:
    def __init__(
        self,
        *,
        node_id: str,
        node_index: int,
        write_nodes: int,
        partition_count: int,
        partitions_dir: Path,
        log_settings: LogSettings,
        keeper: LeaseKeeper,
        leases: LeaseManager,
        nodes: NodeRegistry,
        ttl_ms: int,
        log_factory: LogFactory = default_log_factory,
        takeover: bool = True,
        interval_s: float | None = None,
        reopen_backoff_s: float = 1.0,
        max_reopen_backoff_s: float = 60.0,
        drain_timeout_s: float = 30.0,
        replication: ReplicationHooks | None = None,
        on_open: Callable[[OwnedPartition], Awaitable[None]] | None = None,
    ) -> None:
        """``on_open`` runs once a partition's log has started, before it serves (the
        dedup index is rebuilt there); an exception makes the partition offline."""
        if not 0 <= node_index < write_nodes:
            raise ValueError(f"node index {node_index} outside [0, {write_nodes})")
        self.node_id = node_id
        self.node_index = node_index
        self.write_nodes = write_nodes
        self.partition_count = partition_count
        self.partitions_dir = partitions_dir
        self._log_settings = log_settings
        self._keeper = keeper
        self._leases = leases
        self._nodes = nodes
        self._ttl_s = ttl_ms / 1000.0
        self._log_factory = log_factory
        self._takeover = takeover
        self._interval_s = interval_s if interval_s is not None else max(ttl_ms / 3000.0, 0.02)
        self._reopen_backoff_s = reopen_backoff_s
        self._max_reopen_backoff_s = max_reopen_backoff_s
        self._drain_timeout_s = drain_timeout_s
        self._replication = replication
        self._on_open = on_open
        self._parts: dict[int, OwnedPartition] = {}
        self._unowned_rounds: dict[int, int] = {}
        self._home_rounds: dict[int, int] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None
        self._started_at = 0.0
        self._stopping = False
        self._inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    # ------------------------------------------------------------------ queries
    def is_home(self, pp: int) -> bool:
        return pp % self.write_nodes == self.node_index

    def held(self) -> list[OwnedPartition]:
        """Every partition whose lease this node holds, by pp."""
        return [self._parts[pp] for pp in sorted(self._parts)]

    def serving(self, pp: int) -> OwnedPartition:
        """The online partition ``pp`` with its log, or ``Unavailable`` (see module doc)."""
        part = self._parts.get(pp)
        if part is None or self._stopping:
            why = "is stopping" if self._stopping else "does not hold the lease of"
            raise Unavailable(NOT_OWNER, f"write node {self.node_id} {why} partition {pp}", partition=pp, node=self.node_id)
        if part.state is State.ONLINE:
            if self._keeper.token(part.resource) != part.token:
                self._lost(part, "lease no longer held")
                raise Unavailable(NOT_OWNER, f"write node {self.node_id} lost the lease of partition {pp}", partition=pp, node=self.node_id)
            assert part.log is not None
            if part.log.online:
                return part
            self.mark_offline(part, "the log went offline")
        if part.state is State.CLOSING:
            raise Unavailable(NOT_OWNER, f"write node {self.node_id} is giving partition {pp} up", partition=pp, node=self.node_id)
        if part.state is State.OPENING:
            raise Unavailable(PARTITION_OFFLINE, f"partition {pp} is opening on write node {self.node_id}", partition=pp, state="opening")
        raise Unavailable(
            PARTITION_OFFLINE,
            f"partition {pp} is offline on write node {self.node_id}: {part.error}",
            partition=pp,
            state="offline",
        )

    @contextlib.contextmanager
    def track(self) -> Iterator[None]:
        """Counts an in-flight append; ``stop()`` waits for them."""
        self._inflight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.set()

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        self._started_at = time.monotonic()
        self.partitions_dir.mkdir(parents=True, exist_ok=True)
        await self.tick()
        self._task = asyncio.create_task(self._run(), name=f"write-node-ownership-{self.node_id}")

    async def stop(self, release: bool = True) -> None:
        self._stopping = True
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._idle.wait(), self._drain_timeout_s)
        if self._inflight:
            log.warning("stopping with %d appends still in flight", self._inflight)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        for part in list(self._parts.values()):
            await self._close(part, release=release, why="node stopping")

    async def _run(self) -> None:
        await run_rounds(self._interval_s, self.tick, log, "ownership", (MetadataUnavailable, OSError))

    # ------------------------------------------------------------- maintenance
    async def tick(self) -> None:
        """One maintenance round (see module doc)."""
        now = time.monotonic()
        for part in list(self._parts.values()):
            if part.state is State.ONLINE and part.log is not None and not part.log.online:
                self.mark_offline(part, "the log went offline")
            if part.state is State.OPENING:
                await self._open(part)
            elif part.state is State.OFFLINE and now >= part.retry_at:
                await self._reopen(part)
        if self._stopping:
            return
        free = [pp for pp in range(self.partition_count) if pp not in self._parts]
        owners = await self._leases.owners([pp_resource(pp) for pp in free]) if free else {}
        homes = await self._live_homes()
        up_long_enough = time.monotonic() - self._started_at >= self._ttl_s
        for pp in free:
            owner = owners.get(pp_resource(pp))
            if owner is not None and owner.node_id != self.node_id:
                self._unowned_rounds.pop(pp, None)
                continue
            if self._replication is not None:  # any in-sync replica may lead; the epoch CAS decides
                if self._replication.is_replica(pp) and await self._replication.eligible(pp):
                    await self._take(pp)
                continue
            if self.is_home(pp):
                await self._take(pp)
                continue
            rounds = self._unowned_rounds.get(pp, 0) + 1
            self._unowned_rounds[pp] = rounds
            needed = 6 if (pp % self.write_nodes) in homes else 2
            if self._takeover and up_long_enough and rounds >= needed:
                log.info("taking over partition %d (unowned for %d rounds)", pp, rounds)
                await self._take(pp)
        for part in list(self._parts.values()):
            pp = part.pp
            if self._replication is not None or self.is_home(pp) or part.state is State.CLOSING:
                continue
            if (pp % self.write_nodes) in homes:
                rounds = self._home_rounds.get(pp, 0) + 1
                self._home_rounds[pp] = rounds
                if rounds >= 2:
                    home = homes[pp % self.write_nodes]
                    await self._close(part, release=True, why=f"handing it back to its home node {home}")
            else:
                self._home_rounds.pop(pp, None)

    async def _live_homes(self) -> dict[int, str]:
        """node index -> node id of the other live write nodes."""
        out: dict[int, str] = {}
        for node in await self._nodes.nodes(WRITE_ROLE):
            index = node.meta.get("index") if isinstance(node.meta, dict) else None
            if node.node_id != self.node_id and isinstance(index, int):
                out[index] = node.node_id
        return out

    async def _take(self, pp: int) -> None:
        resource = pp_resource(pp)
        token = await self._keeper.acquire(resource)
        if token is None:
            return
        self._unowned_rounds.pop(pp, None)
        self._home_rounds.pop(pp, None)
        if self._replication is not None and not await self._replication.claim(pp):
            with contextlib.suppress(MetadataUnavailable, OSError):
                await self._keeper.release(resource)
            return
        part = OwnedPartition(pp, token, resource)
        self._parts[pp] = part
        log.info("acquired the lease of partition %d (token %d)", pp, token)
        await self._open(part)

    async def _open(self, part: OwnedPartition) -> None:
        async with part.mutex:
            if part.closed or part.state is not State.OPENING:
                return
            loop = asyncio.get_running_loop()
            if part.lock is None:
                try:
                    part.lock = await loop.run_in_executor(
                        None, PartitionLock.acquire, self.partitions_dir, part.pp, self.node_id, part.token
                    )
                except PartitionBusyError as exc:
                    if not part.busy_logged:
                        log.warning("%s; waiting for it to close", exc)
                        part.busy_logged = True
                    return
                except OSError as exc:
                    self._set_offline(part, f"cannot lock the directory: {exc}")
                    return
            plog = self._log_factory(partition_dir(self.partitions_dir, part.pp), self._log_settings, part.pp)
            try:
                report = await plog.start()
            except LogIOError as exc:
                self._set_offline(part, str(exc), disk_full=is_disk_full(exc))
                return
            except Exception as exc:  # e.g. a damaged checkpoint: same treatment, logged in full
                log.exception("partition %d failed to open", part.pp)
                self._set_offline(part, f"cannot open the log: {exc!r}")
                return
            if self._replication is not None:  # the leader epoch's history entry, before any append
                try:
                    await self._replication.opened(part.pp, plog)
                except Exception as exc:
                    log.exception("partition %d: cannot start leading", part.pp)
                    with contextlib.suppress(LogIOError):
                        await plog.stop()
                    self._set_offline(part, f"cannot start leading: {exc!r}")
                    return
            part.log, part.report = plog, report
            if part.closed or part.state is not State.OPENING:
                return  # lost meanwhile: _close (waiting on the mutex) closes the log
            if self._on_open is not None:
                try:
                    await self._on_open(part)
                except Exception as exc:  # the log stays open: the reopen round stops it
                    log.exception("partition %d: open hook failed", part.pp)
                    self._set_offline(part, f"cannot prepare the partition: {exc!r}")
                    return
                if part.closed or part.state is not State.OPENING:
                    return
            part.state = State.ONLINE
            part.error = None
            part.backoff_s = 0.0
            log.info(
                "partition %d online: offsets [%d, %d), recovery checked %d segments (%d batches), "
                "trusted %d, truncated %d bytes, deleted %d segments in %.3fs%s",
                part.pp,
                report.start_offset,
                report.recovered_end_offset,
                report.segments_checked,
                report.batches_checked,
                report.segments_trusted,
                report.bytes_truncated,
                report.segments_deleted,
                report.duration_s,
                f"; problem: {report.problem}" if report.problem else "",
            )

    async def _reopen(self, part: OwnedPartition) -> None:
        async with part.mutex:
            if part.closed or part.state is not State.OFFLINE:
                return
            plog, part.log = part.log, None
            if plog is not None:
                with contextlib.suppress(LogIOError):
                    await plog.stop()
            part.state = State.OPENING
        log.info("reopening partition %d after: %s", part.pp, part.error)
        await self._open(part)

    def _set_offline(self, part: OwnedPartition, why: str, disk_full: bool = False) -> None:
        """Offline until a reopen after a backoff that doubles on each failure, but
        stays at its first step when the disk is full (space may return any time)."""
        part.state = State.OFFLINE
        part.error = why
        if disk_full:
            part.backoff_s = self._reopen_backoff_s
        else:
            part.backoff_s = min(max(part.backoff_s * 2, self._reopen_backoff_s), self._max_reopen_backoff_s)
        part.retry_at = time.monotonic() + part.backoff_s
        log.error("partition %d offline (retry in %.1fs): %s", part.pp, part.backoff_s, why)

    def mark_offline(self, part: OwnedPartition, why: str | BaseException) -> None:
        """Record an I/O error of ``part``'s log: it answers ``partition_offline`` until
        a later round reopens it (recovery)."""
        if part.state is State.ONLINE:
            self._set_offline(part, str(why), disk_full=isinstance(why, BaseException) and is_disk_full(why))

    # ------------------------------------------------------------------- losing
    async def on_lost(self, resource: str, token: int) -> None:
        """The keeper's callback: the lease ``resource`` (``token``) is gone."""
        for part in self._parts.values():
            if part.resource == resource and part.token == token:
                self._lost(part, "lease lost")
                return

    def _lost(self, part: OwnedPartition, why: str) -> None:
        if part.state is State.CLOSING:
            return
        part.state = State.CLOSING
        task = asyncio.create_task(self._close(part, release=False, why=why), name=f"close-pp-{part.pp}")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def give_up(self, pp: int, why: str) -> None:
        """Stop serving ``pp`` at once, close its log and release its lease (a newer
        leader epoch exists)."""
        part = self._parts.get(pp)
        if part is None or part.state is State.CLOSING:
            return
        part.state = State.CLOSING
        task = asyncio.create_task(self._close(part, release=True, why=why), name=f"give-up-pp-{pp}")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _close(self, part: OwnedPartition, *, release: bool, why: str) -> None:
        part.state = State.CLOSING
        if self._replication is not None:
            self._replication.closed(part.pp)
        async with part.mutex:
            if part.closed:
                return
            part.closed = True
            plog, part.log = part.log, None
            if plog is not None:
                try:
                    await plog.stop()
                except LogIOError as exc:
                    log.warning("partition %d closed after an I/O error: %s", part.pp, exc)
            if part.lock is not None:
                part.lock.release()
                part.lock = None
            if release and self._keeper.token(part.resource) == part.token:
                try:
                    await self._keeper.release(part.resource)
                except (MetadataUnavailable, OSError) as exc:
                    log.warning("could not release the lease of partition %d (it will expire): %s", part.pp, exc)
            if self._parts.get(part.pp) is part:
                del self._parts[part.pp]
            log.info("partition %d closed (%s)", part.pp, why)

    # ------------------------------------------------------------------ listing
    def snapshot(self) -> list[dict[str, Any]]:
        """The ``GET /internal/v1/partitions`` rows of every held partition."""
        rows: list[dict[str, Any]] = []
        for part in self.held():
            plog = part.log
            online = part.state is State.ONLINE and plog is not None and plog.online
            state = part.state.value if online or part.state is not State.ONLINE else State.OFFLINE.value
            if plog is not None and plog.report is not None:
                start, end, nxt, size = plog.start_offset, plog.durable_end_offset, plog.end_offset, plog.size_bytes
                compacted = plog.compactions.bytes_reclaimed
                commits, loop_commits = plog.commit_counts
            else:
                start = end = nxt = size = compacted = commits = loop_commits = 0
            rows.append(
                {
                    "id": part.pp,
                    "start_offset": start,
                    "end_offset": end,
                    "next_offset": nxt,
                    "bytes": size,
                    "compacted_bytes": compacted,
                    "online": online,
                    "state": state,
                    "dedup_ids": len(part.dedup) if part.dedup is not None else 0,
                    "dedup_duplicates": part.dedup.duplicates if part.dedup is not None else 0,
                    "group_commits": commits,
                    "loop_commits": loop_commits,
                }
            )
        return rows
