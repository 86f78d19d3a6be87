"""Read-node metrics: the pure sampling and rendering, and ``GET /internal/v1/metrics`` of a
real ``ReadNodeService`` (real Redis, the real write node of ``test_service_env``) after deliveries, acks, nacks, a redelivery and a dead letter."""

from __future__ import annotations

import asyncio

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tests.read_nodes.test_service_env import Env, drain
from vpq.isolation.context import IsolationContext
from vpq.read_nodes.metrics import NodeSample, ReadNodeMetrics, group_sample


def samples(text: str) -> dict[str, list[Sample]]:
    """family name -> samples, from Prometheus text (raises on malformed text)."""
    return {f.name: list(f.samples) for f in text_string_to_metric_families(text)}


def series(fams: dict[str, list[Sample]], family: str, **labels: str) -> dict[tuple[tuple[str, str], ...], float]:
    """(sorted labels) -> value of the samples of ``family`` that carry ``labels``."""
    return {
        tuple(sorted(s.labels.items())): s.value
        for s in fams.get(family, [])
        if all(s.labels.get(k) == v for k, v in labels.items())
    }


def one(fams: dict[str, list[Sample]], family: str, **labels: str) -> float:
    found = series(fams, family, **labels)
    assert len(found) == 1, (family, labels, fams.get(family))
    return next(iter(found.values()))


def test_group_sample_from_the_public_group_answer() -> None:
    info = {
        "members": [{"consumer_id": "a", "in_flight": 2}, {"consumer_id": "b", "in_flight": 1}],
        "lag": {"total": 7, "by_lane": {"": 5, "feat-a": 2}, "by_env": {"prod": 7}, "by_set": {"": 7}},
    }
    oldest = {IsolationContext(): 1_000, IsolationContext(lane="feat-a"): 4_000}
    stats = {"ready": 4, "dead_letters": 1, "dead_letters_pending": 1, "blocked_keys": 2, "parked_keys": 1}
    g = group_sample("q", "g", info, stats, oldest, now_ms=6_000)
    assert (g.lag, g.consumers, g.in_flight, g.ready, g.pending_dead_letters) == (7, 2, 3, 4, 1)
    assert g.by_lane == {"": 5, "feat-a": 2}
    fams = samples(ReadNodeMetrics().render(NodeSample(groups=[g])).decode())
    assert one(fams, "vpq_group_lag_messages", queue="q", group="g") == 7
    assert series(fams, "vpq_group_lane_lag_messages") == {
        (("group", "g"), ("lane", ""), ("queue", "q")): 5,
        (("group", "g"), ("lane", "feat-a"), ("queue", "q")): 2,
    }
    assert one(fams, "vpq_group_in_flight_messages", queue="q", group="g") == 3
    assert one(fams, "vpq_read_node_groups") == 1
    assert one(fams, "vpq_group_blocked_keys", queue="q", group="g") == 2
    assert one(fams, "vpq_group_parked_keys", queue="q", group="g") == 1
    assert series(fams, "vpq_group_oldest_unacked_age_seconds") == {
        (("env", "prod"), ("group", "g"), ("lane", ""), ("queue", "q"), ("set", "")): 5.0,
        (("env", "prod"), ("group", "g"), ("lane", "feat-a"), ("queue", "q"), ("set", "")): 2.0,
    }
    assert "vpq_record_cache_bytes" not in fams  # no cache figures given


def test_counters_count_redeliveries_and_ignore_zero() -> None:
    m = ReadNodeMetrics()
    m.delivered("q", "g", 2, 1)
    m.delivered("q", "g", 0, 0)
    m.acked("q", "g", 0)
    m.nacked("q", "h", 2)
    fams = samples(m.render(NodeSample()).decode())
    assert one(fams, "vpq_delivered_messages", queue="q", group="g") == 2
    assert one(fams, "vpq_redelivered_messages", queue="q", group="g") == 1
    assert series(fams, "vpq_acked_messages") == {}
    assert one(fams, "vpq_nacked_messages", queue="q", group="h") == 2


