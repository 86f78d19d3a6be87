"""``read_nodes.bulk_offer`` and ``read_nodes.bulk_deliver``: the ingest scan with its C
bulk path does exactly what the scan does record by record, and a poll that hands its
messages over in one C call exactly what ``GroupDelivery._deliver`` does. The same random history (records of several keys and
contexts, some not cached, some with headers or expired; steps, polls, acks, nacks,
joins, leaves, timeouts, tight read-ahead and ``max_unacked`` bounds, plain and lineage
order, re-reads from the low watermark) runs twice, with and without the C call; after every step the whole
delivery state (timers and each consumer's messages in flight included), the tracker,
the ingestor's cursors and parked keys, the cache's counts and every poll's answer are
the same."""

from __future__ import annotations

import asyncio
import random
from heapq import heappush
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.needs import missing
from tests.read_nodes.test_service_parts import R
from tests.read_nodes.test_service_parts import _Pool as _PartsPool
from vpq.codec.records import Record
from vpq.codec.system_headers import DEDUP, PRIORITY
from vpq.isolation.context import IsolationContext
from vpq.read_nodes import bulk_deliver, bulk_offer, ingestor
from vpq.read_nodes import delivery as delivery_module
from vpq.read_nodes.delivery import GroupDelivery
from vpq.read_nodes.delivery_types import DeliveryConfig
from vpq.read_nodes.ingestor import Ingestor
from vpq.read_nodes.lineage_order import LineageOrder
from vpq.read_nodes.messages import TailedRecord, record_size, tailed_record
from vpq.read_nodes.record_cache import RecordCache
from vpq.read_nodes.tailer import pack_ref

QUEUE = 7
CONTEXTS = {1: IsolationContext(), 2: IsolationContext("test"), 3: IsolationContext("prod", "", "feat")}
KEYS = [b"a", b"b", b"c", b"d", None]


class _CachedSource:
    """A record source with a real ``RecordCache``, as the read node's."""

    def __init__(self) -> None:
        self.cache: RecordCache[tuple[int, int], TailedRecord] = RecordCache(1 << 30)
        self.log: dict[tuple[int, int], TailedRecord] = {}

    def context(self, context_id: int) -> IsolationContext | None:
        return CONTEXTS.get(context_id)

    def cached(self, pp: int, offset: int) -> TailedRecord | None:
        return self.cache.get((pp, offset))

    async def get(self, pp: int, offset: int) -> TailedRecord | None:
        return self.log.get((pp, offset))


class _Pool(_PartsPool):
    def __init__(self) -> None:
        super().__init__([0])
        self.source = _CachedSource()  # type: ignore[assignment]


def _history(seed: int) -> tuple[dict[str, Any], list[tuple]]:
    rnd = random.Random(seed)
    cfg = {
        "key_read_ahead": rnd.choice([1, 2, 3, 50]),
        "blocked_read_ahead": rnd.choice([2, 5, 1000]),
        "max_unacked": rnd.choice([2, 4, 8, 1000]),
        "max_deliveries": rnd.choice([2, 5]),
        "lineage": rnd.choice(["plain", "plain", "own", "other"]),
        "cutoff": rnd.choice([None, None, 50]),
    }
    ops: list[tuple] = []
    offset = 0
    for _ in range(rnd.randint(5, 30)):
        kind = rnd.choices(["add", "step", "poll", "ack", "nack", "join", "leave", "time", "rewind"],
                           [5, 4, 3, 3, 1, 1, 1, 1, 1])[0]
        if kind == "add":
            n = rnd.randint(1, 40)
            recs = []
            for _ in range(n):
                key = rnd.choice(KEYS)
                headers: tuple = rnd.choice([(), (), ((DEDUP, b"id1"),), (("trace", b"x"),), ((PRIORITY, b"3"),)])
                recs.append((offset, key, rnd.choice([1, 1, 1, 2, 3]), headers, rnd.choice([10, 100, 100, 0, None]),
                             rnd.random() < 0.85))
                offset += 1
            ops.append(("add", recs))
        elif kind == "poll":
            ops.append(("poll", rnd.choice(["c1", "c2"]), rnd.choice([1, 3, 10, 500])))
        elif kind in ("ack", "nack"):
            ops.append((kind, rnd.choice(["c1", "c2"]), rnd.random()))
        elif kind == "join":
            ops.append(("join", rnd.choice(["c1", "c2"]), rnd.choice([1, 2, 3])))
        elif kind == "leave":
            ops.append(("leave", rnd.choice(["c1", "c2"])))
        elif kind == "rewind":
            ops.append(("rewind",))
        elif kind == "time":
            ops.append(("time", rnd.choice([1_000, 40_000])))
        else:
            ops.append(("step",))
    ops.append(("step",))
    return cfg, ops


