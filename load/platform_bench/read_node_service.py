"""Benchmark of the read-node service over real processes' parts, in one event loop.

``python -m vpq.load.platform_bench.read_node_service [--messages 20000] [--consumers 4] [--queues 100]``

Starts its own redis-server (no persistence: the figures are about the read
node), a real ``WriteNodeService`` and a ``ReadNodeService`` on free ports,
produces through the real produce path (``produce_path.produce.Appender``) and
consumes through ``node_rpc.read_node_client`` over HTTP. Measures:

1. ``empty_poll_ms``: round trip of a poll with nothing to deliver;
2. ``produce_to_poll_ms`` p50/p99: a long poll waiting, one message produced
   (durable: fsynced), time until the poll answers; ``durable_to_poll_ms``: the
   part after the produce was answered (tail long-poll + ingestion + delivery);
3. ``drain_msgs_per_s``: one group, ``--consumers`` consumers polling up to 500
   and acking, over a backlog of ``--messages`` keyed messages;
4. ``many_queues_drain_msgs_per_s``: ``--queues`` small queues merged into the same
   physical partitions, one group each, drained by one consumer per group
   (reads only each queue's offsets from the per-queue index).

Prints one line per figure and a JSON summary as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from vpq.common.redis_server import RedisServer
from vpq.config.settings import ClusterSettings, QueueDefaults, RedisSettings, Settings
from vpq.metadata.map_cache import MapCache
from vpq.metadata.store import MetadataStore
from vpq.node_rpc.node_directory import WriteNodeDirectory
from vpq.node_rpc.read_node_client import ReadNodeClient
from vpq.node_rpc.write_node_client import WriteNodeClient
from vpq.produce_path.append_accumulator import AppendAccumulator
from vpq.produce_path.produce import Appender, PlainMessage
from vpq.queue_admin.cluster_queues import QueueAdmin
from vpq.read_nodes.service import ReadNodeService
from vpq.traffic.cluster_traffic import TrafficMeter
from vpq.virtual_partitions.router import ProduceRouter


def _pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))] if s else 0.0


async def _drain(client: ReadNodeClient, address: str, queue: str, group: str, cids: list[str], total: int) -> float:
    done = 0
    start = time.perf_counter()

    async def worker(cid: str) -> None:
        nonlocal done
        while done < total:
            batch = await client.poll(address, queue, group, cid, 500, 100)
            if batch:
                await client.ack(address, queue, group, cid, [m["id"] for m in batch])
                done += len(batch)

    await asyncio.wait_for(asyncio.gather(*(worker(c) for c in cids)), 300)
    return total / (time.perf_counter() - start)


async def run(messages: int, consumers: int, queues: int, pps: int) -> dict[str, Any]:
    from vpq.write_nodes.service import WriteNodeService

    tmp = Path(tempfile.mkdtemp(prefix="vpq-bench-read-"))
    redis = RedisServer(data_dir=tmp / "redis", appendonly=False)
    redis.start()
    settings = Settings(
        data_dir=tmp, redis=RedisSettings(key_prefix="bench"), cluster=ClusterSettings(physical_partitions=pps),
        queues=QueueDefaults(),
    )
    md = MetadataStore(settings.redis, url=redis.url, queue_defaults=settings.queues)
    out: dict[str, Any] = {"messages": messages, "consumers": consumers, "queues": queues, "physical_partitions": pps}
    writer = WriteNodeService(settings, "w0", 0, redis.url)
    reader = ReadNodeService(settings, "r0", redis.url)
    await md.start()
    listener = md.event_listener()
    await listener.start()
    cache = MapCache(md.queues, md.maps, listener)
    await cache.start()
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256))
    try:
        await writer.start()
        await reader.start()
        a = reader.address
        admin = QueueAdmin(md, lambda: list(range(pps)), TrafficMeter(), on_change=cache.refresh)
        writers = WriteNodeDirectory(md.nodes, md.leases, pps)
        appender = Appender(cache, ProduceRouter(cache, md.contexts), writers, AppendAccumulator(WriteNodeClient(session)))
        client = ReadNodeClient(session)

        def msg(key: str, i: int) -> PlainMessage:
            return PlainMessage(value=orjson.dumps({"i": i, "pad": "x" * 200}), value_is_json=True, key=key)

        await admin.put("bench", {"virtual_partitions": 16})
        cid = (await client.join(a, "bench", "g", consumer_id="c0", env="", set_="", lane=""))["consumer_id"]
        t = time.perf_counter()
        for _ in range(200):
            await client.poll(a, "bench", "g", cid, 10, 0)
        out["empty_poll_ms"] = round((time.perf_counter() - t) / 200 * 1000, 3)
        lat: list[float] = []
        after: list[float] = []
        for i in range(200):
            pending = asyncio.ensure_future(client.poll(a, "bench", "g", cid, 10, 5000))
            await asyncio.sleep(0.005)
            t = time.perf_counter()
            await appender.append("bench", [msg(f"lat-{i}", i)])
            durable = time.perf_counter()
            got = await pending
            done = time.perf_counter()
            lat.append((done - t) * 1000)
            after.append((done - durable) * 1000)
            await client.ack(a, "bench", "g", cid, [m["id"] for m in got])
        out["produce_to_poll_ms_p50"] = round(_pct(lat, 0.5), 2)
        out["produce_to_poll_ms_p99"] = round(_pct(lat, 0.99), 2)
        out["durable_to_poll_ms_p50"] = round(_pct(after, 0.5), 2)
        out["durable_to_poll_ms_p99"] = round(_pct(after, 0.99), 2)
        for i in range(0, messages, 500):
            await appender.append("bench", [msg(f"key-{j % 1000}", j) for j in range(i, min(messages, i + 500))])
        cids = [cid] + [
            (await client.join(a, "bench", "g", consumer_id=f"c{k}", env="", set_="", lane=""))["consumer_id"]
            for k in range(1, consumers)
        ]
        out["drain_msgs_per_s"] = round(await _drain(client, a, "bench", "g", cids, messages))
        per_queue = max(1, messages // queues)
        names = [f"small-{q}" for q in range(queues)]
        for name in names:
            await admin.put(name, {"virtual_partitions": 1})
        for i in range(per_queue):
            await asyncio.gather(*(appender.append(n, [msg(f"k{i}", i)]) for n in names))
        group_cids = []
        for name in names:
            group_cids.append((await client.join(a, name, "g", consumer_id="c", env="", set_="", lane=""))["consumer_id"])
        t = time.perf_counter()
        await asyncio.gather(*(_drain(client, a, n, "g", ["c"], per_queue) for n in names))
        out["many_queues_drain_msgs_per_s"] = round(per_queue * queues / (time.perf_counter() - t))
        status = reader.status()
        out["record_cache_hit_ratio"] = round(status["cache"]["hit_ratio"], 3)
        out["tailers"] = len(status["tailers"])
    finally:
        await session.close()
        await reader.stop()
        await writer.stop()
        await cache.stop()
        await listener.stop()
        await md.stop()
        redis.stop()
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m vpq.load.platform_bench.read_node_service", description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--consumers", type=int, default=4)
    p.add_argument("--queues", type=int, default=100)
    p.add_argument("--physical-partitions", type=int, default=2)
    args = p.parse_args(argv)
    result = asyncio.run(run(args.messages, args.consumers, args.queues, args.physical_partitions))
    for k, v in result.items():
        print(f"{k:32s} {v}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
