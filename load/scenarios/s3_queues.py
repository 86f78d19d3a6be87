"""Scenario 3: produce throughput as logical queues grow (1 -> 100 -> 1,000 -> 10,000).

Per step: create ``n`` queues (timed; creation stops at ``s3_create_budget_s`` and the
step goes on with the queues created so far, saying so; the rate is printed), read the
server's memory,
produce ``s3_rounds`` rounds of ``s3_messages`` 1 KiB messages in batches of ``s3_batch``
spread round-robin over the queues (vpq: over ``s3_lanes`` swimlanes too; each round goes
on to queues the earlier rounds did not reach, and uses keys of its own; the step's rate
is the median of the rounds' rates: one round is a second or two, and a stall of the
shared machine in one of them is not the system's throughput), read the memory again, check
the stored counts of a sample of queues (``count_check``: fewer stored than acknowledged
is loss, more is unexpected) and read back a few sampled queues in full
(loss, duplicates, per-key order), then delete the step's queues (timed).

Creation and deletion go in chunks of ``CREATE_CHUNK`` names, ``CHUNKS_IN_FLIGHT`` of
them at once (a sliding window, as an admin tool keeps requests in flight), each chunk
one ``setup()``/``delete()`` call whose own concurrency is the system's driver's
business; the budget is checked before each chunk starts.

Paired reference: the steps run one after the other, minutes apart on a shared machine,
so the ratio of the last step's rate to the first's also measures the machine's drift.
One more queue (``s3-ref``) lives through the whole scenario; at the last step a round on
it goes before each of the step's rounds, back to back, with the same producers, batch
and lanes, for ``s3_paired_rounds`` rounds each (5 in the full run: more than the other
steps' ``s3_rounds``, as this ratio is the scenario's headline). ``paired_1q`` of that step holds the reference's median rate and ``ratio`` =
the step's median / the reference's median: "many queues against one, at the same time".
Its stored count is checked at the end (it is never drained: reading it back would add
tens of seconds for the slow peers).

vpq keeps every queue in its physical partitions (8 when the harness starts it); the
peers get one stream / quorum queue per logical queue, and ``nats-subjects`` one
stream with a subject per queue.
"""

from __future__ import annotations

import asyncio
import logging
import math
import statistics
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from vpq.load.checks import CheckReport, DeliveryChecker, count_report, merge
from vpq.load.scenarios.common import Context, ProduceRun, drain, produce_closed
from vpq.load.system import System

log = logging.getLogger(__name__)

TITLE = "throughput as logical queues grow (creation time, server memory)"
REFERENCE_QUEUE = "s3-ref"
CREATE_CHUNK = 50  # the budget is checked before each chunk starts
CHUNKS_IN_FLIGHT = 2
DELETE_PASSES = 3


def _sample(items: list[str], k: int) -> list[str]:
    """Up to ``k`` items spread evenly over ``items`` (first and last included)."""
    if len(items) <= k:
        return list(items)
    step = (len(items) - 1) / (k - 1) if k > 1 else 0
    return list(dict.fromkeys(items[round(i * step)] for i in range(k)))


async def in_chunks(
    op: Callable[[Sequence[str]], Awaitable[None]],
    names: Sequence[str],
    budget_s: float,
    *,
    errors: list[BaseException] | None = None,
    keep_going: bool = False,
) -> tuple[list[str], float]:
    """``op`` over ``names`` in chunks of ``CREATE_CHUNK``, ``CHUNKS_IN_FLIGHT`` at once,
    starting no chunk after ``budget_s``; ``(names done, in name order; seconds)``.

    Without ``errors``, an error of ``op`` cancels the other chunks and is raised. With
    it, the error is appended there and no new chunk starts (with ``keep_going``, the
    other chunks still start): the chunks in flight finish, and the failed chunk's names
    are not reported done (a server that runs out of a resource at queue 7,000 still has
    7,000 queues to measure)."""
    t0 = time.monotonic()
    chunks = [names[i : i + CREATE_CHUNK] for i in range(0, len(names), CREATE_CHUNK)]
    running: dict[asyncio.Task[None], int] = {}
    finished: set[int] = set()
    try:
        for index, chunk in enumerate(chunks):
            if time.monotonic() - t0 > budget_s or (errors and not keep_going):
                break
            running[asyncio.create_task(op(chunk))] = index
            while len(running) >= CHUNKS_IN_FLIGHT:
                finished |= await _settle(running, asyncio.FIRST_COMPLETED, errors)
        while running:
            finished |= await _settle(running, asyncio.ALL_COMPLETED, errors)
    finally:
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running)
    return [n for i in sorted(finished) for n in chunks[i]], time.monotonic() - t0


