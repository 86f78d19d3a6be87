"""Group commit (BookKeeper-journal style), as its own component.

Callers ``await committer.submit(data, meta)``. ``submit`` asks the *sink* to
place the write (on the event-loop thread: offsets, segment roll, indexes) and
queues the resulting :class:`WriteOp`. A dedicated I/O thread drains the queue
continuously: it takes everything queued (up to ``max_group_bytes``), writes it
with one ``writev`` per file, fsyncs once per file, then hands the group back to
the loop through the loop's :class:`~write_nodes.completion_relay.CompletionRelay`
(one loop wake-up for the groups of several committers that complete together),
which lets the sink mark it durable and only then resolves the waiters. The loop
wakes a parked I/O thread with one lock release; a busy one takes the next group
without being woken. The thread never waits for the loop, so it writes group N+1 while the
loop is still acknowledging group N and building the next batches.

An idle loop writes on the loop thread itself (``inline_idle_ms``): when a submit finds the
I/O thread parked, nothing queued, and no committer of the loop has completed a
write for ``inline_idle_ms`` (``CompletionRelay.io_quiet_for``), the loop writes and
syncs that one op itself and resolves it on its next iteration, exactly as the
thread's group would be. That saves the thread's wake-up and the loop's for the
completion, most of a lone append's wait besides the fsync; under load writes keep
going to the thread, so the loop is not blocked by fsyncs while requests arrive.

Fsync policy (``LogSettings.fsync_policy``):
- ``group`` (default, durable): every group is fsynced before its waiters are
  resolved: an acknowledged append survives ``kill -9`` and power loss;
- ``interval``: waiters are resolved once the bytes are written (page cache); a
  timer fsyncs every ``fsync_interval_ms``. Survives a process crash, NOT a
  power loss or kernel crash (up to an interval of acknowledged data may go);
- ``none``: never fsync while running (experiments only); :meth:`stop` still
  fsyncs once.

Any exception (from the sink's ``prepare`` or from the I/O) takes the committer
offline: the failed group's waiters and every queued write get a
``PartitionOfflineError`` (chaining the original error), later submits raise it
at once, and the sink's ``failed`` hook is called once.

Except a full disk: when a group's write fails with ENOSPC/EDQUOT, the I/O thread
truncates every file the group wrote back to where the group began (each op's
``position``), takes every write queued behind it, and stops taking groups; on
the loop thread the sink's ``rollback`` undoes the placement of all those writes
(offsets, segment bookkeeping), their waiters get a ``DiskFullError`` and the
committer goes on: nothing of them was appended, what came before is untouched,
and the next submit is placed where the failed group began. A sink that cannot
roll back (``rollback`` answers False) or a truncate that fails takes the
committer offline as above.
"""

from __future__ import annotations

import asyncio
import errno
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from vpq.write_nodes.completion_relay import CompletionRelay
from vpq.write_nodes.errors import DiskFullError, LogIOError, PartitionOfflineError
from vpq.write_nodes.storage import OS_STORAGE

FsyncFn = Callable[[int], None]
WriteFn = Callable[[int, list[bytes]], int]
TruncateFn = Callable[[int, int], None]
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
FsyncPolicy = Literal["group", "interval", "none"]


def default_fsync(fd: int) -> None:
    """``fdatasync`` where it exists (it still flushes the file size), else ``fsync``."""
    OS_STORAGE.fdatasync(fd)


@dataclass(slots=True)
class WriteOp:
    """One queued unit of I/O, prepared by the sink on the loop thread.

    The I/O thread runs ``before`` (in order, each given the counting fsync), then
    appends ``data`` to ``fd`` (consecutive ops on one fd share one ``writev``).
    When the group is synced (policy ``group``, or a ``force_sync`` op in it) every
    fd in ``sync_fds`` of every op of the group is fsynced once, after all writes."""

    fd: int = -1
    data: bytes = b""
    position: int = -1
    """where ``data`` starts in the file (-1: unknown): a full disk truncates back to it"""
    before: list[Callable[[FsyncFn], object]] = field(default_factory=list)
    sync_fds: tuple[int, ...] = ()
    force_sync: bool = False
    context: object = None
    future: asyncio.Future[None] | None = None


