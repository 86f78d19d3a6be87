"""What the scenarios share: closed-loop producing, draining a queue with N consumers,
and the context a scenario runs in (open-loop producing: :mod:`load.scenarios.open_loop`).

* ``produce_closed``: ``producers`` tasks, each sending one batch at a time and waiting
  for its acknowledgement before the next (closed loop), until ``max_messages`` were
  sent or ``duration_s`` passed. Each task owns its keys and queues round-robin, so a
  key's messages are sent one request after the other (the produce order the per-key
  order check relies on). ``on_acked(queue, key, seq)`` is called for every message
  the system acknowledged.
* ``drain``: starts ``members`` consumers whose handler feeds a checker (and an optional
  ``on_delivery``), optionally "works" ``work_s`` per message, and waits until every
  expected message was delivered, or ``timeout_s``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vpq.load.checks import DeliveryChecker
from vpq.load.payload import MESSAGE_BYTES, KeySequencer, make_payload, parse_payload
from vpq.load.profiles import Profile
from vpq.load.system import System

log = logging.getLogger(__name__)

OnAcked = Callable[[str, str, int], None]
OnDelivery = Callable[[str, int, float], None]


@dataclass
class Context:
    """What a scenario gets: the started system, the sizes, a logger line function."""

    system: System
    profile: Profile
    echo: Callable[[str], None] = print


@dataclass
class ProduceRun:
    messages: int = 0
    requests: int = 0
    errors: int = 0
    seconds: float = 0.0
    client_cpu: float = 0.0
    per_queue: dict[str, int] = field(default_factory=dict)
    first_error: str = ""

    def figures(self, message_bytes: int = MESSAGE_BYTES) -> dict[str, Any]:
        rate = self.messages / self.seconds if self.seconds > 0 else 0.0
        return {
            "messages": self.messages,
            "requests": self.requests,
            "errors": self.errors,
            "seconds": round(self.seconds, 3),
            "msgs_per_s": round(rate, 1),
            "mib_per_s": round(rate * message_bytes / 2**20, 2),
            "client_cpu": round(self.client_cpu, 2),
            **({"first_error": self.first_error} if self.first_error else {}),
        }


async def produce_closed(
    system: System,
    queues: Sequence[str],
    *,
    producers: int,
    batch: int,
    max_messages: int,
    duration_s: float,
    keys_per_producer: int,
    on_acked: OnAcked | None = None,
    lanes: int = 1,
    message_bytes: int = MESSAGE_BYTES,
    key_tag: str = "",
    queue_offset: int = 0,
) -> ProduceRun:
    """Closed-loop produce (see the module docstring). Failed requests are counted, not
    retried (the SDK/driver retries what it retries); their messages are not expected.
    ``key_tag`` prefixes every key (runs over the same queues with different tags never
    share a key); each task starts ``queue_offset`` queues into its own round robin."""
    if not queues:
        return ProduceRun()
    run = ProduceRun()
    budget = [max_messages]
    producers = max(1, min(producers, max_messages))
    # the harness's own set-up (linear in the number of queues: 10,000 at scenario 3's
    # last step) is done before the clock starts, so it does not count as the system's time
    index = {q: i for i, q in enumerate(queues)}
    owned = [list(queues[j::producers]) or [queues[j % len(queues)]] for j in range(producers)]
    t0 = time.monotonic()
    cpu0 = time.process_time()
    deadline = t0 + duration_s

    def reserve() -> int:
        n = min(batch, budget[0])
        budget[0] -= n
        return n

    async def worker(j: int) -> None:
        mine = owned[j]
        seqs = KeySequencer()
        key_cursor = 0
        q_cursor = queue_offset
        names: dict[str, list[str]] = {}  # queue -> this task's key names, made once

        while time.monotonic() < deadline:
            n = reserve()
            if n == 0:
                return
            queue = mine[q_cursor % len(mine)]
            q_cursor += 1
            keys = names.get(queue)
            if keys is None:
                qi = index[queue]
                keys = names[queue] = [f"{key_tag}q{qi}-p{j}-k{c}" for c in range(keys_per_producer)]
            nxt = seqs.next
            items = [(key, nxt(key)) for key in (keys[(key_cursor + i) % keys_per_producer] for i in range(n))]
            key_cursor += n
            batch_msgs = [(k, make_payload(k, s, size=message_bytes)) for k, s in items]
            run.requests += 1
            try:
                await system.produce(queue, batch_msgs, lanes=lanes)
            except Exception as exc:  # a failed request: counted, its messages not expected
                run.errors += 1
                if not run.first_error:
                    run.first_error = f"{type(exc).__name__}: {exc}"[:300]
                    log.warning("produce to %s failed: %r", queue, exc)
                continue
            run.messages += n
            run.per_queue[queue] = run.per_queue.get(queue, 0) + n
            if on_acked is not None:
                for k, s in items:
                    on_acked(queue, k, s)

    await asyncio.gather(*(worker(j) for j in range(producers)))
    run.seconds = time.monotonic() - t0
    run.client_cpu = (time.process_time() - cpu0) / run.seconds if run.seconds > 0 else 0.0
    return run


@dataclass
class DrainRun:
    seconds: float = 0.0
    first_s: float = 0.0  # from consumer start to the first delivery
    handled: int = 0
    timed_out: bool = False
    client_cpu: float = 0.0

    def figures(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 3),
            "handled": self.handled,
            "msgs_per_s": round(self.handled / self.seconds, 1) if self.seconds > 0 else 0.0,
            "first_delivery_s": round(self.first_s, 3),
            "timed_out": self.timed_out,
            "client_cpu": round(self.client_cpu, 2),
        }


async def wait_until(condition: Callable[[], bool], timeout_s: float, interval_s: float = 0.01) -> bool:
    """Poll ``condition`` until true (answers True) or ``timeout_s`` passed (False)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(interval_s)
    return True


