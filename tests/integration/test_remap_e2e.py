"""Issue 5 "Must show": ``vpq rebalance`` moves vps of a running ``vpq up`` under live,
skewed, keyed traffic with zero loss and zero per-key reordering.

The platform runs with 2 write nodes, 4 physical partitions and 1 s statistics
windows. A hot queue (32 vps) gets keys whose vps all sit on two of the four pps, so
those pps carry everything and the other two nothing: the planner must move vps
(each hot vp is a quarter of one pp's fair share, below the split threshold, so it
moves rather than splits). Small queues add light traffic. Producer threads run the
whole time, ``vpq rebalance`` (not dry-run, Spark ``local[2]``) runs as a subprocess
meanwhile; producers retry 503/429 as a client would and record every acknowledged id
with its key and per-key sequence. Then one group per queue consumes everything.

Printed (no timing asserts): map epoch before/after, moves, fenced ms, produce
latency p99 overall and in the cut-over window (epoch changes seen by a watcher,
widened by 0.5 s each side), the Spark job time and the whole command's time.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from tests.integration.api import Api, OrderChecker
from tests.integration.conftest import FAST
from tests.integration.platform import ROOT, Platform
from vpq.virtual_partitions.hashing import key_hash, vp_of_hash

pytestmark = pytest.mark.integration

HOT = "remap-hot"
HOT_VPS = 32
SMALL = [f"remap-small-{i}" for i in range(3)]
HOT_BATCH = 10
PAD = "x" * 200
WARMUP_S = 4.0  # > 3 complete 1 s windows (the job's min_windows) from both nodes
# pause between a producer thread's requests; VPQ_REMAP_E2E_PAUSE_S=0 floods the platform
# (a heavier, slower run: the read-back then takes minutes, bounded by progress, not time)
PAUSE_S = float(os.environ.get("VPQ_REMAP_E2E_PAUSE_S", "0.03"))
ENV = {
    **FAST,
    "VPQ_REBALANCE__WINDOW_MS": "1000",
    "VPQ_REBALANCE__MAX_STATS_AGE_MS": "60000",
}


@pytest.fixture
def platform(tmp_path):
    yield from Platform(tmp_path / "vpq", write_nodes=2, read_nodes=1, physical_partitions=4, env=dict(ENV)).running()


@dataclass
class Sent:
    """What the producers got acknowledged, and how long each request took."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    by_key: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # (queue, key) -> ids in order
    seq_of: dict[str, tuple[str, str, int]] = field(default_factory=dict)  # id -> (queue, key, seq)
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (start monotonic, seconds)
    retries: int = 0
    errors: list[str] = field(default_factory=list)


def _produce_until(base: str, queue: str, keys: list[str], batch: int, stop: threading.Event, sent: Sent) -> None:
    """Round-robin over ``keys`` (each owned by this thread only), one key per request so a
    batch lives in one vp; retry a refused request (503/429) until it is acknowledged."""
    s = requests.Session()
    seq = {k: 0 for k in keys}
    i = 0
    while not stop.is_set():
        key = keys[i % len(keys)]
        i += 1
        msgs = [{"key": key, "value": {"seq": seq[key] + j, "pad": PAD}} for j in range(batch)]
        body = {"messages": msgs}
        t0 = time.monotonic()
        while True:
            try:
                r = s.post(f"{base}/v1/queues/{queue}/messages", json=body, timeout=30)
            except requests.RequestException as exc:  # an unanswered request: its fate is unknown
                with sent.lock:
                    sent.errors.append(f"{queue}/{key}: {exc}")
                return
            if r.status_code in (429, 503):
                with sent.lock:
                    sent.retries += 1
                time.sleep(min(float(r.headers.get("Retry-After", "0.05")), 0.05))
                continue
            break
        elapsed = time.monotonic() - t0
        if r.status_code != 200:
            with sent.lock:
                sent.errors.append(f"{queue}/{key}: {r.status_code} {r.text[:200]}")
            return
        results = r.json()["results"]
        with sent.lock:
            sent.latencies.append((t0, elapsed))
            ids = sent.by_key.setdefault((queue, key), [])
            for j, res in enumerate(results):
                ids.append(res["id"])
                sent.seq_of[res["id"]] = (queue, key, seq[key] + j)
        seq[key] += batch
        if PAUSE_S:
            time.sleep(PAUSE_S)  # a steady load, not a flood: keeps the drain below short