def _key_hash(key: bytes | None) -> int:
    return 0 if key is None else (key[0] * 2654435761) & 0xFFFFFFFF


def _snapshot(d: GroupDelivery, ing: Ingestor, cache: RecordCache) -> dict[str, Any]:
    msgs = {
        pos: (m.seq, m.pp, m.offset, m.key_hash, m.key, m.ctx, m.timestamp_ms, m.ctx_id, m.priority, m.stream, m.pos,
              None if m.chain is None else m.chain.key, m.state, m.holder, m.count, m.due, m.pos == pos,
              None if m.timer is None else (m.timer.due, m.timer.live))
        for pos, m in d._msgs.items()
    }
    chains = {k: ([m.pos for m in c.pending], [m.pos for m in c.run], c.counted, c.parked_key, c.key)
              for k, c in d._chains.items()}
    ready = {k: [(p, s, m.pos) for p, s, m in heap] for k, heap in d._ready._heaps.items()}
    parts = {s: (p.scanned, sorted(p.unfinished._live), list(p.unfinished._heap), list(p.done))
             for s, p in d._tracker._parts.items()}
    return {
        "msgs": msgs, "order": list(d._msgs), "chains": chains, "chain_order": list(d._chains), "ready": ready,
        "ints": (d._seq, d._blocked, d._inflight, d._unroutable_held, d._unroutable, len(d._ready)),
        "counts": dict(d._ctx_count), "parked": dict(d._parked), "parts": parts, "cursors": dict(ing.cursors),
        "ingestor_parked": sorted(ing.parked._keys), "cache": cache.stats(), "expired": ing.expired,
        "timers": [(due, seq, t.due, t.live, None if t.msgs is None else [m.pos for m in t.msgs])
                   for due, seq, t in d._timers],
        "inflight": {cid: [(mid, m.pos) for mid, m in c.inflight.items()] for cid, c in d._consumers.items()},
        "by_ctx": (dict(d._inflight_by_ctx), d._timer_seq),
    }


async def _run(cfg: dict[str, Any], ops: list[tuple]) -> list[Any]:
    pool = _Pool()
    delivery = GroupDelivery(DeliveryConfig(
        virtual_partitions=4, max_unacked=cfg["max_unacked"], key_read_ahead=cfg["key_read_ahead"],
        blocked_read_ahead=cfg["blocked_read_ahead"], max_deliveries=cfg["max_deliveries"],
        visibility_timeout_ms=30_000, max_acked_above=None,
    ))
    ing = Ingestor(QUEUE, delivery, pool, "g", lambda pp: None)  # type: ignore[arg-type]
    ing.add_pp(0, 0)
    lineage = {"plain": {}, "own": {1: [R(0, 0, None)]}, "other": {1: [R(5, 0, None)]}}[cfg["lineage"]]
    ing.set_lineage(LineageOrder(lineage), 0)
    ing.expire_before = cfg["cutoff"]
    now = 0
    seen: list[Any] = []
    held: dict[str, list[str]] = {"c1": [], "c2": []}
    source = pool.source
    for op in ops:
        if op[0] == "add":
            for offset, key, cid, headers, ts, cached in op[1]:
                kh = _key_hash(key)
                pool.tailers[0].index.add(0, offset, QUEUE, pack_ref(cid, kh), cid)
                rec = Record(value=b"v", queue_id=QUEUE, key=key, key_hash=kh, offset=offset, timestamp_ms=ts,
                             headers=headers, context_id=cid)
                tailed = tailed_record(0, rec, CONTEXTS[cid])
                source.log[(0, offset)] = tailed
                if cached:
                    source.cache.put((0, offset), tailed, record_size(tailed))
        elif op[0] == "step":
            res = await ing.step(now)
            seen.append(("step", res.ingested, res.held, res.nobody, res.blocked))
        elif op[0] == "join":
            if op[1] not in delivery._consumers:
                delivery.join(op[1], CONTEXTS[op[2]], range(4), now)
        elif op[0] == "leave":
            if op[1] in delivery._consumers:
                delivery.leave(op[1], now)
                held[op[1]] = []
        elif op[0] == "poll":
            if op[1] in delivery._consumers:
                got = delivery.poll(op[1], op[2], now)
                held[op[1]] += [g.message_id for g in got]
                seen.append(("poll", got))
        elif op[0] in ("ack", "nack"):
            ids = held[op[1]]
            cut = int(len(ids) * op[2])
            some, held[op[1]] = ids[:cut], ids[cut:]
            if op[1] in delivery._consumers and some:
                if op[0] == "ack":
                    seen.append(("ack", delivery.ack(op[1], some)))
                else:
                    seen.append(("nack", delivery.nack(op[1], some, 0, now)))
        elif op[0] == "rewind":  # read again from the low watermark, as a restarted host does
            for stream, cursor in ing.cursors.items():
                ing.cursors[stream] = min(cursor, delivery.low_watermark(stream) or 0)
        else:
            now += op[1]
        seen.append(_snapshot(delivery, ing, source.cache))
    return seen


