"""``load.scenarios.common.produce_closed``: per-task round robin, offsets, key tags, and
the median-of-rounds figures of scenario 3."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from vpq.load.payload import parse_payload
from vpq.load.scenarios.common import ProduceRun, produce_closed
from vpq.load.scenarios.s3_queues import _median_run


class Recorder:
    """Just enough of ``load.system.System`` for producing."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, list[str]]] = []

    async def produce(self, queue: str, batch: Sequence[tuple[str, bytes]], *, lanes: int = 1) -> None:
        for key, payload in batch:
            assert parse_payload(payload).key == key
        self.sent.append((queue, [k for k, _ in batch]))
        await asyncio.sleep(0)  # a request takes a turn of the loop, so the tasks alternate


async def _run(system: Recorder, queues: list[str], **kw: Any) -> ProduceRun:
    return await produce_closed(
        system,  # type: ignore[arg-type]
        queues,
        producers=2,
        batch=5,
        max_messages=20,
        duration_s=10.0,
        keys_per_producer=2,
        message_bytes=64,
        **kw,
    )


async def test_each_task_walks_its_own_queues_from_the_offset() -> None:
    queues = [f"q{i}" for i in range(8)]  # task 0: q0 q2 q4 q6, task 1: q1 q3 q5 q7
    first, second = Recorder(), Recorder()
    run = await _run(first, queues)
    await _run(second, queues, queue_offset=2, key_tag="r1-")
    assert run.messages == 20 and run.requests == 4
    assert sorted(q for q, _ in first.sent) == ["q0", "q1", "q2", "q3"]
    assert sorted(q for q, _ in second.sent) == ["q4", "q5", "q6", "q7"]  # the next queues of each task
    assert all(k.startswith("r1-") for _, keys in second.sent for k in keys)
    assert not {k for _, ks in first.sent for k in ks} & {k for _, ks in second.sent for k in ks}


def test_median_round_sets_the_rate_and_totals_add_up() -> None:
    rounds = [
        ProduceRun(messages=100, requests=10, seconds=1.0),
        ProduceRun(messages=100, requests=10, seconds=10.0),  # a stalled round
        ProduceRun(messages=100, requests=10, seconds=2.0, errors=1, first_error="boom"),
    ]
    out = _median_run(rounds, 1024)
    assert out["round_msgs_per_s"] == [100.0, 10.0, 50.0]
    assert out["msgs_per_s"] == 50.0
    assert out["messages"] == 300 and out["requests"] == 30 and out["errors"] == 1
    assert out["seconds"] == 13.0 and out["first_error"] == "boom"
