"""The leader's view of one replicated partition: in-sync set, follower progress, high watermark.

Contract of :class:`LeaderState` (no I/O; the replica manager persists in-sync set
changes in Redis and calls back):

- ``high_watermark`` = the smallest durable end among the in-sync replicas: the
  leader's own ``durable_end_offset`` and, for each in-sync follower, the offset it
  asked for in its last fetch (a follower only asks for offset X once everything below
  X is fsynced in its own log). Acknowledgements and read nodes use it.
- ``fetched(replica, offset, now)`` records a follower's fetch. A follower
  is *caught up* at the time of a fetch reaching the leader's end as it was at the
  previous answer (or the current end); ``lagging(now)`` lists the in-sync followers
  not caught up for ``lag_max_s``. It answers a follower out of the in-sync set that is
  caught up now, which the manager adds (in memory first, then in Redis: the set used
  for the watermark is never smaller than the stored one), and an in-sync follower
  asking for less than it reported before (it lost data), which the manager removes
  before counting anything of it.
- ``wait_past(offset)`` (through ``wait_durable``, the log's ``wait_for``, while the
  leader is alone in sync) waits until ``high_watermark >= offset`` and raises the state's
  close reason (``Unavailable``) when the state is closed first (leadership lost).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from vpq.common.errors import Unavailable
from vpq.common.waits import wait_event


class LeaderState:
    def __init__(
        self,
        pp: int,
        me: int,
        epoch: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        durable_end: Callable[[], int],
        wait_durable: Callable[[int, float], Awaitable[bool]],
        now: float,
        lag_max_s: float,
        min_insync: int,
    ) -> None:
        self.pp = pp
        self.me = me
        self.epoch = epoch
        self.replicas = replicas
        self.isr: set[int] = set(isr) | {me}
        self.min_insync = min_insync
        self._durable_end = durable_end
        self._wait_durable = wait_durable
        self._lag_max_s = lag_max_s
        self.follower_end: dict[int, int] = {r: 0 for r in replicas if r != me}
        self.caught_up_at: dict[int, float] = {r: now for r in replicas if r != me}
        self._sent: dict[int, tuple[int, float]] = {}
        self._changed = asyncio.Event()
        self.closed: Unavailable | None = None
        self.isr_shrinks = 0
        self.isr_expands = 0

    # ---------------------------------------------------------------- queries
    @property
    def high_watermark(self) -> int:
        hw = self._durable_end()
        for r in self.isr:
            if r != self.me:
                hw = min(hw, self.follower_end.get(r, 0))
        return hw

    def lag(self, replica: int) -> int:
        """Records the follower lacks of the leader's durable log."""
        return max(0, self._durable_end() - self.follower_end.get(replica, 0))

    def check_insync(self) -> None:
        """``Unavailable`` (``not_enough_replicas``) while fewer than ``min_insync`` replicas are in sync."""
        if self.closed is not None:
            raise self.closed
        if len(self.isr) < self.min_insync:
            raise Unavailable(
                "not_enough_replicas",
                f"partition {self.pp} has {len(self.isr)} in-sync replica(s), fewer than min_insync {self.min_insync}",
                partition=self.pp,
                isr=sorted(self.isr),
                min_insync=self.min_insync,
            )

    def lagging(self, now: float) -> list[int]:
        return sorted(r for r in self.isr if r != self.me and now - self.caught_up_at.get(r, now) > self._lag_max_s)

    # ---------------------------------------------------------------- updates
    def fetched(self, replica: int, offset: int, now: float) -> str | None:
        """Record a fetch at ``offset`` (everything below it durable on ``replica``).
        Answers ``"expand"`` for a follower out of the in-sync set that is caught up now,
        ``"shrink"`` for an in-sync follower that asks for less than it had reported
        (it lost data: a wiped or damaged disk), else None."""
        end = self._durable_end()
        before = self.follower_end.get(replica, 0)
        if offset < before and replica in self.isr:
            return "shrink"
        self.follower_end[replica] = offset
        sent = self._sent.get(replica)
        if offset >= end:
            self.caught_up_at[replica] = now
        elif sent is not None and offset >= sent[0]:
            self.caught_up_at[replica] = max(self.caught_up_at.get(replica, 0.0), sent[1])
        self._wake()
        return "expand" if replica not in self.isr and offset >= end else None

    def answered(self, replica: int, end: int, now: float) -> None:
        """The fetch answer sent to ``replica`` brings it to ``end``."""
        self._sent[replica] = (end, now)

    def set_isr(self, isr: set[int]) -> None:
        grew = len(isr) > len(self.isr)
        shrank = len(isr) < len(self.isr)
        self.isr = set(isr) | {self.me}
        self.isr_expands += int(grew)
        self.isr_shrinks += int(shrank)
        self._wake()

    def close(self, reason: Unavailable) -> None:
        if self.closed is None:
            self.closed = reason
        self._wake()

    def wake(self) -> None:
        self._wake()

    def _wake(self) -> None:
        event = self._changed
        self._changed = asyncio.Event()
        event.set()

    # ------------------------------------------------------------------ waits
    async def wait_past(self, offset: int, timeout_s: float | None = None) -> bool:
        """Until ``high_watermark >= offset`` (True); False after ``timeout_s``; raises
        the close reason once closed."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while self.high_watermark < offset:
            if self.closed is not None:
                raise self.closed
            event = self._changed
            remaining = 3600.0 if deadline is None else deadline - loop.time()
            if remaining <= 0:
                return False
            if self.isr == {self.me}:  # the watermark is the leader's durable end
                if not await self._wait_durable(offset - 1, min(remaining, 1.0)):
                    await asyncio.sleep(0.01)
                continue
            if deadline is None:
                await event.wait()
                continue
            if not await wait_event(event, remaining):
                return self.high_watermark >= offset
        return True