PATHS = [(ingestor, "offer_cached", bulk_offer, "_fast_offer"),
         (delivery_module, "deliver_many", bulk_deliver, "_fast_deliver")]


@pytest.mark.parametrize("path", PATHS, ids=["offer", "deliver"])
@settings(max_examples=250, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_the_bulk_path_changes_exactly_what_one_by_one_does(path: tuple, seed: int) -> None:
    user, name, binder, extension = path
    if getattr(binder, name) is None:
        missing(f"the C extension vpq.read_nodes.{extension} is not built")
    cfg, ops = _history(seed)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(user, name, None)
        want = asyncio.run(_run(cfg, ops))
    got = asyncio.run(_run(cfg, ops))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g == w, f"after op {i}: {ops[i] if i < len(ops) else ''}"


def test_the_bulk_path_is_taken() -> None:
    """A catch-up of plain records goes through the C call (not one offer per record)."""
    if bulk_offer.offer_cached is None:
        missing("the C extension vpq.read_nodes._fast_offer is not built")
    calls = []
    real = bulk_offer.offer_cached

    def counting(*args: Any) -> Any:
        out = real(*args)
        calls.append(out[0])
        return out

    ops = [("join", "c1", 1), ("add", [(o, KEYS[o % 4], 1, (), 100, True) for o in range(200)]), ("step",)]
    cfg = {"key_read_ahead": 1000, "blocked_read_ahead": 1000, "max_unacked": 1000, "max_deliveries": 5,
           "lineage": "plain", "cutoff": None}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ingestor, "offer_cached", counting)
        asyncio.run(_run(cfg, ops))
    assert sum(calls) >= 190  # all but the few the scan offers itself (the first of each context)


def test_bind_refuses_a_message_type_it_does_not_know() -> None:
    if bulk_offer.offer_cached is None:
        missing("the C extension vpq.read_nodes._fast_offer is not built")
    from vpq.read_nodes import _fast_offer
    from vpq.read_nodes.delivery_items import WAITING, Chain, Msg

    class Other:
        __slots__ = ("seq", "pp")

    with pytest.raises(TypeError, match="__slots__"):
        _fast_offer.bind(Other, Chain, DEDUP, 0, len)
    _fast_offer.bind(Msg, Chain, DEDUP, WAITING, heappush)  # bound again as at import


def test_deliver_refuses_what_is_not_a_message() -> None:
    if bulk_deliver.deliver_many is None:
        missing("the C extension vpq.read_nodes._fast_deliver is not built")
    with pytest.raises(TypeError, match="Msg"):
        bulk_deliver.deliver_many([object()], "c", {}, 5, 3, None)
