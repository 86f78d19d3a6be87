"""Producer against the real gateway (a live platform, through a recording proxy): batching,
durability of the futures, order under retries, partial failures."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestServer

from tests.live_platform import LivePlatform
from tests.recording_proxy import RecordingProxy
from tests.sdk.conftest import read_back, values
from vpq.sdk.client import AsyncClient
from vpq.sdk.errors import ClientClosedError, ForbiddenError, PayloadTooLargeError
from vpq.sdk.producer import Producer
from vpq.sdk.retry import RetryPolicy


@pytest.fixture
async def one_shot_client(server: TestServer) -> AsyncIterator[AsyncClient]:
    """A client that never retries by itself, so the producer's own retries are exercised."""
    c = AsyncClient(str(server.make_url("")), retry=RetryPolicy(attempts=1, initial_backoff_s=0.001, max_backoff_s=0.001))
    yield c
    await c.close()


def produce_bodies(gateway: RecordingProxy, queue: str) -> list[list[object]]:
    return [[m["value"] for m in r.body["messages"]] for r in gateway.requests_to("POST", f"/v1/queues/{queue}/messages")]


async def test_sends_are_batched_and_results_come_in_order(client: AsyncClient, gateway: RecordingProxy, platform: LivePlatform, q: str) -> None:
    await client.put_queue(q, virtual_partitions=1)  # one vp, one pp: log order is send order
    async with Producer(client, linger_ms=50, max_batch=20) as producer:
        futures = [await producer.send(q, {"n": i}) for i in range(50)]
        results = await asyncio.gather(*futures)
    assert produce_bodies(gateway, q) == [
        [{"n": i} for i in range(0, 20)],
        [{"n": i} for i in range(20, 40)],
        [{"n": i} for i in range(40, 50)],
    ]
    assert [r.id for r in results] == [m.id for m in await read_back(platform.url, q, 50)]
    offsets = [r.offset for r in results]  # one partition, so offsets follow send order
    assert offsets == sorted(offsets) and len(set(offsets)) == 50


async def test_message_fields_reach_the_gateway(client: AsyncClient, gateway: RecordingProxy, platform: LivePlatform, q: str) -> None:
    await client.put_queue(q, virtual_partitions=1)  # one vp, one pp: log order is send order
    async with Producer(client) as producer:
        r = await producer.send_and_wait(q, b"\x01\x02", key="k", headers={"h": "v"}, lane="feat-a", env="test", set="s1")
    [stored] = await read_back(platform.url, q, 1, env="test")
    assert stored.value == b"\x01\x02" and stored.key == "k" and stored.headers == {"h": "v"}
    assert (stored.lane, stored.env, stored.set) == ("feat-a", "test", "s1")
    assert r.id == stored.id


async def test_future_resolves_only_after_the_gateway_answers(client: AsyncClient, gateway: RecordingProxy, platform: LivePlatform, q: str) -> None:
    await client.put_queue(q, virtual_partitions=1)  # one vp, one pp: log order is send order
    gateway.hold_produce()
    assert gateway.produce_arrived is not None
    async with Producer(client, linger_ms=0) as producer:
        fut = await producer.send(q, "v")
        await gateway.produce_arrived.wait()
        assert not fut.done()
        assert producer.buffered == 1
        gateway.release_produce()
        result = await fut
    assert [result.id] == [m.id for m in await read_back(platform.url, q, 1)]
    assert producer.buffered == 0


async def test_retries_keep_per_queue_order(one_shot_client: AsyncClient, gateway: RecordingProxy, platform: LivePlatform, q: str) -> None:
    await one_shot_client.put_queue(q, virtual_partitions=1)
    other = f"{q}-other"
    await one_shot_client.put_queue(other, virtual_partitions=1)
    gateway.fail("POST", rf"^/v1/queues/{q}/messages$", 503, "overloaded", retry_after="0", times=3)
    async with Producer(one_shot_client, linger_ms=0, max_batch=3, max_in_flight=4) as producer:
        futures = []
        for i in range(10):
            futures.append(await producer.send(q, i, key=f"k{i % 2}"))
            futures.append(await producer.send(other, i))
        results = await asyncio.gather(*futures)
    assert await values(platform.url, q, 10) == list(range(10))
    assert await values(platform.url, other, 10) == list(range(10))
    bodies = produce_bodies(gateway, q)
    assert bodies[:4] == [[0, 1, 2]] * 4  # the first batch was retried until it went through
    assert [v for body in bodies[3:] for v in body] == list(range(10))  # nothing overtook it
    assert len(results) == 20