async def scrape(address: str) -> dict[str, list[Sample]]:
    async with aiohttp.ClientSession() as http, http.get(f"http://{address}/internal/v1/metrics") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return samples(await resp.text())


async def test_metrics_endpoint_after_traffic(redis_url, key_prefix, tmp_path) -> None:
    env = Env(redis_url, key_prefix, tmp_path)
    await env.start()
    try:
        await env.create_queue("orders", virtual_partitions=4, max_deliveries=2)
        await env.produce_json("orders", [(f"k{i}", i) for i in range(4)])
        await env.produce_json("orders", [("k4", 4), ("k5", 5)], IsolationContext("prod", "", "feat-a"))
        node = await env.read_node()
        a = node.address
        empty = await scrape(a)
        assert one(empty, "vpq_read_node_groups") == 0 and series(empty, "vpq_group_lag_messages") == {}

        cid = (await env.client.join(a, "orders", "g", consumer_id="c1", env="prod", set_="", lane=""))["consumer_id"]
        got = await drain(env, a, "orders", "g", cid, 6, ack=False)  # lane feat-a falls back to the backbone
        by_value = {m["value"]: m["id"] for m in got}
        assert sorted(by_value) == [0, 1, 2, 3, 4, 5]
        assert await env.client.ack(a, "orders", "g", cid, [by_value[v] for v in (0, 1, 4)]) == 3
        assert await env.client.nack(a, "orders", "g", cid, [by_value[3]], 0) == 1
        again = await drain(env, a, "orders", "g", cid, 1, ack=False)
        assert [(m["value"], m["delivery_count"]) for m in again] == [(3, 2)]
        assert await env.client.nack(a, "orders", "g", cid, [by_value[3]], 0) == 1  # max_deliveries: dead letter

        fams = await scrape(a)
        for _ in range(200):  # the group's housekeeping produces the dead letter to the DLQ
            if series(fams, "vpq_dead_lettered_messages"):
                break
            await asyncio.sleep(0.05)
            fams = await scrape(a)
    finally:
        await env.stop()
    qg = {"queue": "orders", "group": "g"}
    assert one(fams, "vpq_delivered_messages", **qg) == 7
    assert one(fams, "vpq_redelivered_messages", **qg) == 1
    assert one(fams, "vpq_acked_messages", **qg) == 3
    assert one(fams, "vpq_nacked_messages", **qg) == 2
    assert one(fams, "vpq_dead_lettered_messages", **qg) == 1
    # values 2 (backbone) and 5 (lane feat-a) are still in flight
    assert one(fams, "vpq_group_lag_messages", **qg) == 2
    assert series(fams, "vpq_group_lane_lag_messages", **qg) == {
        (("group", "g"), ("lane", ""), ("queue", "orders")): 1,
        (("group", "g"), ("lane", "feat-a"), ("queue", "orders")): 1,
    }
    assert one(fams, "vpq_group_env_lag_messages", env="prod", **qg) == 2
    assert one(fams, "vpq_group_set_lag_messages", set="", **qg) == 2
    assert one(fams, "vpq_group_in_flight_messages", **qg) == 2
    assert one(fams, "vpq_group_consumers", **qg) == 1
    assert one(fams, "vpq_group_pending_dead_letters", **qg) == 0
    assert one(fams, "vpq_read_node_groups") == 1
    tailed = series(fams, "vpq_tailer_records")
    assert sum(tailed.values()) >= 6 and all(dict(k)["partition"] in {"0", "1"} for k in tailed)
    assert set(series(fams, "vpq_tailer_records_indexed_only")) == set(tailed)  # 0 each: a small backlog
    assert one(fams, "vpq_record_cache_entries") >= 0
    assert not any("node" in s.labels for items in fams.values() for s in items)  # the gateway adds it
