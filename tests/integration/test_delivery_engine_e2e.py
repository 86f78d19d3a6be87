"""The delivery engine against a real `vpq up`: runs of a hot key, a context nobody
consumes left in the log, a poison key that reaches the DLQ while the others flow."""

from __future__ import annotations

import time

import pytest

from tests.integration.api import Api, unique_name

pytestmark = pytest.mark.integration




def produce_many(api: Api, queue: str, messages: list[dict], headers: dict | None = None) -> list[dict]:
    out: list[dict] = []
    for i in range(0, len(messages), 500):
        out += api.produce(queue, messages[i:i + 500], headers=headers)
    return out


def test_a_hot_key_drains_in_runs_in_order(api):
    q = unique_name("hot")
    api.put_queue(q, virtual_partitions=4)
    produced = produce_many(api, q, [{"key": "hot", "value": i} for i in range(2000)])
    cid = api.join(q, "g")
    got: list[dict] = []
    polls = 0
    deadline = time.monotonic() + 30
    while len(got) < 2000 and time.monotonic() < deadline:
        batch = api.poll(q, "g", cid, max_messages=500, wait_ms=1000)
        polls += 1
        got += batch
        if batch:
            assert api.ack(q, "g", cid, [m["id"] for m in batch]) == len(batch)
    assert [m["value"] for m in got] == list(range(2000))  # all of them, in order, once
    assert [m["id"] for m in got] == [r["id"] for r in produced]
    assert polls <= 12  # runs of up to 500, not one message of the key per poll


def test_an_env_nobody_consumes_never_holds_back_prod(api):
    q = unique_name("env")
    api.put_queue(q, virtual_partitions=4)
    cid = api.join(q, "g")  # the group has prod consumers only
    produce_many(api, q, [{"key": f"t{i % 50}", "value": i} for i in range(25_000)], headers={"X-Env": "test"})
    prod = produce_many(api, q, [{"key": f"p{i % 10}", "value": i} for i in range(100)])
    got: list[dict] = []
    deadline = time.monotonic() + 30
    while len(got) < 100 and time.monotonic() < deadline:
        batch = api.poll(q, "g", cid, max_messages=100, wait_ms=500)
        got += batch
        if batch:
            api.ack(q, "g", cid, [m["id"] for m in batch])
    assert sorted(m["id"] for m in got) == sorted(r["id"] for r in prod)
    assert all(m["env"] == "prod" for m in got)
    lag = api.group(q, "g")["lag"]
    assert lag["by_env"] == {"test": 25_000} and lag["total"] == 25_000
    assert sum(lag["by_virtual_partition"].values()) == 25_000 and lag["oldest_unacked_age_ms"] >= 0
    # a test consumer joins: the env's backlog flows to it, from the start
    tid = api.join(q, "g", env="test")
    seen = 0
    deadline = time.monotonic() + 60
    while seen < 25_000 and time.monotonic() < deadline:
        batch = api.poll(q, "g", tid, max_messages=1000, wait_ms=500)
        seen += len(batch)
        if batch:
            api.ack(q, "g", tid, [m["id"] for m in batch])
    assert seen == 25_000


def test_a_poison_key_reaches_the_dlq_then_its_next_message_flows(api):
    q = unique_name("poison")
    api.put_queue(q, virtual_partitions=4, max_deliveries=3)
    msgs = [{"key": "poison", "value": "bad"}, {"key": "poison", "value": "next"}]
    msgs += [{"key": f"k{i % 20}", "value": i} for i in range(200)]
    produced = api.produce(q, msgs)
    cid = api.join(q, "g")
    good: list[dict] = []
    bad_counts: list[int] = []
    next_alone = False
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (len(good) < 200 or not next_alone):
        batch = api.poll(q, "g", cid, max_messages=100, wait_ms=500)
        acks, nacks, failed_keys = [], [], set()
        for m in batch:  # a consumer that works in key order: after a failure, the key's later ones wait
            if m["key"] in failed_keys:
                continue
            if m["key"] == "poison" and m["value"] == "bad":
                bad_counts.append(m["delivery_count"])
                nacks.append(m["id"])
                failed_keys.add("poison")
                continue
            if m["key"] == "poison":
                next_alone = True
            else:
                good.append(m)
            acks.append(m["id"])
        if acks:
            assert api.ack(q, "g", cid, acks) == len(acks)
        if nacks:
            assert api.nack(q, "g", cid, nacks) == len(nacks)
    assert sorted(m["value"] for m in good) == list(range(200))
    assert bad_counts == [1, 2, 3]
    assert next_alone  # the key's next message flows once the poison one is dead-lettered
    dlq = f"{q}.g.dlq"
    deadline = time.monotonic() + 20  # produced to the DLQ (created on demand) by the group's housekeeping
    while api.call("GET", f"/v1/queues/{dlq}", expect=None).status_code == 404 and time.monotonic() < deadline:
        time.sleep(0.1)
    did = api.join(dlq, "g")
    dead: list[dict] = []
    deadline = time.monotonic() + 20
    while not dead and time.monotonic() < deadline:
        dead = api.poll(dlq, "g", did, max_messages=10, wait_ms=500)
    assert [m["value"] for m in dead] == ["bad"] and dead[0]["headers"]["x-original-id"] == produced[0]["id"]