def _watch_epochs(api_base: str, stop: threading.Event, seen: list[tuple[float, int]]) -> None:
    s = requests.Session()
    last = None
    while not stop.is_set():
        try:
            epoch = s.get(f"{api_base}/v1/maps/current", timeout=5).json()["epoch"]
        except (requests.RequestException, ValueError, KeyError):
            epoch = None
        if epoch is not None and epoch != last:
            seen.append((time.monotonic(), epoch))
            last = epoch
        time.sleep(0.02)


def _hot_keys(placement: list[int], per_vp: int = 2) -> tuple[list[str], set[int]]:
    """Keys of the hot queue whose vps all sit on the two pps holding the most of its vps."""
    counts: dict[int, int] = {}
    for pp in placement:
        counts[pp] = counts.get(pp, 0) + 1
    hot_pps = set(sorted(counts, key=lambda pp: (-counts[pp], pp))[:2])
    want = {vp for vp, pp in enumerate(placement) if pp in hot_pps}
    got: dict[int, list[str]] = {vp: [] for vp in want}
    n = 0
    while any(len(v) < per_vp for v in got.values()):
        key = f"hot-{n}"
        n += 1
        vp = vp_of_hash(key_hash(key), len(placement))
        if vp in got and len(got[vp]) < per_vp:
            got[vp].append(key)
    return [k for vp in sorted(got) for k in got[vp]], hot_pps


