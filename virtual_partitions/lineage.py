"""Lineage: the ordered physical history of each virtual partition.

A vp's lineage is the list of ``(pp, from_offset, to_offset)`` ranges it has lived
in, oldest first. ``to_offset`` is exclusive; ``None`` marks the one open range
(where the vp is written now), which can only be the last. Every range but the
last is sealed.

Ordering rule (why a move never reorders a key): a reader of a vp consumes its
ranges strictly in order and only starts range ``k + 1`` after it has finished
range ``k`` (read up to ``to_offset``), and within a range records come in pp
offset order. All records of a key live in one vp, so they are read in the
order they were written provided the writer honours the move protocol:

1. stop appending the vp to the old pp (producers fenced by the new epoch),
2. seal the old range at the old pp's end offset (every record of the vp on the
   old pp lies below it),
3. open the new range at the new pp's end offset *before* the first record of
   the vp is appended there.

Split: when V doubles, vp ``i + V`` inherits a copy of vp ``i``'s lineage: both
live in the same pp ranges, and their readers keep only records with
``vp_of_hash(record_hash, V_new)`` equal to their own vp.

Retention may drop fully consumed or deleted leading ranges (``drop_first``).

Pure logic: no I/O. All classes are immutable values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vpq.virtual_partitions.hashing import check_virtual_partitions
from vpq.virtual_partitions.placement import QueuePlacement


def _check_offset(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{what} must be an integer >= 0, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class LineageRange:
    """Offsets ``[from_offset, to_offset)`` of pp ``pp``; ``to_offset=None`` is open-ended."""

    pp: int
    from_offset: int
    to_offset: int | None = None

    def __post_init__(self) -> None:
        _check_offset(self.pp, "pp")
        _check_offset(self.from_offset, "from_offset")
        if self.to_offset is not None:
            _check_offset(self.to_offset, "to_offset")
            if self.to_offset < self.from_offset:
                raise ValueError(f"to_offset {self.to_offset} is below from_offset {self.from_offset}")

    @property
    def sealed(self) -> bool:
        return self.to_offset is not None

    def contains(self, pp: int, offset: int) -> bool:
        """True when position ``(pp, offset)`` lies inside this range."""
        return pp == self.pp and offset >= self.from_offset and (self.to_offset is None or offset < self.to_offset)

    def to_dict(self) -> dict[str, Any]:
        return {"pp": self.pp, "from": self.from_offset, "to": self.to_offset}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LineageRange:
        if not isinstance(data, Mapping) or set(data) != {"pp", "from", "to"}:
            raise ValueError(f"lineage range must be an object with exactly pp, from, to; got {data!r}")
        return cls(data["pp"], data["from"], data["to"])


@dataclass(frozen=True, slots=True)
class Lineage:
    """The ranges of one (queue, vp), oldest first.

    Invariants (checked on construction): only the last range may be open; a
    later range on a pp already used starts at or after the end of every earlier
    range on that pp (a pp's offsets only grow).
    """

    ranges: tuple[LineageRange, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.ranges, tuple):
            object.__setattr__(self, "ranges", tuple(self.ranges))
        ends: dict[int, int] = {}
        last = len(self.ranges) - 1
        for i, r in enumerate(self.ranges):
            if not isinstance(r, LineageRange):
                raise ValueError(f"lineage range {i} must be a LineageRange")
            if not r.sealed and i != last:
                raise ValueError(f"lineage range {i} is open but is not the last range")
            prev_end = ends.get(r.pp)
            if prev_end is not None and r.from_offset < prev_end:
                raise ValueError(
                    f"lineage range {i} starts at offset {r.from_offset} of pp {r.pp}, "
                    f"below the end {prev_end} of an earlier range on that pp"
                )
            if r.to_offset is not None:
                ends[r.pp] = r.to_offset

    @property
    def current(self) -> LineageRange | None:
        """The open range (where the vp is written now), or None when sealed or empty."""
        if self.ranges and not self.ranges[-1].sealed:
            return self.ranges[-1]
        return None

    @property
    def is_open(self) -> bool:
        return self.current is not None

    def open_range(self, pp: int, from_offset: int) -> Lineage:
        """A new open range on ``pp`` from ``from_offset``; ValueError unless the last range is sealed."""
        if self.is_open:
            cur = self.ranges[-1]
            raise ValueError(f"cannot open a range on pp {pp}: the range on pp {cur.pp} is still open (seal it first)")
        return Lineage(self.ranges + (LineageRange(pp, from_offset),))

    def seal(self, to_offset: int) -> Lineage:
        """The open range closed at ``to_offset`` (exclusive); ValueError when none is open."""
        cur = self.current
        if cur is None:
            raise ValueError("cannot seal: no open range")
        return Lineage(self.ranges[:-1] + (LineageRange(cur.pp, cur.from_offset, to_offset),))

    def move(self, to_pp: int, seal_at: int, open_at: int) -> Lineage:
        """Seal the open range at ``seal_at`` and open one on ``to_pp`` at ``open_at``."""
        return self.seal(seal_at).open_range(to_pp, open_at)

    def index_of(self, pp: int, offset: int) -> int | None:
        """Index of the range holding position ``(pp, offset)``, or None."""
        for i, r in enumerate(self.ranges):
            if r.contains(pp, offset):
                return i
        return None

    def drop_first(self, n: int) -> Lineage:
        """Without the first ``n`` ranges (retention); they must all be sealed."""
        if not 0 <= n <= len(self.ranges):
            raise ValueError(f"cannot drop {n} of {len(self.ranges)} ranges")
        if any(not r.sealed for r in self.ranges[:n]):
            raise ValueError("cannot drop the open range")
        return Lineage(self.ranges[n:])

    def to_dict(self) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self.ranges]

    @classmethod
    def from_dict(cls, data: Any) -> Lineage:
        if not isinstance(data, (list, tuple)):
            raise ValueError(f"lineage must be a list of ranges, got {type(data).__name__}")
        return cls(tuple(LineageRange.from_dict(r) for r in data))


def split_lineage(lineage: Lineage) -> tuple[Lineage, Lineage]:
    """The lineages of vp ``i`` and ``i + V`` after splitting vp ``i``: both equal to ``i``'s."""
    return lineage, lineage


@dataclass(frozen=True, slots=True)
class QueueLineage:
    """The lineages of all vps of one queue: ``vps[vp]``; ``len(vps)`` is V."""

    vps: tuple[Lineage, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.vps, tuple):
            object.__setattr__(self, "vps", tuple(self.vps))
        check_virtual_partitions(len(self.vps), "number of vp lineages")
        for vp, lin in enumerate(self.vps):
            if not isinstance(lin, Lineage):
                raise ValueError(f"lineage of vp {vp} must be a Lineage")

    @property
    def virtual_partitions(self) -> int:
        return len(self.vps)

    @classmethod
    def new(cls, placement: QueuePlacement, end_offsets: Mapping[int, int]) -> QueueLineage:
        """A new queue: each vp opens a range on its pp at that pp's current end offset
        (``end_offsets[pp]``, 0 when absent)."""
        return cls(
            tuple(
                Lineage((LineageRange(pp, _check_offset(end_offsets.get(pp, 0), f"end offset of pp {pp}")),))
                for pp in placement.placement
            )
        )

    def lineage(self, vp: int) -> Lineage:
        if not isinstance(vp, int) or not 0 <= vp < len(self.vps):
            raise ValueError(f"vp {vp!r} out of range [0, {len(self.vps)})")
        return self.vps[vp]

    def split(self) -> QueueLineage:
        """V doubles: vp ``i + V`` gets a copy of vp ``i``'s lineage."""
        return QueueLineage(self.vps + self.vps)

    def move(self, vp: int, to_pp: int, seal_at: int, open_at: int) -> QueueLineage:
        """``vp`` moved to ``to_pp`` (see ``Lineage.move``)."""
        new = self.lineage(vp).move(to_pp, seal_at, open_at)
        return QueueLineage(self.vps[:vp] + (new,) + self.vps[vp + 1 :])

    def follow(self, placement: QueuePlacement, end_offsets: Mapping[int, int]) -> QueueLineage:
        """The lineage after publishing ``placement``: split as often as V grew, then
        every vp whose open range is on another pp is sealed at the old pp's end
        offset and reopened on the new pp at its end offset (``end_offsets``, taken
        while producers of the queue are fenced). A sealed vp is reopened on its pp.
        ValueError when V shrank or an end offset is missing."""
        if placement.virtual_partitions < self.virtual_partitions:
            raise ValueError(
                f"virtual_partitions cannot shrink ({self.virtual_partitions} -> {placement.virtual_partitions})"
            )
        cur = self
        while cur.virtual_partitions < placement.virtual_partitions:
            cur = cur.split()
        out: list[Lineage] = []
        for vp, lin in enumerate(cur.vps):
            pp = placement.placement[vp]
            open_r = lin.current
            if open_r is not None and open_r.pp == pp:
                out.append(lin)
                continue
            if open_r is not None:
                lin = lin.seal(_end(end_offsets, open_r.pp))
            out.append(lin.open_range(pp, _end(end_offsets, pp)))
        return QueueLineage(tuple(out))

    def to_dict(self) -> dict[str, Any]:
        return {"virtual_partitions": len(self.vps), "vps": [lin.to_dict() for lin in self.vps]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QueueLineage:
        if not isinstance(data, Mapping) or set(data) != {"virtual_partitions", "vps"}:
            raise ValueError("queue lineage must be an object with exactly virtual_partitions, vps")
        vps = data["vps"]
        if not isinstance(vps, (list, tuple)) or len(vps) != data["virtual_partitions"]:
            raise ValueError("queue lineage 'vps' must list one lineage per vp")
        return cls(tuple(Lineage.from_dict(v) for v in vps))


def _end(end_offsets: Mapping[int, int], pp: int) -> int:
    if pp not in end_offsets:
        raise ValueError(f"end offset of pp {pp} is needed to move a vp but was not given")
    return _check_offset(end_offsets[pp], f"end offset of pp {pp}")
