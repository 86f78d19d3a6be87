"""Deduplication in a real write node: retried frames, restart, takeover, window 0."""

from __future__ import annotations

import time
from collections.abc import Sequence

import aiohttp

from tests.write_nodes.test_service_helpers import (
    eventually,
    make_settings,
    open_metadata,
    partitions,
    place_queue,
    read,
)
from vpq.codec.batch_common import Record
from vpq.codec.columnar import build_columnar_batch, columns_of
from vpq.codec.records import decode_batches
from vpq.codec.system_headers import attribute_headers, split
from vpq.node_rpc.append_frames import Deduplicated, Frame
from vpq.node_rpc.write_node_client import WriteNodeClient
from vpq.write_nodes.service import WriteNodeService


def dedup_batch(queue_id: int, vps: Sequence[int], ids: Sequence[str | None], tag: str = "m") -> bytes:
    records = [
        Record(
            value=f"{tag}-{i}".encode(),
            queue_id=queue_id,
            virtual_partition=vp,
            key=f"k{i}".encode(),
            headers=attribute_headers(None, 0, d) if d is not None else (),
        )
        for i, (vp, d) in enumerate(zip(vps, ids))
    ]
    ts = int(time.time() * 1000)
    return build_columnar_batch(0, ts, columns_of(records, ts))


async def stored(http: aiohttp.ClientSession, address: str, pp: int) -> list[tuple[str | None, bytes]]:
    _, data, _ = await read(http, address, pp, 0)
    return [(split(r.headers)[0].dedup_id, r.value) for r in decode_batches(data)]


async def test_a_retried_frame_is_not_stored_twice(node) -> None:
    service, _md, qid, http = node
    client = WriteNodeClient(http)
    first = [Frame(0, dedup_batch(qid, [0, 3], ["a", "b"])), Frame(2, dedup_batch(qid, [2], ["c"]))]
    assert await client.append_many(service.address, first, 1) == [(0, 1), (0, 0)]
    retry = [
        Frame(0, dedup_batch(qid, [3, 0, 0], ["b", "new", "a"], "r")),
        Frame(2, dedup_batch(qid, [2], ["c"], "r")),
    ]
    assert await client.append_many(service.address, retry, 1) == [
        Deduplicated([1, 2, 0], [3, 0, 0]),
        Deduplicated([0], [2]),
    ]
    assert await stored(http, service.address, 0) == [("a", b"m-0"), ("b", b"m-1"), ("new", b"r-1")]
    assert await stored(http, service.address, 2) == [("c", b"m-0")]
    rows = {r["id"]: r for r in (await partitions(http, service.address))["partitions"]}
    assert (rows[0]["dedup_ids"], rows[0]["dedup_duplicates"]) == (3, 2)
    assert (rows[2]["dedup_ids"], rows[2]["dedup_duplicates"]) == (1, 1)
    async with http.get(f"http://{service.address}/internal/v1/metrics") as resp:
        text = await resp.text()
    assert 'vpq_partition_dedup_duplicates{partition="0"} 2.0' in text


async def test_dedup_holds_across_a_restart_and_a_takeover(tmp_path, redis_url, key_prefix) -> None:
    settings = make_settings(tmp_path, key_prefix, write_nodes=2, partitions=2)
    md = await open_metadata(settings, redis_url)
    qid = await place_queue(md, "q", [0, 1])
    a = WriteNodeService(settings, "w0", 0, redis_url)
    await a.start()
    b: WriteNodeService | None = None
    try:
        async with aiohttp.ClientSession() as http:
            client = WriteNodeClient(http)
            assert await client.append_many(a.address, [Frame(0, dedup_batch(qid, [0, 0], ["x", "y"]))], 1) == [(0, 1)]
            await a.stop()
            a = WriteNodeService(settings, "w0", 0, redis_url)
            await a.start()  # a graceful restart: the index is rebuilt from the log
            again = await client.append_many(a.address, [Frame(0, dedup_batch(qid, [0], ["y"], "r"))], 1)
            assert again == [Deduplicated([1], [0])]

            b = WriteNodeService(settings, "w1", 1, redis_url)
            await b.start()
            await a.stop(release=False)  # a crash as Redis sees it: w1 takes partition 0 over
            node_b = b

            async def b_serves_0() -> bool:
                _, _, headers = await read(http, node_b.address, 0, 0)
                return "X-End-Offset" in headers

            await eventually(b_serves_0, "w1 to take partition 0 over")
            answer = await client.append_many(b.address, [Frame(0, dedup_batch(qid, [0, 0], ["x", "z"], "t"))], 1)
            assert answer == [Deduplicated([0, 2], [0, 0])]
            assert await stored(http, b.address, 0) == [("x", b"m-0"), ("y", b"m-1"), ("z", b"t-1")]
    finally:
        if b is not None:
            await b.stop()
        await a.stop()
        await md.stop()


async def test_a_queue_with_window_zero_stores_every_copy(node) -> None:
    service, md, qid, http = node
    client = WriteNodeClient(http)
    await client.append_many(service.address, [Frame(0, dedup_batch(qid, [0], ["first"]))], 1)  # the node loads q
    await md.queues.create_or_update("q", {"dedup_window_ms": 0})

    async def off() -> bool:
        return service.ownership is not None and (await _window(service, qid)) == 0

    await eventually(off, "the node to see dedup_window_ms 0")
    for _ in range(2):
        await client.append_many(service.address, [Frame(0, dedup_batch(qid, [0], ["same"]))], 1)
    assert await stored(http, service.address, 0) == [("first", b"m-0"), ("same", b"m-0"), ("same", b"m-0")]


async def _window(service: WriteNodeService, qid: int) -> int:
    cache = service._cache  # noqa: SLF001 - what the node's placement guard reads
    assert cache is not None
    rec = cache.queue_by_id(qid)
    return -1 if rec is None else int(rec.config["dedup_window_ms"])
