"""Growing from ``vpq up`` to a several-host layout without losing data, the procedure
of docs/deploy.md ("From vpq up to three hosts"), with real processes:

1. ``vpq up --write-nodes 2 --replication-factor 2`` with its embedded Redis takes
   keyed traffic, part of it consumed and acknowledged, then stops (SIGTERM);
2. Redis moves "to its own host": a redis-server started on a copy of the embedded
   server's directory (its append-only file);
3. each write node's directory (``<data>/write-node-<i>``) is copied to that node's
   own data directory, the cluster secret file too, and every role runs as
   ``vpq serve`` on its own loopback address (127.0.0.2, ...), write nodes under the
   node ids ``vpq up`` gave them (``w0``, ``w1``);
4. the same group resumes: every acknowledged message not yet acknowledged by the
   group is delivered, in key order; nothing it acknowledged comes back from a lost
   ack state; new traffic flows.
"""

from __future__ import annotations

import shutil
import time

import pytest

from tests.integration.api import Api, OrderChecker
from tests.integration.platform import Platform
from tests.integration.served import Served
from vpq.common.redis_server import RedisServer

pytestmark = pytest.mark.integration

KEYS = [f"k{i}" for i in range(12)]
MESSAGES = 600


def _drain(api: Api, queue: str, group: str, cid: str, want: set[str], checker: OrderChecker) -> list[dict]:
    got: list[dict] = []
    seen: set[str] = set()
    deadline = time.monotonic() + 30
    while not want <= seen and time.monotonic() < deadline:
        batch = api.poll(queue, group, cid, max_messages=100, wait_ms=300)
        for m in batch:
            checker.delivered(m["key"], m["id"], batch)
            seen.add(m["id"])
            got.append(m)
        if batch:
            ids = [m["id"] for m in batch]
            api.ack(queue, group, cid, ids)
            checker.ack(ids)
    return got


@pytest.mark.timeout(180)
def test_grow_from_vpq_up_to_served_roles(tmp_path):
    t_start = time.monotonic()
    up_dir = tmp_path / "up"
    plat = Platform(
        up_dir, write_nodes=2, replication_factor=2, physical_partitions=2,
        env={"VPQ_REDIS__LEASE_TTL_MS": "2000", "VPQ_QUEUES__SESSION_TIMEOUT_MS": "3000"},
    )  # fmt: skip
    plat.start()
    checker = OrderChecker()
    produced: list[str] = []
    try:
        api = Api(plat.url)
        api.put_queue("grow", virtual_partitions=8)
        for start in range(0, MESSAGES, 50):
            msgs = [{"key": KEYS[i % len(KEYS)], "value": i} for i in range(start, start + 50)]
            for m, res in zip(msgs, api.produce("grow", msgs)):
                checker.produced_in_order(m["key"], res["id"])
                produced.append(res["id"])
        cid = api.join("grow", "g")
        first: list[dict] = []
        while len(first) < MESSAGES // 3:  # a third consumed and acknowledged under vpq up
            batch = api.poll("grow", "g", cid, max_messages=50, wait_ms=500)
            for m in batch:
                checker.delivered(m["key"], m["id"], batch)
            first.extend(batch)
            if batch:
                ids = [m["id"] for m in batch]
                api.ack("grow", "g", cid, ids)
                checker.ack(ids)
        api.leave("grow", "g", cid)
    finally:
        assert plat.stop() == 0, plat.output()
    acked_under_up = {m["id"] for m in first}

    # 2. Redis on its own: the embedded server's directory, copied as an operator would
    redis_dir = tmp_path / "redis-host"
    shutil.copytree(up_dir / "redis", redis_dir)
    redis = RedisServer(redis_dir, appendonly=True, appendfsync="always")
    redis.start()
    # 3. each write node's copies on its own "host", the secret beside them
    secret = tmp_path / "cluster.secret"
    shutil.copy2(up_dir / "run" / "cluster.secret", secret)
    for i in range(2):
        shutil.copytree(up_dir / f"write-node-{i}", tmp_path / f"w{i}" / f"write-node-{i}")
    served = Served(tmp_path, redis.url, {"VPQ_REDIS__LEASE_TTL_MS": "2000"}, secret_file=secret)
    try:
        served.write_node("w0", "127.0.0.2")
        served.write_node("w1", "127.0.0.3")
        served.read_node("r0", "127.0.0.4")
        _, url = served.gateway("g0", "127.0.0.5")
        api = Api(url)
        cluster = api.cluster()
        assert sorted(n["id"] for n in cluster["write_nodes"]) == ["w0", "w1"], cluster
        addresses = {n["id"]: n["address"] for n in cluster["write_nodes"]}
        assert addresses == {"w0": served.registered("write")["w0"], "w1": served.registered("write")["w1"]}
        assert {a.split(":")[0] for a in addresses.values()} == {"127.0.0.2", "127.0.0.3"}, addresses
        cid = api.join("grow", "g")
        rest = set(produced) - acked_under_up
        got = _drain(api, "grow", "g", cid, rest, checker)
        got_ids = {m["id"] for m in got}
        assert rest <= got_ids, f"{len(rest - got_ids)} of {len(rest)} messages never delivered after the move"
        assert not got_ids & acked_under_up, "messages acknowledged under vpq up came back"
        assert not checker.violations, checker.violations[:5]
        new = api.produce("grow", [{"key": "k0", "value": "after"}])  # new traffic flows
        more = _drain(api, "grow", "g", cid, {new[0]["id"]}, checker)
        assert new[0]["id"] in {m["id"] for m in more}
        assert not checker.violations, checker.violations[:5]
    finally:
        served.close()
        redis.stop()
    print(f"\ngrow up -> serve: {len(rest)} messages resumed, none lost; test {time.monotonic() - t_start:.1f} s")
