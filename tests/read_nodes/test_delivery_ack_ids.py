"""Acks are matched by the ids a consumer was handed (``GroupDelivery.ack_ids``); an
ack with an id it was not handed is decoded and validated as a whole, as before."""

from __future__ import annotations

import pytest

from vpq.codec.message_id import MessageIdError
from vpq.isolation.context import IsolationContext
from vpq.read_nodes.delivery import GroupDelivery
from vpq.read_nodes.delivery_types import DeliveryConfig, DeliveryEntry
from vpq.virtual_partitions.hashing import key_hash

PROD = IsolationContext()


def _group(n: int, keys: int = 3) -> GroupDelivery:
    g = GroupDelivery(DeliveryConfig(virtual_partitions=4, visibility_timeout_ms=1000, max_acked_above=None))
    g.join("a", PROD, range(4), 0)
    g.join("b", PROD, (), 0)
    for i in range(n):
        key = b"k%d" % (i % keys)
        g.ingest(DeliveryEntry(0, i, key_hash(key), key, PROD, 5000 + i))
    g.mark_scanned(0, n)
    return g


def test_an_ack_by_ids_finishes_them_and_persists_nothing_twice() -> None:
    g = _group(9)
    got = g.poll("a", 9, 0)
    noted: list[tuple[int, int]] = []
    assert g.ack_ids("a", [d.message_id for d in got], lambda s, o: noted.append((s, o))) == 9
    assert g.inflight_count("a") == 0 and g.lag().total == 0
    assert noted == [(0, 8)]
    assert g.compact_ack_state()[0].pending_below == ()


def test_repeats_and_stale_ids_are_ignored_and_malformed_ones_change_nothing() -> None:
    g = _group(6)
    got = g.poll("a", 6, 0)
    mids = [d.message_id for d in got]
    assert g.ack_ids("a", [mids[0], mids[0]]) == 1
    assert g.ack_ids("a", [mids[0], mids[1]]) == 1  # the first is no longer in flight: the checked path
    with pytest.raises(MessageIdError, match="index 1"):
        g.ack_ids("a", [mids[2], "0-07", mids[3]])  # a non-canonical id is never one handed out
    with pytest.raises(MessageIdError):
        g.ack_ids("a", [mids[2], ["0-1"]])  # type: ignore[list-item]  # unhashable
    with pytest.raises(MessageIdError):
        g.ack_ids("a", mids[2])  # type: ignore[arg-type]  # a string, not a list of them
    assert g.inflight_count("a") == 4
    assert g.ack_ids("b", mids[2:]) == 0  # not in flight to b
    assert g.ack_ids("a", tuple(mids[2:])) == 4
    assert g.inflight_count("a") == 0 and g.lag().total == 0


def test_a_timed_out_message_is_acked_only_once_delivered_again() -> None:
    g = _group(1)
    (d,) = g.poll("a", 1, 0)
    g.expire(1000)  # back to ready: a's delivery is void
    assert g.ack_ids("a", [d.message_id]) == 0
    (again,) = g.poll("a", 1, 1000)
    assert again.message_id == d.message_id and again.delivery_count == 2
    assert g.ack_ids("a", [again.message_id]) == 1
