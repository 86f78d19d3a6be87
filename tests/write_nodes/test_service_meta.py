"""A running cluster's partition count wins over the settings', traffic statistics, and
the process entry point."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pyarrow.parquet as pq

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
from vpq.common.runfiles import write_settings
from vpq.metadata.leases import pp_resource
from vpq.write_nodes.service import WriteNodeService

REPO = Path(__file__).resolve().parents[2]


async def test_an_existing_cluster_keeps_its_partition_count(tmp_path, redis_url, key_prefix):
    settings = make_settings(tmp_path, key_prefix, partitions=3)
    md = await open_metadata(settings, redis_url)
    await md.get_or_init_partition_count(1)
    service = WriteNodeService(settings, "w0", 0, redis_url)
    await service.start()
    try:
        assert service.partition_count == 1
        assert [p.pp for p in service.ownership.held()] == [0]
    finally:
        await service.stop()
        await md.stop()


async def test_traffic_is_counted_per_queue_vp_lane_env(tmp_path, redis_url, key_prefix):
    settings = make_settings(tmp_path, key_prefix)
    md = await open_metadata(settings, redis_url)
    qid = await place_queue(md, "q", [0, 1, 0, 1])
    lane_ctx = await md.contexts.intern("test", "", "feat-a")
    service = WriteNodeService(settings, "w0", 0, redis_url)
    await service.start()
    try:
        async with aiohttp.ClientSession() as http:
            assert (await append(http, service.address, 0, batch(qid, [0, 2, 0], "x", lane_ctx), 1))[0] == 200
            assert (await append(http, service.address, 1, batch(qid, [3], "yy", lane_ctx), 1))[0] == 200
            assert (await append(http, service.address, 0, batch(qid, [2], "z", 0), 1))[0] == 200
        written = await service.traffic.flush(final=True)
        assert written
        stats = settings.data_dir / "stats"
        rows = [r for f in stats.rglob("w0-w*.parquet") for r in pq.read_table(f).to_pylist()]
        totals: dict[tuple, list[int]] = {}
        for r in rows:
            assert r["node_id"] == "w0" and r["window_ms"] == 100
            if r["queue"]:
                key = (r["queue"], r["vp"], r["virtual_partitions"], r["lane"], r["env"])
                t = totals.setdefault(key, [0, 0])
                t[0] += r["messages"]
                t[1] += r["bytes"]
        assert totals == {
            ("q", 0, 4, "feat-a", "test"): [2, 6],  # x-0, x-2
            ("q", 2, 4, "feat-a", "test"): [1, 3],  # x-1
            ("q", 3, 4, "feat-a", "test"): [1, 4],  # yy-0
            ("q", 2, 4, "", "prod"): [1, 3],  # context id 0 is unknown: the default context
        }
    finally:
        await service.stop()
        await md.stop()


async def test_main_runs_until_sigterm_and_stops_cleanly(tmp_path, redis_url, key_prefix):
    settings = make_settings(tmp_path, key_prefix)
    settings_file = write_settings(settings)
    md = await open_metadata(settings, redis_url)
    qid = await place_queue(md, "q", [0, 1])
    proc = subprocess.Popen(
        [sys.executable, "-m", "vpq.write_nodes.main", "--settings", str(settings_file), "--node-id", "w0",
         "--index", "0", "--redis-url", redis_url],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stderr=subprocess.PIPE,
    )
    try:
        async with aiohttp.ClientSession() as http:

            async def serving() -> bool:
                assert proc.poll() is None, "the write node exited early"
                nodes = await md.nodes.nodes("write")
                if not nodes:
                    return False
                listing = await partitions(http, nodes[0].address)
                return sorted(p["id"] for p in listing["partitions"] if p["online"]) == [0, 1]

            await eventually(serving, "the write node to register and open its partitions", timeout_s=30)
            address = (await md.nodes.nodes("write"))[0].address
            assert (await append(http, address, 1, batch(qid, [1, 1], "p"), 1))[0] == 200
            _, data, _ = await read(http, address, 1, 0)
            assert [r.value for r in decode_batches(data)] == [b"p-0", b"p-1"]
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.get_running_loop().run_in_executor(None, proc.communicate, None, 30)
        assert proc.returncode == 0, err.decode()[-2000:]
        log_text = err.decode()
        assert "listening on" in log_text and "stopped" in log_text
        assert await md.leases.owners([pp_resource(0), pp_resource(1)]) == {"pp:0": None, "pp:1": None}
        assert await md.nodes.nodes("write") == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        await md.stop()
