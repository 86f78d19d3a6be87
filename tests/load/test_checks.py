"""The loss / duplicate / per-key order checker on synthetic delivery sequences."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.load.checks import DeliveryChecker


def _expect(checker: DeliveryChecker, per_key: dict[str, int]) -> None:
    for key, n in per_key.items():
        for seq in range(n):
            checker.expect(key, seq)


def test_perfect_run_is_ok() -> None:
    c = DeliveryChecker()
    _expect(c, {"a": 3, "b": 2})
    for key, seq in [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2)]:
        assert c.observe(key, seq)
    r = c.report()
    assert (r.expected, r.delivered, r.distinct, r.lost, r.duplicates, r.reordered, r.unexpected) == (5, 5, 5, 0, 0, 0, 0)
    assert r.ok and r.to_json()["ok"] is True


def test_loss_duplicates_reorder_and_unexpected_are_counted() -> None:
    c = DeliveryChecker()
    _expect(c, {"a": 4})
    assert c.observe("a", 0)
    assert c.observe("a", 2)
    assert c.observe("a", 1)  # later message of "a" was already delivered
    assert not c.observe("a", 2)  # redelivery
    assert c.observe("z", 0)  # never acknowledged
    r = c.report()
    assert r.lost == 1  # seq 3
    assert r.duplicates == 1
    assert r.reordered == 1
    assert r.unexpected == 1
    assert r.delivered == 5 and r.distinct == 4
    assert not r.ok


def test_reordering_is_only_an_error_when_order_is_required() -> None:
    c = DeliveryChecker(order_required=False)
    _expect(c, {"a": 2})
    c.observe("a", 1)
    c.observe("a", 0)
    r = c.report()
    assert r.reordered == 1 and r.ok


def test_expect_after_observe_counts_as_seen() -> None:
    c = DeliveryChecker()
    c.observe("a", 0)  # the consumer can be faster than the producer's acknowledgement
    assert c.expected_seen == 0
    c.expect("a", 0)
    c.expect("a", 0)  # idempotent
    assert c.expected_seen == 1 and c.expected_count == 1
    assert c.report().lost == 0 and c.report().unexpected == 0


def test_a_duplicate_after_a_later_message_is_a_duplicate_not_a_reorder() -> None:
    c = DeliveryChecker()
    _expect(c, {"a": 2})
    c.observe("a", 0)
    c.observe("a", 1)
    c.observe("a", 0)  # at-least-once redelivery of an old message
    r = c.report()
    assert r.duplicates == 1 and r.reordered == 0


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from("abcdef"), st.integers(1, 12), min_size=1), st.randoms(use_true_random=False))
def test_any_interleaving_that_keeps_each_key_in_order_passes(per_key: dict[str, int], rnd: random.Random) -> None:
    queues = {k: list(range(n)) for k, n in per_key.items()}
    c = DeliveryChecker()
    _expect(c, per_key)
    while queues:
        key = rnd.choice(sorted(queues))
        c.observe(key, queues[key].pop(0))
        if not queues[key]:
            del queues[key]
    r = c.report()
    assert r.ok and r.reordered == 0 and r.lost == 0


@settings(max_examples=100, deadline=None)
@given(st.permutations(list(range(10))))
def test_reorders_equal_deliveries_below_the_running_maximum(order: list[int]) -> None:
    c = DeliveryChecker()
    _expect(c, {"k": 10})
    for seq in order:
        c.observe("k", seq)
    top, below = -1, 0
    for seq in order:
        if seq < top:
            below += 1
        top = max(top, seq)
    assert c.report().reordered == below
    assert c.report().ok == (below == 0)


def test_count_reports_name_loss_and_surplus_and_merge_by_summing() -> None:
    from vpq.load.checks import count_report, merge

    assert count_report(10, 10).ok
    short, extra = count_report(10, 7), count_report(5, 6)
    assert (short.lost, short.unexpected, short.ok) == (3, 0, False)
    assert (extra.lost, extra.unexpected, extra.ok) == (0, 1, False)
    total = merge([short, extra, count_report(4, 4)])
    assert (total.expected, total.delivered, total.lost, total.unexpected) == (19, 17, 3, 1)
    assert merge([]).ok
