"""Speed of one group's delivery state (``GroupDelivery``), a benchmark of the read nodes' core.

Figures (wall time, one CPU, pure Python):

- ingest rate of ``--messages`` records of ``--keys`` keys, all in ONE pp;
- poll+ack rate with ``--consumers`` consumers (batches of ``--batch``) until
  the backlog is drained, and how evenly the consumers got work;
- poll cost against backlog: the time to take one batch from a small backlog
  and from the full one (the ratio should stay near 1: poll does not scan the
  backlog), and with one hot key of ``--messages/2`` blocked records in front;
- persisted ack state size (the compact form) after everything but one
  early message (of an env without consumers) is acked.

Prints one line per figure, then one JSON line. Register with
``bench_app.command("delivery")(bench_delivery)``; also ``python -m vpq.load.platform_bench.delivery_state``.
"""

from __future__ import annotations

import json
import time

import typer

from vpq.isolation.context import IsolationContext
from vpq.read_nodes.delivery import GroupDelivery
from vpq.read_nodes.delivery_types import ConsumerSpec, DeliveryConfig, DeliveryEntry
from vpq.virtual_partitions.assignment import assign
from vpq.virtual_partitions.hashing import key_hash

PROD = IsolationContext()


def _group(vps: int, consumers: int, max_unacked: int) -> tuple[GroupDelivery, list[str]]:
    # no ack-window cap: the backlog figures need a large backlog in one pp
    g = GroupDelivery(DeliveryConfig(virtual_partitions=vps, max_unacked=max_unacked, max_acked_above=None))
    members = {f"c{i:04d}": PROD for i in range(consumers)}
    a = assign(members, vps)
    g.set_consumers({c: ConsumerSpec(PROD, a.vps_of(c)) for c in members}, 0, a.virtual_partitions)
    return g, sorted(members)


def _entries(n: int, keys: int, start: int = 0, hot: bytes | None = None) -> list[DeliveryEntry]:
    hashes = [key_hash(b"key-%d" % k) for k in range(keys)]
    out = []
    for i in range(n):
        if hot is not None:
            out.append(DeliveryEntry(0, start + i, key_hash(hot), hot, PROD))
        else:
            k = i % keys
            out.append(DeliveryEntry(0, start + i, hashes[k], b"key-%d" % k, PROD))
    return out


def _time_one_poll(g: GroupDelivery, cid: str, batch: int) -> tuple[float, int]:
    t0 = time.perf_counter()
    got = g.poll(cid, batch, 1)
    dt = time.perf_counter() - t0
    g.nack(cid, [d.message_id for d in got], 0, 1)
    return dt, len(got)


def run_bench(messages: int, keys: int, consumers: int, vps: int, batch: int) -> dict[str, float | int]:
    """Run the benchmark and return its figures."""
    g, cids = _group(vps, consumers, messages * 2 + 10)
    entries = _entries(messages, keys)
    t0 = time.perf_counter()
    for e in entries:
        g.ingest(e)
    ingest_s = time.perf_counter() - t0

    per_consumer = dict.fromkeys(cids, 0)
    t0 = time.perf_counter()
    done = 0
    while done < messages:
        progress = False
        for cid in cids:
            got = g.poll(cid, batch, 0)
            if got:
                progress = True
                per_consumer[cid] += len(got)
                done += g.ack(cid, [d.message_id for d in got])
        if not progress:
            break
    drain_s = time.perf_counter() - t0

    small, _ = _group(vps, 1, messages * 2 + 10)
    for e in _entries(batch * 4, keys):
        small.ingest(e)
    big, _ = _group(vps, 1, messages * 2 + 10)
    for e in _entries(messages, keys):
        big.ingest(e)
    blocked, _ = _group(vps, 1, messages * 2 + 10)
    for e in _entries(messages // 2, 1, hot=b"hot") + _entries(batch * 4, keys, start=messages):
        blocked.ingest(e)
    blocked.poll("c0000", 1, 0)  # the hot key's head is in flight: the rest of it is blocked

    def best(gd: GroupDelivery) -> float:
        return min(_time_one_poll(gd, "c0000", batch)[0] for _ in range(5))

    t_small, t_big, t_blocked = best(small), best(big), best(blocked)

    stuck, _ = _group(vps, 1, messages * 2 + 10)  # one early message of an env nobody consumes
    stuck.ingest(DeliveryEntry(0, 0, 0, b"t", IsolationContext("test")))
    for e in _entries(messages - 1, keys, start=1):
        stuck.ingest(e)
    stuck.mark_scanned(0, messages)
    while got := stuck.poll("c0000", 10_000, 0):
        stuck.ack("c0000", [d.message_id for d in got])
    state = stuck.compact_ack_state()[0]

    return {
        "messages": messages,
        "keys": keys,
        "consumers": consumers,
        "vps": vps,
        "batch": batch,
        "ingest_per_s": round(messages / ingest_s),
        "poll_ack_per_s": round(done / drain_s) if drain_s else 0,
        "drained": done,
        "min_per_consumer": min(per_consumer.values()),
        "max_per_consumer": max(per_consumer.values()),
        "poll_us_small_backlog": round(t_small * 1e6, 1),
        "poll_us_full_backlog": round(t_big * 1e6, 1),
        "poll_us_hot_key_blocked": round(t_blocked * 1e6, 1),
        "poll_cost_ratio_full_vs_small": round(t_big / t_small, 2),
        "poll_cost_ratio_blocked_vs_small": round(t_blocked / t_small, 2),
        "ack_state_entries_one_stuck": len(state.pending_below) + len(state.acked_above),
        "ack_state_low_watermark": state.low_watermark,
    }


def bench_delivery(
    messages: int = typer.Option(200_000, min=100, help="messages ingested (all in one physical partition)"),
    keys: int = typer.Option(10_000, min=1, help="distinct keys"),
    consumers: int = typer.Option(12, min=1, help="consumers of the group"),
    vps: int = typer.Option(16, help="virtual partitions (power of two)"),
    batch: int = typer.Option(100, min=1, help="max_messages per poll"),
) -> None:
    """Time ingest, poll+ack, poll cost against backlog, and ack-state size."""
    try:
        r = run_bench(messages, keys, consumers, vps, batch)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    typer.echo(f"ingest: {r['ingest_per_s']} msg/s ({messages} messages, {keys} keys, one pp)")
    typer.echo(
        f"poll+ack, {consumers} consumers, batch {batch}: {r['poll_ack_per_s']} msg/s; "
        f"per consumer {r['min_per_consumer']}..{r['max_per_consumer']}"
    )
    typer.echo(
        f"one poll of {batch}: {r['poll_us_small_backlog']} us (backlog {batch * 4}), "
        f"{r['poll_us_full_backlog']} us (backlog {messages}, ratio {r['poll_cost_ratio_full_vs_small']}), "
        f"{r['poll_us_hot_key_blocked']} us (behind {messages // 2} blocked, ratio {r['poll_cost_ratio_blocked_vs_small']})"
    )
    typer.echo(
        f"ack state with one stuck message after {messages - 1} acks: compact form lists "
        f"{r['ack_state_entries_one_stuck']} offset(s) (low watermark {r['ack_state_low_watermark']})"
    )
    typer.echo(json.dumps(r))


if __name__ == "__main__":
    typer.run(bench_delivery)
