"""AckTracker and PartitionAckState: done/not-done per offset, against a plain model."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.read_nodes.ack_tracker import AckTracker, PartitionAckState


def test_state_validation() -> None:
    PartitionAckState(10, (1, 5), (10, 12))
    for bad in [
        lambda: PartitionAckState(-1),
        lambda: PartitionAckState(10, (5, 1)),
        lambda: PartitionAckState(10, (10,)),
        lambda: PartitionAckState(10, (), (9,)),
        lambda: PartitionAckState(10, (), (12, 12)),
    ]:
        with pytest.raises(ValueError):
            bad()
    with pytest.raises(ValueError, match="malformed"):
        PartitionAckState.from_json({"pending_below": []})


def test_low_watermark_and_is_done() -> None:
    st_ = PartitionAckState(10, (3, 7), (12,))
    assert st_.low_watermark == 3
    assert [o for o in range(15) if st_.is_done(o)] == [0, 1, 2, 4, 5, 6, 8, 9, 12]
    assert PartitionAckState.from_pair(4, [6]).low_watermark == 4
    assert PartitionAckState.from_json(st_.to_json()) == st_


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32), st.integers(20, 120))
def test_tracker_matches_model_and_restores(seed: int, n: int) -> None:
    """Random ingest (partly ahead of the scan position), acks and scan advances:
    the persisted state says exactly which offsets are done, and a restored
    tracker agrees on every offset."""
    rng = random.Random(seed)
    t = AckTracker()
    offsets = sorted(rng.sample(range(3 * n), n))
    done: set[int] = set()
    tracked: list[int] = []
    scanned = 0
    i = 0
    while i < len(offsets):
        # ingest a few, sometimes one from further ahead first (held-back lineage)
        batch = offsets[i : i + rng.randint(1, 4)]
        i += len(batch)
        for o in batch:
            assert not t.is_done(0, o)
            t.track(0, o)
            tracked.append(o)
        if rng.random() < 0.5:
            scanned = max(scanned, batch[-1] + 1 - rng.randint(0, 3))
            t.mark_scanned(0, scanned)
        for o in list(tracked):
            if rng.random() < 0.3:
                t.done(0, o)
                done.add(o)
                tracked.remove(o)
    state = t.state()[0]
    # built unchecked from the tracker: the validating constructor accepts it as is
    assert PartitionAckState(state.scanned_to, state.pending_below, state.acked_above) == state
    assert isinstance(state.pending_below, tuple) and isinstance(state.acked_above, tuple)
    assert state.scanned_to == scanned
    assert state.low_watermark == min([scanned] + tracked)
    assert len(state.pending_below) + len(state.acked_above) <= len(offsets)
    for o in offsets:
        assert state.is_done(o) == (o in done), o
        assert t.is_done(0, o) == (o in done)
    lw, above = t.pair_state()[0]
    assert lw == state.low_watermark and above == sorted(o for o in done if o >= lw)
    assert t.window(0) == len(above) + len(tracked)
    p = AckTracker()
    p.restore({0: (lw, above)})
    for o in offsets:
        assert p.is_done(0, o) == (o in done or o < lw)
    r = AckTracker()
    r.restore({0: state})
    assert r.state() == {0: state}
    for o in offsets:
        assert r.is_done(0, o) == (o in done)
        assert r.is_tracked(0, o) == (o not in done and o < scanned)
    assert t.outstanding() == len(tracked)


def test_restore_needs_empty_and_validates() -> None:
    t = AckTracker()
    t.track(0, 1)
    with pytest.raises(ValueError, match="empty"):
        t.restore({})
    with pytest.raises(ValueError):
        AckTracker().restore({0: (1, 2, 3)})  # type: ignore[dict-item]
    with pytest.raises(ValueError):
        AckTracker().restore({-1: PartitionAckState(0)})


def test_restore_accepts_objects_with_the_two_attributes() -> None:
    from types import SimpleNamespace

    t = AckTracker()
    t.restore({3: SimpleNamespace(low_watermark=5, acked_above=[9, 7, 7, 2])})
    assert t.pair_state() == {3: (5, [7, 9])}
    assert [o for o in range(11) if t.is_done(3, o)] == [0, 1, 2, 3, 4, 7, 9]
    assert t.is_hole(3, 8) and not t.is_hole(3, 10)
    with pytest.raises(ValueError, match="not an ack state"):
        AckTracker().restore({0: object()})


def test_watermark_never_regresses_on_new_ingest() -> None:
    t = AckTracker()
    t.track(0, 4)
    t.done(0, 4)
    t.mark_scanned(0, 5)
    assert t.pair_state() == {0: (5, [])}
    t.track(0, 7)  # ingested later: the watermark stays
    assert t.pair_state() == {0: (5, [])}
    with pytest.raises(ValueError, match="already done"):
        t.track(0, 4)


def test_stuck_message_keeps_state_small() -> None:
    """One unacked old message and many acks after it: the state stays tiny."""
    t = AckTracker()
    for o in range(1000):
        t.track(0, o)
        if o:
            t.done(0, o)
    t.mark_scanned(0, 1000)
    assert t.state()[0] == PartitionAckState(1000, (0,), ())
    assert t.low_watermark(0) == 0
    assert t.window(0) == 1000  # while the pair form lists every later ack