async def _settle(
    running: dict[asyncio.Task[None], int], when: str, errors: list[BaseException] | None
) -> set[int]:
    done, _ = await asyncio.wait(running, return_when=when)
    out: set[int] = set()
    for task in done:
        index = running.pop(task)
        exc = task.exception()
        if exc is not None:
            if errors is None:
                raise exc  # the chunk's error
            errors.append(exc)
            continue
        out.add(index)
    return out


def _median_run(rounds: list[ProduceRun], message_bytes: int) -> dict[str, Any]:
    """The rounds' totals, with the rate (and MiB/s) of the median round."""
    total = ProduceRun(
        messages=sum(r.messages for r in rounds),
        requests=sum(r.requests for r in rounds),
        errors=sum(r.errors for r in rounds),
        seconds=sum(r.seconds for r in rounds),
        client_cpu=statistics.fmean(r.client_cpu for r in rounds),
        first_error=next((r.first_error for r in rounds if r.first_error), ""),
    )
    out = total.figures(message_bytes)
    rates = [r.messages / r.seconds if r.seconds > 0 else 0.0 for r in rounds]
    rate = statistics.median(rates)
    out["msgs_per_s"] = round(rate, 1)
    out["mib_per_s"] = round(rate * message_bytes / 2**20, 2)
    out["round_msgs_per_s"] = [round(x, 1) for x in rates]
    return out


async def _delete_step(
    system: Any, names: Sequence[str], created: list[str], budget_s: float
) -> tuple[list[str], float]:
    """Delete a step's queues within ``budget_s`` (what is left is removed by the system's
    ``teardown()``); also, ignoring errors, the names whose creation failed (a failed
    chunk may have made some). Answers the names of ``created`` deleted, and the time.

    A server at a resource limit may refuse a deletion until others have freed some
    (NATS near its file-descriptor limit cannot open a stream's consumer state to
    delete it): every chunk is tried, then what failed is tried again, up to
    ``DELETE_PASSES`` passes; an error left after the last pass is raised."""
    t0 = time.monotonic()
    removed: list[str] = []
    remaining = list(created)
    errors: list[BaseException] = []
    for _ in range(DELETE_PASSES):
        errors = []
        left_s = budget_s - (time.monotonic() - t0)
        done, _s = await in_chunks(system.delete, remaining, left_s, errors=errors, keep_going=True)
        removed += done
        gone = set(done)
        remaining = [q for q in remaining if q not in gone]
        if not errors or not remaining:
            break
    if errors and remaining:
        raise errors[0]
    delete_s = time.monotonic() - t0
    made = set(created)
    failed = [q for q in names if q not in made]
    if failed:
        await in_chunks(system.delete, failed, budget_s, errors=[])
    return removed, delete_s


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after if k in before}


async def run(ctx: Context) -> dict[str, Any]:
    system, p = ctx.system, ctx.profile
    steps: list[dict[str, Any]] = []
    # the paired reference: one queue that lives through the whole scenario; at the last
    # step its rounds alternate with the step's rounds (see the module docstring)
    reference = [REFERENCE_QUEUE]
    await system.setup(reference, ordered=True, shards=1)
    ref_expected: list[tuple[str, int]] = []
    try:
        await _steps(ctx, steps, reference, ref_expected)
        stored = await system.count(REFERENCE_QUEUE)
    finally:
        await in_chunks(system.delete, reference, p.s3_delete_budget_s, errors=[])
    if steps and "paired_1q" in steps[-1] and stored is not None:
        steps[-1]["paired_1q"]["count_check"] = count_report(len(ref_expected), stored).to_json()
    return {"batch": p.s3_batch, "lanes_vpq": p.s3_lanes, "rounds": max(1, p.s3_rounds), "steps": steps}


async def _round(
    ctx: Context, queues: Sequence[str], r: int, tag: str, offset: int, on_acked: Callable[[str, str, int], None]
) -> ProduceRun:
    p = ctx.profile
    return await produce_closed(
        ctx.system,
        queues,
        producers=p.producers,
        batch=p.s3_batch,
        max_messages=p.s3_messages,
        duration_s=p.scenario_timeout_s / 2 / max(1, p.s3_rounds),
        keys_per_producer=2,
        on_acked=on_acked,
        lanes=p.s3_lanes,
        message_bytes=p.message_bytes,
        key_tag=f"{tag}{r}-",
        queue_offset=offset,
    )


async def _read_back(
    system: System, queues: list[str], expected: dict[str, list[tuple[str, int]]], batch: int
) -> tuple[list[CheckReport], str]:
    """Read ``queues`` back in full, one checker each; the reports of those read, and the
    first error that stopped the read-back ("" if none). A server that hit a resource
    limit while the step created its queues (NATS: out of file descriptors) may refuse
    the consumer a read-back needs: that ends the read-back, not the scenario, and a
    queue that could not be read is neither counted as read nor as lost."""
    reports: list[CheckReport] = []
    for q in queues:
        checker = DeliveryChecker(order_required=True)
        for k, s in expected[q]:
            checker.expect(k, s)
        try:
            await drain(system, q, checker, members=1, ordered=True, batch=batch, timeout_s=20.0)
        except Exception as exc:  # noqa: BLE001 - reported in the step's figures
            log.warning("read-back of %s failed: %r", q, exc)
            return reports, f"{type(exc).__name__}: {exc}"[:300]
        reports.append(checker.report())
    return reports, ""


