"""An in-memory ``Backend`` for the gateway tests only: simple, but it keeps the contract
of ``gateway/backend.py`` (errors, all-or-nothing produce, JSON vs bytes values, ack/nack,
leave, group info). Isolation: env is strict; lanes and sets are not routed (every
consumer of the env may get every message). Every call is recorded in ``calls``."""

from __future__ import annotations

import asyncio
import base64
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import mmh3
import orjson

from vpq.common.errors import Conflict, NotFound, PayloadTooLarge
from vpq.gateway.backend import JoinSpec
from vpq.produce_path.outgoing import MessageView, OutgoingBatch

DEFAULTS: dict[str, Any] = {
    "virtual_partitions": 16,
    "ordering": "key",
    "max_deliveries": 5,
    "visibility_timeout_ms": 30000,
    "retention_ms": 604800000,
    "max_message_bytes": 1024 * 1024,
}
PARTITIONS = 4


@dataclass
class Stored:
    offset: int
    partition: int
    vp: int
    message: MessageView
    timestamp_ms: int

    @property
    def id(self) -> str:
        return f"{self.partition}-{self.offset}"


@dataclass
class Group:
    start: int
    members: dict[str, JoinSpec] = field(default_factory=dict)
    next_index: int = 0
    in_flight: dict[str, tuple[str, int]] = field(default_factory=dict)  # id -> (consumer, index)
    redeliver: list[int] = field(default_factory=list)
    acked: set[int] = field(default_factory=set)
    deliveries: dict[int, int] = field(default_factory=dict)


@dataclass
class Queue:
    name: str
    config: dict[str, Any]
    log: list[Stored] = field(default_factory=list)
    groups: dict[str, Group] = field(default_factory=dict)
    bytes_total: int = 0

    def info(self) -> dict[str, Any]:
        v = self.config["virtual_partitions"]
        return {
            "name": self.name,
            **self.config,
            "epoch": 1,
            "placement": [vp % PARTITIONS for vp in range(v)],
            "traffic": {"messages_total": len(self.log), "bytes_total": self.bytes_total, "messages_per_s": 0.0, "bytes_per_s": 0.0},
        }