def _p99(values: list[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def _consume_all(api: Api, queue: str, want: set[str], sent: Sent, stall_s: float = 20.0):
    """Drain ``queue`` with one group until every id of ``want`` was delivered (giving up
    after ``stall_s`` without a new delivery); returns
    (first deliveries in order, unknown ids, OrderChecker)."""
    checker = OrderChecker()
    for (q, key), ids in sent.by_key.items():
        if q == queue:
            for msg_id in ids:
                checker.produced_in_order(key, msg_id)
    cid = api.join(queue, "verify")
    delivered: list[dict] = []
    seen: set[str] = set()
    unknown: list[str] = []
    deadline = time.monotonic() + stall_s
    next_report = time.monotonic() + 10.0
    while not want <= seen and time.monotonic() < deadline:
        if time.monotonic() >= next_report:
            print(f"read-back {queue}: {len(want & seen)}/{len(want)} delivered", flush=True)
            next_report += 10.0
        batch = api.poll(queue, "verify", cid, max_messages=100, wait_ms=500)
        for m in batch:
            if m["id"] not in sent.seq_of:
                unknown.append(m["id"])
            else:
                checker.delivered(m["key"], m["id"], batch)
            if m["id"] not in seen:
                seen.add(m["id"])
                delivered.append(m)
                deadline = time.monotonic() + stall_s
        if batch:
            ids = [m["id"] for m in batch]
            api.ack(queue, "verify", cid, ids)
            checker.ack(ids)
    return delivered, unknown, checker


@pytest.mark.timeout(300 if PAUSE_S else 1800)
def test_rebalance_moves_vps_under_live_traffic_without_loss_or_reordering(platform):
    api = Api(platform.url)
    api.put_queue(HOT, virtual_partitions=HOT_VPS)
    for q in SMALL:
        api.put_queue(q, virtual_partitions=2)
    before = api.call("GET", "/v1/maps/current").json()
    placement_before = before["queues"][HOT]["placement"]
    hot_keys, hot_pps = _hot_keys(placement_before)

    sent = Sent()
    stop = threading.Event()
    threads = [
        threading.Thread(target=_produce_until, args=(platform.url, HOT, hot_keys[i::4], HOT_BATCH, stop, sent))
        for i in range(4)
    ]
    threads += [
        threading.Thread(target=_produce_until, args=(platform.url, q, [f"{q}-k{j}" for j in range(3)], 1, stop, sent))
        for q in SMALL
    ]
    epochs: list[tuple[float, int]] = []
    watcher_stop = threading.Event()
    watcher = threading.Thread(target=_watch_epochs, args=(platform.url, watcher_stop, epochs))
    for t in [*threads, watcher]:
        t.start()
    try:
        time.sleep(WARMUP_S)
        t0 = time.monotonic()
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "vpq"), "rebalance", "--data-dir", str(platform.data_dir),
             "--master", "local[2]"],
            cwd=ROOT, capture_output=True, text=True, timeout=240,
        )
        command_s = time.monotonic() - t0
        time.sleep(1.0)  # traffic keeps flowing on the new map for a moment
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        watcher_stop.set()
        watcher.join(10)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert not sent.errors, sent.errors[:5]
    publish_lines = [ln for ln in proc.stdout.splitlines() if ln.startswith('{"publish"')]
    assert publish_lines, f"nothing was published:\n{out}"
    publish = json.loads(publish_lines[-1])["publish"]

    after = api.call("GET", "/v1/maps/current").json()
    assert after["epoch"] > before["epoch"]
    assert publish["moved"], publish
    for m in publish["moved"]:  # every reported move is in the published map
        assert after["queues"][m["queue"]]["placement"][m["vp"]] == m["to_pp"], (m, after)
    changed = [q for q in [HOT, *SMALL] if after["queues"][q]["placement"] != before["queues"][q]["placement"]]
    assert changed, (before, after)

    # consume everything: zero loss, zero per-key reordering
    unknown_total = 0
    delivered_total = 0
    for q in [HOT, *SMALL]:
        want = {i for (qq, _), ids in sent.by_key.items() if qq == q for i in ids}
        delivered, unknown, checker = _consume_all(api, q, want, sent)
        missing = want - {m["id"] for m in delivered}
        assert not missing, (
            f"{q}: {len(missing)} of {len(want)} acknowledged message(s) never delivered "
            f"({len(delivered)} delivered); first missing: {sorted(missing)[:10]}; publish: {publish}"
        )
        assert not checker.violations, checker.violations[:5]
        last_seq: dict[str, int] = {}
        for m in delivered:
            if m["id"] not in sent.seq_of:
                continue
            _, key, seq = sent.seq_of[m["id"]]
            assert seq > last_seq.get(key, -1), f"{q}/{key}: seq {seq} delivered after {last_seq[key]}"
            last_seq[key] = seq
        unknown_total += len(unknown)
        delivered_total += len(delivered)

    # figures
    job = re.search(r"Spark job \(.*?\) done in ([0-9.]+) s", out)
    changes = [t for t, e in epochs if e > before["epoch"]]
    lat_all = [d for _, d in sent.latencies]
    window_lat: list[float] = []
    if changes:
        lo, hi = min(changes) - 0.5, max(changes) + 0.5
        window_lat = [d for t, d in sent.latencies if lo <= t <= hi]
    print(
        f"\nremap e2e: epoch {before['epoch']} -> {after['epoch']} (published {publish['epochs']}); "
        f"hot pps {sorted(hot_pps)}; moved {len(publish['moved'])} vp(s): "
        + ", ".join(f"{m['queue']}/{m['vp']} {m['from_pp']}->{m['to_pp']}" for m in publish["moved"])
        + f"; splits {publish['splits']}; fenced_ms {publish['fenced_ms']}"
    )
    print(
        f"remap e2e: acknowledged {len(sent.seq_of)} msgs in {len(sent.latencies)} requests, "
        f"{sent.retries} 503/429 retries; delivered {delivered_total}, {unknown_total} unacknowledged extra(s); "
        f"produce p99 {_p99(lat_all) * 1000:.1f} ms overall, "
        f"{_p99(window_lat) * 1000:.1f} ms in the cut-over window ({len(window_lat)} requests)"
    )
    print(f"remap e2e: Spark job {job.group(1) if job else '?'} s; vpq rebalance command {command_s:.1f} s")
