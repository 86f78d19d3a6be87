"""Deleting a consumer group and redriving its dead letters, on the real gateway over the
real cluster backend (a real write node and read node, real Redis)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.gateway.conftest import RecordingBackend, error_of
from tests.live_platform import LivePlatform


@pytest.fixture
def q() -> str:
    return f"life-{uuid.uuid4().hex[:8]}"


async def join(client: TestClient, q: str, group: str, **body: Any) -> str:
    r = await client.post(f"/v1/queues/{q}/groups/{group}/consumers", json=body)
    assert r.status == 200, await r.text()
    return str((await r.json())["consumer_id"])


async def poll(client: TestClient, q: str, group: str, cid: str, wait_ms: int = 300, n: int = 1000) -> list[dict[str, Any]]:
    r = await client.post(f"/v1/queues/{q}/groups/{group}/consumers/{cid}/poll", json={"max_messages": n, "wait_ms": wait_ms})
    assert r.status == 200, await r.text()
    return list((await r.json())["messages"])


async def ack(client: TestClient, q: str, group: str, cid: str, msgs: list[dict[str, Any]]) -> None:
    r = await client.post(f"/v1/queues/{q}/groups/{group}/consumers/{cid}/ack", json={"ids": [m["id"] for m in msgs]})
    assert r.status == 200, await r.text()


async def produce(client: TestClient, q: str, messages: list[dict[str, Any]]) -> None:
    r = await client.post(f"/v1/queues/{q}/messages", json={"messages": messages})
    assert r.status == 200, await r.text()


async def drain(client: TestClient, q: str, group: str, cid: str, want: int, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """Poll and ack until ``want`` messages came (or the time is up)."""
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        batch = await poll(client, q, group, cid)
        if batch:
            await ack(client, q, group, cid, batch)
            got += batch
    return got


async def test_delete_group_removes_it_and_a_new_join_starts_over(client: TestClient, q: str) -> None:
    assert (await client.put(f"/v1/queues/{q}", json={"virtual_partitions": 1})).status == 201
    await produce(client, q, [{"key": "k", "value": i} for i in range(4)])
    cid = await join(client, q, "g")
    got = await drain(client, q, "g", cid, 4)
    assert [m["value"] for m in got] == [0, 1, 2, 3]

    r = await client.delete(f"/v1/queues/{q}/groups/g")
    assert r.status == 204, await r.text()
    await error_of(await client.get(f"/v1/queues/{q}/groups/g"), 404, "group_not_found")
    await error_of(await client.post(f"/v1/queues/{q}/groups/g/consumers/{cid}/poll", json={}), 404, "group_not_found")
    await error_of(await client.delete(f"/v1/queues/{q}/groups/g"), 404, "group_not_found")

    # joining again starts a new group: earliest again, so everything comes back with count 1
    cid2 = await join(client, q, "g", start="earliest")
    again = await drain(client, q, "g", cid2, 4)
    assert [(m["value"], m["delivery_count"]) for m in again] == [(0, 1), (1, 1), (2, 1), (3, 1)]
    info = await (await client.get(f"/v1/queues/{q}/groups/g")).json()
    assert [m["consumer_id"] for m in info["members"]] == [cid2]


async def test_delete_group_errors(client: TestClient, backend: RecordingBackend, q: str) -> None:
    await error_of(await client.delete(f"/v1/queues/{q}/groups/g"), 404, "queue_not_found")
    assert (await client.put(f"/v1/queues/{q}", json={})).status == 201
    await error_of(await client.delete(f"/v1/queues/{q}/groups/nope"), 404, "group_not_found")
    await error_of(await client.delete(f"/v1/queues/{q}/groups/bad%20name"), 400)
    await error_of(await client.post(f"/v1/queues/{q}/groups/g/dlq/redrive", json={}), 404, "group_not_found")
    await join(client, q, "g")
    backend.calls.clear()
    for body in ({"max_messages": 0}, {"max_messages": "3"}, {"other": 1}, [1]):
        await error_of(await client.post(f"/v1/queues/{q}/groups/g/dlq/redrive", json=body), 400)
    assert backend.calls == []  # refused before the backend


async def dead_letter_all(client: TestClient, q: str, group: str, cid: str, n: int, timeout_s: float = 15.0) -> None:
    """Take every message and never ack it: with max_deliveries 1 each goes to the DLQ."""
    dlq = f"{q}.{group}.dlq"
    deadline = time.monotonic() + timeout_s
    seen: set[str] = set()
    while time.monotonic() < deadline:
        for m in await poll(client, q, group, cid, wait_ms=100):
            seen.add(m["id"])
        r = await client.get(f"/v1/queues/{dlq}")
        if r.status == 200 and len(seen) >= n:
            depth = await _dlq_count(client, dlq)
            if depth >= n:
                return
        await asyncio.sleep(0.1)
    raise AssertionError(f"only {len(seen)} of {n} messages were dead-lettered in time")


async def _dlq_count(client: TestClient, dlq: str) -> int:
    """Messages stored in the DLQ, counted by a fresh group of it (no ack: it just looks)."""
    group = f"look-{uuid.uuid4().hex[:6]}"
    cid = await join(client, dlq, group)
    return len(await poll(client, dlq, group, cid, wait_ms=300))


async def test_redrive_delivers_to_that_group_only_once_in_key_order(
    client: TestClient, platform: LivePlatform, q: str
) -> None:
    r = await client.put(f"/v1/queues/{q}", json={"virtual_partitions": 4, "max_deliveries": 1, "visibility_timeout_ms": 200})
    assert r.status == 201
    other = await join(client, q, "other")
    cid = await join(client, q, "g")
    msgs = [{"key": f"k{i % 3}", "value": i, "headers": {"h": str(i)}} for i in range(9)]
    await produce(client, q, msgs)
    await dead_letter_all(client, q, "g", cid, 9)
    assert len(await drain(client, q, "other", other, 9)) == 9
    dlq = f"{q}.g.dlq"

    r = await client.post(f"/v1/queues/{q}/groups/g/dlq/redrive", json={"max_messages": 4})
    assert r.status == 200, await r.text()
    assert await r.json() == {"redriven": 4}
    r = await client.post(f"/v1/queues/{q}/groups/g/dlq/redrive")  # no body: all the rest
    assert await r.json() == {"redriven": 5}
    r = await client.post(f"/v1/queues/{q}/groups/g/dlq/redrive", json={})
    assert await r.json() == {"redriven": 0}  # they left the DLQ

    got = await drain(client, q, "g", cid, 9)
    assert len(got) == 9
    assert all(m["delivery_count"] == 1 for m in got)
    assert all(m["headers"]["x-redriven-from"] == dlq and m["headers"]["x-original-id"] for m in got)
    assert all(not any(h.startswith(":") for h in m["headers"]) for m in got)
    assert sorted(m["value"] for m in got) == list(range(9))
    for k in range(3):  # each key in its produce order
        values = [m["value"] for m in got if m["key"] == f"k{k}"]
        assert values == sorted(values), values
    assert all(m["headers"]["h"] == str(m["value"]) for m in got)
    # nothing more for g, nothing at all for the other group (the copies are g's only)
    assert await poll(client, q, "g", cid, wait_ms=500) == []
    assert await poll(client, q, "other", other, wait_ms=500) == []
    # a group created now does not get them either
    late = await join(client, q, "late")
    assert len(await drain(client, q, "late", late, 9, timeout_s=3)) == 9
    assert await poll(client, q, "late", late, wait_ms=300) == []


async def test_redrive_without_dead_letters_is_zero(client: TestClient, q: str) -> None:
    assert (await client.put(f"/v1/queues/{q}", json={})).status == 201
    await join(client, q, "g")
    r = await client.post(f"/v1/queues/{q}/groups/g/dlq/redrive", json={"max_messages": 10})
    assert r.status == 200 and await r.json() == {"redriven": 0}


class CrashAfterAppend:
    """The read node's real appender, but the first call fails right after its append is
    durable: a crash between producing the copies and recording that they left the DLQ."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.crashes = 1

    async def append(self, queue: str, messages: Any) -> Any:
        out = await self.real.append(queue, messages)
        if self.crashes:
            self.crashes -= 1
            raise OSError("simulated crash after the append")
        return out


async def test_a_redrive_cut_after_its_append_loses_nothing(client: TestClient, platform: LivePlatform, q: str) -> None:
    r = await client.put(f"/v1/queues/{q}", json={"virtual_partitions": 1, "max_deliveries": 1, "visibility_timeout_ms": 200})
    assert r.status == 201
    cid = await join(client, q, "g")
    await produce(client, q, [{"key": "k", "value": i} for i in range(5)])
    await dead_letter_all(client, q, "g", cid, 5)
    redriver = platform.readers[0]._redriver  # noqa: SLF001 - the node's own redriver
    assert redriver is not None
    real = redriver._appender  # noqa: SLF001
    redriver._appender = CrashAfterAppend(real)  # type: ignore[assignment]  # noqa: SLF001
    try:
        r = await client.post(f"/v1/queues/{q}/groups/g/dlq/redrive", json={})
        assert r.status == 500
    finally:
        redriver._appender = real  # noqa: SLF001
    r = await client.post(f"/v1/queues/{q}/groups/g/dlq/redrive", json={})
    assert await r.json() == {"redriven": 5}  # still in the DLQ: produced again
    got = await drain(client, q, "g", cid, 10)
    assert [m["value"] for m in got] == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]  # duplicates, in order, none lost
