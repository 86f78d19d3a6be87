"""A follower copies a range its leader has compacted (real processes, R=2, 1
partition): the leader drops a deleted queue's records (offsets kept, with gaps), the
follower loses its disk and restarts, copies the leader's surviving records at the same
offsets across the gaps, and is back in the in-sync set."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from tests.integration.api import Api
from tests.integration.conftest import FAST
from tests.integration.platform import Platform
from tests.integration.replica_helpers import until, write_node_pid
from vpq.codec.records import decode_batches

pytestmark = pytest.mark.integration




def _records(directory: Path) -> list[tuple[int, int, bytes]]:
    """(offset, queue id, value) of every record in a partition directory's segments."""
    out: list[tuple[int, int, bytes]] = []
    for path in sorted(directory.glob("*.log"), key=lambda f: int(f.stem)):
        out += [(r.offset, r.queue_id, r.value) for r in decode_batches(path.read_bytes(), verify=True)]
    return out


def test_a_wiped_follower_copies_a_compacted_range(tmp_path):
    env = {
        **FAST,
        "VPQ_LOG__SEGMENT_BYTES": "4096",
        "VPQ_LOG__CHECKPOINT_INTERVAL_MS": "200",
        "VPQ_LOG__COMPACTION_INTERVAL_MS": "300",
    }
    p = Platform(tmp_path / "vpq", write_nodes=2, physical_partitions=1, replication_factor=2, min_insync=1, env=env)
    for _ in p.running():
        api = Api(p.url)
        api.put_queue("live", virtual_partitions=1)
        api.put_queue("dead", virtual_partitions=1)
        for i in range(30):  # interleaved batches: compaction leaves a gap between each live run
            api.produce("live", [{"key": "k", "value": f"live-{i}-{j}-" + "x" * 150} for j in range(2)])
            api.produce("dead", [{"key": "k", "value": f"dead-{i}-{j}-" + "x" * 150} for j in range(3)])
        until("both in sync", lambda: api.cluster()["physical_partitions"][0]["in_sync_replicas"] == ["w0", "w1"])
        leader_dir = tmp_path / "vpq" / "write-node-0" / "partitions" / "pp-00000"
        follower_dir = tmp_path / "vpq" / "write-node-1" / "partitions" / "pp-00000"
        full = _records(leader_dir)
        dead_id = next(q for _, q, v in full if v.startswith(b'"dead-'))
        api.call("DELETE", "/v1/queues/dead", expect=204)

        def compacted() -> bool:
            offsets = [o for o, _, _ in _records(leader_dir)]
            return len(offsets) < len(full) and any(b - a > 1 for a, b in zip(offsets, offsets[1:]))

        until("the leader compacted the dead queue's records away", compacted)
        follower = write_node_pid(p, "w1")
        assert follower is not None
        os.kill(follower, signal.SIGSTOP)  # then its disk is lost: it restarts empty
        shutil.rmtree(follower_dir)
        os.kill(follower, signal.SIGKILL)
        until("w1 restarted", lambda: write_node_pid(p, "w1") not in (None, follower))
        until("the wiped follower is back in sync",
               lambda: api.cluster()["physical_partitions"][0]["in_sync_replicas"] == ["w0", "w1"], timeout_s=60)
        api.produce("live", [{"key": "k", "value": "after"}])  # acknowledged by both
        until("the follower has the last record", lambda: (r := _records(follower_dir)) and r[-1][2] == b'"after"')
        leader, copied = _records(leader_dir), _records(follower_dir)
        assert copied == leader  # the leader's surviving records, at the same offsets
        offsets = [o for o, _, _ in copied]
        assert any(b - a > 1 for a, b in zip(offsets, offsets[1:]))  # with the gaps compaction left
        assert sum(1 for _, q, _ in copied if q == dead_id) < sum(1 for _, q, _ in full if q == dead_id)
