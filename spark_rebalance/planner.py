"""The remap planner: current placement + smoothed loads -> a ``Plan``.

``plan(current, loads, physical_partitions, options)`` is pure and deterministic:

1. Loads of queues absent from the map are ignored (reported); vps of map queues
   without a figure count as idle. ``physical_partitions`` are the live pps.
2. Splits, only when the combined imbalance is above the target: while a
   queue's heaviest vp exceeds ``split_fraction`` of one pp's fair share (in
   either dimension), its V doubles (up to ``max_virtual_partitions``); each
   child carries its parent's load / 2 (a hint: a single hot key cannot be
   split) and starts where its parent was.
3. Forced moves: vps on pps that are not live are placed on live pps (not
   capped).
4. Greedy balancing (``balancer.Balancer``: single moves and swaps) until the
   target, a dead end, or ``max_moves_per_run`` distinct vps moved.
5. The result is kept when it reaches the target or lowers the combined
   imbalance by at least ``min_improvement``; otherwise only forced moves stay.
   A split is kept only if some parent's children end on different pps; else
   the queue keeps its V and the parent goes where its children went.
6. A partition count is proposed from total traffic and per-pp capacity (see
   ``propose_partitions``); advisory: the plan places vps on live pps only.

The returned map keeps the current epoch (the publisher bumps it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from vpq.spark_rebalance.balancer import EPS, Balancer, Item
from vpq.spark_rebalance.plan_model import Imbalance, PartitionLoad, Plan, PlannerOptions, Split, VpLoad
from vpq.virtual_partitions.placement import PlacementMap, QueuePlacement, moves_between

_ZERO = VpLoad(0.0, 0.0)


def propose_partitions(total_bytes_per_s: float, total_msgs_per_s: float, current: int, options: PlannerOptions) -> tuple[int, str | None]:
    """The partition count to propose, and why (None when ``current`` is kept).

    Utilization ``u`` = the larger of total bytes/s over ``current`` times the
    per-pp byte capacity, and the same for msgs/s. Above 1.0 (over capacity) or
    below ``shrink_utilization`` the proposal is the count giving
    ``target_utilization``; otherwise ``current``. Always within
    ``min_partitions``..``max_partitions``.
    """
    lo, hi = options.min_partitions, options.max_partitions
    need = max(
        total_bytes_per_s / options.partition_capacity_bytes_per_s,
        total_msgs_per_s / options.partition_capacity_msgs_per_s,
    )
    u = need / current
    wanted = min(max(math.ceil(need / options.target_utilization - EPS), lo), hi)
    if u > 1.0 and wanted > current:
        return wanted, f"utilization {u:.2f} of partition capacity is above 1.0: propose {wanted} partitions"
    if u < options.shrink_utilization and wanted < current:
        return wanted, f"utilization {u:.2f} of partition capacity is below {options.shrink_utilization}: propose {wanted} partitions"
    if not lo <= current <= hi:
        clamped = min(max(current, lo), hi)
        return clamped, f"{current} partitions is outside the configured {lo}..{hi}: propose {clamped}"
    return current, None


def _imbalance(sums: Mapping[int, tuple[float, float]], mean_b: float, mean_m: float) -> Imbalance:
    b = max((s[0] for s in sums.values()), default=0.0) / mean_b if mean_b > 0 else 1.0
    m = max((s[1] for s in sums.values()), default=0.0) / mean_m if mean_m > 0 else 1.0
    return Imbalance(max(b, m), b, m)


def _partition_loads(
    pm: PlacementMap, loads: Mapping[tuple[str, int], VpLoad], live: Sequence[int], factor: Mapping[str, int]
) -> tuple[tuple[PartitionLoad, ...], dict[int, tuple[float, float]]]:
    """Per-pp loads of ``pm``; ``loads`` are per vp of V/``factor[q]`` (parent load / factor)."""
    sums: dict[int, list[float]] = {pp: [0.0, 0.0, 0] for pp in live}
    for q, qp in pm.queues.items():
        f = factor.get(q, 1)
        parent_v = qp.virtual_partitions // f
        for vp, pp in enumerate(qp.placement):
            s = sums.setdefault(pp, [0.0, 0.0, 0])
            ld = loads.get((q, vp % parent_v), _ZERO)
            s[0] += ld.bytes_per_s / f
            s[1] += ld.msgs_per_s / f
            s[2] += 1
    live_set = set(live)
    rows = tuple(PartitionLoad(pp, s[0], s[1], int(s[2]), pp in live_set) for pp, s in sorted(sums.items()))
    return rows, {pp: (s[0], s[1]) for pp, s in sums.items()}


def _split_factors(
    current: PlacementMap, loads: Mapping[tuple[str, int], VpLoad], mean_b: float, mean_m: float,
    options: PlannerOptions, reasons: list[str],
) -> dict[str, int]:
    factors: dict[str, int] = {}
    for q, qp in current.queues.items():
        heaviest = 0.0
        for vp in range(qp.virtual_partitions):
            ld = loads.get((q, vp))
            if ld is not None:
                heaviest = max(
                    heaviest,
                    ld.bytes_per_s / mean_b if mean_b > 0 else 0.0,
                    ld.msgs_per_s / mean_m if mean_m > 0 else 0.0,
                )
        f = 1
        while heaviest / f > options.split_fraction and qp.virtual_partitions * f * 2 <= options.max_virtual_partitions:
            f *= 2
        if f > 1:
            factors[q] = f
        if heaviest / f > options.split_fraction:
            reasons.append(
                f"queue {q}: a vp carries {heaviest / f:.2f} of a partition's fair share even at "
                f"V={qp.virtual_partitions * f} (max {options.max_virtual_partitions})"
            )
    return factors


def _final_queue(qp: QueuePlacement, f: int, child_pps: list[int]) -> tuple[QueuePlacement, bool]:
    """The queue's placement from its children's pps; collapses the split (returns
    False) when every parent's children share one pp."""
    v = qp.virtual_partitions
    if f == 1:
        return QueuePlacement(v, tuple(child_pps)), False
    homogeneous = all(len({child_pps[p + j * v] for j in range(f)}) == 1 for p in range(v))
    if homogeneous:
        return QueuePlacement(v, tuple(child_pps[:v])), False
    return QueuePlacement(v * f, tuple(child_pps)), True


