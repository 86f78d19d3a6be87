"""A real write node short of disk: 507 ``insufficient_storage`` per frame, nothing
appended, the partition stays online and readable, appends resume by themselves."""

from __future__ import annotations

import aiohttp

from tests.write_nodes.test_log_disk_full import TornWrites
from tests.write_nodes.test_service_helpers import (
    STEADY_LEASE_MS,
    append,
    batch,
    eventually,
    make_settings,
    open_metadata,
    partitions,
    place_queue,
    read,
)
from vpq.codec.records import decode_batches
from vpq.common.errors import InsufficientStorage
from vpq.node_rpc.append_frames import Frame
from vpq.node_rpc.write_node_client import WriteNodeClient
from vpq.write_nodes.service import WriteNodeService


async def start_node(tmp_path, redis_url, key_prefix, **kwargs):  # type: ignore[no-untyped-def]
    settings = make_settings(tmp_path, key_prefix, write_nodes=1, partitions=2, lease_ttl_ms=STEADY_LEASE_MS)
    if "min_free_bytes" in kwargs:
        settings.log.min_free_bytes = kwargs.pop("min_free_bytes")
    md = await open_metadata(settings, redis_url)
    qid = await place_queue(md, "q", [0, 1])
    service = WriteNodeService(settings, "w0", 0, redis_url, **kwargs)
    await service.start()

    async def online() -> bool:
        return len(service._ownership.snapshot()) == 2 and all(  # noqa: SLF001
            p["state"] == "online" for p in service._ownership.snapshot()  # noqa: SLF001
        )

    await eventually(online, "both partitions online")
    return service, md, qid


async def test_enospc_inside_the_write_answers_507_and_the_partition_stays_online(
    tmp_path, redis_url, key_prefix
) -> None:
    storage = TornWrites()
    service, md, qid = await start_node(tmp_path, redis_url, key_prefix, storage=storage)
    try:
        async with aiohttp.ClientSession() as http:
            assert (await append(http, service.address, 0, batch(qid, [0], "a"), 1))[0] == 200
            storage.full = True
            status, answer = await append(http, service.address, 0, batch(qid, [0, 0], "b"), 1)
            assert status == 507 and answer["error"]["code"] == "insufficient_storage", answer
            client = WriteNodeClient(http)
            (err,) = await client.append_many(service.address, [Frame(0, batch(qid, [0], "c"))], 1)
            assert isinstance(err, InsufficientStorage) and err.retry_after >= 1
            listed = {p["id"]: p for p in (await partitions(http, service.address))["partitions"]}
            assert listed[0]["state"] == "online" and listed[0]["end_offset"] == listed[0]["next_offset"] == 1
            status, data, _ = await read(http, service.address, 0, 0)
            assert status == 200 and [r.value for r in decode_batches(data)] == [b"a-0"]
            storage.full = False
            status, entry = await append(http, service.address, 0, batch(qid, [0], "d"), 1)
            assert status == 200 and entry["base_offset"] == 1
            _, data, _ = await read(http, service.address, 0, 0)
            assert [r.value for r in decode_batches(data)] == [b"a-0", b"d-0"]
    finally:
        await service.stop()
        await md.stop()


async def test_below_the_headroom_every_frame_is_refused_and_nothing_appended(tmp_path, redis_url, key_prefix) -> None:
    service, md, qid = await start_node(tmp_path, redis_url, key_prefix, min_free_bytes=1 << 60)
    try:
        async with aiohttp.ClientSession() as http:
            client = WriteNodeClient(http)
            answers = await client.append_many(
                service.address, [Frame(0, batch(qid, [0], "a")), Frame(1, batch(qid, [1], "b"))], 1
            )
            assert all(isinstance(a, InsufficientStorage) and a.status == 507 for a in answers), answers
            listed = (await partitions(http, service.address))["partitions"]
            assert all(p["state"] == "online" and p["next_offset"] == 0 for p in listed)
            assert (await read(http, service.address, 0, 0))[0] == 200
    finally:
        await service.stop()
        await md.stop()
