"""Assignment of vps to consumers per isolation context: completeness, balance,
minimal (sticky) movement, exact join/leave bounds, determinism, automatic split."""

from __future__ import annotations

import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.isolation.context import IsolationContext
from vpq.virtual_partitions.assignment import AssignmentResult, assign, required_vps

CONTEXTS = [IsolationContext(), IsolationContext(lane="feat-a"), IsolationContext(env="test", set="eu")]


def check_complete_and_even(res: AssignmentResult, consumers: dict[str, IsolationContext]) -> None:
    v = res.virtual_partitions
    live_contexts = set(consumers.values())
    assert set(res.owners) == live_contexts
    for ctx, members in res.owners.items():
        assert set(members) == {c for c, x in consumers.items() if x == ctx}
        owned = [vp for vps in members.values() for vp in vps]
        assert sorted(owned) == list(range(v)), "every vp owned exactly once"
        sizes = [len(vps) for vps in members.values()]
        assert max(sizes) - min(sizes) <= 1, "even"
        for vp in range(v):
            assert vp in members[res.owner_of(ctx, vp)]


def optimal_moved(prev: AssignmentResult | None, res: AssignmentResult, consumers: dict[str, IsolationContext]) -> int:
    """The fewest moves any even assignment at res's V could make, computed independently."""
    total = 0
    v = res.virtual_partitions
    for ctx, members in res.owners.items():
        n = len(members)
        base, extra = divmod(v, n)
        held = dict.fromkeys(members, 0)
        if prev is not None and ctx in prev.owners:
            pv = prev.virtual_partitions
            for vp in range(v):
                o = prev.owner_of(ctx, vp % pv)
                if o in held:
                    held[o] += 1
        kept = sum(min(h, base) for h in held.values()) + min(extra, sum(1 for h in held.values() if h > base))
        total += v - kept
    return total


consumer_maps = st.dictionaries(
    st.from_regex(r"c[0-9]{1,3}", fullmatch=True), st.sampled_from(CONTEXTS), min_size=1, max_size=40
)
log_vs = st.integers(0, 6)


@settings(max_examples=150, deadline=None)
@given(consumer_maps, log_vs)
def test_fresh_assignment_complete_even(consumers: dict[str, IsolationContext], log_v: int) -> None:
    res = assign(consumers, 1 << log_v, max_vps=4096)
    check_complete_and_even(res, consumers)
    assert res.virtual_partitions >= max(sum(1 for x in consumers.values() if x == c) for c in consumers.values())
    assert res.moved == res.virtual_partitions * len(res.owners)


@settings(max_examples=150, deadline=None)
@given(consumer_maps, consumer_maps, log_vs)
def test_reassignment_moves_the_minimum(
    before: dict[str, IsolationContext], after: dict[str, IsolationContext], log_v: int
) -> None:
    prev = assign(before, 1 << log_v)
    res = assign(after, 1 << log_v, previous=prev)
    check_complete_and_even(res, after)
    assert res.moved == optimal_moved(prev, res, after)


@settings(max_examples=150, deadline=None)
@given(consumer_maps, st.integers(2, 7), st.sampled_from(CONTEXTS))
def test_join_moves_only_to_the_joiner(consumers: dict[str, IsolationContext], log_v: int, ctx: IsolationContext) -> None:
    # no split here (covered by test_automatic_split_sticks_to_ancestors): with n >= V
    # the joiner gets nothing and nothing moves, which the bound below also covers
    v = 1 << log_v
    prev = assign(consumers, v, auto_split=False)
    n = sum(1 for x in consumers.values() if x == ctx)
    joined = {**consumers, "joiner": ctx}
    res = assign(joined, v, previous=prev, auto_split=False)
    check_complete_and_even(res, joined)
    new_vps = res.owners[ctx]["joiner"]
    assert res.moved == len(new_vps) <= math.ceil(v / (n + 1))
    assert len(new_vps) >= v // (n + 1)
    for c, x in consumers.items():
        assert set(res.owners[x][c]) <= set(prev.owners[x][c]), "nobody but the joiner gains a vp"
    for other in prev.owners:
        if other != ctx:
            assert res.owners[other] == prev.owners[other]


@settings(max_examples=150, deadline=None)
@given(consumer_maps, st.integers(0, 7), st.data())
def test_leave_moves_only_the_leavers_vps(consumers: dict[str, IsolationContext], log_v: int, data: st.DataObject) -> None:
    v = 1 << log_v
    prev = assign(consumers, v, auto_split=False)
    leaver = data.draw(st.sampled_from(sorted(consumers)))
    ctx = consumers[leaver]
    n = sum(1 for x in consumers.values() if x == ctx)
    left = {c: x for c, x in consumers.items() if c != leaver}
    res = assign(left, v, previous=prev, auto_split=False)
    check_complete_and_even(res, left)
    if n == 1:
        assert ctx not in res.owners and res.moved == 0  # nothing to move: the context is gone
        return
    assert res.moved == len(prev.owners[ctx][leaver]) <= math.ceil(v / n)
    for c, x in left.items():
        assert set(prev.owners[x][c]) <= set(res.owners[x][c]), "survivors keep all their vps"


