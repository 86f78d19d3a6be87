"""The decisions of an operator's leader election (``gateway.cluster_elect``), no I/O."""

from __future__ import annotations

import pytest

from vpq.common.errors import Conflict, NotFound
from vpq.gateway.cluster_elect import event_view, parse_partition, refusal, truncation_event
from vpq.metadata.leases import Lease
from vpq.metadata.partition_leaders import LeaderRecord

REC = LeaderRecord(pp=0, leader=0, leader_id="w0", epoch=3, replicas=(0, 1), isr=(0,), hw=150)


@pytest.mark.parametrize("text", ["4", "-1", "x", "", "01a", "٣", "99999999999"])
def test_unknown_partitions_are_404(text):
    with pytest.raises(NotFound) as err:
        parse_partition(text, 4)
    assert err.value.code == "partition_not_found"


def test_known_partition():
    assert parse_partition("3", 4) == 3


@pytest.mark.parametrize(
    ("rec", "lease", "node", "unclean", "code"),
    [
        (None, None, 1, True, "not_replicated"),
        (REC, None, 2, True, "not_a_replica"),
        (REC, Lease("w0", 7), 1, True, "partition_has_leader"),
        (REC, Lease("w0", 7), 0, False, "partition_has_leader"),
        (REC, None, 1, False, "replica_not_in_sync"),
    ],
)
def test_refusals_are_409(rec, lease, node, unclean, code):
    why = refusal(rec, lease, node, f"w{node}", unclean)
    assert isinstance(why, Conflict) and why.code == code and why.status == 409


def test_allowed_elections():
    assert refusal(REC, None, 1, "w1", True) is None  # out of sync, forced
    assert refusal(REC, None, 0, "w0", False) is None  # in sync: a clean election


def test_the_truncation_event_counts_what_the_new_copy_lacks():
    event = truncation_event(REC, {0: "w0", 1: "w1"}, "w1", 100, 5)
    assert event == {
        "node": "w1", "previous_leader": "w0", "previous_epoch": 3, "high_watermark": 150, "new_leader_end": 100,
        "lost_offsets": 50, "time_ms": 5,
    }  # fmt: skip
    assert truncation_event(REC, {}, "w1", 200, 5)["lost_offsets"] == 0  # the copy has it all
    assert event_view({**event, "epoch": 4})["truncated"] == {}
    assert event_view(None) is None
