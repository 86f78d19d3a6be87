"""Pure planning of a remap cut-over (``spark_rebalance.publisher`` does the I/O).

A plan is computed against one map epoch and applied later, while queue admins may
create, delete or grow queues. Everything here re-bases the plan on the map in
force at the time of each step, so a concurrent change is never overwritten:

- ``apply_splits``: the plan's splits on the current map (a queue already at the
  target V or gone is left alone);
- ``rebase_moves``: the plan's moves that still make sense (same V, vp still on
  its source pp); the others are skipped with a reason;
- ``final_queues``: the current map with the moved vps (and, when V grew during the
  cut-over, their descendants) on their new pps;
- ``lineage_fill_steps`` / ``resolve_lineage`` / ``classify``: completing a queue's
  lineage after splits, and reading what the lineage says about one move.

Maps are in the wire format (``{"epoch", "queues": {name: {"virtual_partitions",
"placement"}}}``). Nothing here mutates its arguments. No I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from vpq.metadata.fences import Fence
from vpq.spark_rebalance.plan_model import Split
from vpq.virtual_partitions.placement import VpMove


class RangeLike(Protocol):
    @property
    def pp(self) -> int: ...

    @property
    def from_offset(self) -> int: ...

    @property
    def to_offset(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class SplitStep:
    """``queue`` doubled from ``old_vs[0]`` vps, once per entry (``old_vs`` are the
    ``split_lineage`` arguments, in order)."""

    queue: str
    old_vs: tuple[int, ...]

    @property
    def to_vps(self) -> int:
        return self.old_vs[-1] * 2


def _copy(queues: Mapping[str, Any]) -> dict[str, Any]:
    return {n: {"virtual_partitions": int(q["virtual_partitions"]), "placement": list(q["placement"])} for n, q in queues.items()}


def apply_splits(queues: Mapping[str, Any], splits: Sequence[Split]) -> tuple[dict[str, Any], list[SplitStep]]:
    """``queues`` with every split applied that is still needed (queue present, V below
    the split's target: doubled until it reaches it), and the steps taken."""
    out = _copy(queues)
    steps: list[SplitStep] = []
    for s in splits:
        q = out.get(s.queue)
        if q is None:
            continue
        olds: list[int] = []
        while q["virtual_partitions"] < s.to_vps:
            olds.append(q["virtual_partitions"])
            q["placement"] = q["placement"] + q["placement"]
            q["virtual_partitions"] *= 2
        if olds:
            steps.append(SplitStep(s.queue, tuple(olds)))
    return out, steps


def rebase_moves(
    queues: Mapping[str, Any], moves: Sequence[VpMove], plan_vps: Mapping[str, int]
) -> tuple[list[VpMove], list[tuple[VpMove, str]]]:
    """Split ``moves`` (planned under ``plan_vps[queue]`` vps) into those still valid
    on ``queues`` and those skipped, with the reason."""
    kept: list[VpMove] = []
    skipped: list[tuple[VpMove, str]] = []
    for m in moves:
        q = queues.get(m.queue)
        if q is None:
            skipped.append((m, "queue no longer placed"))
        elif int(q["virtual_partitions"]) != plan_vps.get(m.queue):
            skipped.append((m, f"queue now has {q['virtual_partitions']} vps, the plan {plan_vps.get(m.queue)}"))
        elif q["placement"][m.vp] != m.from_pp:
            skipped.append((m, f"vp now on pp {q['placement'][m.vp]}, not {m.from_pp}"))
        elif m.from_pp == m.to_pp:
            skipped.append((m, "no change"))
        else:
            kept.append(m)
    return kept, skipped


def descendants(vp: int, fenced_vps: int, current_vps: int) -> range:
    """The vps under ``current_vps`` that descend from ``vp`` under ``fenced_vps``."""
    if current_vps < fenced_vps or current_vps % fenced_vps:
        return range(0)
    return range(vp, current_vps, fenced_vps)


def final_queues(queues: Mapping[str, Any], fence: Fence, moved: Collection[tuple[str, int]]) -> dict[str, Any]:
    """``queues`` with every ``(queue, vp)`` of ``moved`` (vps under the current V) on the
    target pp of the fenced vp it descends from; everything else unchanged."""
    out = _copy(queues)
    for name, q in out.items():
        fq = fence.queues.get(name)
        if fq is None:
            continue
        for vp in range(q["virtual_partitions"]):
            if (name, vp) in moved:
                root = fq.root(vp)
                if root is not None:
                    q["placement"][vp] = fq.moves[root][1]
    return out


def lineage_fill_steps(present: Collection[int], virtual_partitions: int) -> list[int]:
    """The ``split_lineage`` old-V arguments (ascending) that give every vp below
    ``virtual_partitions`` its own lineage by copying from its parent, given the vps
    that have one (``present``). Empty when nothing is missing."""
    have = set(present)
    steps: list[int] = []
    w = 1
    while w < virtual_partitions:
        missing = [j for j in range(w, 2 * w) if j not in have]
        if missing:
            steps.append(w)
            have.update([j for j in missing if j - w in have])
        w *= 2
    return steps


def resolve_lineage(lineage: Mapping[int, Sequence[RangeLike]], vp: int, virtual_partitions: int) -> Sequence[RangeLike]:
    """The lineage of ``vp``: its own, else its nearest ancestor's (what readers use)."""
    v = virtual_partitions
    while v >= 1:
        r = lineage.get(vp & (v - 1))
        if r:
            return r
        v >>= 1
    return ()


class LineageState(enum.Enum):
    IN_PLACE = "in_place"  # open on the source pp: not moved yet
    MOVED = "moved"  # sealed on the source pp, open on the target pp
    OTHER = "other"  # anything else: do not touch


def classify(ranges: Sequence[RangeLike], from_pp: int, to_pp: int) -> LineageState:
    """What a vp's lineage says about its move ``from_pp -> to_pp``."""
    if not ranges or ranges[-1].to_offset is not None:
        return LineageState.OTHER
    last = ranges[-1]
    if last.pp == from_pp:
        return LineageState.IN_PLACE
    if last.pp == to_pp and len(ranges) >= 2 and ranges[-2].pp == from_pp and ranges[-2].to_offset is not None:
        return LineageState.MOVED
    return LineageState.OTHER
