"""Partition ownership of write nodes: takeover after a crash, hand-back, lease loss,
I/O errors taking a partition offline, graceful stop, the directory lock."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import aiohttp
import pytest

from tests.write_nodes.test_service_helpers import (
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
from vpq.config.settings import LogSettings
from vpq.metadata.leases import pp_resource
from vpq.write_nodes.log import PartitionLog
from vpq.write_nodes.ownership import PartitionBusyError, PartitionLock
from vpq.write_nodes.service import WriteNodeService


async def _serves(http: aiohttp.ClientSession, address: str) -> set[int]:
    return {p["id"] for p in (await partitions(http, address))["partitions"] if p["online"]}


async def test_sibling_takes_over_after_a_crash_and_hands_back(tmp_path, redis_url, key_prefix):
    settings = make_settings(tmp_path, key_prefix, write_nodes=2, partitions=2)
    md = await open_metadata(settings, redis_url)
    qid = await place_queue(md, "q", [0, 1])
    a = WriteNodeService(settings, "w0", 0, redis_url)
    b = WriteNodeService(settings, "w1", 1, redis_url)
    await a.start()
    await b.start()
    a2: WriteNodeService | None = None
    try:
        async with aiohttp.ClientSession() as http:
            assert await _serves(http, a.address) == {0} and await _serves(http, b.address) == {1}
            assert (await append(http, a.address, 0, batch(qid, [0, 0], "before"), 1))[1]["last_offset"] == 1
            token_a = (await md.leases.owner(pp_resource(0))).token

            await a.stop(release=False)  # a crash, as Redis sees it: lease and registration stay
            owner = await md.leases.owner(pp_resource(0))
            assert owner is not None and owner.node_id == "w0"

            async def b_serves_0() -> bool:
                return 0 in await _serves(http, b.address)

            await eventually(b_serves_0, "w1 to take partition 0 over")
            owner = await md.leases.owner(pp_resource(0))
            assert owner.node_id == "w1" and owner.token > token_a
            # same directory: the log continues where w0 left it
            assert await append(http, b.address, 0, batch(qid, [0], "after"), 1) == (200, {"base_offset": 2, "last_offset": 2})
            _, data, _ = await read(http, b.address, 0, 0)
            assert [r.value for r in decode_batches(data)] == [b"before-0", b"before-1", b"after-0"]

            # w0 comes back (same id): w1 hands partition 0 back to its home node
            a2 = WriteNodeService(settings, "w0", 0, redis_url)
            await a2.start()
            a2_address = a2.address

            async def handed_back() -> bool:
                return await _serves(http, a2_address) == {0} and await _serves(http, b.address) == {1}

            await eventually(handed_back, "partition 0 to return to w0")
            assert (await md.leases.owner(pp_resource(0))).node_id == "w0"
            assert await append(http, a2.address, 0, batch(qid, [0], "home"), 1) == (200, {"base_offset": 3, "last_offset": 3})
            status, body = await append(http, b.address, 0, batch(qid, [0]), 1)
            assert (status, body["error"]["code"]) == (503, "not_owner")
    finally:
        if a2 is not None:
            await a2.stop()
        await b.stop()
        await md.stop()


async def test_no_takeover_when_disabled(tmp_path, redis_url, key_prefix):
    settings = make_settings(tmp_path, key_prefix, write_nodes=2, partitions=2)
    md = await open_metadata(settings, redis_url)
    b = WriteNodeService(settings, "w1", 1, redis_url, takeover=False)
    await b.start()
    try:
        for _ in range(10):
            await b.ownership.tick()
        assert [p.pp for p in b.ownership.held()] == [1]
        assert await md.leases.owner(pp_resource(0)) is None
    finally:
        await b.stop()
        await md.stop()


async def test_lost_lease_stops_serving_at_once(tmp_path, redis_url, key_prefix):
    settings = make_settings(tmp_path, key_prefix)
    md = await open_metadata(settings, redis_url)
    qid = await place_queue(md, "q", [0, 1])
    service = WriteNodeService(settings, "w0", 0, redis_url)
    await service.start()
    try:
        async with aiohttp.ClientSession() as http:
            assert (await append(http, service.address, 0, batch(qid, [0]), 1))[0] == 200
            # another node grabs the lease behind w0's back (as after a long Redis partition)
            await md.client.delete(md.keys.lease(pp_resource(0)))
            assert await md.leases.acquire(pp_resource(0), "intruder", 60_000) is not None

            async def refused() -> bool:
                status, raw, _ = await read(http, service.address, 0, 0)
                return status == 503 and b"not_owner" in raw

            await eventually(refused, "w0 to notice the lost lease")
            status, body = await append(http, service.address, 0, batch(qid, [0]), 1)
            assert (status, body["error"]["code"]) == (503, "not_owner")
            assert await _serves(http, service.address) == {1}
            # w0 gets it back once the intruder lets go
            await md.leases.release(pp_resource(0), "intruder", (await md.leases.owner(pp_resource(0))).token)

            async def back() -> bool:
                return 0 in await _serves(http, service.address)

            await eventually(back, "w0 to reacquire partition 0")
            assert await append(http, service.address, 0, batch(qid, [0]), 1) == (200, {"base_offset": 1, "last_offset": 1})
    finally:
        await service.stop()
        await md.stop()


class FlakyDisk:
    """An fsync that fails while ``failing`` is set."""

    def __init__(self) -> None:
        self.failing = False

    def fsync(self, fd: int) -> None:
        if self.failing:
            raise OSError(errno.EIO, "injected I/O error")
        os.fsync(fd)

    def factory(self, directory: Path, settings: LogSettings, pp: int) -> PartitionLog:
        return PartitionLog(directory, settings, pp, fsync=self.fsync)


@pytest.mark.parametrize("reopen", [False, True])
async def test_io_error_takes_the_partition_offline(tmp_path, redis_url, key_prefix, reopen):
    settings = make_settings(tmp_path, key_prefix)
    md = await open_metadata(settings, redis_url)
    qid = await place_queue(md, "q", [0, 1])
    disk = FlakyDisk()
    service = WriteNodeService(
        settings, "w0", 0, redis_url, log_factory=disk.factory, reopen_backoff_s=0.05 if reopen else 3600.0
    )
    await service.start()
    try:
        async with aiohttp.ClientSession() as http:
            assert (await append(http, service.address, 0, batch(qid, [0], "ok"), 1))[0] == 200
            disk.failing = True
            status, body = await append(http, service.address, 0, batch(qid, [0], "lost"), 1)
            assert (status, body["error"]["code"]) == (503, "partition_offline")
            if not reopen:
                rows = {p["id"]: p for p in (await partitions(http, service.address))["partitions"]}
                assert rows[0]["online"] is False and rows[0]["state"] == "offline"
                assert rows[1]["online"] is True
                for _ in range(2):
                    status, body = await append(http, service.address, 0, batch(qid, [0]), 1)
                    assert (status, body["error"]["code"]) == (503, "partition_offline")
                    status, raw, _ = await read(http, service.address, 0, 0)
                    assert status == 503 and b"partition_offline" in raw
                return
            disk.failing = False

            async def online() -> bool:
                return 0 in await _serves(http, service.address)

            await eventually(online, "partition 0 to be reopened")
            _, data, _ = await read(http, service.address, 0, 0)
            values = [r.value for r in decode_batches(data)]
            assert values[0] == b"ok-0" and len(values) in (1, 2)  # the failed append may or may not have survived
            assert (await append(http, service.address, 0, batch(qid, [0], "again"), 1))[0] == 200
    finally:
        await service.stop()
        await md.stop()


async def test_graceful_stop_releases_and_deregisters(tmp_path, redis_url, key_prefix):
    settings = make_settings(tmp_path, key_prefix)
    md = await open_metadata(settings, redis_url)
    qid = await place_queue(md, "q", [0, 1])
    service = WriteNodeService(settings, "w0", 0, redis_url)
    await service.start()
    async with aiohttp.ClientSession() as http:
        assert (await append(http, service.address, 1, batch(qid, [1, 1]), 1))[0] == 200
    await service.stop()
    owners = await md.leases.owners([pp_resource(0), pp_resource(1)])
    assert owners == {"pp:0": None, "pp:1": None}
    assert await md.nodes.nodes("write") == []
    # the log was closed cleanly: its checkpoint covers everything appended
    checkpoint = settings.data_dir / "partitions" / "pp-00001" / "recovery-point.checkpoint"
    assert checkpoint.is_file()
    restarted = WriteNodeService(settings, "w0", 0, redis_url)
    await restarted.start()
    try:
        part = {p.pp: p for p in restarted.ownership.held()}[1]
        assert part.report is not None and part.report.recovered_end_offset == 2
        assert part.report.bytes_truncated == 0 and part.report.problem is None
    finally:
        await restarted.stop()
        await md.stop()


def test_directory_lock_is_exclusive_and_dies_with_its_holder(tmp_path):
    first = PartitionLock.acquire(tmp_path, 3, "w0", 7)
    with pytest.raises(PartitionBusyError, match='"token": 7'):
        PartitionLock.acquire(tmp_path, 3, "w1", 8)
    other = PartitionLock.acquire(tmp_path, 4, "w1", 1)  # another partition is free
    first.release()
    second = PartitionLock.acquire(tmp_path, 3, "w1", 8)
    assert '"node_id": "w1"' in (tmp_path / "pp-00003.lock").read_text()
    second.release()
    other.release()
