"""Applying a remap ``Plan`` to the running platform without losing, duplicating
(beyond at-least-once) or reordering anything (DESIGN.md guarantee 6).

The protocol is ``docs/internals.md``, "Remap cut-over". In short, from map epoch E0:

1. splits: publish the split map (E0+1, compare-and-swap) then copy lineage
   (``split_lineage``); a split moves nothing, so it needs no fence;
2. fence: publish E1 = next epoch, same placement, AND the fence of the moved vps
   (one Lua script, ``metadata.fences.FenceStore.publish_fenced``); write nodes refuse appends
   to fenced vps (retryable ``stale_map``);
3. ask the owner of every pp a move leaves or enters for its fenced end offset
   (``FenceClient``; X for a source, Y for a target), bounded retries;
4. ``move_range(queue, vp, to_offset=X, pp=target, from_offset=Y, epoch=E1)`` for
   every moved vp (and every descendant when V grew meanwhile), only while the
   fence is younger than ``fence_ttl_ms - lineage_margin_ms``;
5. publish the final map (next epoch) with the vps whose lineage moved on their new
   pps, and remove the fence, in one script; a vp whose pp did not answer, or whose
   lineage could not move, stays where it was (rolled back: nothing changed for it).

Concurrent publishers (queue admins) only make a compare-and-swap fail: every step
re-reads the map and re-bases on it (``cutover``). A fence older than its TTL (a
publisher that died) is recovered by the next run (``recover``): each fenced vp
goes where its lineage says (moved -> new pp, otherwise it stays); the fence goes.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from vpq.common.errors import VpqError
from vpq.config.settings import PublisherSettings
from vpq.metadata.fences import BUSY, GONE, PUBLISHED, Fence, FenceStore, fence_of
from vpq.metadata.map_history import remap_note
from vpq.metadata.maps import MapConflictError
from vpq.metadata.store import MetadataStore
from vpq.spark_rebalance.cutover import (
    LineageState,
    SplitStep,
    apply_splits,
    classify,
    descendants,
    final_queues,
    lineage_fill_steps,
    rebase_moves,
    resolve_lineage,
)
from vpq.spark_rebalance.plan_model import Plan
from vpq.virtual_partitions.placement import VpMove

EMPTY_MAP: dict[str, Any] = {"epoch": 0, "queues": {}}


class FenceClient(Protocol):
    async def fence(self, pp: int, epoch: int, timeout_s: float) -> int:
        """The end offset of ``pp`` once its owner enforces the fence of ``epoch``."""


@dataclass(frozen=True, slots=True)
class PublisherOptions:
    """Bounds of a cut-over (seconds unless named ``_ms``).

    - ``fence_ttl_ms``: how long a cut-over may keep vps fenced before another run
      may recover it (producers of those vps wait at most about this long if the
      publisher dies);
    - ``lineage_margin_ms``: no lineage move is started later than
      ``fence_ttl_ms - lineage_margin_ms`` after fencing (by this process's clock);
    - ``fence_call_timeout_s``: one fence call (the node waits for its in-flight
      appends); ``fence_budget_s``: all attempts for one pp;
    - ``cas_attempts``: compare-and-swap attempts per publish before giving up."""

    fence_ttl_ms: int = 60_000
    lineage_margin_ms: int = 10_000
    fence_call_timeout_s: float = 5.0
    fence_budget_s: float = 15.0
    retry_backoff_s: float = 0.05
    cas_attempts: int = 32

    def __post_init__(self) -> None:
        if not 0 <= self.lineage_margin_ms < self.fence_ttl_ms:
            raise ValueError("need 0 <= lineage_margin_ms < fence_ttl_ms")
        if self.fence_call_timeout_s <= 0 or self.fence_budget_s <= 0 or self.cas_attempts < 1:
            raise ValueError("timeouts must be > 0 and cas_attempts >= 1")

    @classmethod
    def from_settings(cls, section: PublisherSettings) -> PublisherOptions:
        """The options of the ``[rebalance.publisher]`` settings section (same field names)."""
        return cls(**section.model_dump())


@dataclass(frozen=True, slots=True)
class Recovery:
    """A leftover fence resolved: which of its moves went forward, which back."""

    fence_id: str
    epoch: int
    forward: tuple[VpMove, ...]
    back: tuple[VpMove, ...]


@dataclass
class PublishResult:
    """What ``Publisher.apply`` did. ``status``: ``published`` (something changed),
    ``unchanged`` (nothing to do or everything skipped/rolled back), ``busy``
    (another cut-over holds a fresh fence: nothing changed) or ``aborted`` (the fence
    was recovered by another run before this one finished)."""

    status: str = "unchanged"
    base_epoch: int = 0
    epochs: list[int] = field(default_factory=list)
    splits: list[SplitStep] = field(default_factory=list)
    moved: list[VpMove] = field(default_factory=list)
    rolled_back: list[tuple[VpMove, str]] = field(default_factory=list)
    skipped: list[tuple[VpMove, str]] = field(default_factory=list)
    seals: dict[int, int] = field(default_factory=dict)
    recovered: Recovery | None = None
    notes: list[str] = field(default_factory=list)
    fenced_ms: float | None = None
    """How long the vps stayed fenced (fence publish to final publish, this process's
    clock): the longest any producer of a moved vp can have been refused."""

    def to_dict(self) -> dict[str, Any]:
        def mv(m: VpMove) -> dict[str, Any]:
            return {"queue": m.queue, "vp": m.vp, "from_pp": m.from_pp, "to_pp": m.to_pp}

        return {
            "status": self.status,
            "base_epoch": self.base_epoch,
            "epochs": list(self.epochs),
            "splits": [{"queue": s.queue, "to_vps": s.to_vps, "steps": len(s.old_vs)} for s in self.splits],
            "moved": [mv(m) for m in self.moved],
            "rolled_back": [{**mv(m), "reason": r} for m, r in self.rolled_back],
            "skipped": [{**mv(m), "reason": r} for m, r in self.skipped],
            "fenced_end_offsets": {str(pp): x for pp, x in sorted(self.seals.items())},
            "recovered": None if self.recovered is None else {
                "fence": self.recovered.fence_id, "epoch": self.recovered.epoch,
                "forward": len(self.recovered.forward), "back": len(self.recovered.back),
            },
            "notes": list(self.notes),
            "fenced_ms": None if self.fenced_ms is None else round(self.fenced_ms, 1),
        }


class Publisher:
    """Applies plans through ``md`` (started by the caller) and ``fence_client``."""

    def __init__(
        self,
        md: MetadataStore,
        fence_client: FenceClient,
        options: PublisherOptions | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._md = md
        self._maps = md.maps
        self._fences = md.fences
        self._client = fence_client
        self._opts = options or PublisherOptions()
        self._clock = clock

    @property
    def fences(self) -> FenceStore:
        return self._fences

    async def _current(self) -> dict[str, Any]:
        return await self._maps.current() or dict(EMPTY_MAP)

    # ------------------------------------------------------------------ apply
    async def apply(self, plan: Plan) -> PublishResult:
        """Apply ``plan`` (see the module docstring). Errors propagate after the
        publisher tried to resolve its own fence (by lineage); a fence it could not
        resolve (Redis away) is recovered by a later run once its TTL has passed."""
        res = PublishResult(base_epoch=plan.placement.epoch)
        if plan.refused is not None or not plan.changed:
            res.notes.append("nothing to publish")
            return res
        snap = await self._fences.snapshot()
        if snap.fence is not None:
            if not snap.expired:
                res.status = "busy"
                res.notes.append(f"cut-over {snap.fence.id} (epoch {snap.fence.epoch}) is in progress; nothing published")
                return res
            res.recovered = await self.recover(fence_id=snap.fence.id)
        imbalance = (plan.imbalance_before.combined, plan.imbalance_after.combined)
        res.splits = await self._publish_splits(plan, res, None if plan.moves else imbalance)
        if plan.moves:
            await self._cutover(plan, res, imbalance)
        if res.status == "unchanged" and (res.splits or res.moved):
            res.status = "published"
        return res

    async def _publish_splits(
        self, plan: Plan, res: PublishResult, imbalance: tuple[float, float] | None
    ) -> list[SplitStep]:
        """Publish the plan's splits (one epoch); ``imbalance`` goes to its history entry
        when this epoch ends the remap (a plan without moves)."""
        for _ in range(self._opts.cas_attempts):
            cur = await self._current()
            queues, steps = apply_splits(cur["queues"], plan.splits)
            if not steps:
                return []
            new = {"epoch": cur["epoch"] + 1, "queues": queues}
            splits = [(st.queue, min(st.old_vs), st.to_vps) for st in steps]
            note = remap_note("split", splits=splits, imbalance=imbalance)
            if await self._maps.publish(new, cur["epoch"], note=note, base=cur):
                res.epochs.append(new["epoch"])
                for s in steps:
                    for old_v in s.old_vs:
                        await self._maps.split_lineage(s.queue, old_v, new["epoch"])
                return steps
        raise MapConflictError(f"split publish lost the epoch race {self._opts.cas_attempts} times")

    async def _cutover(self, plan: Plan, res: PublishResult, imbalance: tuple[float, float]) -> None:
        plan_vps = {m.queue: plan.placement.queue(m.queue).virtual_partitions for m in plan.moves}
        fence: Fence | None = None
        fenced_at = 0.0
        for _ in range(self._opts.cas_attempts):
            cur = await self._current()
            kept, skipped = rebase_moves(cur["queues"], plan.moves, plan_vps)
            if not kept:
                res.skipped = skipped
                return
            epoch = cur["epoch"] + 1
            vps = {m.queue: int(cur["queues"][m.queue]["virtual_partitions"]) for m in kept}
            fence = fence_of(uuid.uuid4().hex, epoch, self._opts.fence_ttl_ms, vps,
                             ((m.queue, m.vp, m.from_pp, m.to_pp) for m in kept))
            fenced_at = self._clock()
            try:
                r = await self._fences.publish_fenced(
                    {"epoch": epoch, "queues": cur["queues"]}, cur["epoch"], fence,
                    note=remap_note("fence", fenced=len(kept)), base=cur,
                )
            except BaseException:
                await self._resolve_own(fence)  # it may have been applied before the error
                raise
            if r == PUBLISHED:
                res.skipped = skipped
                break
            if r == BUSY:
                res.status = "busy"
                res.notes.append("another cut-over fenced vps first; moves not published")
                return
        else:
            raise MapConflictError(f"fence publish lost the epoch race {self._opts.cas_attempts} times")
        assert fence is not None
        res.epochs.append(fence.epoch)
        try:
            offsets, failures = await self._fence_all(sorted(fence.pps()), fence.epoch)
            res.seals = dict(offsets)
            deadline = fenced_at + (self._opts.fence_ttl_ms - self._opts.lineage_margin_ms) / 1000.0
            await self._finish(fence, offsets, failures, deadline, fenced_at, res, imbalance)
        except BaseException:
            await self._resolve_own(fence)
            raise

    async def _resolve_own(self, fence: Fence) -> None:
        """After a failure: resolve our own fence now (by lineage, as a later run would),
        so producers of the fenced vps do not wait for its TTL. Best effort."""
        try:
            await self.recover(force=True, fence_id=fence.id)
        except Exception:  # noqa: BLE001 - the caller re-raises the original error
            pass

    # ------------------------------------------------------------ fence calls
    async def _fence_all(self, pps: list[int], epoch: int) -> tuple[dict[int, int], dict[int, str]]:
        answers = await asyncio.gather(*(self._fence_one(pp, epoch) for pp in pps))
        offsets = {pp: a for pp, a in zip(pps, answers, strict=True) if isinstance(a, int)}
        failures = {pp: a for pp, a in zip(pps, answers, strict=True) if isinstance(a, str)}
        return offsets, failures

    async def _fence_one(self, pp: int, epoch: int) -> int | str:
        """The fenced end offset of ``pp``, or why it could not be had in time."""
        o = self._opts
        end = self._clock() + o.fence_budget_s
        backoff = o.retry_backoff_s
        while True:
            left = end - self._clock()
            try:
                return await self._client.fence(pp, epoch, max(0.05, min(o.fence_call_timeout_s, left)))
            except VpqError as exc:
                if not exc.retryable:
                    return f"pp {pp}: {exc.message} ({exc.code})"
                why = f"pp {pp}: {exc.message} ({exc.code})"
            if self._clock() + backoff >= end:
                return f"{why}; gave up after {o.fence_budget_s:.0f} s"
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    # ------------------------------------------------------- lineage + final
    async def _move_lineage(
        self, fence: Fence, queue: str, v_now: int, offsets: dict[int, int], deadline: float, failed: dict[tuple[str, int], str]
    ) -> set[tuple[str, int]]:
        """Move the lineage of every fenced vp of ``queue`` (and descendants under
        ``v_now``) whose pps answered; returns the (queue, vp) whose lineage is moved."""
        fq = fence.queues[queue]
        steps = lineage_fill_steps(set(await self._maps.lineage_all(queue)), v_now)
        for old_v in steps:
            await self._maps.split_lineage(queue, old_v, fence.epoch)
        lineage = await self._maps.lineage_all(queue)
        moved: set[tuple[str, int]] = set()
        for root, (a, b) in fq.moves.items():
            if (queue, root) in failed:
                continue
            for vp in descendants(root, fq.virtual_partitions, v_now):
                state = classify(resolve_lineage(lineage, vp, v_now), a, b)
                if state is LineageState.MOVED:
                    moved.add((queue, vp))
                elif state is LineageState.OTHER:
                    failed[(queue, root)] = f"lineage of vp {vp} is not open on pp {a}"
                elif self._clock() > deadline:
                    failed[(queue, root)] = "fence deadline passed before its lineage moved"
                elif await self._maps.move_range(queue, vp, offsets[a], b, offsets[b], fence.epoch):
                    moved.add((queue, vp))
                else:
                    failed[(queue, root)] = f"lineage refused the move of vp {vp}"
        return moved

    async def _finish(
        self, fence: Fence, offsets: dict[int, int], failures: dict[int, str], deadline: float, fenced_at: float,
        res: PublishResult, imbalance: tuple[float, float],
    ) -> None:
        failed: dict[tuple[str, int], str] = {}
        for q, fq in fence.queues.items():
            for root, (a, b) in fq.moves.items():
                why = failures.get(a) or failures.get(b)
                if why:
                    failed[(q, root)] = why
        moved: set[tuple[str, int]] = set()
        handled: dict[str, int] = {}
        for _ in range(self._opts.cas_attempts):
            cur = await self._current()
            for q, fq in fence.queues.items():
                placed = cur["queues"].get(q)
                v_now = int(placed["virtual_partitions"]) if placed else 0
                if placed is None or not descendants(0, fq.virtual_partitions, v_now):
                    for root in fq.moves:
                        failed.setdefault((q, root), "queue deleted or recreated during the cut-over")
                elif handled.get(q) != v_now:
                    moved |= await self._move_lineage(fence, q, v_now, offsets, deadline, failed)
                    handled[q] = v_now
            final = {"epoch": cur["epoch"] + 1, "queues": final_queues(cur["queues"], fence, moved)}
            went = [VpMove(q, root, a, b) for q, fq in fence.queues.items() for root, (a, b) in fq.moves.items()
                    if (q, root) in moved and (q, root) not in failed]
            note = remap_note("final", moves=went, imbalance=imbalance, rolled_back=len(failed))
            r = await self._fences.publish_unfenced(final, cur["epoch"], fence.id, note=note, base=cur)
            if r == PUBLISHED:
                res.epochs.append(final["epoch"])
                res.fenced_ms = (self._clock() - fenced_at) * 1000.0
                break
            if r == GONE:
                res.status = "aborted"
                res.notes.append(f"fence {fence.id} was recovered by another run; it placed the vps by their lineage")
                return
        else:
            raise MapConflictError(f"final publish lost the epoch race {self._opts.cas_attempts} times")
        for q, fq in fence.queues.items():
            for root, (a, b) in fq.moves.items():
                m = VpMove(q, root, a, b)
                if (q, root) in failed:
                    res.rolled_back.append((m, failed[(q, root)]))
                elif (q, root) in moved:
                    res.moved.append(m)
        if res.moved:
            res.status = "published"

    # --------------------------------------------------------------- recovery
    async def recover(self, force: bool = False, fence_id: str | None = None) -> Recovery | None:
        """Resolve a leftover fence (only the one named ``fence_id`` when given): only
        an expired one unless ``force`` (safe only when its publisher is known to be
        gone, e.g. this one). Each fenced vp goes where its lineage says; no lineage is
        written. None when there is no such fence (or another run resolved it first, or
        it is still fresh and not forced)."""
        for _ in range(self._opts.cas_attempts):
            snap = await self._fences.snapshot()
            fence = snap.fence
            if fence is None or (fence_id is not None and fence.id != fence_id) or not (force or snap.expired):
                return None
            cur = await self._current()
            moved: set[tuple[str, int]] = set()
            forward: list[VpMove] = []
            back: list[VpMove] = []
            for q, fq in fence.queues.items():
                placed = cur["queues"].get(q)
                v_now = int(placed["virtual_partitions"]) if placed else 0
                lineage = await self._maps.lineage_all(q) if placed else {}
                for root, (a, b) in fq.moves.items():
                    went = [vp for vp in descendants(root, fq.virtual_partitions, v_now)
                            if classify(resolve_lineage(lineage, vp, v_now), a, b) is LineageState.MOVED]
                    moved.update((q, vp) for vp in went)
                    (forward if went else back).append(VpMove(q, root, a, b))
            final = {"epoch": cur["epoch"] + 1, "queues": final_queues(cur["queues"], fence, moved)}
            note = remap_note("recovery", moves=forward, rolled_back=len(back))
            r = await self._fences.publish_unfenced(final, cur["epoch"], fence.id, note=note, base=cur)
            if r == PUBLISHED:
                return Recovery(fence.id, final["epoch"], tuple(forward), tuple(back))
            if r == GONE:
                return None
        raise MapConflictError(f"fence recovery lost the epoch race {self._opts.cas_attempts} times")


def describe(result: PublishResult) -> Iterable[str]:
    """Human lines summarising ``result`` (what ``vpq rebalance`` prints)."""
    if result.recovered is not None:
        r = result.recovered
        yield (f"recovered the leftover cut-over {r.fence_id} at epoch {r.epoch}: "
               f"{len(r.forward)} vp(s) forward, {len(r.back)} back")
    epochs = ", ".join(str(e) for e in result.epochs) or "none"
    fenced = f"; fenced for {result.fenced_ms:.0f} ms" if result.fenced_ms is not None else ""
    yield (f"publish: {result.status}; epochs published: {epochs}; splits: {len(result.splits)}; "
           f"vps moved: {len(result.moved)}; rolled back: {len(result.rolled_back)}; skipped: {len(result.skipped)}"
           + fenced)
    for m, why in result.rolled_back[:10]:
        yield f"  rolled back {m.queue} vp {m.vp} ({m.from_pp} -> {m.to_pp}): {why}"
    for m, why in result.skipped[:10]:
        yield f"  skipped {m.queue} vp {m.vp} ({m.from_pp} -> {m.to_pp}): {why}"
    yield from (f"  {n}" for n in result.notes)
