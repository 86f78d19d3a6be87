"""Synthetic traffic for tests and ``vpq bench rebalance``: per-vp loads, the
placement they start from, and stats files (as write nodes would write them).

Every generator is deterministic for a given ``seed``. Queues are named
``q00000``, ``q00001``, ... Pure except ``write_stats``, which writes files.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from vpq.spark_rebalance.plan_model import VpLoad
from vpq.traffic.stats_schema import TrafficRow
from vpq.traffic.stats_writer import StatsWriter
from vpq.virtual_partitions.placement import PlacementMap, QueuePlacement, initial_placement

Loads = dict[tuple[str, int], VpLoad]


def queue_name(i: int) -> str:
    return f"q{i:05d}"


def _queues(num_vps: int, vps_per_queue: int) -> list[str]:
    if num_vps < 1 or vps_per_queue < 1 or num_vps % vps_per_queue:
        raise ValueError("num_vps must be a positive multiple of vps_per_queue")
    return [queue_name(i) for i in range(num_vps // vps_per_queue)]


def zipf_loads(
    num_vps: int = 10_000,
    vps_per_queue: int = 16,
    exponent: float = 1.0,
    total_msgs_per_s: float = 100_000.0,
    seed: int = 0,
) -> Loads:
    """Zipf-skewed loads: the vps get ranks 1..N in random order and vp of rank r
    carries msgs/s proportional to ``1 / r**exponent``. Each queue has its own
    mean message size (100..4000 bytes), so bytes/s and msgs/s skew differently."""
    rng = random.Random(seed)
    queues = _queues(num_vps, vps_per_queue)
    ranks = list(range(1, num_vps + 1))
    rng.shuffle(ranks)
    weights = [1.0 / r**exponent for r in ranks]
    scale = total_msgs_per_s / sum(weights)
    sizes = {q: rng.uniform(100.0, 4000.0) for q in queues}
    out: Loads = {}
    for i, w in enumerate(weights):
        q = queues[i // vps_per_queue]
        msgs = w * scale
        out[(q, i % vps_per_queue)] = VpLoad(msgs * sizes[q], msgs)
    return out


def balanced_loads(
    num_queues: int = 64,
    vps_per_queue: int = 16,
    msgs_per_s: float = 100.0,
    msg_bytes: float = 1000.0,
    jitter: float = 0.02,
    seed: int = 0,
) -> Loads:
    """Every vp carries about the same load (uniform jitter of +-``jitter``)."""
    rng = random.Random(seed)
    out: Loads = {}
    for qi in range(num_queues):
        for vp in range(vps_per_queue):
            m = msgs_per_s * (1.0 + rng.uniform(-jitter, jitter))
            out[(queue_name(qi), vp)] = VpLoad(m * msg_bytes * (1.0 + rng.uniform(-jitter, jitter)), m)
    return out


def single_heavy_loads(
    num_queues: int = 64,
    vps_per_queue: int = 16,
    heavy_share: float = 0.35,
    heavy: tuple[str, int] = ("q00000", 0),
    seed: int = 0,
) -> Loads:
    """Balanced loads plus one vp (``heavy``) carrying ``heavy_share`` of all traffic."""
    if not 0 < heavy_share < 1:
        raise ValueError("heavy_share must be in (0, 1)")
    out = balanced_loads(num_queues, vps_per_queue, seed=seed)
    if heavy not in out:
        raise ValueError(f"heavy vp {heavy} is not among the generated vps")
    rest_b = sum(v.bytes_per_s for k, v in out.items() if k != heavy)
    rest_m = sum(v.msgs_per_s for k, v in out.items() if k != heavy)
    f = heavy_share / (1.0 - heavy_share)
    out[heavy] = VpLoad(rest_b * f, rest_m * f)
    return out


def queue_sizes(loads: Mapping[tuple[str, int], VpLoad]) -> dict[str, int]:
    """V of each queue implied by ``loads`` (the next power of two above its top vp)."""
    top: dict[str, int] = {}
    for q, vp in loads:
        top[q] = max(top.get(q, 0), vp)
    return {q: 1 << (t.bit_length()) if t else 1 for q, t in top.items()}


def placement_for(queues: Mapping[str, int], physical_partitions: Sequence[int], epoch: int = 1) -> PlacementMap:
    """Each queue placed the way a new queue is (``initial_placement``, round robin)."""
    return PlacementMap(
        epoch,
        {q: QueuePlacement(v, initial_placement(q, v, physical_partitions)) for q, v in sorted(queues.items())},
    )


def stats_windows(
    loads: Mapping[tuple[str, int], VpLoad],
    placement: PlacementMap,
    window_starts: Sequence[int],
    window_ms: int,
    nodes: Sequence[str],
    lanes: Sequence[str] = ("",),
    noise: float = 0.0,
    seed: int = 0,
) -> Iterator[tuple[str, int, list[TrafficRow]]]:
    """``(node_id, window_start_ms, rows)`` for every node and window: each vp's
    traffic (rate x window, times ``1 +- noise``) is counted by the node owning its
    pp (``nodes[pp % len(nodes)]``), split evenly over ``lanes``; V comes from
    ``placement``. Nodes with nothing in a window get an empty row list."""
    if not nodes or not lanes:
        raise ValueError("need at least one node and one lane")
    rng = random.Random(seed)
    secs = window_ms / 1000.0
    keys = sorted(loads)
    for start in window_starts:
        per_node: dict[str, list[TrafficRow]] = {n: [] for n in nodes}
        for q, vp in keys:
            ld = loads[(q, vp)]
            qp = placement.queue(q)
            f = 1.0 + (rng.uniform(-noise, noise) if noise else 0.0)
            msgs = round(ld.msgs_per_s * secs * f)
            nbytes = round(ld.bytes_per_s * secs * f)
            if msgs == 0 and nbytes == 0:
                continue
            node = nodes[qp.pp_of(vp) % len(nodes)]
            n = len(lanes)
            for li, lane in enumerate(lanes):
                m_share = msgs // n + (1 if li < msgs % n else 0)
                b_share = nbytes // n + (1 if li < nbytes % n else 0)
                if m_share or b_share:
                    per_node[node].append(TrafficRow(q, vp, qp.virtual_partitions, lane, "prod", m_share, b_share))
        for node in nodes:
            yield node, start, per_node[node]


def write_stats(
    stats_dir: str | Path,
    windows: Iterator[tuple[str, int, list[TrafficRow]]],
    window_ms: int,
    now_ms: int | None = None,
) -> int:
    """Write ``windows`` (from ``stats_windows``) with one ``StatsWriter`` per node;
    returns the number of rows written (heartbeats included)."""
    writers: dict[str, StatsWriter] = {}
    rows = 0
    for node, start, node_rows in windows:
        w = writers.get(node)
        if w is None:
            w = writers[node] = StatsWriter(stats_dir, node)
            w.start(now_ms)
        w.write_window(start, window_ms, node_rows)
        rows += max(1, len(node_rows))
    for w in writers.values():
        w.stop()
    return rows
