"""Scenario 3's creation/deletion window (``load.scenarios.s3_queues.in_chunks``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from load.scenarios import s3_queues
from load.scenarios.s3_queues import CHUNKS_IN_FLIGHT, CREATE_CHUNK, in_chunks


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


async def test_a_failing_step_deletes_its_queues_before_the_error_ends_the_scenario() -> None:
    # NATS at ~10,000 streams: the stream creations succeed, then creating a consumer for
    # the read-back fails; the streams must not stay for scenarios 4 and 5
    from dataclasses import replace

    from load.profiles import QUICK
    from load.scenarios.common import Context

    class Failing:
        def __init__(self) -> None:
            self.live: set[str] = set()

        async def server_memory(self) -> dict[str, int]:
            return {}

        async def setup(self, queues: Sequence[str], *, ordered: bool = True, shards: int = 1) -> None:
            self.live.update(queues)

        async def produce(self, queue: str, batch: Sequence[tuple[str, bytes]], *, lanes: int = 1) -> None:
            await asyncio.sleep(0)

        async def count(self, queue: str) -> int | None:
            return None

        async def consume(self, *args: object, **kwargs: object) -> object:
            raise RuntimeError("error creating store for consumer")

        async def delete(self, queues: Sequence[str]) -> None:
            self.live.difference_update(queues)

    system = Failing()
    profile = replace(QUICK, s3_steps=(3,), s3_messages=30, producers=2)
    with pytest.raises(RuntimeError, match="creating store"):
        await s3_queues.run(Context(system, profile, echo=lambda _line: None))  # type: ignore[arg-type]
    assert system.live == set()
