"""Write-node metrics: the pure per-queue summary, the log hooks (fsync timing, records per
group commit) on a real partition log, and ``GET /internal/v1/metrics`` of a real
``WriteNodeService`` (real Redis) after some appends, parsed as Prometheus text."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tests.write_nodes.test_service_helpers import (
    STEADY_LEASE_MS,
    append,
    batch,
    make_settings,
    open_metadata,
    place_queue,
)
from vpq.codec.records import Record
from vpq.config.settings import LogSettings
from vpq.write_nodes.metrics import WriteNodeMetrics, per_queue
from vpq.write_nodes.service import WriteNodeService


def samples(text: str) -> dict[str, list[Sample]]:
    """family name -> samples, from Prometheus text (raises on malformed text)."""
    return {f.name: list(f.samples) for f in text_string_to_metric_families(text)}


def value(fams: dict[str, list[Sample]], family: str, sample: str, **labels: str) -> float:
    found = [s.value for s in fams[family] if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (family, sample, labels, fams.get(family))
    return found[0]


def label_values(items: Iterable[Sample], label: str) -> set[str]:
    return {s.labels[label] for s in items if label in s.labels}


def test_per_queue_sums_vps_and_contexts_and_skips_unknown_ids() -> None:
    summary = {(1, 0, 0): [2, 10], (1, 3, 5): [1, 4], (2, 1, 0): [3, 9], (9, 0, 0): [7, 70]}
    queues = {1: ("orders", 4), 2: ("audit", 2)}
    assert per_queue(summary, queues) == {"orders": (3, 14), "audit": (3, 9)}
    assert per_queue({}, queues) == {}


async def test_log_factory_times_fsyncs_and_counts_records_per_group(tmp_path) -> None:
    m = WriteNodeMetrics()
    plog = m.log_factory(tmp_path / "pp-7", LogSettings(retention_ms=-1), 7)
    await plog.start()
    try:
        recs = [Record(value=b"v", queue_id=1, virtual_partition=0, key_hash=0)]
        await asyncio.gather(*(plog.append(recs * (1 + i % 3)) for i in range(40)))
        total = sum(1 + i % 3 for i in range(40))
        fams = samples(m.render([], 0).decode())
        groups = plog.committer.groups
        fsyncs = plog.committer.fsyncs
    finally:
        await plog.stop()
    assert value(fams, "vpq_group_commit_records", "vpq_group_commit_records_sum", partition="7") == total
    assert value(fams, "vpq_group_commit_records", "vpq_group_commit_records_count", partition="7") == groups
    assert 1 <= groups <= 40
    assert value(fams, "vpq_fsync_seconds", "vpq_fsync_seconds_count", partition="7") == fsyncs >= groups
    assert value(fams, "vpq_fsync_seconds", "vpq_fsync_seconds_sum", partition="7") > 0


async def test_metrics_endpoint_after_appends(tmp_path, redis_url, key_prefix) -> None:
    settings = make_settings(tmp_path, key_prefix, write_nodes=1, partitions=2, lease_ttl_ms=STEADY_LEASE_MS)
    md = await open_metadata(settings, redis_url)
    qid = await place_queue(md, "q", [0, 1, 0, 1])
    other = await place_queue(md, "r", [1, 1])
    service = WriteNodeService(settings, "w0", 0, redis_url)
    await service.start()
    try:
        async with aiohttp.ClientSession() as http:
            a = service.address
            epoch = 2  # two queues placed: two map updates
            sends = ((batch(qid, [0, 2, 0], "a"), 0), (batch(qid, [1], "b"), 1), (batch(other, [0, 1], "cc"), 1))
            for body, pp in sends:
                status, answer = await append(http, a, pp, body, epoch)
                assert status == 200, answer
            status, answer = await append(http, a, 0, batch(qid, [1]), epoch)  # vp 1 is not on pp 0
            assert status == 503 and answer["error"]["code"] == "stale_map"
            async with http.get(f"http://{a}/internal/v1/metrics") as resp:
                assert resp.status == 200
                assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                text = await resp.text()
    finally:
        await service.stop()
        await md.stop()
    fams = samples(text)
    assert value(fams, "vpq_produced_messages", "vpq_produced_messages_total", queue="q", partition="0") == 3
    assert value(fams, "vpq_produced_messages", "vpq_produced_messages_total", queue="q", partition="1") == 1
    assert value(fams, "vpq_produced_messages", "vpq_produced_messages_total", queue="r", partition="1") == 2
    assert value(fams, "vpq_produced_bytes", "vpq_produced_bytes_total", queue="q", partition="0") == 9  # 'a-0' x3
    assert value(fams, "vpq_produced_bytes", "vpq_produced_bytes_total", queue="r", partition="1") == 8
    assert value(fams, "vpq_partition_appended_records", "vpq_partition_appended_records_total", partition="1") == 3
    assert value(fams, "vpq_partition_appended_batches", "vpq_partition_appended_batches_total", partition="1") == 2
    assert value(fams, "vpq_partition_appended_bytes", "vpq_partition_appended_bytes_total", partition="0") > 9
    # the refused append is not counted
    assert value(fams, "vpq_append_seconds", "vpq_append_seconds_count", partition="0") == 1
    assert value(fams, "vpq_group_commit_records", "vpq_group_commit_records_sum", partition="1") == 3
    assert value(fams, "vpq_fsync_seconds", "vpq_fsync_seconds_count", partition="0") >= 1
    assert value(fams, "vpq_partition_end_offset", "vpq_partition_end_offset", partition="0") == 3
    assert value(fams, "vpq_partition_next_offset", "vpq_partition_next_offset", partition="1") == 3
    assert value(fams, "vpq_partition_start_offset", "vpq_partition_start_offset", partition="1") == 0
    assert value(fams, "vpq_partition_size_bytes", "vpq_partition_size_bytes", partition="1") > 0
    assert label_values(fams["vpq_partition_online"], "partition") == {"0", "1"}
    assert all(s.value == 1 for s in fams["vpq_partition_online"])
    assert value(fams, "vpq_write_node_partitions", "vpq_write_node_partitions") == 2
    assert value(fams, "vpq_write_node_map_epoch", "vpq_write_node_map_epoch") == 2
    assert not any("node" in s.labels for items in fams.values() for s in items)  # the gateway adds it


async def test_group_commits_and_those_written_on_the_loop_are_counted(tmp_path, redis_url, key_prefix) -> None:
    settings = make_settings(tmp_path, key_prefix, write_nodes=1, partitions=1, lease_ttl_ms=STEADY_LEASE_MS)
    md = await open_metadata(settings, redis_url)
    qid = await place_queue(md, "q", [0])
    service = WriteNodeService(settings, "w0", 0, redis_url)
    await service.start()
    try:
        async with aiohttp.ClientSession() as http:
            a = service.address
            for i in range(3):
                await asyncio.sleep(0.05)  # the node's disks idle for longer than inline_commit_idle_ms
                status, answer = await append(http, a, 0, batch(qid, [0], f"m{i}"), 1)
                assert status == 200, answer
            async with http.get(f"http://{a}/internal/v1/partitions") as resp:
                row = (await resp.json())["partitions"][0]
            async with http.get(f"http://{a}/internal/v1/metrics") as resp:
                fams = samples(await resp.text())
    finally:
        await service.stop()
        await md.stop()
    assert row["group_commits"] == 3 and row["loop_commits"] == 3
    assert value(fams, "vpq_partition_group_commits", "vpq_partition_group_commits", partition="0") == 3
    assert value(fams, "vpq_partition_loop_commits", "vpq_partition_loop_commits", partition="0") == 3
