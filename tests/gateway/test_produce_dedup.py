"""dedup_id through the real gateway and cluster backend: a retried message is stored once
and answered with the stored copy's coordinates; the queue's dedup_window_ms."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.gateway.conftest import RecordingBackend, error_of, read_all

URL = "/v1/queues/orders/messages"


@pytest.fixture
async def queue(client: TestClient, backend: RecordingBackend) -> str:
    assert (await client.put("/v1/queues/orders", json={"virtual_partitions": 8})).status == 201
    return "orders"


async def produce(client: TestClient, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    r = await client.post(URL, json={"messages": messages})
    assert r.status == 200, await r.text()
    return (await r.json())["results"]


async def test_a_retried_batch_is_stored_once(client: TestClient, queue: str) -> None:
    batch = [{"value": i, "dedup_id": f"p1-{i}", **({"key": f"k{i % 3}"} if i % 2 else {})} for i in range(20)]
    first = await produce(client, batch)
    assert len({r["id"] for r in first}) == 20
    again = await produce(client, [dict(m, value="retry") for m in batch])
    assert again == first  # id, partition, offset and virtual_partition of the stored copies
    # retried in pieces, in another order, mixed with new messages and repeated inside one request
    mixed = [batch[7], {"value": "new", "dedup_id": "p1-new"}, batch[3], {"value": "new2", "dedup_id": "p1-new"}]
    answer = await produce(client, mixed)
    assert answer[0] == first[7] and answer[2] == first[3] and answer[3] == answer[1]
    assert answer[1]["id"] not in {r["id"] for r in first}
    stored = await read_all(client, queue, 21)
    assert sorted(m["value"] for m in stored if m["value"] != "new") == list(range(20))
    assert all(m["headers"] == {} for m in stored)  # the dedup id is not shown to consumers


async def test_bytes_values_and_other_attributes_keep_the_dedup(client: TestClient, queue: str) -> None:
    """Bodies the msgspec short path does not take (value_b64, headers, a priority) go
    through the models; the id is stored and checked all the same."""
    batch = [
        {"value_b64": "AAE=", "dedup_id": "b-1", "headers": {"h": "v"}},
        {"key": "k", "value": 1, "dedup_id": "b-2", "priority": 3},
    ]
    first = await produce(client, batch)
    assert await produce(client, batch) == first
    stored = await read_all(client, queue, 2)
    assert sorted(m["headers"].get("h", "") for m in stored) == ["", "v"]


async def test_concurrent_retries_store_one_copy(client: TestClient, queue: str) -> None:
    batch = [{"key": f"k{i}", "value": i, "dedup_id": f"c-{i}"} for i in range(50)]
    answers = await asyncio.gather(*(produce(client, batch) for _ in range(5)))
    assert all(a == answers[0] for a in answers)
    await read_all(client, queue, 50)


async def test_window_zero_turns_deduplication_off(client: TestClient, queue: str) -> None:
    r = await client.put("/v1/queues/orders", json={"dedup_window_ms": 0})
    assert r.status == 200 and (await r.json())["dedup_window_ms"] == 0
    await asyncio.sleep(0.3)  # the write node's map cache follows the registry's event
    first = await produce(client, [{"key": "k", "value": 1, "dedup_id": "same"}])
    second = await produce(client, [{"key": "k", "value": 1, "dedup_id": "same"}])
    assert first[0]["id"] != second[0]["id"]
    await read_all(client, queue, 2)


async def test_the_window_is_a_queue_setting(client: TestClient, backend: RecordingBackend) -> None:
    r = await client.put("/v1/queues/w", json={})
    assert r.status == 201 and (await r.json())["dedup_window_ms"] == 300_000
    assert (await (await client.get("/v1/queues/w")).json())["dedup_window_ms"] == 300_000
    r = await client.put("/v1/queues/w", json={"dedup_window_ms": 60_000})
    assert r.status == 200 and (await r.json())["dedup_window_ms"] == 60_000
    for bad in (-1, 3_600_001, "10", 1.5):
        r = await client.put("/v1/queues/w", json={"dedup_window_ms": bad})
        assert "dedup_window_ms" in str(await error_of(r, 400, "invalid_request")), bad
    assert (await (await client.get("/v1/queues/w")).json())["dedup_window_ms"] == 60_000