def _moves_lower_bound(
    current: PlacementMap, new_map: PlacementMap, loads: Mapping[tuple[str, int], VpLoad],
    live: Sequence[int], mean_b: float, mean_m: float, target: float,
) -> tuple[int, int]:
    """(lower bound on moves, forced moves), both counted in vps of the NEW map's V
    (the unit ``moves`` is counted in), every vp at its original pp: the vps on
    vanished pps plus ``Balancer.moves_lower_bound``."""
    items: list[Item] = []
    for q, nq in new_map.queues.items():
        oq = current.queue(q)
        f = nq.virtual_partitions // oq.virtual_partitions
        for vp in range(nq.virtual_partitions):
            parent = vp % oq.virtual_partitions
            ld = loads.get((q, parent), _ZERO)
            nb = ld.bytes_per_s / f / mean_b if mean_b > 0 else 0.0
            nm = ld.msgs_per_s / f / mean_m if mean_m > 0 else 0.0
            items.append(Item(q, vp, nb, nm, oq.placement[parent]))
    live_set = set(live)
    forced = sum(1 for it in items if it.pp not in live_set)
    bal = Balancer([it for it in items if it.pp in live_set], live, {}, 0.0, 0.0)
    return forced + bal.moves_lower_bound(target), forced


def plan(
    current: PlacementMap,
    loads: Mapping[tuple[str, int], VpLoad],
    physical_partitions: Sequence[int],
    options: PlannerOptions,
) -> Plan:
    """Plan the next placement; see the module docstring for the contract."""
    live = sorted(set(physical_partitions))
    if not live:
        raise ValueError("plan needs at least one live physical partition")
    k = len(live)
    reasons: list[str] = []
    unknown = sorted({q for q, _ in loads if q not in current})
    if unknown:
        reasons.append(f"ignored loads of {len(unknown)} queue(s) not in the map: {', '.join(unknown[:5])}")
    known = 0
    for (q, vp), _ in loads.items():
        if q in current:
            current.queue(q).pp_of(vp)  # ValueError when out of range
            known += 1
    if not current.queues:
        return Plan.refusal(current, k, "the placement map has no queues")
    if not known:
        return Plan.refusal(current, k, "no load figures for any queue of the placement map")

    total_b = sum(ld.bytes_per_s for (q, _), ld in loads.items() if q in current)
    total_m = sum(ld.msgs_per_s for (q, _), ld in loads.items() if q in current)
    mean_b, mean_m = total_b / k, total_m / k
    before, before_sums = _partition_loads(current, loads, live, {})
    imb_before = _imbalance(before_sums, mean_b, mean_m)
    if total_b == 0 and total_m == 0:
        reasons.append("no traffic in the statistics: nothing to balance")

    factors: dict[str, int] = {}
    if imb_before.combined > options.target_imbalance + EPS:
        factors = _split_factors(current, loads, mean_b, mean_m, options, reasons)

    items: list[Item] = []  # idle vps on live pps are left out: they never need to move
    live_set = set(live)
    weight: dict[str, float] = {}
    for q, qp in current.queues.items():
        f = factors.get(q, 1)
        for child in range(qp.virtual_partitions * f):
            parent = child % qp.virtual_partitions
            ld = loads.get((q, parent), _ZERO)
            nb = ld.bytes_per_s / f / mean_b if mean_b > 0 else 0.0
            nm = ld.msgs_per_s / f / mean_m if mean_m > 0 else 0.0
            pp = qp.placement[parent]
            if nb > 0 or nm > 0 or pp not in live_set:
                items.append(Item(q, child, nb, nm, pp))
            weight[q] = weight.get(q, 0.0) + max(nb, nm)

    bal = Balancer(items, live, weight, options.hot_queue_fraction, options.small_queue_fraction)
    if bal.evacuate():
        gone = sorted({it.pp for it in items if it.pp not in live_set})
        reasons.append(f"vps evacuated from partitions that no longer exist: {gone}")
    start = bal.assignment()
    pre = bal.imbalance()[0]
    if pre <= options.target_imbalance + EPS:
        reasons.append(f"within target: combined max/mean {pre:.3f} <= {options.target_imbalance}")
        final = start
    else:
        cap = options.max_moves_per_run
        why = bal.balance(options.target_imbalance, cap, max_steps=4 * cap + 64)
        post = bal.imbalance()[0]
        final = bal.assignment()
        if why == "target":
            reasons.append(f"reached target: combined max/mean {post:.3f} <= {options.target_imbalance}")
        elif pre - post + EPS < options.min_improvement:
            reasons.append(
                f"target {options.target_imbalance} not reachable: the best plan found changes max/mean "
                f"{pre:.3f} -> {post:.3f}, less than min_improvement {options.min_improvement}: moving nothing"
            )
            final = start
        else:
            detail = {
                "cap": f"move cap {cap} reached",
                "stuck": "no move or swap lowers the excess over the target",
                "steps": "step limit reached",
            }.get(why, why)
            reasons.append(f"target {options.target_imbalance} not reached ({detail}): max/mean {pre:.3f} -> {post:.3f}")

    child_pps: dict[str, list[int]] = {
        q: list(qp.placement) * factors.get(q, 1) for q, qp in current.queues.items()
    }
    for it, pp in zip(items, final):
        child_pps[it.queue][it.vp] = pp
    new_queues: dict[str, QueuePlacement] = {}
    splits: list[Split] = []
    kept_factor: dict[str, int] = {}
    for q, qp in current.queues.items():
        f = factors.get(q, 1)
        nq, split = _final_queue(qp, f, child_pps[q])
        new_queues[q] = nq
        if split:
            splits.append(Split(q, qp.virtual_partitions, nq.virtual_partitions))
            kept_factor[q] = f
    new_map = PlacementMap(current.epoch, new_queues)
    moves_min, forced = _moves_lower_bound(current, new_map, loads, live, mean_b, mean_m, options.target_imbalance)
    after, after_sums = _partition_loads(new_map, loads, live, kept_factor)
    imb_after = _imbalance(after_sums, mean_b, mean_m)
    proposed, why_count = propose_partitions(total_b, total_m, k, options)
    if why_count:
        reasons.append(why_count)
    return Plan(
        placement=new_map,
        moves=tuple(moves_between(current, new_map)),
        splits=tuple(splits),
        before=before,
        after=after,
        imbalance_before=imb_before,
        imbalance_after=imb_after,
        moves_min=moves_min,
        forced_moves=forced,
        partitions=k,
        proposed_partitions=proposed,
        reasons=tuple(reasons),
    )