class MemoryBackend:
    """See the module docstring. ``is_ready`` drives ``ready()``; ``fail_with`` makes every
    data call raise that exception (to test error mapping)."""

    def __init__(self) -> None:
        self.queues: dict[str, Queue] = {}
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.started = False
        self.stopped = False
        self.is_ready = True
        self.fail_with: BaseException | None = None
        self.extra_metrics = ""
        self._offsets = [0] * PARTITIONS
        self._ids = itertools.count(1)
        self._changed = asyncio.Event()

    def _record(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))
        if self.fail_with is not None:
            raise self.fail_with

    def _queue(self, name: str) -> Queue:
        q = self.queues.get(name)
        if q is None:
            raise NotFound("queue_not_found", f"no queue {name!r}", queue=name)
        return q

    def _group(self, queue: str, group: str) -> Group:
        g = self._queue(queue).groups.get(group)
        if g is None:
            raise NotFound("group_not_found", f"no group {group!r} on queue {queue!r}")
        return g

    def _member(self, queue: str, group: str, consumer_id: str) -> Group:
        g = self._group(queue, group)
        if consumer_id not in g.members:
            raise NotFound("consumer_not_found", f"no consumer {consumer_id!r} in group {group!r}")
        return g

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    async def ready(self) -> bool:
        return self.started and self.is_ready

    async def put_queue(self, name: str, config: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        self._record("put_queue", name, config)
        q = self.queues.get(name)
        if q is None:
            q = self.queues[name] = Queue(name, {**DEFAULTS, **config})
            return q.info(), True
        if config.get("virtual_partitions", q.config["virtual_partitions"]) < q.config["virtual_partitions"]:
            raise Conflict("virtual_partitions_shrink", "virtual_partitions may only grow")
        q.config.update(config)
        return q.info(), False

    async def get_queue(self, name: str) -> dict[str, Any]:
        self._record("get_queue", name)
        return self._queue(name).info()

    async def list_queues(self) -> list[dict[str, Any]]:
        self._record("list_queues")
        return [self.queues[n].info() for n in sorted(self.queues)]

    async def delete_queue(self, name: str) -> None:
        self._record("delete_queue", name)
        self._queue(name)
        del self.queues[name]

    async def produce(self, queue: str, batch: OutgoingBatch) -> list[dict[str, Any]]:
        messages = list(batch.messages())
        self._record("produce", queue, messages)
        q = self._queue(queue)
        limit = q.config["max_message_bytes"]
        over = batch.first_over(limit)
        if over is not None:
            i, size = over
            raise PayloadTooLarge("message_too_large", f"messages[{i}] is {size} bytes, over {limit}", index=i)
        v = q.config["virtual_partitions"]
        results = []
        for m in messages:
            vp = (mmh3.hash(m.key, signed=False) if m.key is not None else next(self._ids)) % v
            pp = vp % PARTITIONS
            stored = Stored(self._offsets[pp], pp, vp, m, int(time.time() * 1000))
            self._offsets[pp] += 1
            q.log.append(stored)
            q.bytes_total += len(m.value)
            results.append({"id": stored.id, "partition": pp, "offset": stored.offset, "virtual_partition": vp})
        self._changed.set()
        return results

    async def join(self, queue: str, group: str, spec: JoinSpec) -> dict[str, Any]:
        self._record("join", queue, group, spec)
        q = self._queue(queue)
        g = q.groups.get(group)
        if g is None:
            start = 0 if spec.start == "earliest" else len(q.log)
            g = q.groups[group] = Group(start=start, next_index=start)
        cid = spec.consumer_id or f"c-{next(self._ids)}"
        g.members[cid] = JoinSpec(cid, spec.context, spec.start)
        return {"consumer_id": cid, "session_timeout_ms": 10000}

    def _take(self, q: Queue, g: Group, cid: str, limit: int) -> list[dict[str, Any]]:
        """Redeliveries first, then new messages; messages of other envs wait for their own."""
        env = g.members[cid].context.env
        out: list[dict[str, Any]] = []

        def deliver(index: int) -> None:
            stored = q.log[index]
            g.deliveries[index] = g.deliveries.get(index, 0) + 1
            g.in_flight[stored.id] = (cid, index)
            out.append(self._render(q.name, stored, g.deliveries[index]))

        waiting, g.redeliver = g.redeliver, []
        for index in waiting:
            if len(out) < limit and q.log[index].message.context.env == env:
                deliver(index)
            else:
                g.redeliver.append(index)
        while len(out) < limit and g.next_index < len(q.log):
            index = g.next_index
            g.next_index += 1
            if q.log[index].message.context.env == env:
                deliver(index)
            else:
                g.redeliver.append(index)
        return out

    @staticmethod
    def _render(queue: str, s: Stored, count: int) -> dict[str, Any]:
        m = s.message
        out: dict[str, Any] = {"id": s.id, "queue": queue, "key": m.key}
        if m.value_is_json:
            out["value"] = orjson.loads(m.value)
        else:
            out["value_b64"] = base64.b64encode(m.value).decode()
        out.update(
            headers=m.headers,
            **m.context.to_dict(),
            partition=s.partition,
            offset=s.offset,
            virtual_partition=s.vp,
            timestamp_ms=s.timestamp_ms,
            delivery_count=count,
        )
        return out

    async def poll(self, queue: str, group: str, consumer_id: str, max_messages: int, wait_ms: int) -> list[dict[str, Any]]:
        self._record("poll", queue, group, consumer_id, max_messages, wait_ms)
        q = self._queue(queue)
        g = self._member(queue, group, consumer_id)
        out = self._take(q, g, consumer_id, max_messages)
        if not out and wait_ms > 0:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), wait_ms / 1000)
            except TimeoutError:
                return []
            out = self._take(q, g, consumer_id, max_messages)
        return out

    def _settle(self, queue: str, group: str, consumer_id: str, ids: list[str]) -> tuple[Group, list[int]]:
        g = self._member(queue, group, consumer_id)
        done = []
        for one in ids:
            owner = g.in_flight.get(one)
            if owner is not None and owner[0] == consumer_id:
                del g.in_flight[one]
                done.append(owner[1])
        return g, done

    async def ack(self, queue: str, group: str, consumer_id: str, ids: list[str]) -> int:
        self._record("ack", queue, group, consumer_id, ids)
        g, done = self._settle(queue, group, consumer_id, ids)
        g.acked.update(done)
        return len(done)

    async def nack(self, queue: str, group: str, consumer_id: str, ids: list[str], delay_ms: int) -> int:
        self._record("nack", queue, group, consumer_id, ids, delay_ms)
        g, done = self._settle(queue, group, consumer_id, ids)
        g.redeliver.extend(done)
        return len(done)

    async def leave(self, queue: str, group: str, consumer_id: str) -> None:
        self._record("leave", queue, group, consumer_id)
        g = self._member(queue, group, consumer_id)
        del g.members[consumer_id]
        for mid, (owner, index) in list(g.in_flight.items()):
            if owner == consumer_id:
                del g.in_flight[mid]
                g.redeliver.append(index)

    async def group_info(self, queue: str, group: str) -> dict[str, Any]:
        self._record("group_info", queue, group)
        q = self._queue(queue)
        g = self._group(queue, group)
        pending = [s for i, s in enumerate(q.log) if i >= g.start and i not in g.acked]
        lag: dict[str, Any] = {"total": len(pending), "by_lane": {}, "by_env": {}, "by_set": {}}
        for s in pending:
            c = s.message.context
            for name, value in (("by_lane", c.lane), ("by_env", c.env), ("by_set", c.set)):
                lag[name][value] = lag[name].get(value, 0) + 1
        members = [
            {
                **spec.context.to_dict(),
                "consumer_id": cid,
                "virtual_partitions": list(range(q.config["virtual_partitions"])),
                "in_flight": sum(1 for owner, _ in g.in_flight.values() if owner == cid),
            }
            for cid, spec in g.members.items()
        ]
        return {"queue": queue, "group": group, "members": members, "lag": lag}

    async def cluster(self) -> dict[str, Any]:
        self._record("cluster")
        return {
            "write_nodes": [{"id": "w1", "address": "memory"}],
            "read_nodes": [{"id": "r1", "address": "memory"}],
            "physical_partitions": [
                {"id": pp, "owner": "w1", "end_offset": self._offsets[pp], "bytes": 0} for pp in range(PARTITIONS)
            ],
            "epoch": 1,
        }

    async def current_map(self) -> dict[str, Any]:
        self._record("current_map")
        return {
            "epoch": 1,
            "queues": {n: {"virtual_partitions": q.config["virtual_partitions"], "placement": q.info()["placement"]} for n, q in self.queues.items()},
        }

    async def metrics_text(self) -> str:
        return self.extra_metrics
