"""gateway/cluster_traffic.py (pure, clock injected) and metadata/api_errors.py mapping."""

from __future__ import annotations

import pytest

from vpq.common.errors import BadRequest, Conflict, NotFound, Unavailable
from vpq.gateway.cluster_traffic import TrafficMeter
from vpq.metadata.api_errors import metadata_errors
from vpq.metadata.errors import MetadataUnavailable, QueueConfigError, QueueConflictError, QueueNotFoundError
from vpq.metadata.maps import MapConflictError


def test_totals_and_windowed_rates() -> None:
    now = [1000.0]
    meter = TrafficMeter(window_s=10, clock=lambda: now[0])
    assert meter.figures("q")["messages_total"] == 0 and meter.figures("q")["since_ms"] == 1_000_000
    meter.record("q", 10, 1000)
    now[0] = 1001.5
    meter.record("q", 10, 1000)
    meter.record("other", 1, 1)
    f = meter.figures("q")
    assert (f["messages_total"], f["bytes_total"]) == (20, 2000)
    assert (f["messages_per_s"], f["bytes_per_s"]) == (2.0, 200.0)
    now[0] = 1010.2  # the first second left the window
    assert meter.figures("q")["messages_per_s"] == 1.0
    now[0] = 1100.0
    f = meter.figures("q")
    assert f["messages_per_s"] == 0.0 and f["messages_total"] == 20
    meter.forget("q")
    assert meter.figures("q")["messages_total"] == 0
    assert meter.figures("other")["messages_total"] == 1


def test_meter_bounds_the_number_of_queues() -> None:
    meter = TrafficMeter(max_queues=2)
    for name in ("a", "b", "c"):
        meter.record(name, 1, 1)
    assert [meter.figures(n)["messages_total"] for n in ("a", "b", "c")] == [1, 1, 0]


@pytest.mark.parametrize(
    ("raised", "expected", "code"),
    [
        (MetadataUnavailable("refused"), Unavailable, "metadata_unavailable"),
        (QueueNotFoundError("q"), NotFound, "queue_not_found"),
        (QueueConflictError("q", "may only grow"), Conflict, "virtual_partitions_shrink"),
        (QueueConfigError("ordering", "bad"), BadRequest, "invalid_request"),
        (MapConflictError("lost"), Unavailable, "map_conflict"),
    ],
)
def test_metadata_errors_become_api_errors(raised: Exception, expected: type, code: str) -> None:
    with pytest.raises(expected) as info, metadata_errors():
        raise raised
    assert info.value.code == code
    assert info.value.__cause__ is raised


def test_other_errors_pass_through() -> None:
    with pytest.raises(KeyError), metadata_errors():
        raise KeyError("x")
