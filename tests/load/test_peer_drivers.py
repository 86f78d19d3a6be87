"""NATS JetStream and RabbitMQ drivers against the machine's servers (skipped when a
server does not answer; a failure under VPQ_TEST_STRICT=1, as in CI). Names are unique per test and everything is deleted."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from tests.needs import missing
from vpq.load.checks import DeliveryChecker
from vpq.load.payload import make_payload, parse_payload
from vpq.load.peers.nats_js import NatsJetStream
from vpq.load.peers.rabbitmq import RabbitMQ
from vpq.load.system import System, SystemUnavailable


def _make(kind: str) -> System:
    tag = "t" + uuid.uuid4().hex[:6]
    if kind == "nats":
        return NatsJetStream(layout="streams", tag=tag)
    if kind == "nats-subjects":
        return NatsJetStream(layout="subjects", tag=tag)
    return RabbitMQ(tag=tag)


async def _started(kind: str) -> System:
    """A started driver; the machine's server not answering is a missing requirement."""
    system = _make(kind)
    try:
        await system.start()
    except SystemUnavailable as exc:
        missing(f"{kind} server not answering: {exc}")
    return system


@pytest.mark.parametrize("kind", ["nats", "nats-subjects", "rabbitmq"])
@pytest.mark.parametrize("ordered", [True, False])
async def test_round_trip(kind: str, ordered: bool) -> None:
    system = await _started(kind)
    try:
        await system.setup(["q"], ordered=ordered, shards=4)
        checker = DeliveryChecker(order_required=ordered)
        batch = []
        for i in range(60):
            key = f"k{i % 6}"
            batch.append((key, make_payload(key, i // 6)))
            checker.expect(key, i // 6)
        await system.produce("q", batch[:30])
        await system.produce("q", batch[30:])
        assert await system.count("q") == 60
        assert (await system.server_memory()).get("rss_bytes", 1) > 0

        async def handler(key: str, payload: bytes) -> None:
            stamp = parse_payload(payload)
            assert stamp.key == key
            checker.observe(stamp.key, stamp.seq)

        members = [await system.consume("q", handler, ordered=ordered, member=m, members=2, batch=5) for m in range(2)]
        for _ in range(500):
            if checker.expected_seen == 60:
                break
            await asyncio.sleep(0.01)
        for member in members:
            await member.stop()
        report = checker.report()
        assert report.ok and report.distinct == 60, report
        await system.delete(["q"])
    finally:
        await system.teardown()
        await system.stop()


async def test_nats_deleting_a_stream_that_is_already_gone_is_not_an_error() -> None:
    # a deletion that answered an error (the server out of file descriptors) may still have
    # happened: trying it again must not fail on "stream not found"
    system = await _started("nats")
    try:
        await system.setup(["q", "r"], ordered=True, shards=1)
        js = system._js  # type: ignore[attr-defined]
        await js.delete_stream(system._stream("q"))  # type: ignore[attr-defined]  # behind the driver's back
        await system.delete(["q", "r"])
        names = {s.config.name for s in await js.streams_info()}
        assert system._stream("q") not in names and system._stream("r") not in names  # type: ignore[attr-defined]
        await system.delete(["q"])  # nothing left to delete: no error either
    finally:
        await system.teardown()
        await system.stop()
