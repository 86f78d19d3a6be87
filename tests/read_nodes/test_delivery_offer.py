"""``GroupDelivery.offer`` decides and holds exactly what ``admit`` followed by
``ingest(entry, admitted=True)`` does, whatever the state: parked keys, full
read-ahead, paused streams, contexts nobody takes, runs in flight, acks and nacks."""

from __future__ import annotations

import random

import pytest

from vpq.isolation.context import IsolationContext
from vpq.read_nodes.delivery import GroupDelivery
from vpq.read_nodes.delivery_types import Admission, DeliveryConfig, DeliveryEntry, stream_of

PROD = IsolationContext()
TEST = IsolationContext(env="test")
CTX_IDS = {PROD: 1, TEST: 2}


def _admit_ingest(g: GroupDelivery, pp: int, offset: int, ctx: IsolationContext, key_hash: int,
                  key: bytes | None, ts: int, priority: int) -> str | bool:
    ctx_id = CTX_IDS[ctx]
    verdict = g.admit(stream_of(pp, ctx_id), offset, ctx, ctx_id, key_hash, key)
    if verdict != Admission.INGEST:
        return verdict
    return g.ingest(DeliveryEntry.trusted(pp, offset, key_hash, key, ctx, ts, ctx_id, priority), True)


def _state(g: GroupDelivery) -> tuple:
    return (g.outstanding(), g.ready_held(), sorted(g._msgs), g.stats(), sorted(g._parked.items()))


@pytest.mark.parametrize("seed", range(12))
def test_offer_is_admit_then_ingest(seed: int) -> None:
    rnd = random.Random(seed)
    cfg = DeliveryConfig(
        virtual_partitions=4, max_unacked=rnd.choice([5, 40, 1000]), key_read_ahead=rnd.choice([2, 6, 1000]),
        blocked_read_ahead=rnd.choice([3, 50]), max_acked_above=rnd.choice([None, 9000]),
        ordering=rnd.choice(["key", "key", "none"]),
    )
    a, b = GroupDelivery(cfg), GroupDelivery(cfg)
    for g in (a, b):
        g.join("c1", PROD, range(4), 0)
        if seed % 3 == 0:
            g.join("c2", TEST, range(4), 0)
    offsets = {0: 0, 1: 0}
    now = 1
    for _step in range(400):
        op = rnd.random()
        if op < 0.6:
            pp = rnd.choice([0, 1])
            offset = offsets[pp]
            ctx = rnd.choice([PROD, PROD, TEST])
            k = rnd.randrange(6)
            key = None if k == 5 else b"k%d" % k
            key_hash = 100 + k if key is not None else rnd.randrange(1 << 32)
            if rnd.random() < 0.05:  # a key parked by the reader
                for g in (a, b):
                    g.park_key(CTX_IDS[ctx], key_hash, stream_of(pp, CTX_IDS[ctx]), offset, offset)
            priority = rnd.randrange(3)
            got = a.offer(pp, offset, ctx, CTX_IDS[ctx], key_hash, key, 1000 + offset, priority)
            want = _admit_ingest(b, pp, offset, ctx, key_hash, key, 1000 + offset, priority)
            assert got == want, (seed, _step)
            if want is not True or rnd.random() < 0.9:
                offsets[pp] += 1  # sometimes a record just held is offered again
        elif op < 0.8:
            n = rnd.randrange(1, 8)
            da, db = a.poll("c1", n, now), b.poll("c1", n, now)
            assert da == db
            settle = [d.message_id for d in da if rnd.random() < 0.8]
            if rnd.random() < 0.8:
                assert a.ack("c1", settle) == b.ack("c1", settle)
            else:
                delay = rnd.choice([0, 5])
                assert a.nack("c1", settle, delay, now) == b.nack("c1", settle, delay, now)
        else:
            now += rnd.choice([1, 10, 40_000])
            assert a.expire(now) == b.expire(now)
        assert _state(a) == _state(b), (seed, _step)
