"""Appends carry the partition's leader epoch (real processes, R=2, 1 partition): a write
node refuses an append naming another epoch than the one it leads at (503
``stale_leader_epoch``, the gateway re-reads the leader and retries), and a paused old
leader (a zombie) acknowledges nothing it receives, whatever epoch it names."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from typing import Any

import aiohttp
import pytest
import redis
import requests

from tests.integration.api import Api
from tests.integration.conftest import FAST
from tests.integration.platform import Platform
from tests.integration.replica_helpers import until, write_node_pid
from vpq.codec.batch_common import VALUE_JSON
from vpq.codec.columnar import build_columnar_batch, columns_of
from vpq.codec.records import Record, decode_batches
from vpq.common.errors import VpqError
from vpq.common.runfiles import read_redis_url
from vpq.node_rpc.append_frames import STALE_LEADER_EPOCH, Frame
from vpq.node_rpc.write_node_client import WriteNodeClient

pytestmark = pytest.mark.integration




class Appender:
    """Raw appends of one record to partition 0 of queue ``q``, straight to a write node,
    in the isolation context of the partition's first record (one the gateway wrote)."""

    def __init__(self, p: Platform, queue: str, leader: str) -> None:
        r = redis.Redis.from_url(read_redis_url(p.data_dir), decode_responses=True)
        self.queue_id = int(json.loads(r.hget("vpq:queues", queue))["id"])
        self.map_epoch = int(r.hget("vpq:map", "epoch"))
        self.headers = p.node_headers()
        data = requests.get(
            f"http://{leader}/internal/v1/partitions/0/read?offset=0", headers=self.headers, timeout=10
        ).content
        self.context_id = decode_batches(data)[0].context_id

    def frame(self, value: str, leader_epoch: int) -> Frame:
        ts = int(time.time() * 1000)
        rec = Record(
            value=json.dumps(value).encode(), value_encoding=VALUE_JSON, queue_id=self.queue_id, virtual_partition=0,
            key_hash=1, key=b"z", context_id=self.context_id,
        )
        return Frame(0, build_columnar_batch(0, ts, columns_of([rec], ts)), False, leader_epoch)

    async def send(self, address: str, value: str, leader_epoch: int) -> Any:
        async with aiohttp.ClientSession(headers=self.headers) as session:
            try:
                (answer,) = await WriteNodeClient(session).append_many(
                    address, [self.frame(value, leader_epoch)], self.map_epoch
                )
            except VpqError as err:  # the whole request failed
                return err
            return answer

    def one(self, address: str, value: str, leader_epoch: int) -> Any:
        return asyncio.run(self.send(address, value, leader_epoch))


def test_appends_name_the_leader_epoch_and_a_zombie_acknowledges_nothing(tmp_path):
    p = Platform(
        tmp_path / "vpq", write_nodes=2, physical_partitions=1, replication_factor=2, min_insync=1, env=dict(FAST),
    )
    for _ in p.running():
        api = Api(p.url)
        api.put_queue("zq", virtual_partitions=1)
        api.produce("zq", [{"key": "z", "value": "g-0"}])
        part = until("both replicas in sync", lambda: (x := api.cluster()["physical_partitions"][0])
                      ["in_sync_replicas"] == ["w0", "w1"] and x)
        epoch = part["leader_epoch"]
        nodes = {n["id"]: n["address"] for n in api.cluster()["write_nodes"]}
        raw = Appender(p, "zq", nodes["w0"])

        ok = raw.one(nodes["w0"], "ok-0", epoch)
        assert isinstance(ok, tuple), ok  # the epoch it leads at
        wrong = raw.one(nodes["w0"], "never-0", epoch + 5)
        assert isinstance(wrong, VpqError) and wrong.code == STALE_LEADER_EPOCH and wrong.status == 503, wrong
        assert wrong.retryable

        old = write_node_pid(p, "w0")
        os.kill(old, signal.SIGSTOP)  # past its lease: w1 (in sync) takes over at the next epoch
        try:
            until("w1 leads", lambda: (x := api.cluster()["physical_partitions"][0])["owner"] == "w1"
                   and x["leader"] == "w1")
            new_epoch = api.cluster()["physical_partitions"][0]["leader_epoch"]
            assert new_epoch > epoch
            r = until("produce through the gateway at the new epoch", lambda: (x := requests.post(
                f"{p.url}/v1/queues/zq/messages", json={"messages": [{"key": "z", "value": "g-1"}]}, timeout=60,
            )).status_code == 200 and x)
            assert r.json()["results"][0]["partition"] == 0
            stale = raw.one(nodes["w1"], "never-1", epoch)
            assert isinstance(stale, VpqError) and stale.code == STALE_LEADER_EPOCH, stale

            async def zombie() -> list[Any]:
                sends = [
                    asyncio.create_task(raw.send(nodes["w0"], "never-2", new_epoch)),
                    asyncio.create_task(raw.send(nodes["w0"], "never-3", epoch)),
                ]
                await asyncio.sleep(0.5)  # both requests wait in the paused node's socket
                os.kill(old, signal.SIGCONT)
                return await asyncio.gather(*sends)

            answers = asyncio.run(zombie())
        finally:
            os.kill(old, signal.SIGCONT)
        for answer in answers:  # refused or failed, never acknowledged
            assert isinstance(answer, VpqError), answer
        assert isinstance(answers[0], VpqError) and answers[0].retryable, answers[0]

        until("w0 back in sync", lambda: api.cluster()["physical_partitions"][0]["in_sync_replicas"] == ["w0", "w1"],
               timeout_s=60)
        group = api.join("zq", "g", start="earliest")
        values: list[str] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            msgs = api.poll("zq", "g", group, wait_ms=500)
            if not msgs and len(values) >= 3:
                break
            values += [m["value"] for m in msgs]
            if msgs:
                api.ack("zq", "g", group, [m["id"] for m in msgs])
        assert sorted(values) == ["g-0", "g-1", "ok-0"]  # nothing the zombie or a stale epoch got