async def drain(
    system: System,
    queue: str,
    checker: DeliveryChecker,
    *,
    members: int,
    ordered: bool,
    batch: int,
    timeout_s: float,
    work_s: float = 0.0,
    on_delivery: OnDelivery | None = None,
    producing: asyncio.Event | None = None,
) -> DrainRun:
    """Consume ``queue`` with ``members`` consumers until every expected message of
    ``checker`` was delivered (and ``producing``, when given, is set: production over),
    or ``timeout_s``. ``seconds`` runs from the first delivery to the last."""
    run = DrainRun()
    first: list[float] = []
    last = [0.0]

    async def handler(key: str, payload: bytes) -> None:
        now = time.monotonic()
        if not first:
            first.append(now)
        stamp = parse_payload(payload)
        checker.observe(stamp.key, stamp.seq)
        if on_delivery is not None:
            on_delivery(stamp.key, stamp.seq, now)
        if work_s > 0:
            await asyncio.sleep(work_s)
        run.handled += 1
        last[0] = time.monotonic()

    def done() -> bool:
        finished = producing is None or producing.is_set()
        return finished and checker.expected_seen >= checker.expected_count

    t0 = time.monotonic()
    cpu0 = time.process_time()
    handles: list[Any] = []
    try:
        # all members start together, as a scaled-out deployment would: joined one after
        # the other, the last joins would be timed as part of the drain
        started = await asyncio.gather(
            *(system.consume(queue, handler, ordered=ordered, member=m, members=members, batch=batch)
              for m in range(members)),
            return_exceptions=True,
        )
        handles = [h for h in started if not isinstance(h, BaseException)]
        failed = [h for h in started if isinstance(h, BaseException)]
        if failed:
            raise failed[0]
        run.timed_out = not await wait_until(done, timeout_s)
    finally:
        await asyncio.gather(*(h.stop() for h in handles), return_exceptions=True)
    if first:
        run.first_s = first[0] - t0
        run.seconds = max(last[0] - first[0], 1e-9)
    wall = time.monotonic() - t0
    run.client_cpu = (time.process_time() - cpu0) / wall if wall > 0 else 0.0
    return run
