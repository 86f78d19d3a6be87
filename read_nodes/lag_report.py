"""What a group reports about itself: its public answer and its lag. Reading only.

``group_info(host)`` is ``GET .../groups/{group}``'s answer for a hosted group: its
members, and its lag made of the messages the delivery state holds plus the records the
ingestor has indexed but not ingested yet (``backlog``: per context and vp, exact up to
a sample of each stream, then scaled), with the oldest unacked message's age and the
expired count. ``oldest_unacked_by_context`` feeds it and the metrics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vpq.common.errors import VpqError
from vpq.isolation.context import IsolationContext
from vpq.read_nodes.delivery_types import stream_ctx_id, stream_pp
from vpq.read_nodes.node_parts import wall_ms

if TYPE_CHECKING:
    from vpq.read_nodes.group_host import GroupHost
    from vpq.read_nodes.ingestor import Ingestor


async def group_info(host: GroupHost) -> dict[str, Any]:
    """The group's public answer: members, lag (held here and still in the log, by
    lane, env, set and vp), the oldest unacked message's age and the expired count."""
    members = [
        {
            "consumer_id": m.consumer_id,
            "lane": m.ctx.lane,
            "env": m.ctx.env,
            "set": m.ctx.set,
            "virtual_partitions": list(m.vps),
            "in_flight": m.inflight,
        }
        for m in host.delivery.members()
    ]
    lag = host.delivery.lag()
    total = lag.total
    by_lane, by_env, by_set = dict(lag.by_lane), dict(lag.by_env), dict(lag.by_set)
    by_vp = dict(lag.by_vp)
    for (ctx_id, vp), n in host.ingestor.backlog().items():
        try:
            env, set_, lane = await host.parts.md.contexts.resolve(ctx_id)
        except KeyError:
            continue
        total += n
        by_lane[lane] = by_lane.get(lane, 0) + n
        by_env[env] = by_env.get(env, 0) + n
        by_set[set_] = by_set.get(set_, 0) + n
        by_vp[vp] = by_vp.get(vp, 0) + n
    by_ctx = await oldest_unacked_by_context(host)
    oldest = min(by_ctx.values()) if by_ctx else None
    expired = await host.expiry.total()
    return {
        "queue": host.queue,
        "group": host.group,
        "members": members,
        "expired": expired,
        "lag": {
            "total": total, "by_lane": by_lane, "by_env": by_env, "by_set": by_set,
            "by_virtual_partition": {str(vp): n for vp, n in sorted(by_vp.items())},
            "oldest_unacked_age_ms": None if oldest is None else max(0, wall_ms() - oldest),
        },
    }


async def oldest_unacked_by_context(host: GroupHost) -> dict[IsolationContext, int]:
    """Per message context, the timestamp of the group's oldest message not acked
    nor dead-lettered (held here, or still in the log)."""
    oldest = dict(host.delivery.lag().oldest_by_context)
    source = host.parts.source
    for pp, offset in host.ingestor.oldest_backlog():
        tailed = source.cached(pp, offset)
        if tailed is None:
            try:
                tailed = await source.get(pp, offset)
            except VpqError:
                continue
        if tailed is not None and tailed.timestamp_ms:
            ts = tailed.timestamp_ms
            cur = oldest.get(tailed.ctx)
            oldest[tailed.ctx] = ts if cur is None else min(cur, ts)
    return oldest


def backlog(ing: Ingestor, sample: int = 20_000) -> dict[tuple[int, int], int]:
    """Indexed records of the queue not ingested yet (parked keys' included), by
    (context id, vp under the group's current V). Exact while a stream holds at
    most ``sample`` of them; beyond that the stream's (exact) count is split in
    the proportions of its oldest ``sample`` records (so the cost stays bounded)."""
    out: dict[tuple[int, int], int] = {}
    mask = ing.delivery.virtual_partitions - 1
    for pp in ing.starts:
        tailer = ing._pool.get(pp)
        if tailer is not None:
            ing._streams(pp, tailer.index)
    for stream, c in ing.cursors.items():
        pp = stream_pp(stream)
        tailer = ing._pool.get(pp)
        if tailer is None:
            continue
        ctx_id = stream_ctx_id(stream)
        low = c
        parked_low = ing.parked.lowest(stream) if len(ing.parked) else None
        if parked_low is not None and parked_low < low:
            low = parked_low
        seen: dict[int, int] = {}
        if parked_low is not None and parked_low < c:
            hashes = {h for (cid, h) in ing.parked.keys() if cid == ctx_id}
            for _offset, ref in tailer.index.entries_from(pp, ing.queue_id, parked_low, sample, ctx_id):
                if _offset >= c:
                    break
                h = ref & 0xFFFFFFFF
                if h in hashes:
                    seen[h & mask] = seen.get(h & mask, 0) + 1
        total = tailer.index.count_from(pp, ing.queue_id, c, ctx_id)
        if total:
            tail: dict[int, int] = {}
            for _offset, ref in tailer.index.entries_from(pp, ing.queue_id, c, min(total, sample), ctx_id):
                vp = (ref & 0xFFFFFFFF) & mask
                tail[vp] = tail.get(vp, 0) + 1
            looked = sum(tail.values())
            if looked < total:
                scaled = {vp: n * total // looked for vp, n in tail.items()}
                scaled[max(tail, key=tail.__getitem__)] += total - sum(scaled.values())
                tail = scaled
            for vp, n in tail.items():
                seen[vp] = seen.get(vp, 0) + n
        for vp, n in seen.items():
            out[(ctx_id, vp)] = out.get((ctx_id, vp), 0) + n
    return out

def oldest_backlog(ing: Ingestor) -> list[tuple[int, int]]:
    """Per stream with records not ingested yet, the ``(pp, offset)`` of its oldest
    one (a parked key's, or the first past the cursor)."""
    out = []
    for stream, c in ing.cursors.items():
        pp = stream_pp(stream)
        tailer = ing._pool.get(pp)
        if tailer is None:
            continue
        low = ing.parked.lowest(stream) if len(ing.parked) else None
        first = tailer.index.offsets_from(pp, ing.queue_id, c, 1, stream_ctx_id(stream))
        cand = [x for x in (low, first[0] if first else None) if x is not None]
        if cand:
            out.append((pp, min(cand)))
    return out
