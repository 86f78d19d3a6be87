"""Producers that retry safely, under faults, with real processes (issue 24).

A ``vpq up`` with two write nodes; SDK producers (``sdk.producer.Producer``, a dedup id
on every message, 3 s request timeout, retries with the same ids) send keyed messages
for ~16 s while the platform is hurt: a write node is killed with SIGKILL (the
supervisor restarts it; its partitions are reopened and their dedup index rebuilt from
the log), Redis is frozen with SIGSTOP for 4 s, the other write node is frozen with
SIGSTOP for 4 s (requests to it time out at the SDK and are retried while the first
tries are still queued in front of it), then killed. Afterwards a fresh
consumer group reads the whole queue back.

Checked, with dedup ids: no message is stored twice (duplicates = stored messages whose
value another stored message has), every acknowledged message is in the read-back with
the id its answer gave, and the producers did retry. The same run without dedup ids
(``dedup=False``) must lose nothing either; its duplicates are reported, not judged (the
faults' timing decides how many retries land twice). Run with ``-s`` for the figures.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
from collections import Counter
from typing import Any

import psutil
import pytest

from tests.integration.api import Api
from tests.integration.conftest import FAST
from tests.integration.platform import Platform
from vpq.sdk.client import AsyncClient
from vpq.sdk.producer import Producer
from vpq.sdk.retry import RetryPolicy

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

PRODUCERS = 4
LOAD_S = 16.0
QUEUE = "faulty"


async def _faults(p: Platform, log: list[str]) -> None:
    t0 = time.monotonic()

    def note(what: str) -> None:
        log.append(f"{time.monotonic() - t0:5.1f}s {what}")

    def writers() -> list[psutil.Process]:
        return sorted(p.children("vpq.write_nodes.main"), key=lambda c: c.pid)

    await asyncio.sleep(1.5)
    victim = writers()[0]
    victim.kill()  # SIGKILL
    note(f"kill -9 write node pid {victim.pid}")
    await asyncio.sleep(2.5)
    [redis] = [c for c in psutil.Process(p.proc.pid).children(recursive=True) if "redis-server" in " ".join(c.cmdline())]
    redis.send_signal(signal.SIGSTOP)
    note(f"SIGSTOP redis-server pid {redis.pid}")
    await asyncio.sleep(4.0)
    redis.send_signal(signal.SIGCONT)
    note("SIGCONT redis-server")
    await asyncio.sleep(1.0)
    frozen = [c for c in writers() if c.pid != victim.pid][0]
    frozen.send_signal(signal.SIGSTOP)  # requests to it time out at the SDK and are retried
    note(f"SIGSTOP write node pid {frozen.pid}")
    await asyncio.sleep(4.0)
    frozen.send_signal(signal.SIGCONT)  # ... while the first tries are still on their way
    note(f"SIGCONT write node pid {frozen.pid}")
    await asyncio.sleep(1.0)
    frozen.kill()
    note(f"kill -9 write node pid {frozen.pid}")


class _Retries(logging.Handler):
    """Counts the producers' retries (``sdk.producer`` logs one warning per retry)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0
        self.reasons: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        if "retrying" in record.getMessage():
            self.count += 1
            self.reasons[type(record.args[1]).__name__ if isinstance(record.args, tuple) else "?"] += 1


async def _produce(url: str, dedup: bool) -> dict[str, Any]:
    """Every producer sends {"p", "n"} values until LOAD_S has passed; per value sent, its
    answer (the message id) or the error it failed with for good."""
    acked: dict[str, str] = {}  # value -> id answered
    failed: dict[str, str] = {}
    requests = 0
    stop_at = time.monotonic() + LOAD_S
    sent = 0

    async def one(k: int) -> None:
        nonlocal requests, sent
        client = AsyncClient(url, timeout=3.0, retry=RetryPolicy(attempts=1), dedup=dedup)
        try:
            async with Producer(client, linger_ms=5, max_batch=100, delivery_timeout_ms=120_000) as producer:
                futures: list[tuple[str, asyncio.Future[Any]]] = []
                n = 0
                while time.monotonic() < stop_at:
                    for _ in range(50):
                        value = f"{k}-{n}"
                        futures.append((value, await producer.send(QUEUE, value, key=f"k{n % 20}")))
                        n += 1
                    await asyncio.sleep(0.02)  # about 2,500 messages/s per producer at most
                await producer.flush()
                requests += producer.requests_sent
                sent += n
                for value, fut in futures:
                    exc = fut.exception()
                    if exc is None:
                        acked[value] = fut.result().id
                    else:
                        failed[value] = repr(exc)
        finally:
            await client.close()

    await asyncio.gather(*(one(k) for k in range(PRODUCERS)))
    return {"acked": acked, "failed": failed, "requests": requests, "sent": sent}


def _read_back(api: Api, want: int, group: str) -> dict[str, str]:
    """id -> value of every message stored in the queue, read by a fresh group."""
    cid = api.join(QUEUE, group, retry_s=60)
    got: dict[str, str] = {}
    deadline = time.monotonic() + 120
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        batch = api.poll(QUEUE, group, cid, max_messages=1000, wait_ms=500)
        if batch:
            api.ack(QUEUE, group, cid, [m["id"] for m in batch])
            got.update((m["id"], m["value"]) for m in batch)
            quiet_since = time.monotonic()
        elif len(got) >= want and time.monotonic() - quiet_since > 3:
            break
    return got


@pytest.mark.parametrize("dedup", [True, False], ids=["dedup", "no-dedup"])
def test_retries_under_faults_store_each_message_once(tmp_path, dedup: bool) -> None:
    p = Platform(tmp_path / "vpq", write_nodes=2, physical_partitions=4, env=dict(FAST))
    p.start()
    try:
        api = Api(p.url)
        api.put_queue(QUEUE, virtual_partitions=16)
        faults: list[str] = []

        async def run() -> dict[str, Any]:
            hurt = asyncio.create_task(_faults(p, faults))
            out = await _produce(p.url, dedup)
            await hurt
            return out

        retries = _Retries()
        logging.getLogger("vpq.sdk.producer").addHandler(retries)
        try:
            result = asyncio.run(run())
        finally:
            logging.getLogger("vpq.sdk.producer").removeHandler(retries)
        acked, failed = result["acked"], result["failed"]
        p.wait_ready(60)
        stored = _read_back(api, len(acked), f"read-back-{int(dedup)}")
    finally:
        p.stop()
    copies = Counter(stored.values())
    duplicates = sum(c - 1 for c in copies.values())
    lost = [v for v in acked if v not in copies]
    wrong_id = [v for v, i in acked.items() if stored.get(i) != v]
    figures = {
        "dedup": dedup,
        "sent": result["sent"],
        "acknowledged": len(acked),
        "failed_for_good": len(failed),
        "requests": result["requests"],
        "retried_requests": retries.count,
        "retry_causes": dict(retries.reasons),
        "stored": len(stored),
        "distinct_values_stored": len(copies),
        "duplicates": duplicates,
        "acknowledged_lost": len(lost),
        "acknowledged_with_another_id": len(wrong_id),
        "faults": faults,
    }
    print("\nFAULT-TEST " + json.dumps(figures))
    assert not lost, lost[:10]
    assert len(acked) + len(failed) == result["sent"]
    assert not failed, list(failed.items())[:3]
    if dedup:
        assert retries.count > 0  # the faults made the producers retry
        assert duplicates == 0, [v for v, c in copies.items() if c > 1][:10]
        assert not wrong_id, wrong_id[:10]
