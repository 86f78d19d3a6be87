"""Model-based tests of GroupDelivery: at-least-once, per-key order across joins,
leaves, timeouts, nacks and failovers, isolation at delivery time (see
``delivery_model.Harness`` for everything checked at each step)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tests.read_nodes.delivery_model import CONTEXTS, Harness


class DeliveryMachine(RuleBasedStateMachine):
    """Random interleavings of every operation; ``teardown`` drains and checks that
    every message ends acked or dead-lettered."""

    @initialize(
        ordering=st.sampled_from(["key", "key", "none"]),
        max_deliveries=st.integers(1, 3),
        form=st.sampled_from(["pair", "compact"]),
        steal=st.booleans(),
        delays=st.booleans(),
    )
    def setup(self, ordering: str, max_deliveries: int, form: str, steal: bool, delays: bool) -> None:
        self.h = Harness(ordering=ordering, max_deliveries=max_deliveries, form=form, steal=steal)
        self.h.delays = delays
        self.rng = random.Random(0)

    def _cid(self, i: int) -> str:
        cids = sorted(self.h.consumers)
        return cids[i % len(cids)]

    @rule(n=st.integers(1, 8), seed=st.integers(0, 2**16))
    def ingest(self, n: int, seed: int) -> None:
        self.h.ingest(random.Random(seed), n)

    @precondition(lambda self: len(self.h.consumers) < 6)
    @rule(ctx=st.sampled_from(CONTEXTS))
    def join(self, ctx) -> None:  # type: ignore[no-untyped-def]
        self.h.join(ctx)

    @precondition(lambda self: self.h.consumers)
    @rule(i=st.integers(0, 100), graceful=st.booleans())
    def leave(self, i: int, graceful: bool) -> None:
        self.h.leave(self._cid(i), graceful)

    @precondition(lambda self: self.h.consumers)
    @rule(i=st.integers(0, 100), n=st.integers(1, 5))
    def poll(self, i: int, n: int) -> None:
        self.h.poll(self._cid(i), n)

    @precondition(lambda self: self.h.consumers)
    @rule(i=st.integers(0, 100), seed=st.integers(0, 2**16), fraction=st.sampled_from([0.3, 1.0]))
    def ack(self, i: int, seed: int, fraction: float) -> None:
        self.h.ack(self._cid(i), random.Random(seed), fraction)

    @precondition(lambda self: self.h.consumers)
    @rule(i=st.integers(0, 100), seed=st.integers(0, 2**16), delay=st.sampled_from([0, 0, 50, 300]))
    def nack(self, i: int, seed: int, delay: int) -> None:
        self.h.nack(self._cid(i), random.Random(seed), delay)

    @rule(dt=st.sampled_from([1, 49, 100, 250]))
    def advance(self, dt: int) -> None:
        self.h.advance(dt)

    @rule(seed=st.integers(0, 2**16))
    def confirm_dead_letters(self, seed: int) -> None:
        self.h.confirm_dead(0.5, random.Random(seed))

    @rule(json_roundtrip=st.booleans())
    def failover(self, json_roundtrip: bool) -> None:
        self.h.failover(json_roundtrip)

    @invariant()
    def lag_matches(self) -> None:
        if hasattr(self, "h"):
            self.h.check_lag()

    def teardown(self) -> None:
        if hasattr(self, "h"):
            self.h.drain(self.rng)


TestDeliveryMachine = DeliveryMachine.TestCase
TestDeliveryMachine.settings = settings(
    max_examples=150, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("ordering", ["key", "none"])
def test_randomized_long_runs(seed: int, ordering: str) -> None:
    """Longer random runs than the state machine explores (300 steps, more messages)."""
    rng = random.Random(seed * 7919 + (ordering == "none"))
    h = Harness(ordering=ordering, max_deliveries=rng.choice([2, 3, 4]), form="pair" if seed % 2 else "compact")
    h.delays = seed % 3 != 0  # delayed messages and priorities in two runs out of three
    for ctx in rng.sample(CONTEXTS, 3):
        h.join(ctx)
    for _ in range(300):
        op = rng.random()
        cids = sorted(h.consumers)
        if op < 0.15:
            h.ingest(rng, rng.randint(1, 10))
        elif op < 0.45 and cids:
            h.poll(rng.choice(cids), rng.randint(1, 8))
        elif op < 0.65 and cids:
            h.ack(rng.choice(cids), rng, rng.choice([0.5, 1.0]))
        elif op < 0.72 and cids:
            h.nack(rng.choice(cids), rng, rng.choice([0, 30, 200]))
        elif op < 0.82:
            h.advance(rng.choice([10, 60, 120]))
        elif op < 0.87 and len(cids) < 7:
            h.join(rng.choice(CONTEXTS))
        elif op < 0.91 and cids:
            h.leave(rng.choice(cids), graceful=rng.random() < 0.5)
        elif op < 0.95:
            h.confirm_dead(0.7, rng)
        elif op < 0.97:
            h.failover(json_roundtrip=rng.random() < 0.5)
    h.drain(rng)
    assert h.deliveries >= len(h.msgs)
