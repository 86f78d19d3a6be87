"""The write-node service's internal API against a real Redis: append, read, errors."""

from __future__ import annotations

import asyncio

import aiohttp

from tests.codec.format1 import build_batch
from tests.write_nodes.test_service_helpers import (
    append,
    batch,
    make_settings,
    open_metadata,
    partitions,
    place_queue,
    read,
)
from vpq.codec.records import Record, decode_batches, iter_batches
from vpq.common.errors import Unavailable
from vpq.metadata.leases import pp_resource
from vpq.node_rpc.append_frames import Frame
from vpq.node_rpc.write_node_client import WriteNodeClient
from vpq.write_nodes.service import WriteNodeService


async def test_append_then_read_back_raw_bytes(node):
    service, _md, qid, http = node
    first = batch(qid, [0, 3, 0], "a")
    second = batch(qid, [3, 0], "b")
    assert await append(http, service.address, 0, first, 1) == (200, {"base_offset": 0, "last_offset": 2})
    assert await append(http, service.address, 0, second, 1) == (200, {"base_offset": 3, "last_offset": 4})

    status, data, headers = await read(http, service.address, 0, 0)
    assert status == 200
    assert (headers["X-Start-Offset"], headers["X-End-Offset"]) == ("0", "5")
    views = list(iter_batches(data, verify=True))
    assert [(v.base_offset, v.record_count) for v in views] == [(0, 3), (3, 2)]
    # the stored bytes are the sent batches, base offset re-stamped
    assert data[8 : views[0].size] == first[8:]
    records = decode_batches(data)
    assert [(r.offset, r.value, r.virtual_partition) for r in records] == [
        (0, b"a-0", 0), (1, b"a-1", 3), (2, b"a-2", 0), (3, b"b-0", 3), (4, b"b-1", 0),
    ]
    # an offset inside the second batch returns that whole batch
    status, data, _ = await read(http, service.address, 0, 4)
    assert [v.base_offset for v in iter_batches(data)] == [3]
    # the other home partition is independent
    assert await append(http, service.address, 2, batch(qid, [2]), 1) == (200, {"base_offset": 0, "last_offset": 0})


async def test_concurrent_appends_get_distinct_contiguous_offsets(node):
    service, _md, qid, http = node
    results = await asyncio.gather(*(append(http, service.address, 0, batch(qid, [0, 3], f"c{i}"), 1) for i in range(20)))
    assert all(status == 200 for status, _ in results)
    ranges = sorted((body["base_offset"], body["last_offset"]) for _, body in results)
    assert ranges == [(2 * i, 2 * i + 1) for i in range(20)]
    _, data, headers = await read(http, service.address, 0, 0)
    assert headers["X-End-Offset"] == "40" and len(decode_batches(data)) == 40


async def test_record_placed_elsewhere_is_stale_map(node):
    service, _md, qid, http = node
    status, body = await append(http, service.address, 0, batch(qid, [0, 1]), 1)
    assert status == 503
    assert body["error"]["code"] == "stale_map" and body["error"]["epoch"] == 1
    status, body = await append(http, service.address, 0, batch(qid + 100, [0]), 1)
    assert (status, body["error"]["code"]) == (503, "stale_map")
    status, body = await append(http, service.address, 0, batch(qid, [7]), 1)  # vp beyond V
    assert (status, body["error"]["code"]) == (503, "stale_map")
    _, data, headers = await read(http, service.address, 0, 0)
    assert data == b"" and headers["X-End-Offset"] == "0"  # nothing was appended


async def test_partition_not_held_is_not_owner(node):
    service, _md, qid, http = node
    for pp in (1, 3, 99):
        status, body = await append(http, service.address, pp, batch(qid, [1]), 1)
        assert (status, body["error"]["code"]) == (503, "not_owner")
        status, raw, _ = await read(http, service.address, pp, 0)
        assert status == 503 and b"not_owner" in raw


async def test_corrupt_batches_are_rejected_and_change_nothing(node):
    service, _md, qid, http = node
    good = batch(qid, [0, 0])
    flipped = bytearray(good)
    flipped[-1] ^= 0xFF
    rows = build_batch(0, [Record(value=b"v", queue_id=qid, virtual_partition=0)], 1000)  # magic 1: never sent
    for body in (bytes(flipped), good + good, good[:-3], b"", b"x" * 10, rows):
        status, answer = await append(http, service.address, 0, body, 1)
        assert (status, answer["error"]["code"]) == (400, "corrupt_batch"), body[:20]
    status, answer = await append(http, service.address, 0, good, "x")  # type: ignore[arg-type]
    assert (status, answer["error"]["code"]) == (400, "invalid_header")
    _, data, _ = await read(http, service.address, 0, 0)
    assert data == b""


