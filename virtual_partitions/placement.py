"""Placement maps: (queue, vp) -> physical partition, versioned by an epoch.

Both classes are immutable values; every "change" returns a new object. Changing
a map's content does NOT bump its epoch: the publisher does that explicitly
(``m.move(...).next_epoch()``) and compare-and-swaps on the epoch in Redis.

Wire format (``GET /v1/maps/current``, and what is stored)::

    {"epoch": n, "queues": {"q": {"virtual_partitions": V,
                                  "placement": [pp of vp 0, pp of vp 1, ...]}}}

Pure logic: no I/O.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from vpq.virtual_partitions.hashing import check_virtual_partitions, key_hash

QUEUE_NAME_RE = re.compile(r"[A-Za-z0-9._-]{1,128}")


def check_queue_name(name: object) -> str:
    """Return ``name`` if it is a valid queue name (``[A-Za-z0-9._-]{1,128}``), else ValueError."""
    if not isinstance(name, str) or not QUEUE_NAME_RE.fullmatch(name):
        raise ValueError(f"invalid queue name {name!r}: must match [A-Za-z0-9._-]{{1,128}}")
    return name


def _check_int(value: object, what: str, minimum: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class QueuePlacement:
    """Where each vp of one queue lives: ``placement[vp]`` is the pp of ``vp``."""

    virtual_partitions: int
    placement: tuple[int, ...]

    def __post_init__(self) -> None:
        check_virtual_partitions(self.virtual_partitions)
        if not isinstance(self.placement, tuple):
            object.__setattr__(self, "placement", tuple(self.placement))
        if len(self.placement) != self.virtual_partitions:
            raise ValueError(
                f"placement has {len(self.placement)} entries, expected one per vp ({self.virtual_partitions})"
            )
        for vp, pp in enumerate(self.placement):
            _check_int(pp, f"pp of vp {vp}")

    def pp_of(self, vp: int) -> int:
        """The pp holding ``vp``; ValueError when ``vp`` is out of range."""
        if not isinstance(vp, int) or not 0 <= vp < self.virtual_partitions:
            raise ValueError(f"vp {vp!r} out of range [0, {self.virtual_partitions})")
        return self.placement[vp]

    def split(self) -> QueuePlacement:
        """V doubles: vp ``i`` becomes ``i`` and ``i + V``, both where ``i`` was."""
        return QueuePlacement(self.virtual_partitions * 2, self.placement + self.placement)

    def move(self, vp: int, pp: int) -> QueuePlacement:
        """``vp`` placed on ``pp`` instead (the same object when already there)."""
        self.pp_of(vp)
        _check_int(pp, "pp")
        if self.placement[vp] == pp:
            return self
        p = list(self.placement)
        p[vp] = pp
        return QueuePlacement(self.virtual_partitions, tuple(p))

    def vps_on(self, pp: int) -> tuple[int, ...]:
        """The vps of this queue placed on ``pp``, ascending."""
        return tuple(vp for vp, p in enumerate(self.placement) if p == pp)

    def to_dict(self) -> dict[str, Any]:
        return {"virtual_partitions": self.virtual_partitions, "placement": list(self.placement)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QueuePlacement:
        """Parse the wire format; ValueError on anything malformed."""
        if not isinstance(data, Mapping):
            raise ValueError(f"queue placement must be an object, got {type(data).__name__}")
        extra = set(data) - {"virtual_partitions", "placement"}
        if extra:
            raise ValueError(f"unexpected fields in queue placement: {sorted(extra)}")
        if "virtual_partitions" not in data or "placement" not in data:
            raise ValueError("queue placement needs 'virtual_partitions' and 'placement'")
        placement = data["placement"]
        if not isinstance(placement, (list, tuple)):
            raise ValueError("'placement' must be a list of pp ids")
        return cls(data["virtual_partitions"], tuple(placement))


@dataclass(frozen=True, slots=True)
class PlacementMap:
    """The whole cluster's placement at one epoch. ``queues`` is read-only."""

    epoch: int
    queues: Mapping[str, QueuePlacement] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_int(self.epoch, "epoch")
        frozen: dict[str, QueuePlacement] = {}
        for name in sorted(self.queues):
            qp = self.queues[name]
            check_queue_name(name)
            if not isinstance(qp, QueuePlacement):
                raise ValueError(f"placement of queue {name!r} must be a QueuePlacement")
            frozen[name] = qp
        object.__setattr__(self, "queues", MappingProxyType(frozen))

    def __contains__(self, queue: object) -> bool:
        return queue in self.queues

    def __iter__(self) -> Iterator[str]:
        return iter(self.queues)

    def queue(self, name: str) -> QueuePlacement:
        """The placement of ``name``; ValueError when the map does not know the queue."""
        try:
            return self.queues[name]
        except KeyError:
            raise ValueError(f"queue {name!r} is not in the placement map (epoch {self.epoch})") from None

    def pp_of(self, queue: str, vp: int) -> int:
        return self.queue(queue).pp_of(vp)

    def next_epoch(self) -> PlacementMap:
        """The same content at ``epoch + 1``."""
        return PlacementMap(self.epoch + 1, self.queues)

    def with_placement(self, name: str, qp: QueuePlacement) -> PlacementMap:
        """``name`` placed as ``qp`` (added or replaced)."""
        q = dict(self.queues)
        q[name] = qp
        return PlacementMap(self.epoch, q)

    def with_queue(self, name: str, virtual_partitions: int, pps: Sequence[int]) -> PlacementMap:
        """``name`` added (or replaced) with ``pps[vp]`` as the pp of each vp."""
        return self.with_placement(name, QueuePlacement(virtual_partitions, tuple(pps)))

    def without_queue(self, name: str) -> PlacementMap:
        """``name`` removed; ValueError when it is not there."""
        self.queue(name)
        return PlacementMap(self.epoch, {k: v for k, v in self.queues.items() if k != name})

    def split(self, queue: str) -> PlacementMap:
        """``queue``'s V doubled (see ``QueuePlacement.split``)."""
        return self.with_placement(queue, self.queue(queue).split())

    def move(self, queue: str, vp: int, pp: int) -> PlacementMap:
        """``queue``'s ``vp`` placed on ``pp``."""
        qp = self.queue(queue)
        moved = qp.move(vp, pp)
        return self if moved is qp else self.with_placement(queue, moved)

    def vp_count_by_pp(self) -> dict[int, int]:
        """How many vps (over all queues) each pp holds; pps holding none are absent."""
        counts: dict[int, int] = {}
        for qp in self.queues.values():
            for pp in qp.placement:
                counts[pp] = counts.get(pp, 0) + 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "queues": {name: qp.to_dict() for name, qp in self.queues.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlacementMap:
        """Parse the wire format; ValueError (naming the queue) on anything malformed."""
        if not isinstance(data, Mapping):
            raise ValueError(f"placement map must be an object, got {type(data).__name__}")
        extra = set(data) - {"epoch", "queues"}
        if extra:
            raise ValueError(f"unexpected fields in placement map: {sorted(extra)}")
        if "epoch" not in data:
            raise ValueError("placement map needs 'epoch'")
        queues = data.get("queues", {})
        if not isinstance(queues, Mapping):
            raise ValueError("'queues' must be an object")
        parsed: dict[str, QueuePlacement] = {}
        for name, qd in queues.items():
            try:
                parsed[check_queue_name(name)] = QueuePlacement.from_dict(qd)
            except ValueError as e:
                raise ValueError(f"queue {name!r}: {e}") from None
        return cls(data["epoch"], parsed)


@dataclass(frozen=True, slots=True)
class VpMove:
    """One vp whose pp differs between two maps."""

    queue: str
    vp: int
    from_pp: int
    to_pp: int


def moves_between(old: PlacementMap, new: PlacementMap) -> list[VpMove]:
    """The vps of queues present in both maps whose pp changed, sorted by (queue, vp).

    When a queue's V grew from ``old`` to ``new`` (splits), new vp ``j`` is compared
    with its ancestor ``j mod V_old``, so a split alone yields no moves. Queues
    whose V shrank are reported as ValueError (V may only grow).
    """
    out: list[VpMove] = []
    for name, nq in new.queues.items():
        oq = old.queues.get(name)
        if oq is None:
            continue
        if nq.virtual_partitions < oq.virtual_partitions:
            raise ValueError(
                f"queue {name!r}: virtual_partitions shrank from {oq.virtual_partitions} to {nq.virtual_partitions}"
            )
        mask = oq.virtual_partitions - 1
        for vp, pp in enumerate(nq.placement):
            before = oq.placement[vp & mask]
            if before != pp:
                out.append(VpMove(name, vp, before, pp))
    return out


def initial_placement(
    queue: str,
    virtual_partitions: int,
    physical_partitions: Sequence[int],
    load_hint: Mapping[int, float] | None = None,
) -> tuple[int, ...]:
    """Deterministically spread a new queue's vps over ``physical_partitions``.

    Without ``load_hint``: round robin starting at ``key_hash(queue) mod K`` over the
    pps sorted ascending, so each pp gets ``V/K`` vps (or at most one) and many small
    queues (``V < K``) start on different pps and spread evenly overall.

    With ``load_hint`` (pp -> how many vps, or other load in units of one new vp,
    the pp already carries; missing pps count as 0): each vp in turn goes to the pp
    with the least ``load + vps of this queue already given``; ties go to the pp
    given fewer vps of this queue, then to the earlier pp in the hash-rotated order.
    """
    check_queue_name(queue)
    check_virtual_partitions(virtual_partitions)
    for pp in physical_partitions:
        _check_int(pp, "pp")
    pps = sorted(set(physical_partitions))
    if not pps:
        raise ValueError("initial_placement needs at least one physical partition")
    k = len(pps)
    start = key_hash(queue) % k
    rotated = pps[start:] + pps[:start]
    if load_hint is None:
        return tuple(rotated[vp % k] for vp in range(virtual_partitions))
    heap: list[tuple[float, int, int]] = []
    for i, pp in enumerate(rotated):
        v = load_hint.get(pp, 0)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v < float("inf"):
            raise ValueError(f"load_hint for pp {pp} must be a finite number >= 0, got {v!r}")
        heap.append((float(v), 0, i))
    heapq.heapify(heap)
    out: list[int] = []
    for _ in range(virtual_partitions):
        load, given, i = heapq.heappop(heap)
        out.append(rotated[i])
        heapq.heappush(heap, (load + 1.0, given + 1, i))
    return tuple(out)
