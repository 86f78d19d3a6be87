"""Value types of the remap planner: inputs (``VpLoad``, ``PlannerOptions``) and
the output (``Plan`` with its ``PartitionLoad``, ``Imbalance``, ``Split``).

Load units: bytes/s and messages/s, smoothed by the job. The planner balances
both at once; the *combined* imbalance of a placement is
``max(bytes max/mean, msgs max/mean)`` over the live physical partitions, so a
combined figure <= 1.10 bounds both dimensions. A dimension with no traffic at
all counts as perfectly balanced (1.0).

Pure values: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from vpq.config.settings import QueueDefaults, RebalanceSettings
from vpq.virtual_partitions.placement import PlacementMap, VpMove

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class VpLoad:
    """Smoothed traffic of one (queue, vp)."""

    bytes_per_s: float
    msgs_per_s: float

    def __post_init__(self) -> None:
        for name in ("bytes_per_s", "msgs_per_s"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not (0.0 <= v < math.inf):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")


@dataclass(frozen=True, slots=True)
class PlannerOptions:
    """Knobs of ``planner.plan``. ``from_settings`` takes the configured ones from
    ``RebalanceSettings``/``QueueDefaults``; the rest keep the defaults below.

    - ``target_imbalance``: stop moving once combined max/mean is at most this.
    - ``max_moves_per_run``: cap on vps moved by one plan (forced evacuations of
      vps on pps that no longer exist are always done and not capped).
    - ``min_improvement``: a plan that does not reach the target is kept only when
      it lowers the combined imbalance by at least this much (absolute, e.g.
      1.40 -> 1.35); otherwise it moves nothing.
    - ``split_fraction``: a vp heavier than this fraction of one pp's fair share
      (in either dimension) gets its queue split (V doubled, repeatedly, until
      every vp of the queue is within the fraction or V reaches
      ``max_virtual_partitions``) before any move; only when the placement is
      above target. The default 0.5 covers "a vp that alone exceeds a fair share"
      and goes further: a vp near a full share can only be balanced by emptying
      its pp of everything else, which costs far more moves than a split.
    - ``hot_queue_fraction`` / ``small_queue_fraction``: a queue whose total load
      is at least / at most this fraction of one pp's fair share is hot / small.
      Among near-equally good moves the planner prefers moving vps of hot queues,
      to pps holding fewer of that queue's vps, and avoids scattering a small
      queue onto a pp holding none of its vps.
    - ``partition_capacity_*``: what one pp should carry; with the utilization
      band they drive the proposed partition count (advisory, within
      ``min_partitions``..``max_partitions``).
    """

    target_imbalance: float = 1.10
    max_moves_per_run: int = 64
    min_improvement: float = 0.05
    min_partitions: int = 1
    max_partitions: int = 64
    max_virtual_partitions: int = 4096
    split_fraction: float = 0.5
    hot_queue_fraction: float = 0.5
    small_queue_fraction: float = 0.05
    partition_capacity_bytes_per_s: float = 64.0 * MiB
    partition_capacity_msgs_per_s: float = 50_000.0
    target_utilization: float = 0.7
    shrink_utilization: float = 0.3

    def __post_init__(self) -> None:
        if not self.target_imbalance >= 1.0:
            raise ValueError(f"target_imbalance must be >= 1.0, got {self.target_imbalance}")
        if self.max_moves_per_run < 0:
            raise ValueError("max_moves_per_run must be >= 0")
        if self.min_improvement < 0:
            raise ValueError("min_improvement must be >= 0")
        if not 1 <= self.min_partitions <= self.max_partitions:
            raise ValueError("need 1 <= min_partitions <= max_partitions")
        if not self.split_fraction > 0:
            raise ValueError("split_fraction must be > 0")
        if not (self.partition_capacity_bytes_per_s > 0 and self.partition_capacity_msgs_per_s > 0):
            raise ValueError("partition capacities must be > 0")
        if not 0 < self.shrink_utilization < self.target_utilization <= 1.0:
            raise ValueError("need 0 < shrink_utilization < target_utilization <= 1")

    @classmethod
    def from_settings(
        cls, rebalance: RebalanceSettings, queues: QueueDefaults | None = None, **overrides: Any
    ) -> PlannerOptions:
        """Options from the configured settings, then ``overrides`` (field names above)."""
        known = {f.name for f in fields(cls)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"unknown planner options: {sorted(unknown)}")
        values: dict[str, Any] = {
            "target_imbalance": rebalance.target_imbalance,
            "max_moves_per_run": rebalance.max_moves_per_run,
            "min_improvement": rebalance.min_improvement,
            "min_partitions": rebalance.min_partitions,
            "max_partitions": rebalance.max_partitions,
        }
        if queues is not None:
            values["max_virtual_partitions"] = queues.max_virtual_partitions
        values.update(overrides)
        return cls(**values)


@dataclass(frozen=True, slots=True)
class Imbalance:
    """max/mean over the live pps: per dimension and combined (the larger)."""

    combined: float
    bytes: float
    msgs: float


@dataclass(frozen=True, slots=True)
class PartitionLoad:
    """Load of one pp. ``live`` is False for a pp the map uses but that no longer exists."""

    pp: int
    bytes_per_s: float
    msgs_per_s: float
    vps: int
    live: bool = True


@dataclass(frozen=True, slots=True)
class Split:
    """A queue whose V the plan doubles (possibly several times): ``from_vps -> to_vps``."""

    queue: str
    from_vps: int
    to_vps: int


@dataclass(frozen=True)
class Plan:
    """A proposed placement and how it was reached.

    ``placement`` is the new map content with splits applied; its epoch is the
    current one (the publisher bumps it). ``moves`` are vps (under the new V)
    whose pp changes, sorted by (queue, vp); ``moves_min`` is a lower bound on
    the moves any plan needs to bring every pp to the target (see
    ``balancer.moves_lower_bound``); ``forced_moves`` counts evacuations of pps
    that no longer exist. ``refused`` is set (and nothing changes) when the
    planner or the job declined to plan; ``reasons`` explains the outcome.
    """

    placement: PlacementMap
    moves: tuple[VpMove, ...]
    splits: tuple[Split, ...]
    before: tuple[PartitionLoad, ...]
    after: tuple[PartitionLoad, ...]
    imbalance_before: Imbalance
    imbalance_after: Imbalance
    moves_min: int
    forced_moves: int
    partitions: int
    proposed_partitions: int
    reasons: tuple[str, ...] = field(default_factory=tuple)
    refused: str | None = None

    @property
    def changed(self) -> bool:
        """True when the plan moves or splits anything."""
        return bool(self.moves or self.splits)

    @classmethod
    def refusal(cls, current: PlacementMap, physical_partitions: int, reason: str) -> Plan:
        """A plan that changes nothing because planning was refused for ``reason``."""
        one = Imbalance(1.0, 1.0, 1.0)
        return cls(
            placement=current, moves=(), splits=(), before=(), after=(),
            imbalance_before=one, imbalance_after=one, moves_min=0, forced_moves=0,
            partitions=physical_partitions, proposed_partitions=physical_partitions,
            reasons=(reason,), refused=reason,
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly summary (the placement itself in its wire format)."""

        def imb(i: Imbalance) -> dict[str, float]:
            return {"combined": round(i.combined, 4), "bytes": round(i.bytes, 4), "msgs": round(i.msgs, 4)}

        def loads(ls: tuple[PartitionLoad, ...]) -> list[dict[str, Any]]:
            return [
                {"pp": p.pp, "bytes_per_s": round(p.bytes_per_s, 3), "msgs_per_s": round(p.msgs_per_s, 3),
                 "vps": p.vps, "live": p.live}
                for p in ls
            ]

        return {
            "refused": self.refused,
            "reasons": list(self.reasons),
            "moves": [{"queue": m.queue, "vp": m.vp, "from_pp": m.from_pp, "to_pp": m.to_pp} for m in self.moves],
            "moves_made": len(self.moves),
            "moves_min": self.moves_min,
            "forced_moves": self.forced_moves,
            "splits": [{"queue": s.queue, "from_vps": s.from_vps, "to_vps": s.to_vps} for s in self.splits],
            "imbalance_before": imb(self.imbalance_before),
            "imbalance_after": imb(self.imbalance_after),
            "before": loads(self.before),
            "after": loads(self.after),
            "partitions": self.partitions,
            "proposed_partitions": self.proposed_partitions,
            "placement": self.placement.to_dict(),
        }