async def _steps(
    ctx: Context, steps: list[dict[str, Any]], reference: list[str], ref_expected: list[tuple[str, int]]
) -> None:
    system, p = ctx.system, ctx.profile
    for n in p.s3_steps:
        names = [f"s3-n{n}-{i}" for i in range(n)]
        memory_before = await system.server_memory()
        create_errors: list[BaseException] = []
        created, create_s = await in_chunks(
            lambda chunk: system.setup(chunk, ordered=True, shards=1), names, p.s3_create_budget_s, errors=create_errors
        )
        create_rate = len(created) / create_s if create_s > 0 else 0.0
        create_error = f"{type(create_errors[0]).__name__}: {create_errors[0]}"[:300] if create_errors else ""
        stopped = f" (creation stopped by an error: {create_error})" if create_error else ""
        ctx.echo(f"  {n} queues: created {len(created)} in {create_s:.2f}s ({create_rate:.0f}/s){stopped}; producing")
        try:
            expected: dict[str, list[tuple[str, int]]] = defaultdict(list)
            per_task = math.ceil(p.s3_messages / p.s3_batch / max(1, p.producers))
            rounds: list[ProduceRun] = []
            ref_rounds: list[ProduceRun] = []
            paired = n > 1 and n == max(p.s3_steps)
            for r in range(max(1, p.s3_paired_rounds if paired else p.s3_rounds)):
                if paired:
                    ref_rounds.append(await _round(ctx, reference, r, "ref", 0, lambda q, k, s: ref_expected.append((k, s))))
                record = lambda q, k, s: expected[q].append((k, s))  # noqa: E731
                rounds.append(await _round(ctx, created, r, "r", r * per_task, record))
            produced = _median_run(rounds, p.message_bytes)
            if paired:
                ref = _median_run(ref_rounds, p.message_bytes)
                produced["paired_1q"] = {
                    "msgs_per_s": ref["msgs_per_s"],
                    "round_msgs_per_s": ref["round_msgs_per_s"],
                    "errors": ref.get("errors", 0),
                    "ratio": round(produced["msgs_per_s"] / ref["msgs_per_s"], 3) if ref["msgs_per_s"] else None,
                }
            memory_after = await system.server_memory()

            mismatches = 0
            counted = 0
            count_unknown = 0
            counts: list[CheckReport] = []
            for q in _sample(created, p.s3_count_sample):
                stored = await system.count(q)
                if stored is None:
                    count_unknown += 1
                    continue
                counted += 1
                mismatches += int(stored != len(expected.get(q, ())))
                counts.append(count_report(len(expected.get(q, ())), stored))
            read_back, readback_error = await _read_back(
                system, _sample([q for q in created if expected.get(q)], p.s3_drain_sample), expected, p.drain_batch
            )
            if readback_error:
                ctx.echo(f"  {n} queues: read-back stopped by an error: {readback_error}")
        except Exception:
            # a step that fails (a server out of file descriptors, say) must not leave its
            # queues behind for the next scenarios; the error still ends this scenario
            await _delete_step(system, names, created, p.s3_delete_budget_s)
            raise

        removed, delete_s = await _delete_step(system, names, created, p.s3_delete_budget_s)
        deleted = len(removed)
        mem_delta = _delta(memory_after, memory_before)
        steps.append(
            {
                "queues": n,
                "created": len(created),
                "creation_complete": len(created) == n,
                **({"create_error": create_error} if create_error else {}),
                "create_s": round(create_s, 3),
                "creates_per_s": round(len(created) / create_s, 1) if create_s > 0 else None,
                **produced,
                "memory_before": memory_before,
                "memory_after": memory_after,
                "memory_delta": mem_delta,
                "rss_delta_per_queue": (
                    round(mem_delta["rss_bytes"] / len(created)) if "rss_bytes" in mem_delta and created else None
                ),
                "counts_checked": counted,
                "count_mismatches": mismatches,
                "counts_unknown": count_unknown,
                "count_check": merge(counts).to_json(),
                "check": merge(read_back).to_json(),
                "queues_read_back": len(read_back),
                **({"readback_error": readback_error} if readback_error else {}),
                "deleted": deleted,
                "delete_s": round(delete_s, 3),
                "deletes_per_s": round(deleted / delete_s, 1) if delete_s > 0 else None,
            }
        )
