"""Pure planning of the map changes the queue admin makes (no I/O).

Maps are in the wire format (``{"epoch", "queues": {name: {"virtual_partitions", "placement"}}}``);
every function but ``add_load`` (which counts into the dict it is given) returns new
objects and never mutates its arguments.

- A new queue is spread by ``virtual_partitions.placement.initial_placement`` with the vp
  count each pp already carries as load hint; vps that already have an open lineage range
  (a creation interrupted after opening them) keep that pp, so lineage and map agree.
- Growing V doubles the queue's placement (``QueuePlacement.split``) as often as needed.
- ``lineage_repair_splits`` says which ``split_lineage`` calls bring a queue's lineage up
  to V when a split was published but its lineage copy was not made (a crash in between).
- Group commit (``queue_admin.map_batcher``): ``apply_edits`` applies many edits (place,
  grow, remove) to one map in order, in time proportional to the edits, not to the map:
  the queues dict is copied shallowly once and entries are replaced, never mutated;
  the vp count per pp (``placement_load``) is carried along and updated per edit so
  that planning a new queue never rescans the map.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vpq.virtual_partitions.placement import QueuePlacement, initial_placement


def load_hint(queues: Mapping[str, Any], pps: Sequence[int]) -> dict[int, int]:
    """How many vps (of every queue in ``queues``) each of ``pps`` holds."""
    counts = {pp: 0 for pp in pps}
    for q in queues.values():
        for pp in q["placement"]:
            if pp in counts:
                counts[pp] += 1
    return counts


def placement_load(queues: Mapping[str, Any]) -> dict[int, int]:
    """How many vps each pp holds, over every pp the map places something on."""
    counts: dict[int, int] = {}
    for q in queues.values():
        for pp in q["placement"]:
            counts[pp] = counts.get(pp, 0) + 1
    return counts


def add_load(load: dict[int, int], placement: Iterable[int], sign: int = 1) -> None:
    """Count ``placement``'s vps into ``load`` (``sign=-1``: out of it); in place."""
    for pp in placement:
        n = load.get(pp, 0) + sign
        if n:
            load[pp] = n
        else:
            load.pop(pp, None)


def plan_placement(
    queue: str, virtual_partitions: int, pps: Sequence[int], load: Mapping[int, int], keep: Mapping[int, int]
) -> tuple[int, ...]:
    """The placement of a new queue given the vp count per pp: ``keep[vp]`` where given,
    else the balanced choice (``initial_placement`` with ``load`` as hint)."""
    hint = {pp: load.get(pp, 0) for pp in pps}
    plan = initial_placement(queue, virtual_partitions, pps, load_hint=hint)
    return tuple(keep.get(vp, plan[vp]) for vp in range(virtual_partitions))


def plan_new_queue(
    queues: Mapping[str, Any], queue: str, virtual_partitions: int, pps: Sequence[int], keep: Mapping[int, int]
) -> tuple[int, ...]:
    """The placement of a new queue: ``keep[vp]`` where given, else the balanced choice."""
    return plan_placement(queue, virtual_partitions, pps, load_hint(queues, pps), keep)


def clean_creation(lineage: Mapping[int, Sequence[Any]], virtual_partitions: int) -> bool:
    """True when ``lineage`` (vp -> ranges) is what a (possibly concurrent, possibly
    interrupted) creation leaves: at most one open range per vp (from 0 or from the pp's
    end offset at creation), only vps below V. Anything else is left over by an earlier
    queue of the same name."""
    for vp, ranges in lineage.items():
        if vp >= virtual_partitions or len(ranges) != 1:
            return False
        if ranges[0].to_offset is not None:
            return False
    return True


def lineage_repair_splits(present: Collection[int], virtual_partitions: int) -> list[int]:
    """The old-V arguments of the ``split_lineage`` calls (in order) that fill vps missing
    from ``present``: each ``w`` such that vps ``[0, w)`` have lineage (after the earlier
    calls) and some of ``[w, 2w)`` do not."""
    have = set(present)
    out: list[int] = []
    w = 1
    while w < virtual_partitions:
        if all(vp in have for vp in range(w)) and any(vp not in have for vp in range(w, 2 * w)):
            out.append(w)
            have.update(range(w, 2 * w))
        w *= 2
    return out


@dataclass(frozen=True, slots=True)
class MapEdit:
    """One change for ``apply_edits``. ``kind`` "place": make ``queue`` placed with at least
    ``virtual_partitions`` vps: added as ``placement`` when absent (skipped when
    ``placement`` is None), split when placed with fewer. ``kind`` "remove": drop it."""

    kind: str
    queue: str
    virtual_partitions: int = 0
    placement: tuple[int, ...] | None = None


def apply_edits(
    queues: Mapping[str, Any], load: Mapping[int, int], edits: Iterable[MapEdit]
) -> tuple[dict[str, Any], dict[int, int], bool]:
    """``(queues after the edits in order, their placement_load, whether anything changed)``;
    ``load`` must be ``placement_load(queues)``. Inputs are left untouched."""
    out = dict(queues)
    counts = dict(load)
    changed = False
    for e in edits:
        cur = out.get(e.queue)
        if e.kind == "remove":
            if cur is not None:
                del out[e.queue]
                add_load(counts, cur["placement"], -1)
                changed = True
        elif e.kind == "place":
            if cur is None:
                if e.placement is None:
                    continue
                new = QueuePlacement(len(e.placement), tuple(e.placement)).to_dict()
            elif cur["virtual_partitions"] < e.virtual_partitions:
                qp = QueuePlacement.from_dict(cur)
                while qp.virtual_partitions < e.virtual_partitions:
                    qp = qp.split()
                new = qp.to_dict()
                add_load(counts, cur["placement"], -1)
            else:
                continue
            out[e.queue] = new
            add_load(counts, new["placement"])
            changed = True
        else:
            raise ValueError(f"unknown map edit kind {e.kind!r}")
    return out, counts, changed
