"""Consumer loop against the real gateway (a live platform, through a recording proxy):
handler calls, acks, nacks, rejoin, leave. The module's platform gives consumers a short
session (1 s) so that keepalive polls are needed within a test."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tests.live_platform import LivePlatform, platform_settings, running
from tests.recording_proxy import RecordingProxy
from vpq.config.settings import QueueDefaults
from vpq.sdk.client import AsyncClient
from vpq.sdk.consumer import Consumer, RetryLater
from vpq.sdk.errors import NotFoundError
from vpq.sdk.models import Message, ProduceMessage

GUARD_S = 10  # only a hang guard: a failing test must not block the suite


SESSION_MS = 1000


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LivePlatform]:
    settings = platform_settings(tmp_path_factory.mktemp("consumer-platform"), queues=QueueDefaults(session_timeout_ms=SESSION_MS))
    with running(settings) as live:
        yield live


async def fill(client: AsyncClient, queue: str, n: int, **context: str) -> None:
    await client.put_queue(queue, virtual_partitions=1)  # one vp: delivered in produce order
    await client.produce(queue, [ProduceMessage(value=i, key=f"k{i}") for i in range(n)], **context)


def acked_ids(gateway: RecordingProxy, cid: str | None) -> list[str]:
    """The ids ``cid`` acknowledged, in the order sent: by ack requests and by the
    ``ack`` field of its polls."""
    out: list[str] = []
    for r in gateway.requests:
        if r.method == "POST" and r.path.endswith(f"/consumers/{cid}/ack"):
            out.extend(r.body["ids"])
        elif r.method == "POST" and r.path.endswith(f"/consumers/{cid}/poll") and r.body:
            out.extend(r.body.get("ack", []))
    return out


class Collector:
    def __init__(self, until: int) -> None:
        self.seen: list[Message] = []
        self.until = until
        self.done = asyncio.Event()

    async def __call__(self, msg: Message) -> None:
        self.seen.append(msg)
        if len(self.seen) >= self.until:
            self.done.set()


async def test_handler_called_and_auto_acked_then_leave(client: AsyncClient, gateway: RecordingProxy, q: str) -> None:
    await fill(client, q, 5, lane="feat-a", env="test")
    handler = Collector(5)
    consumer = Consumer(client, q, "g", handler, lane="feat-a", env="test", max_messages=2, wait_ms=100)
    await consumer.start()
    cid = consumer.consumer_id
    assert cid is not None
    await asyncio.wait_for(handler.done.wait(), GUARD_S)
    await consumer.stop()
    assert [m.value for m in handler.seen] == [0, 1, 2, 3, 4]
    join = gateway.requests_to("POST", f"/v1/queues/{q}/groups/g/consumers")[0]
    assert join.body == {"lane": "feat-a", "env": "test"}
    # once each, in order (an ack riding on a poll cancelled by stop() is sent once more)
    assert list(dict.fromkeys(acked_ids(gateway, cid))) == [m.id for m in handler.seen]
    polls = gateway.requests_to("POST", f"/consumers/{cid}/poll")
    assert polls[0].body == {"max_messages": 2, "wait_ms": 100}
    assert gateway.requests_to("DELETE", f"/consumers/{cid}")
    assert (await client.group(q, "g"))["members"] == []
    assert consumer.handled == 5 and consumer.failed == 0


async def test_exception_nacks_with_delay_and_message_comes_back(client: AsyncClient, gateway: RecordingProxy, q: str) -> None:
    await fill(client, q, 3)
    seen: list[tuple[Any, int]] = []
    ids: dict[Any, str] = {}
    done = asyncio.Event()

    async def handler(msg: Message) -> None:
        seen.append((msg.value, msg.delivery_count))
        ids[msg.value] = msg.id
        if msg.value == 1 and msg.delivery_count == 1:
            raise RetryLater(delay_ms=250)
        if msg.value == 2 and msg.delivery_count == 1:
            raise ValueError("boom")
        if len(seen) == 5:
            done.set()

    consumer = Consumer(client, q, "g", handler, nack_delay_ms=40, wait_ms=50)
    await consumer.start()
    await asyncio.wait_for(done.wait(), GUARD_S)
    await consumer.stop()
    cid = consumer.consumer_id
    nacks = [r.body for r in gateway.requests_to("POST", f"/consumers/{cid}/nack")]
    assert {"ids": [ids[1]], "delay_ms": 250} in nacks
    assert {"ids": [ids[2]], "delay_ms": 40} in nacks
    assert sorted(seen) == [(0, 1), (1, 1), (1, 2), (2, 1), (2, 2)]
    assert consumer.failed == 2 and consumer.handled == 3
    assert (await client.group(q, "g"))["lag"]["total"] == 0  # all three acked in the end


async def test_concurrency_runs_handlers_in_parallel(client: AsyncClient, gateway: RecordingProxy, q: str) -> None:
    await fill(client, q, 3)
    active = 0
    all_in = asyncio.Event()

    async def handler(msg: Message) -> None:
        nonlocal active
        active += 1
        if active == 3:
            all_in.set()
        await all_in.wait()  # would never return with concurrency 1

    consumer = Consumer(client, q, "g", handler, concurrency=3, wait_ms=50)
    await consumer.start()
    await asyncio.wait_for(all_in.wait(), GUARD_S)
    await consumer.stop()
    assert consumer.handled == 3
    assert (await client.group(q, "g"))["lag"]["total"] == 0


async def test_manual_ack_mode(client: AsyncClient, gateway: RecordingProxy, q: str) -> None:
    await fill(client, q, 2)
    done = asyncio.Event()
    consumer: Consumer

    async def handler(msg: Message) -> None:
        if msg.value == 0:
            await consumer.ack(msg)
        else:
            done.set()
            raise RuntimeError("not settled, not nacked")

    consumer = Consumer(client, q, "g", handler, auto_ack=False, wait_ms=50)
    await consumer.start()
    await asyncio.wait_for(done.wait(), GUARD_S)
    await consumer.stop()
    cid = consumer.consumer_id
    assert len(gateway.requests_to("POST", f"/consumers/{cid}/ack")) == 1
    assert gateway.requests_to("POST", f"/consumers/{cid}/nack") == []
    assert (await client.group(q, "g"))["lag"]["total"] == 1  # one acked
    other = await client.join(q, "g")
    back = await client.poll(q, "g", other.consumer_id, wait_ms=5000)
    assert [(m.value, m.delivery_count) for m in back] == [(1, 2)]  # the unsettled one went back when the consumer left
    await client.leave(q, "g", other.consumer_id)


async def test_rejoins_after_the_server_forgot_it(client: AsyncClient, gateway: RecordingProxy, q: str) -> None:
    await fill(client, q, 1)
    gateway.fail("POST", r"/poll$", 404, "consumer_not_found", times=1)
    handler = Collector(1)
    consumer = Consumer(client, q, "g", handler, consumer_id="me", wait_ms=50)
    await consumer.start()
    await asyncio.wait_for(handler.done.wait(), GUARD_S)
    await consumer.stop()
    joins = gateway.requests_to("POST", f"/v1/queues/{q}/groups/g/consumers")
    assert [j.body["consumer_id"] for j in joins] == ["me", "me"]


async def test_stop_during_long_poll_and_cancel_both_leave(client: AsyncClient, gateway: RecordingProxy, q: str) -> None:
    await client.put_queue(q)
    c1 = Consumer(client, q, "g", Collector(1), wait_ms=5000)
    await c1.start()
    await c1.stop()
    assert gateway.requests_to("DELETE", f"/consumers/{c1.consumer_id}")

    c2 = Consumer(client, q, "g", Collector(1), wait_ms=5000)
    task = asyncio.create_task(c2.run())
    async def polling() -> None:
        while not gateway.requests_to("POST", "/poll") or c2.consumer_id is None:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(polling(), GUARD_S)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
    assert gateway.requests_to("DELETE", f"/consumers/{c2.consumer_id}")
    assert (await client.group(q, "g"))["members"] == []


async def test_join_error_surfaces_from_start(client: AsyncClient, q: str) -> None:
    consumer = Consumer(client, f"{q}-missing", "g", Collector(1))
    with pytest.raises(NotFoundError) as exc:
        await consumer.start()
    assert exc.value.code == "queue_not_found"


async def test_keepalive_polls_while_a_slow_batch_is_handled(client: AsyncClient, gateway: RecordingProxy, q: str) -> None:
    await fill(client, q, 1)
    seen: list[int] = []
    done = asyncio.Event()

    def keepalive_polls() -> list[object]:
        return [r for r in gateway.requests_to("POST", "/poll") if r.body == {"max_messages": 1, "wait_ms": 0}]

    async def handler(msg: Message) -> None:
        seen.append(msg.value)
        if msg.value == 0:
            await client.produce(q, [ProduceMessage(value=1)])
            while not keepalive_polls():  # slow handler: outlives a third of the session
                await asyncio.sleep(0.01)
        else:
            done.set()

    consumer = Consumer(client, q, "g", handler, max_messages=1, wait_ms=20)
    await consumer.start()
    await asyncio.wait_for(done.wait(), GUARD_S)
    await consumer.stop()
    assert seen == [0, 1]
    assert (await client.group(q, "g"))["lag"]["total"] == 0  # both acked


@pytest.mark.parametrize("prefetch", [True, False])
async def test_prefetch_sends_the_next_poll_while_a_batch_is_handled(
    client: AsyncClient, gateway: RecordingProxy, q: str, prefetch: bool
) -> None:
    await fill(client, q, 6)
    polls_during_first_batch: list[int] = []
    handler = Collector(6)

    async def handle(msg: Message) -> None:
        if len(handler.seen) < 2:  # the first batch (max_messages=2)
            await asyncio.sleep(0.1)
            polls_during_first_batch.append(len(gateway.requests_to("POST", "/poll")))
        await handler(msg)

    consumer = Consumer(client, q, "g", handle, max_messages=2, wait_ms=50, prefetch=prefetch)
    await consumer.start()
    await asyncio.wait_for(handler.done.wait(), GUARD_S)
    await consumer.stop()
    assert [m.value for m in handler.seen] == [0, 1, 2, 3, 4, 5]
    assert max(polls_during_first_batch) == (2 if prefetch else 1)
    assert sorted(set(acked_ids(gateway, consumer.consumer_id))) == sorted(m.id for m in handler.seen)


async def test_stop_releases_a_prefetched_batch_unhandled(client: AsyncClient, gateway: RecordingProxy, q: str) -> None:
    await fill(client, q, 4)
    first_done = asyncio.Event()
    seen: list[int] = []

    async def slow(msg: Message) -> None:
        seen.append(msg.value)
        if len(seen) == 2:
            first_done.set()
            await asyncio.sleep(0.2)  # the prefetch of messages 2 and 3 is answered meanwhile

    consumer = Consumer(client, q, "g", slow, max_messages=2, wait_ms=50)
    await consumer.start()
    await asyncio.wait_for(first_done.wait(), GUARD_S)
    await asyncio.sleep(0.1)
    await consumer.stop(timeout_s=GUARD_S)
    assert seen == [0, 1]  # the prefetched batch was not handled after stop()
    other = Collector(2)
    second = Consumer(client, q, "g", other, max_messages=10, wait_ms=50)
    await second.start()
    await asyncio.wait_for(other.done.wait(), GUARD_S)  # left by the first: delivered at once
    await second.stop()
    assert sorted(m.value for m in other.seen) == [2, 3]


async def test_background_acks_go_once_per_flush_not_once_per_round_trip(
    client: AsyncClient, gateway: RecordingProxy, q: str
) -> None:
    # Acks slower than handling: while one ack request is in flight the next batch's
    # messages are handled. They must wait for that batch's end (the next flush), not
    # go out as soon as the sender is free: that made a busy consumer send an ack every
    # round trip (three times as many acks as polls at 64 consumers).
    await fill(client, q, 50)
    gateway.ack_delay_s = 0.01
    handler = Collector(50)

    async def handle(msg: Message) -> None:
        await asyncio.sleep(0.004)
        await handler(msg)

    consumer = Consumer(client, q, "g", handle, max_messages=10, wait_ms=50, ack_interval_ms=60_000)
    await consumer.start()
    await asyncio.wait_for(handler.done.wait(), GUARD_S)
    await consumer.stop()
    cid = consumer.consumer_id
    assert sorted(set(acked_ids(gateway, cid))) == sorted(m.id for m in handler.seen)
    acking = [r for r in gateway.requests if r.body and (r.path.endswith("/ack") or r.body.get("ack"))]
    assert len(acking) <= 5 + 1  # one per batch of 10, and the one at stop()


@pytest.mark.parametrize("prefetch", [True, False])
async def test_a_busy_prefetching_consumer_acks_with_its_next_poll(
    client: AsyncClient, gateway: RecordingProxy, q: str, prefetch: bool
) -> None:
    await fill(client, q, 50)
    handler = Collector(50)

    async def handle(msg: Message) -> None:
        await asyncio.sleep(0.004)
        await handler(msg)

    # no flush by ack_interval_ms while a batch is handled (a slow machine would reach 500 ms)
    consumer = Consumer(client, q, "g", handle, max_messages=10, wait_ms=50, prefetch=prefetch, ack_interval_ms=60_000)
    await consumer.start()
    await asyncio.wait_for(handler.done.wait(), GUARD_S)
    await consumer.stop()
    cid = consumer.consumer_id
    assert sorted(set(acked_ids(gateway, cid))) == sorted(m.id for m in handler.seen)
    acks = gateway.requests_to("POST", f"/consumers/{cid}/ack")
    polls = gateway.requests_to("POST", f"/consumers/{cid}/poll")
    if prefetch:
        assert len(acks) <= 1  # at most the one at stop(): the others went with a poll
        assert all(p.body["wait_ms"] == 0 for p in polls[1:6])  # prefetches never wait on the server
    else:
        assert len(acks) >= 5 and not any(p.body.get("ack") for p in polls)


def count_polls_in_flight(client: AsyncClient) -> list[int]:
    """Wraps ``client.poll``; the returned list holds the most polls seen in flight at once."""
    peak = [0]
    in_flight = [0]
    poll = client.poll

    async def counting(*args: Any, **kwargs: Any) -> list[Message]:
        in_flight[0] += 1
        peak[0] = max(peak[0], in_flight[0])
        try:
            return await poll(*args, **kwargs)
        finally:
            in_flight[0] -= 1

    client.poll = counting  # type: ignore[method-assign]
    return peak


async def test_a_consumer_waiting_on_slow_polls_keeps_two_ahead(
    client: AsyncClient, gateway: RecordingProxy, q: str
) -> None:
    # full batches handled at once, polls answered 50 ms late: the consumer waits on the
    # server, so it sends a second poll ahead
    await fill(client, q, 40)
    gateway.delay(r"/poll$", 0.05)
    peak = count_polls_in_flight(client)
    handler = Collector(40)
    consumer = Consumer(client, q, "g", handler, max_messages=5, wait_ms=50)
    await consumer.start()
    await asyncio.wait_for(handler.done.wait(), GUARD_S)
    await consumer.stop()
    assert [m.value for m in handler.seen] == list(range(40))
    assert peak[0] == 2
    assert sorted(set(acked_ids(gateway, consumer.consumer_id))) == sorted(m.id for m in handler.seen)


@pytest.mark.parametrize("case", ["slow handler", "partial batches"])
async def test_a_consumer_paced_by_its_handler_or_caught_up_keeps_one_ahead(
    client: AsyncClient, gateway: RecordingProxy, q: str, case: str
) -> None:
    await fill(client, q, 20)
    if case == "partial batches":
        gateway.delay(r"/poll$", 0.05)
    peak = count_polls_in_flight(client)
    handler = Collector(20)

    async def handle(msg: Message) -> None:
        if case == "slow handler":
            await asyncio.sleep(0.02)  # a batch of 5 takes 100 ms; a poll takes a few
        await handler(msg)

    max_messages = 5 if case == "slow handler" else 25  # 20 messages never fill a poll of 25
    consumer = Consumer(client, q, "g", handle, max_messages=max_messages, wait_ms=50)
    await consumer.start()
    await asyncio.wait_for(handler.done.wait(), GUARD_S)
    await consumer.stop()
    assert [m.value for m in handler.seen] == list(range(20))
    assert peak[0] == 1
