"""Scenario 3: the creation/deletion window (``in_chunks``), the paired reference and the count checks."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from vpq.load.scenarios import s3_queues
from vpq.load.scenarios.s3_queues import CHUNKS_IN_FLIGHT, CREATE_CHUNK, in_chunks


async def test_every_chunk_runs_with_a_bounded_window() -> None:
    names = [f"q{i}" for i in range(CREATE_CHUNK * 7 + 3)]
    seen: list[str] = []
    active = peak = 0

    async def op(chunk: Sequence[str]) -> None:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.001 * (len(seen) % 3))  # chunks finish out of order
        seen.extend(chunk)
        active -= 1

    done, seconds = await in_chunks(op, names, budget_s=60.0)
    assert done == names and sorted(seen) == sorted(names)  # all, reported in name order
    assert peak == CHUNKS_IN_FLIGHT > 1 and seconds >= 0


async def test_no_chunk_starts_after_the_budget() -> None:
    names = [f"q{i}" for i in range(CREATE_CHUNK * 5)]
    started: list[str] = []

    async def op(chunk: Sequence[str]) -> None:
        started.append(chunk[0])
        await asyncio.sleep(0.5)  # the window fills at once; when a slot frees the budget is gone

    done, _ = await in_chunks(op, names, budget_s=0.2)
    assert done == names[: CREATE_CHUNK * CHUNKS_IN_FLIGHT]
    assert len(started) == CHUNKS_IN_FLIGHT


async def test_an_error_cancels_the_other_chunks_and_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s3_queues, "CHUNKS_IN_FLIGHT", 3)
    cancelled: list[str] = []

    async def op(chunk: Sequence[str]) -> None:
        if chunk[0] == "q50":
            raise RuntimeError("refused")
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append(chunk[0])
            raise

    with pytest.raises(RuntimeError, match="refused"):
        await in_chunks(op, [f"q{i}" for i in range(CREATE_CHUNK * 6)], budget_s=60.0)
    assert sorted(cancelled) == ["q0", "q100"]


async def test_with_an_error_list_the_chunks_in_flight_finish_and_none_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a server that runs out of file descriptors at queue 7,000 (NATS: 2 per stream) still
    # leaves a step with the queues it made
    monkeypatch.setattr(s3_queues, "CHUNKS_IN_FLIGHT", 3)
    names = [f"q{i}" for i in range(CREATE_CHUNK * 6)]
    started: list[str] = []

    async def op(chunk: Sequence[str]) -> None:
        started.append(chunk[0])
        if chunk[0] == f"q{CREATE_CHUNK}":
            raise RuntimeError("too many open files")
        await asyncio.sleep(0.05)

    errors: list[BaseException] = []
    done, _ = await in_chunks(op, names, budget_s=60.0, errors=errors)
    assert [str(e) for e in errors] == ["too many open files"]
    assert started == [names[0], names[CREATE_CHUNK], names[2 * CREATE_CHUNK]]  # none after the error
    assert done == names[:CREATE_CHUNK] + names[2 * CREATE_CHUNK : 3 * CREATE_CHUNK]


async def test_a_refused_read_back_ends_the_read_back_not_the_scenario() -> None:
    # NATS at ~10,000 streams: the stream creations succeed, then creating a consumer for
    # the read-back fails (out of file descriptors). The step keeps its figures and says
    # why it read nothing back, the scenario goes on, and its streams do not stay for
    # scenarios 4 and 5
    from dataclasses import replace

    from vpq.load.profiles import QUICK
    from vpq.load.report import check_totals
    from vpq.load.scenarios.common import Context

    class Refusing(_Counting):
        async def consume(self, *args: object, **kwargs: object) -> object:
            raise RuntimeError("error creating store for consumer")

    system = Refusing()
    lines: list[str] = []
    profile = replace(QUICK, s3_steps=(1, 3), s3_messages=30, producers=2, s3_drain_sample=2)
    result = await s3_queues.run(Context(system, profile, echo=lines.append))  # type: ignore[arg-type]
    assert [s["queues"] for s in result["steps"]] == [1, 3]
    for step in result["steps"]:
        assert step["readback_error"] == "RuntimeError: error creating store for consumer"
        assert step["queues_read_back"] == 0 and step["check"]["expected"] == 0
        assert step["counts_checked"] >= 1 and step["count_mismatches"] == 0  # what could be checked was
    assert result["steps"][-1]["paired_1q"]["ratio"] > 0
    assert check_totals(result)["failed"] == 0
    assert any("read-back stopped by an error" in line for line in lines)
    assert system.stored == {}


async def test_a_failing_step_deletes_its_queues_before_the_error_ends_the_scenario() -> None:
    from dataclasses import replace

    from vpq.load.profiles import QUICK
    from vpq.load.scenarios.common import Context

    class Failing(_Counting):
        async def count(self, queue: str) -> int | None:
            raise RuntimeError("connection lost")

    system = Failing()
    profile = replace(QUICK, s3_steps=(3,), s3_messages=30, producers=2)
    with pytest.raises(RuntimeError, match="connection lost"):
        await s3_queues.run(Context(system, profile, echo=lambda _line: None))  # type: ignore[arg-type]
    assert system.stored == {}


class _Counting:
    """Stores produced messages per queue; ``drop`` queues lose their first message."""

    def __init__(self, drop: frozenset[str] = frozenset()) -> None:
        self.stored: dict[str, int] = {}
        self.produced_to: list[str] = []
        self.drop = set(drop)

    async def server_memory(self) -> dict[str, int]:
        return {}

    async def setup(self, queues: Sequence[str], *, ordered: bool = True, shards: int = 1) -> None:
        for q in queues:
            self.stored.setdefault(q, 0)

    async def produce(self, queue: str, batch: Sequence[tuple[str, bytes]], *, lanes: int = 1) -> None:
        await asyncio.sleep(0)
        self.produced_to.append(queue)
        n = len(batch)
        if queue in self.drop:
            self.drop.discard(queue)
            n -= 1
        self.stored[queue] += n

    async def count(self, queue: str) -> int | None:
        return self.stored.get(queue)

    async def delete(self, queues: Sequence[str]) -> None:
        for q in queues:
            self.stored.pop(q, None)


async def _run_s3(system: _Counting) -> dict[str, Any]:
    from dataclasses import replace

    from vpq.load.profiles import QUICK
    from vpq.load.scenarios.common import Context

    profile = replace(QUICK, s3_steps=(1, 6), s3_messages=60, s3_rounds=2, s3_paired_rounds=3, producers=2, s3_drain_sample=0)
    return await s3_queues.run(Context(system, profile, echo=lambda _line: None))  # type: ignore[arg-type]


async def test_the_last_step_alternates_with_a_paired_one_queue_reference() -> None:
    from vpq.load.report import check_totals, headline

    system = _Counting()
    result = await _run_s3(system)
    last = result["steps"][-1]
    paired = last["paired_1q"]
    assert len(paired["round_msgs_per_s"]) == 3 and paired["ratio"] > 0
    assert paired["count_check"]["expected"] == 3 * 60 and paired["count_check"]["ok"]
    assert "paired_1q" not in result["steps"][0]  # only the last step is paired
    assert len(result["steps"][0]["round_msgs_per_s"]) == 2 and len(last["round_msgs_per_s"]) == 3
    # reference rounds go before each of the step's rounds
    runs = [q == s3_queues.REFERENCE_QUEUE for q in system.produced_to if not q.startswith("s3-n1-")]
    starts = [i for i in range(len(runs)) if runs[i] and (i == 0 or not runs[i - 1])]
    assert len(starts) == 3
    assert system.stored == {}  # the reference is deleted with the steps' queues
    assert headline(3, result)["throughput_6q_vs_1q_paired"] == paired["ratio"]
    assert check_totals(result)["failed"] == 0


async def test_a_stored_count_below_the_acknowledged_is_a_failed_check() -> None:
    from vpq.load.report import check_totals

    result = await _run_s3(_Counting(drop=frozenset({s3_queues.REFERENCE_QUEUE, "s3-n6-0"})))
    totals = check_totals(result)
    assert totals["lost"] >= 1 and totals["failed"] >= 1
    assert result["steps"][-1]["paired_1q"]["count_check"]["lost"] == 1


async def test_a_deletion_refused_at_a_resource_limit_is_tried_again_after_the_others() -> None:
    # NATS near its file-descriptor limit: deleting the first stream fails until other
    # streams are gone; the step must still delete everything and the scenario go on
    class Crowded(_Counting):
        refusals = 0

        async def delete(self, queues: Sequence[str]) -> None:
            if "s3-n6-0" in queues and len(self.stored) > 4:
                Crowded.refusals += 1
                for q in queues:  # the others of the call go (NATS deletes stream by stream)
                    if q != "s3-n6-0":
                        self.stored.pop(q, None)
                raise RuntimeError("too many open files")
            await super().delete(queues)

    system = Crowded()
    result = await _run_s3(system)
    assert Crowded.refusals >= 1
    assert [s["deleted"] for s in result["steps"]] == [1, 6]
    assert system.stored == {}


async def test_a_deletion_that_keeps_failing_still_ends_the_scenario() -> None:
    class Stuck(_Counting):
        async def delete(self, queues: Sequence[str]) -> None:
            if "s3-n6-3" in queues:
                raise RuntimeError("stream is stuck")
            await super().delete(queues)

    with pytest.raises(RuntimeError, match="stuck"):
        await _run_s3(Stuck())