@settings(max_examples=100, deadline=None)
@given(consumer_maps, consumer_maps, log_vs, st.randoms(use_true_random=False))
def test_deterministic_whatever_the_input_order(
    before: dict[str, IsolationContext], after: dict[str, IsolationContext], log_v: int, rnd: random.Random
) -> None:
    prev = assign(before, 1 << log_v)
    res = assign(after, 1 << log_v, previous=prev)
    items = list(after.items())
    rnd.shuffle(items)
    prev_items = list(before.items())
    rnd.shuffle(prev_items)
    prev2 = assign(dict(prev_items), 1 << log_v)
    assert prev2 == prev
    assert assign(dict(items), 1 << log_v, previous=prev2) == res


def test_required_vps() -> None:
    assert required_vps(16, 5) == 16
    assert required_vps(16, 16) == 16
    assert required_vps(16, 17) == 32
    assert required_vps(16, 1000) == 1024
    assert required_vps(16, 5000, max_vps=4096) == 4096
    assert required_vps(8192, 10000, max_vps=4096) == 8192  # never shrinks
    assert required_vps(4, 0) == 4
    with pytest.raises(ValueError, match="power of two"):
        required_vps(12, 1)
    with pytest.raises(ValueError, match="max_vps"):
        required_vps(16, 1, max_vps=100)
    with pytest.raises(ValueError):
        required_vps(16, -1)


def test_automatic_split_sticks_to_ancestors() -> None:
    ctx = IsolationContext()
    prev = assign({"a": ctx, "b": ctx}, 4)
    assert prev.owners[ctx] == {"a": (0, 1), "b": (2, 3)}
    consumers = {c: ctx for c in "abcde"}
    res = assign(consumers, 4, previous=prev)
    assert res.grew and res.grew_from == 4 and res.virtual_partitions == 8
    check_complete_and_even(res, consumers)
    for c in "ab":
        assert all(vp % 4 in prev.owners[ctx][c] for vp in res.owners[ctx][c])
        assert len(res.owners[ctx][c]) == 2
    # a and b each held 4 of the 8 after the split and keep 2: 4 vps moved to c, d, e
    assert res.moved == 4 == optimal_moved(prev, res, consumers)


def test_split_uses_the_largest_context() -> None:
    consumers = {f"p{i}": CONTEXTS[0] for i in range(3)} | {f"l{i}": CONTEXTS[1] for i in range(9)}
    res = assign(consumers, 4)
    assert res.virtual_partitions == 16
    check_complete_and_even(res, consumers)
    assert not assign(consumers, 4, auto_split=False).grew


def test_previous_with_larger_v_wins() -> None:
    ctx = IsolationContext()
    prev = assign({f"c{i}": ctx for i in range(20)}, 4)
    assert prev.virtual_partitions == 32
    res = assign({"c1": ctx}, 4, previous=prev)
    assert res.virtual_partitions == 32 and res.owners[ctx]["c1"] == tuple(range(32))
    assert not res.grew


def test_beyond_the_cap_surplus_consumers_idle() -> None:
    ctx = IsolationContext()
    consumers = {f"c{i:02d}": ctx for i in range(6)}
    res = assign(consumers, 2, max_vps=4)
    assert res.virtual_partitions == 4
    sizes = sorted(len(v) for v in res.owners[ctx].values())
    assert sizes == [0, 0, 1, 1, 1, 1]
    check_complete_and_even(res, consumers)
    # sticky even when idle consumers exist: a newcomer does not steal
    res2 = assign({**consumers, "z": ctx}, 4, previous=res, max_vps=4)
    assert res2.moved == 0 and res2.owners[ctx]["z"] == ()


def test_no_consumers() -> None:
    res = assign({}, 16)
    assert res.virtual_partitions == 16 and dict(res.owners) == {} and res.moved == 0
    assert res.owner_of(IsolationContext(), 3) is None
    assert res.owner_table(IsolationContext()) == (None,) * 16


def test_lookups_and_round_trip() -> None:
    consumers = {"a": CONTEXTS[0], "b": CONTEXTS[0], "x": CONTEXTS[1]}
    res = assign(consumers, 4)
    assert res.vps_of("a") == (0, 1) and res.vps_of("x") == (0, 1, 2, 3) and res.vps_of("nobody") == ()
    assert res.owner_table(CONTEXTS[0]) == ("a", "a", "b", "b")
    d = json.loads(json.dumps(res.to_dict(IsolationContext.token)))
    assert AssignmentResult.from_dict(d, IsolationContext.from_token) == res
    with pytest.raises(ValueError, match="malformed"):
        AssignmentResult.from_dict({"contexts": []}, IsolationContext.from_token)


def test_result_validation_and_immutability() -> None:
    with pytest.raises(ValueError, match="owned by both"):
        AssignmentResult(4, {"ctx": {"a": (0, 1), "b": (1, 2)}})
    with pytest.raises(ValueError, match="out of range"):
        AssignmentResult(4, {"ctx": {"a": (4,)}})
    res = assign({"a": "ctx"}, 2)
    with pytest.raises(AttributeError):
        res.moved = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        res.owners["other"] = {}  # type: ignore[index]
    with pytest.raises(ValueError, match="consumer id"):
        assign({"": "ctx"}, 2)


def test_large_join_moves_about_v_over_n() -> None:
    ctx = IsolationContext()
    consumers = {f"c{i:04d}": ctx for i in range(1000)}
    prev = assign(consumers, 4096)
    res = assign({**consumers, "new": ctx}, 4096, previous=prev)
    assert res.moved == len(res.owners[ctx]["new"]) == 4
    res2 = assign({c: x for c, x in consumers.items() if c != "c0500"}, 4096, previous=prev)
    assert res2.moved == len(prev.owners[ctx]["c0500"])