async def test_one_bad_message_fails_alone(client: AsyncClient, gateway: RecordingProxy, platform: LivePlatform, q: str) -> None:
    await client.put_queue(q, virtual_partitions=1, max_message_bytes=64)
    async with Producer(client, linger_ms=1000) as producer:
        f1 = await producer.send(q, "small-1")
        f2 = await producer.send(q, "x" * 200)
        f3 = await producer.send(q, "small-2")
        await producer.flush()
    assert f1.result().id and f3.result().id
    with pytest.raises(PayloadTooLargeError) as exc:
        f2.result()
    assert exc.value.code == "message_too_large"
    assert await values(platform.url, q, 2) == ["small-1", "small-2"]


async def test_request_too_large_without_index_is_split_in_order(client: AsyncClient, gateway: RecordingProxy, platform: LivePlatform, q: str) -> None:
    await client.put_queue(q, virtual_partitions=1)  # one vp, one pp: log order is send order
    gateway.fail("POST", r"/messages$", 413, "request_too_large", times=1)
    async with Producer(client, linger_ms=1000) as producer:
        futures = [await producer.send(q, i) for i in range(4)]
    assert all(f.done() and f.exception() is None for f in futures)
    assert produce_bodies(gateway, q) == [[0, 1, 2, 3], [0, 1], [2, 3]]
    assert await values(platform.url, q, 4) == [0, 1, 2, 3]


async def test_final_error_fails_the_whole_batch(client: AsyncClient, gateway: RecordingProxy, platform: LivePlatform, q: str) -> None:
    await client.put_queue(q, virtual_partitions=1)  # one vp, one pp: log order is send order
    gateway.fail("POST", r"/messages$", 403, "forbidden", message="no produce scope", times=1)
    async with Producer(client, linger_ms=1000) as producer:
        futures = [await producer.send(q, i) for i in range(3)]
        await producer.flush()
    for f in futures:
        err = f.exception()
        assert isinstance(err, ForbiddenError) and err.message == "no produce scope"
    assert await values(platform.url, q, 0) == []


async def test_stop_flushes_and_then_refuses(client: AsyncClient, gateway: RecordingProxy, platform: LivePlatform, q: str) -> None:
    await client.put_queue(q, virtual_partitions=1)  # one vp, one pp: log order is send order
    producer = Producer(client, linger_ms=60_000)
    futures = [await producer.send(q, i) for i in range(5)]
    await producer.stop()
    assert [f.result().offset for f in futures] == sorted(f.result().offset for f in futures)
    assert await values(platform.url, q, 5) == [0, 1, 2, 3, 4]
    with pytest.raises(ClientClosedError):
        await producer.send(q, 5)
    await producer.stop()  # idempotent


async def test_send_waits_when_the_buffer_is_full(client: AsyncClient, gateway: RecordingProxy, platform: LivePlatform, q: str) -> None:
    await client.put_queue(q, virtual_partitions=1)  # one vp, one pp: log order is send order
    gateway.hold_produce()
    assert gateway.produce_arrived is not None
    async with Producer(client, linger_ms=0, max_batch=1, max_buffered=2) as producer:
        await producer.send(q, 0)
        await producer.send(q, 1)
        third = asyncio.create_task(producer.send(q, 2))
        await gateway.produce_arrived.wait()
        for _ in range(5):
            await asyncio.sleep(0)
        assert not third.done()
        gateway.release_produce()
        await (await third)
    assert await values(platform.url, q, 3) == [0, 1, 2]


async def test_unserialisable_value_fails_at_send(client: AsyncClient, q: str) -> None:
    async with Producer(client) as producer:
        with pytest.raises(TypeError):
            await producer.send(q, object())
