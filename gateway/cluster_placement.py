"""Pure planning of the map changes the queue admin makes (no I/O).

Maps are in the wire format (``{"epoch", "queues": {name: {"virtual_partitions", "placement"}}}``);
every function returns new objects and never mutates its arguments.

- A new queue is spread by ``virtual_partitions.placement.initial_placement`` with the vp
  count each pp already carries as load hint; vps that already have an open lineage range
  (a creation interrupted after opening them) keep that pp, so lineage and map agree.
- Growing V doubles the queue's placement (``QueuePlacement.split``) as often as needed.
- ``lineage_repair_splits`` says which ``split_lineage`` calls bring a queue's lineage up
  to V when a split was published but its lineage copy was not made (a crash in between).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from virtual_partitions.placement import QueuePlacement, initial_placement


def load_hint(queues: Mapping[str, Any], pps: Sequence[int]) -> dict[int, int]:
    """How many vps (of every queue in ``queues``) each of ``pps`` holds."""
    counts = {pp: 0 for pp in pps}
    for q in queues.values():
        for pp in q["placement"]:
            if pp in counts:
                counts[pp] += 1
    return counts


def plan_new_queue(
    queues: Mapping[str, Any], queue: str, virtual_partitions: int, pps: Sequence[int], keep: Mapping[int, int]
) -> tuple[int, ...]:
    """The placement of a new queue: ``keep[vp]`` where given, else the balanced choice."""
    plan = initial_placement(queue, virtual_partitions, pps, load_hint=load_hint(queues, pps))
    return tuple(keep.get(vp, plan[vp]) for vp in range(virtual_partitions))


def with_queue(queues: Mapping[str, Any], queue: str, placement: Sequence[int]) -> dict[str, Any]:
    """``queues`` plus ``queue`` placed as ``placement``."""
    out = {name: dict(q) for name, q in queues.items()}
    out[queue] = QueuePlacement(len(placement), tuple(placement)).to_dict()
    return out


def grow_queue(queues: Mapping[str, Any], queue: str, virtual_partitions: int) -> tuple[dict[str, Any], list[int]] | None:
    """``queues`` with ``queue`` split until it has ``virtual_partitions`` vps, and the V of
    each split in order (e.g. ``[4, 8]`` for 4 -> 16); None when it has that many or more."""
    qp = QueuePlacement.from_dict(queues[queue])
    splits: list[int] = []
    while qp.virtual_partitions < virtual_partitions:
        splits.append(qp.virtual_partitions)
        qp = qp.split()
    if not splits:
        return None
    out = {name: dict(q) for name, q in queues.items()}
    out[queue] = qp.to_dict()
    return out, splits


def without_queue(queues: Mapping[str, Any], queue: str) -> dict[str, Any] | None:
    """``queues`` without ``queue``; None when it is not there."""
    if queue not in queues:
        return None
    return {name: dict(q) for name, q in queues.items() if name != queue}


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