async def test_bad_read_parameters_and_unknown_routes(node):
    service, _md, _qid, http = node
    async with http.get(f"http://{service.address}/internal/v1/partitions/0/read") as resp:
        assert resp.status == 400 and (await resp.json())["error"]["field"] == "offset"
    async with http.get(f"http://{service.address}/internal/v1/partitions/0/read?offset=-1") as resp:
        assert resp.status == 400
    async with http.get(f"http://{service.address}/internal/v1/nothing") as resp:
        assert resp.status == 404 and (await resp.json())["error"]["code"] == "not_found"
    async with http.get(f"http://{service.address}/internal/v1/append") as resp:
        assert resp.status == 405 and (await resp.json())["error"]["allowed"] == ["POST"]
    async with http.post(f"http://{service.address}/internal/v1/partitions/0/append", data=batch(_qid, [0])) as resp:
        assert resp.status == 404  # appends go through /internal/v1/append only


async def test_long_poll_returns_when_data_arrives(node):
    service, _md, qid, http = node
    status, data, headers = await read(http, service.address, 0, 0, wait_ms=50)
    assert (status, data, headers["X-End-Offset"]) == (200, b"", "0")  # nothing after waiting
    waiting = asyncio.create_task(read(http, service.address, 0, 0, wait_ms=20_000))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    assert (await append(http, service.address, 0, batch(qid, [0], "late"), 1))[0] == 200
    status, data, headers = await waiting
    assert status == 200 and headers["X-End-Offset"] == "1"
    assert [r.value for r in decode_batches(data)] == [b"late-0"]


async def test_read_past_the_end_waits_for_that_offset(node):
    service, _md, qid, http = node
    assert (await append(http, service.address, 0, batch(qid, [0]), 1))[0] == 200
    waiting = asyncio.create_task(read(http, service.address, 0, 2, wait_ms=20_000))
    assert (await append(http, service.address, 0, batch(qid, [0], "second"), 1))[0] == 200  # offset 1
    assert (await append(http, service.address, 0, batch(qid, [0, 0], "third"), 1))[0] == 200  # 2-3
    status, data, _ = await waiting
    assert status == 200 and [r.offset for r in decode_batches(data)] == [2, 3]


async def test_newer_sender_epoch_refreshes_the_map(tmp_path, redis_url, key_prefix):
    # no pub/sub and slow polling: the node only learns the new map on demand
    settings = make_settings(tmp_path, key_prefix, write_nodes=1, partitions=2, poll_ms=600_000)
    md = await open_metadata(settings, redis_url)
    qid = await place_queue(md, "q", [0, 1])
    service = WriteNodeService(settings, "w0", 0, redis_url, use_pubsub=False)
    await service.start()
    try:
        async with aiohttp.ClientSession() as http:
            assert (await append(http, service.address, 1, batch(qid, [1]), 1))[0] == 200  # q is now held by the node
            await place_queue(md, "q", [0, 0])  # epoch 2 moves vp 1 to pp 0
            status, body = await append(http, service.address, 0, batch(qid, [1]), 1)
            assert (status, body["error"]["code"], body["error"]["epoch"]) == (503, "stale_map", 1)
            assert await append(http, service.address, 0, batch(qid, [1]), 2) == (200, {"base_offset": 0, "last_offset": 0})
            assert (await partitions(http, service.address))["map_epoch"] == 2
            # a queue created after the node's last reload is found by its id
            other = await place_queue(md, "other", [0])
            assert (await append(http, service.address, 0, batch(other, [0]), 3))[0] == 200
    finally:
        await service.stop()
        await md.stop()


async def test_partitions_listing_and_registration(node):
    service, md, qid, http = node
    assert (await append(http, service.address, 0, batch(qid, [0, 0, 0]), 1))[0] == 200
    listing = await partitions(http, service.address)
    assert listing["node_id"] == "w0" and listing["map_epoch"] == 1
    rows = {p["id"]: p for p in listing["partitions"]}
    assert set(rows) == {0, 2}
    assert rows[0]["start_offset"] == 0 and rows[0]["end_offset"] == 3 and rows[0]["next_offset"] == 3
    assert rows[0]["bytes"] > 0 and rows[0]["online"] is True and rows[0]["state"] == "online"
    assert rows[2]["end_offset"] == 0
    nodes = await md.nodes.nodes("write")
    assert [(n.node_id, n.address, n.meta["index"]) for n in nodes] == [("w0", service.address, 0)]
    owners = await md.leases.owners([pp_resource(pp) for pp in range(4)])
    assert {r: (o.node_id if o else None) for r, o in owners.items()} == {
        "pp:0": "w0", "pp:1": None, "pp:2": "w0", "pp:3": None,
    }
    assert await md.client.get(f"{md.keys.prefix}:cluster:physical_partitions") == "4"


async def test_the_write_node_client_speaks_the_same_wire_format(node):
    service, _md, qid, http = node
    client = WriteNodeClient(http)
    assert await client.append_many(service.address, [Frame(0, batch(qid, [0, 3]))], 1) == [(0, 1)]
    result = await client.read(service.address, 0, 0, 1 << 20, 0)
    assert (result.start_offset, result.end_offset) == (0, 2) and len(decode_batches(result.data)) == 2
    (refused,) = await client.append_many(service.address, [Frame(1, batch(qid, [1]))], 1)
    assert isinstance(refused, Unavailable) and refused.code == "not_owner"
    assert [p["id"] for p in (await client.partitions(service.address))["partitions"]] == [0, 2]
