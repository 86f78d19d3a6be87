"""A full disk is an answer, not an outage (DESIGN.md guarantee 9), with real processes.

``vpq up`` runs with its data directory (partitions, logs AND its embedded Redis, whose
AOF lives under it by default) on a 64 MiB tmpfs the test mounts. A ballast file takes
part of the space. Producing until the write node runs short gives 507
``insufficient_storage`` with ``Retry-After`` and appends nothing; consuming, acking and
admin reads go on, and the embedded Redis keeps running (same process, no restart);
once the ballast is deleted, produce resumes by itself, and every acknowledged message
is still delivered.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.integration.api import Api, unique_name
from tests.integration.conftest import FAST
from tests.integration.platform import Platform
from tests.needs import missing

pytestmark = pytest.mark.integration

DISK_MIB = 64
BALLAST_MIB = 24
VALUE = "x" * 2000
NODE_MODULES = ("vpq.write_nodes.main", "vpq.read_nodes.main", "vpq.gateway.main")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_MIB}m", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if done.returncode != 0:
        missing(f"cannot mount a small tmpfs for the full-disk test (needs root): {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def redis_pids(p: Platform) -> set[int]:
    """The embedded redis-server processes of ``vpq up``."""
    assert p.proc is not None
    return {c.pid for c in psutil.Process(p.proc.pid).children(recursive=True) if "redis" in c.name()}


def end_offsets(api: Api) -> dict[int, int]:
    return {p["id"]: p["end_offset"] for p in api.cluster()["physical_partitions"]}


def test_full_disk_answers_507_and_recovers_by_itself(small_disk: Path) -> None:
    ballast = small_disk / "ballast"
    with open(ballast, "wb") as f:
        f.write(b"\0" * (BALLAST_MIB << 20))
    plat = Platform(small_disk / "vpq", physical_partitions=2, env=dict(FAST, VPQ_LOG__MIN_FREE_BYTES="-1"))
    for p in plat.running():
        api = Api(p.url)
        redis_before = redis_pids(p)
        assert redis_before, "vpq up runs its embedded Redis"
        nodes_before = {m: {c.pid for c in p.children(m)} for m in NODE_MODULES}
        assert all(nodes_before.values())
        q = unique_name("full")
        api.put_queue(q, virtual_partitions=4)

        acked: dict[str, int] = {}  # id -> value of every message answered 200
        short = None
        n = 0
        for _ in range(2000):
            batch = [{"key": f"k{(n + i) % 16}", "value": {"n": n + i, "pad": VALUE}} for i in range(50)]
            r = api.call("POST", f"/v1/queues/{q}/messages", {"messages": batch}, expect=None)
            if r.status_code != 200:
                short = r
                break
            for m, res in zip(batch, r.json()["results"], strict=True):
                acked[res["id"]] = m["value"]["n"]
            n += len(batch)
        assert short is not None, "the disk never ran short"
        assert short.status_code == 507, short.text
        assert short.json()["error"]["code"] == "insufficient_storage"
        assert int(short.headers["Retry-After"]) >= 1
        assert len(acked) > 1000

        # nothing is appended while short, however often the producer tries
        ends = end_offsets(api)
        for _ in range(5):
            r = api.call("POST", f"/v1/queues/{q}/messages", {"messages": batch}, expect=None)
            assert r.status_code == 507, r.text
        assert end_offsets(api) == ends

        # consume, ack and admin reads go on; Redis (on the same disk, its AOF growing with
        # every ack-state save) keeps working: the group drains the whole backlog
        cid = api.join(q, "g")  # a group created while short (Redis writes), from the earliest
        drained = 0
        deadline = time.monotonic() + 60
        while drained < len(acked) and time.monotonic() < deadline:
            got = api.poll(q, "g", cid, max_messages=200, wait_ms=1000)
            if got:
                assert api.ack(q, "g", cid, [m["id"] for m in got]) == len(got)
                drained += len(got)
        assert drained >= len(acked)
        assert api.call("GET", f"/v1/queues/{q}").json()["name"] == q
        assert api.group(q, "g")["members"]
        assert api.call("GET", "/v1/queues").status_code == 200
        other = api.join(q, "h")  # a group created now: Redis writes work
        assert api.poll(q, "h", other, max_messages=10, wait_ms=2000)
        assert redis_pids(p) == redis_before

        # space returns: the same produce succeeds without anyone restarting anything
        ballast.unlink()
        freed = time.monotonic()
        deadline = time.monotonic() + 30
        while True:
            r = api.call("POST", f"/v1/queues/{q}/messages", {"messages": batch}, expect=None)
            if r.status_code == 200:
                resumed = time.monotonic()
                for m, res in zip(batch, r.json()["results"], strict=True):
                    acked[res["id"]] = m["value"]["n"]
                break
            assert r.status_code == 507 and time.monotonic() < deadline, r.text
            time.sleep(float(r.headers.get("Retry-After", "1")))

        # nothing acknowledged is lost: a new group reads every acknowledged message
        reader = api.join(q, "all")
        seen: dict[str, int] = {}
        deadline = time.monotonic() + 60
        while len(seen) < len(acked) and time.monotonic() < deadline:
            msgs = api.poll(q, "all", reader, max_messages=1000, wait_ms=1000)
            if msgs:
                api.ack(q, "all", reader, [m["id"] for m in msgs])
            for m in msgs:
                seen[m["id"]] = m["value"]["n"]
        missing_ids = set(acked) - set(seen)
        assert not missing_ids, f"{len(missing_ids)} acknowledged messages lost"
        assert {i: seen[i] for i in acked} == acked
        assert redis_pids(p) == redis_before
        assert {m: {c.pid for c in p.children(m)} for m in NODE_MODULES} == nodes_before  # no role restarted
        print(f"full disk: {n // 50} batches of 50 acknowledged before the first 507, produce back "
              f"{resumed - freed:.2f}s after space returned, {len(acked)} acknowledged all delivered, "
              f"redis-server restarts 0")


def test_enospc_inside_a_write_answers_507_and_the_partition_comes_back(small_disk: Path, tmp_path: Path) -> None:
    """No headroom (``min_free_bytes = 0``), eight producers and another program filling the
    same disk at the same time: produce answers only 200 or 507 (never 503 or 500), and once
    space returns it works again with nothing acknowledged lost. (A write that hits ENOSPC
    inside the log answers 507 too, the log undoing it and staying online:
    ``tests/write_nodes/test_log_disk_full.py`` and ``test_disk_full_node.py``; on tmpfs
    the guard's check right before the append leaves that race too narrow to provoke here.)
    Redis runs off the small disk in this test (with no headroom it would starve)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import requests

    from vpq.common.redis_server import RedisServer

    redis = RedisServer(tmp_path / "redis", appendonly=False)
    redis.start()
    try:
        ballast = small_disk / "ballast"
        with open(ballast, "wb") as f:
            f.write(b"\0" * (BALLAST_MIB << 20))
        env = dict(FAST, VPQ_LOG__MIN_FREE_BYTES="0")
        plat = Platform(small_disk / "vpq", physical_partitions=2, env=env, redis_url=redis.url)
        for p in plat.running():
            api = Api(p.url)
            q = unique_name("enospc")
            api.put_queue(q, virtual_partitions=4)
            statuses: dict[int, int] = {}
            acked: dict[str, int] = {}

            def producer(k: int) -> None:
                s = requests.Session()
                for j in range(400):
                    base = (k * 400 + j) * 50
                    batch = [{"key": f"k{k}", "value": {"n": base + i, "pad": VALUE}} for i in range(50)]
                    r = s.post(f"{p.url}/v1/queues/{q}/messages", json={"messages": batch}, timeout=60)
                    statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                    if r.status_code == 200:
                        for m, res in zip(batch, r.json()["results"], strict=True):
                            acked[res["id"]] = m["value"]["n"]
                    elif statuses.get(507, 0) > 400:
                        return

            stop_filling = threading.Event()

            def filler() -> None:  # another program eating the disk while we produce
                fd = os.open(small_disk / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
                try:
                    while not stop_filling.is_set():
                        try:
                            os.write(fd, b"\0" * 4096)
                        except OSError:
                            pass
                        time.sleep(0.0005)
                finally:
                    os.close(fd)

            with ThreadPoolExecutor(9) as pool:
                fill = pool.submit(filler)
                list(pool.map(producer, range(8)))
                stop_filling.set()
                fill.result()
            assert statuses.get(507), statuses
            assert set(statuses) <= {200, 507}, statuses  # never 503 partition_offline, never 500
            ballast.unlink()
            (small_disk / "filler").unlink()
            deadline = time.monotonic() + 30
            while True:
                r = api.call("POST", f"/v1/queues/{q}/messages", {"messages": [{"key": "z", "value": {"n": -1}}]}, expect=None)
                if r.status_code == 200:
                    acked[r.json()["results"][0]["id"]] = -1
                    break
                assert r.status_code in (503, 507) and time.monotonic() < deadline, r.text
                time.sleep(0.5)
            reader = api.join(q, "all")
            seen: dict[str, int] = {}
            deadline = time.monotonic() + 60
            while len(seen) < len(acked) and time.monotonic() < deadline:
                msgs = api.poll(q, "all", reader, max_messages=1000, wait_ms=1000)
                if msgs:
                    api.ack(q, "all", reader, [m["id"] for m in msgs])
                for m in msgs:
                    seen[m["id"]] = m["value"]["n"]
            assert {i: seen.get(i) for i in acked} == acked
            print(f"no headroom, competing writer: answers {statuses}, {len(acked)} acknowledged all delivered")
    finally:
        redis.stop()