class CommitSink(Protocol):
    """What the committer needs from the thing it writes to (the partition log)."""

    def prepare(self, data: bytes, meta: object, sync: bool) -> WriteOp:
        """Place one write (loop thread). ``sync``: the policy fsyncs every group."""
        ...

    def prepare_sync(self) -> WriteOp | None:
        """An op whose fsyncs cover everything written so far, ``None`` if all is synced."""
        ...

    def finish(self, ops: list[WriteOp], synced: bool) -> None:
        """The group's I/O completed (loop thread); ``synced`` when it was fsynced."""
        ...

    def failed(self, error: LogIOError) -> None:
        """The I/O failed; the committer is offline from now on."""
        ...

    def rollback(self, ops: list[WriteOp]) -> bool:
        """The disk was full: none of ``ops`` (the failed group and every op placed after
        it, in order) was written; undo their placement so the next ``prepare`` goes
        where the first of them began. False when that is not possible (the committer
        then goes offline)."""
        ...


class GroupCommitter:
    """Gathers concurrent appends into one write and one fsync per group."""

    def __init__(
        self,
        sink: CommitSink,
        *,
        policy: FsyncPolicy = "group",
        fsync_interval_ms: int = 50,
        max_group_bytes: int = 8 * 1024 * 1024,
        fsync: FsyncFn = default_fsync,
        write: WriteFn = OS_STORAGE.write_all,
        truncate: TruncateFn = OS_STORAGE.truncate,
        name: str = "log",
        history_size: int = 0,
        write_sync: WriteFn | None = None,
        inline_idle_ms: float = 0.0,
    ) -> None:
        """``fsync`` syncs one fd and ``write`` writes buffers to one fd (both on the I/O
        thread), ``truncate`` cuts one fd back after a full disk: the storage of the files
        the sink places writes in. ``write_sync`` (optional) is ``write`` then ``fsync`` of
        that fd in one call (``Storage.write_all_dsync``): a synced group whose ops all
        append to one fd and sync only it is written with it, counted as one fsync.
        ``inline_idle_ms`` > 0: a submit that finds the I/O thread parked, and the loop's
        committers without a completed write for that long, is written on the loop
        thread (module docstring); 0: never."""
        if policy not in ("group", "interval", "none"):
            raise ValueError(f"unknown fsync policy {policy!r}")
        self._sink = sink
        self.policy: FsyncPolicy = policy
        self._sync_groups = policy == "group"
        self._interval_s = fsync_interval_ms / 1000.0
        self._max_group_bytes = max_group_bytes
        self._inline_idle_s = inline_idle_ms / 1000.0
        self._fsync_fn = fsync
        self._write = write
        self._write_sync = write_sync
        self._truncate = truncate
        self._name = name
        self._queue: deque[WriteOp] = deque()
        self._lock = threading.Lock()  # guards the queue and the flags the I/O thread reads
        self._wake = threading.Lock()  # held while the I/O thread may park on it
        self._wake.acquire()
        self._parked = False  # the I/O thread waits on ``_wake`` (released once to wake it)
        self._relay: CompletionRelay | None = None
        self._closing = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._accepting = False
        self._error: PartitionOfflineError | None = None
        self._refusing = False  # a full disk's group is being rolled back: no I/O meanwhile
        self._late: list[WriteOp] = []  # ops submitted meanwhile: they are rolled back too
        self.disk_full = 0  # groups refused because the disk was full
        self.fsyncs = 0  # fsync calls made (by the I/O thread, or inline while it is parked)
        self.groups = 0  # I/O rounds completed
        self.inline_groups = 0  # of which written on the loop thread (counted with ``groups``)
        self.writes = 0  # ops completed
        # (bytes written, fsyncs made) per I/O round, oldest first, when history_size > 0;
        # appended by the I/O thread: read it with history_snapshot()
        self.history: deque[tuple[int, int]] = deque(maxlen=history_size)

    # ---------------------------------------------------------------- lifecycle
    @property
    def online(self) -> bool:
        return self._error is None

    @property
    def error(self) -> PartitionOfflineError | None:
        return self._error

    async def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("committer already started")
        self._loop = asyncio.get_running_loop()
        self._relay = CompletionRelay.of(self._loop)
        self._accepting = True
        self._thread = threading.Thread(target=self._io_main, name=f"vpq-io-{self._name}", daemon=True)
        self._thread.start()
        if self.policy == "interval":
            self._ticker = asyncio.create_task(self._tick(), name=f"fsync-interval-{self._name}")

    async def stop(self) -> None:
        """Stop accepting, complete every queued write, fsync once (any policy), end
        the I/O thread. Raises the offline error if the I/O failed."""
        self._accepting = False
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
            self._ticker = None
        if self._thread is None:
            return
        try:
            if self._error is None:
                await self.sync_now()
        except LogIOError:
            pass
        finally:
            with self._lock:
                self._closing = True
                self._unpark()
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join)
            self._thread = None
        if self._error is not None:
            raise self._error

    def history_snapshot(self) -> list[tuple[int, int]]:
        """A copy of ``history``: (bytes written, fsyncs) per I/O round, oldest first."""
        with self._lock:
            return list(self.history)

    # ------------------------------------------------------------------ appends
    def submit(self, data: bytes, meta: object = None) -> asyncio.Future[None]:
        """Queue ``data``; the returned future resolves once it is written (and fsynced
        under the ``group`` policy). Raises ``PartitionOfflineError`` at once when
        offline or not running. Call order is write order."""
        if self._error is not None:
            raise self._error
        if not self._accepting:
            raise PartitionOfflineError(f"{self._name}: not running")
        try:
            op = self._sink.prepare(data, meta, self._sync_groups)
        except Exception as exc:
            self._go_offline(exc, [])
            assert self._error is not None
            raise self._error from exc
        return self._enqueue(op)

    async def sync_now(self) -> None:
        """fsync everything written so far (whatever the policy)."""
        if self._error is not None:
            raise self._error
        op = self._sink.prepare_sync()
        if op is None:
            return
        op.force_sync = True
        await self._enqueue(op)

    def _enqueue(self, op: WriteOp) -> asyncio.Future[None]:
        loop = self._loop
        assert loop is not None and self._relay is not None
        fut: asyncio.Future[None] = loop.create_future()
        op.future = fut
        with self._lock:
            if self._refusing:
                self._late.append(op)
                return fut
            inline = self._parked and not self._queue and self._relay.io_quiet_for(self._inline_idle_s)
            if not inline:
                self._queue.append(op)
                if self._parked:
                    self._parked = False
                    self._wake.release()
        if inline:
            # the I/O thread is parked and stays so: only the loop thread unparks it
            self._run([op], loop.call_soon, on_loop=True)
        return fut

    def _unpark(self) -> None:
        """Wake the I/O thread if it is parked (``_lock`` held)."""
        if self._parked:
            self._parked = False
            self._wake.release()

    # ---------------------------------------------------------------- I/O thread
    def _io_main(self) -> None:
        relay = self._relay
        assert relay is not None
        while True:
            with self._lock:
                if (not self._queue or self._refusing) and not self._closing:
                    self._parked = True
                    group = None
                elif not self._queue or self._refusing:
                    return
                else:
                    group = self._take_group()
            if group is None:
                self._wake.acquire()  # released by whoever clears ``_parked``
                continue
            if not self._run(group, relay.post):
                return

    def _run(self, group: list[WriteOp], post: Callable[..., object], on_loop: bool = False) -> bool:
        """Write (and sync) ``group``, then ``post`` its completion, its full disk or the
        error that takes the committer offline to the loop. False when offline.
        ``on_loop``: called on the loop thread (an inline write), not the I/O thread."""
        assert self._relay is not None
        try:
            synced = self._execute(group)
        except OSError as exc:
            if exc.errno in FULL_ERRNOS and self._undo(group):
                with self._lock:
                    self._refusing = True
                    refused = group + list(self._queue)
                    self._queue.clear()
                self._relay.note_io()
                post(self._refuse, exc, refused)
                return True
            post(self._go_offline, exc, group)
            return False
        except BaseException as exc:  # the partition goes offline; the loop learns why
            post(self._go_offline, exc, group)
            if on_loop:
                raise  # KeyboardInterrupt and the like go on up
            return False
        self._relay.note_io()
        post(self._complete, group, synced, on_loop)
        return True

    def _take_group(self) -> list[WriteOp]:
        queue = self._queue
        group = [queue.popleft()]
        total = len(group[0].data)
        limit = self._max_group_bytes
        while queue and total + len(queue[0].data) <= limit:
            op = queue.popleft()
            total += len(op.data)
            group.append(op)
        return group

    def _execute(self, group: list[WriteOp]) -> bool:
        """Writes (one writev per run of ops on the same fd), then the fsyncs; or, for a
        synced group of plain appends to one fd, one ``write_sync`` call."""
        if self._write_sync is not None and self._sync_groups:
            fd = group[0].fd
            only = (fd,)
            for op in group:
                if op.fd != fd or op.before or not op.data or op.sync_fds != only:
                    break
            else:
                bufs = [op.data for op in group]
                self._write_sync(fd, bufs)
                self.fsyncs += 1
                if self.history.maxlen:
                    with self._lock:
                        self.history.append((sum(len(b) for b in bufs), 1))
                return True
        before = self.fsyncs
        write_all = self._write
        sync = self._sync_groups
        fd = -1
        bufs: list[bytes] = []
        nbytes = 0
        for op in group:
            sync = sync or op.force_sync
            if op.before:
                if bufs:
                    write_all(fd, bufs)
                    bufs = []
                for step in op.before:
                    step(self._counted_fsync)
            if op.data:
                if op.fd != fd and bufs:
                    write_all(fd, bufs)
                    bufs = []
                fd = op.fd
                bufs.append(op.data)
                nbytes += len(op.data)
        if bufs:
            write_all(fd, bufs)
        if sync:
            done: set[int] = set()
            for op in group:
                for sync_fd in op.sync_fds:
                    if sync_fd not in done:
                        done.add(sync_fd)
                        self._counted_fsync(sync_fd)
        if self.history.maxlen:
            with self._lock:
                self.history.append((nbytes, self.fsyncs - before))
        return sync

    def _undo(self, group: list[WriteOp]) -> bool:
        """Truncate every file ``group`` wrote back to where the group began there (I/O
        thread); False when a write's position is unknown or a truncate fails."""
        starts: dict[int, int] = {}
        for op in group:
            if op.data:
                if op.position < 0:
                    return False
                if op.fd not in starts or op.position < starts[op.fd]:
                    starts[op.fd] = op.position
        try:
            for fd, position in starts.items():
                self._truncate(fd, position)
        except OSError:
            return False
        return True

    def _counted_fsync(self, fd: int) -> None:
        self._fsync_fn(fd)
        self.fsyncs += 1

    # ---------------------------------------------------------------- loop side
    def _complete(self, group: list[WriteOp], synced: bool, on_loop: bool = False) -> None:
        self.groups += 1
        if on_loop:
            self.inline_groups += 1
        self.writes += len(group)
        self._sink.finish(group, synced)
        for op in group:
            fut = op.future
            if fut is not None and not fut.done():
                fut.set_result(None)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            if self._error is not None:
                return
            try:
                await self.sync_now()
            except DiskFullError:
                continue
            except LogIOError:
                return

    def _refuse(self, exc: OSError, ops: list[WriteOp]) -> None:
        """Loop side of a full disk (see the module docstring)."""
        with self._lock:
            ops = ops + self._late
            self._late = []
        if self._error is not None:  # went offline meanwhile: those ops fail with it
            self._go_offline(exc, ops)
            return
        try:
            undone = self._sink.rollback(ops)
        except Exception:
            undone = False
        if not undone:
            self._go_offline(exc, ops)
            return
        self.disk_full += 1
        err = DiskFullError(f"{self._name}: the disk is full, nothing was appended: {exc}")
        err.__cause__ = exc
        for op in ops:
            fut = op.future
            if fut is not None and not fut.done():
                fut.set_exception(err)
                fut.exception()  # the submitter may be gone: no "never retrieved" warning
        with self._lock:
            self._refusing = False
            self._unpark()

    def _go_offline(self, exc: BaseException, group: list[WriteOp]) -> None:
        first = self._error is None
        if first:
            err = PartitionOfflineError(f"{self._name}: I/O error, partition offline: {exc}")
            err.__cause__ = exc
            self._error = err
        with self._lock:
            failed = list(group) + list(self._queue) + self._late
            self._queue.clear()
            self._late = []
            self._refusing = False
            self._closing = True
            self._unpark()
        for op in failed:
            fut = op.future
            if fut is not None and not fut.done():
                fut.set_exception(self._error)
                fut.exception()  # the submitter may be gone: no "never retrieved" warning
        if first:
            assert self._error is not None
            self._sink.failed(self._error)
