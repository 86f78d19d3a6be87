"""metadata/api_errors.py: metadata errors mapped to API errors (TrafficMeter: tests/traffic)."""

from __future__ import annotations

import pytest

from vpq.common.errors import BadRequest, Conflict, NotFound, Unavailable
from vpq.metadata.api_errors import metadata_errors
from vpq.metadata.errors import MetadataUnavailable, QueueConfigError, QueueConflictError, QueueNotFoundError
from vpq.metadata.maps import MapConflictError


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
