"""The SDK (blocking Client, AsyncClient with Producer and Consumer, the CLI commands)
against a real `vpq up` (processes, Redis, disks), the module's platform of
tests/integration/conftest.py."""

from __future__ import annotations

import asyncio

import pytest
from typer.testing import CliRunner

from tests.integration.api import unique_name
from vpq.cli.main import app
from vpq.sdk.client import AsyncClient
from vpq.sdk.consumer import Consumer
from vpq.sdk.errors import ConflictError, NotFoundError
from vpq.sdk.models import Message, ProduceMessage
from vpq.sdk.producer import Producer
from vpq.sdk.sync import Client

pytestmark = pytest.mark.integration

GUARD_S = 30  # only a hang guard


def test_blocking_client_round_trip(platform) -> None:  # type: ignore[no-untyped-def]
    q = unique_name("sdk-sync")
    with Client(platform.url) as c:
        assert c.readyz()
        info = c.put_queue(q, virtual_partitions=4, max_message_bytes=1024)
        assert info["virtual_partitions"] == 4 and len(info["placement"]) == 4
        with pytest.raises(ConflictError):
            c.put_queue(q, virtual_partitions=2)
        results = c.produce(q, [ProduceMessage(value={"n": 1}, key="k"), {"value": b"\x00\x01", "key": "k"}], lane="feat-a")
        joined = c.join(q, "g", lane="feat-a")
        got: list[Message] = []
        for _ in range(20):
            got += c.poll(q, "g", joined.consumer_id, max_messages=10, wait_ms=500)
            if len(got) >= 2:
                break
        assert [m.value for m in got] == [{"n": 1}, b"\x00\x01"]  # one key: in order
        assert [m.id for m in got] == [r.id for r in results]
        assert {m.lane for m in got} == {"feat-a"}
        assert c.ack(q, "g", joined.consumer_id, [got[0].id]) == 1
        assert c.group(q, "g")["lag"]["total"] == 1
        c.leave(q, "g", joined.consumer_id)
        assert q in c.current_map()["queues"]
        c.delete_queue(q)
        with pytest.raises(NotFoundError):
            c.get_queue(q)


async def test_producer_and_consumer_deliver_every_message_in_key_order(platform) -> None:  # type: ignore[no-untyped-def]
    q = unique_name("sdk-async")
    keys = [f"k{i}" for i in range(8)]
    async with AsyncClient(platform.url) as client:
        await client.put_queue(q, virtual_partitions=8)
        async with Producer(client, linger_ms=5, max_batch=50) as producer:
            futures = [await producer.send(q, {"key": k, "seq": s}, key=k) for s in range(25) for k in keys]
            results = await asyncio.gather(*futures)
        assert len({r.id for r in results}) == 200

        seen: dict[str, list[int]] = {k: [] for k in keys}
        done = asyncio.Event()

        async def handle(msg: Message) -> None:
            seen[msg.key or ""].append(msg.value["seq"])  # type: ignore[index]
            if sum(len(v) for v in seen.values()) >= 200:
                done.set()

        consumer = Consumer(client, q, "g", handle, max_messages=50, wait_ms=500)
        await consumer.start()
        try:
            await asyncio.wait_for(done.wait(), GUARD_S)
        finally:
            await consumer.stop()
        assert all(seen[k] == list(range(25)) for k in keys), seen  # every message, once, in key order
        assert consumer.handled == 200 and consumer.failed == 0
        assert (await client.group(q, "g"))["lag"]["total"] == 0


def test_cli_commands_against_the_platform(platform) -> None:  # type: ignore[no-untyped-def]
    q = unique_name("sdk-cli")
    runner = CliRunner()
    env = {"COLUMNS": "200", "VPQ_URL": "", "VPQ_TOKEN": ""}

    def vpq(*args: str):  # type: ignore[no-untyped-def]
        return runner.invoke(app, [*args, "--url", platform.url], env=env)

    assert vpq("create-queue", q, "--virtual-partitions", "1").exit_code == 0
    res = vpq("produce", q, "1", "2", "3")
    assert res.exit_code == 0 and "produced (3)" in res.stdout, res.output
    res = vpq("consume", q, "-g", "g", "--wait-ms", "1000")
    assert res.exit_code == 0, res.output
    assert [line.split()[-1] for line in res.stdout.splitlines()] == ["1", "2", "3"]
    res = vpq("cluster")
    assert res.exit_code == 0 and "write nodes (1)" in res.stdout and "read nodes (1)" in res.stdout
    assert vpq("delete-queue", q, "--yes").exit_code == 0
