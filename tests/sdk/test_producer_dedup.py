"""Retries that are safe: the SDK's dedup ids against the real gateway (a live platform,
through a recording proxy that loses answers after the gateway stored the messages)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp.test_utils import TestServer

from tests.live_platform import LivePlatform
from tests.recording_proxy import RecordingProxy
from tests.sdk.conftest import RecordingSleep, read_back
from vpq.sdk.client import AsyncClient
from vpq.sdk.models import DedupIds, ProduceMessage, encode_message, with_dedup_id
from vpq.sdk.producer import Producer
from vpq.sdk.retry import RetryPolicy

Rewrite = Callable[[int, dict[str, str], bytes], tuple[int, dict[str, str], bytes]]


def lose_answers(times: int) -> Rewrite:
    """Replace the next ``times`` answers (the request went through) with a 503."""
    left = [times]

    def rewrite(status: int, headers: dict[str, str], payload: bytes) -> tuple[int, dict[str, str], bytes]:
        if left[0] <= 0:
            return status, headers, payload
        left[0] -= 1
        body = b'{"error": {"code": "produce_unavailable", "message": "answer lost on the way"}}'
        return 503, {"Content-Type": "application/json", "Retry-After": "0"}, body

    return rewrite


@pytest.fixture
async def one_shot_client(server: TestServer) -> AsyncIterator[AsyncClient]:
    c = AsyncClient(str(server.make_url("")), retry=RetryPolicy(attempts=1))
    yield c
    await c.close()


def sent_ids(gateway: RecordingProxy, queue: str) -> list[list[str]]:
    return [[m["dedup_id"] for m in r.body["messages"]] for r in gateway.requests_to("POST", f"/v1/queues/{queue}/messages")]


def test_dedup_ids_are_unique_and_kept() -> None:
    a, b = DedupIds(), DedupIds()
    ids = [a.next() for _ in range(3)] + [b.next()]
    assert len(set(ids)) == 4 and all(len(i) <= 128 and i.isascii() and i.isprintable() for i in ids)
    assert ids[0].endswith("-0") and ids[2].endswith("-2")
    assert with_dedup_id(ProduceMessage(value=1, dedup_id="mine"), a).dedup_id == "mine"
    assert with_dedup_id({"value": 1, "dedup_id": "mine"}, a) == {"value": 1, "dedup_id": "mine"}
    assert encode_message(with_dedup_id(ProduceMessage(value=1), DedupIds("p"))) == {"value": 1, "dedup_id": "p-0"}


async def test_producer_retries_a_lost_answer_without_duplicates(
    one_shot_client: AsyncClient, gateway: RecordingProxy, platform: LivePlatform, q: str
) -> None:
    await one_shot_client.put_queue(q, virtual_partitions=4)
    gateway.rewrite(rf"^/v1/queues/{q}/messages$", lose_answers(2))
    async with Producer(one_shot_client, linger_ms=0, max_batch=10) as producer:
        futures = [await producer.send(q, i, key=f"k{i % 3}" if i % 2 else None) for i in range(30)]
        results = await asyncio.gather(*futures)
    ids = sent_ids(gateway, q)
    assert ids[0] == ids[1] == ids[2]  # the first batch was sent three times, with the same ids
    assert len({i for batch in ids for i in batch}) == 30
    stored = await read_back(platform.url, q, 30)  # fails on a 31st message
    assert sorted(m.value for m in stored) == list(range(30))
    assert sorted(r.id for r in results) == sorted(m.id for m in stored)  # answers name the stored copies


async def test_client_produce_retries_with_the_same_ids(
    server: TestServer, gateway: RecordingProxy, platform: LivePlatform, q: str
) -> None:
    sleeps = RecordingSleep()
    async with AsyncClient(str(server.make_url("")), retry=RetryPolicy(attempts=3), sleep=sleeps) as client:
        await client.put_queue(q, virtual_partitions=4)
        gateway.rewrite(rf"^/v1/queues/{q}/messages$", lose_answers(1))
        results = await client.produce(q, [ProduceMessage(value=i) for i in range(5)] + [{"value": "own", "dedup_id": "own-1"}])
    ids = sent_ids(gateway, q)
    assert len(ids) == 2 and ids[0] == ids[1] and ids[0][5] == "own-1"
    stored = await read_back(platform.url, q, 6)
    assert sorted(r.id for r in results) == sorted(m.id for m in stored)


async def test_without_dedup_a_lost_answer_duplicates(
    server: TestServer, gateway: RecordingProxy, platform: LivePlatform, q: str
) -> None:
    async with AsyncClient(str(server.make_url("")), retry=RetryPolicy(attempts=2), sleep=RecordingSleep(), dedup=False) as client:
        await client.put_queue(q, virtual_partitions=1)
        gateway.rewrite(rf"^/v1/queues/{q}/messages$", lose_answers(1))
        await client.produce(q, [ProduceMessage(value="once")])
    assert [m.value for m in await read_back(platform.url, q, 2)] == ["once", "once"]
