"""Turning metadata-layer exceptions into the API's ``common.errors``.

``metadata_errors()`` is a context manager around any code that talks to the metadata
stores: Redis trouble (``MetadataUnavailable``) becomes a retryable ``Unavailable``
(``metadata_unavailable``), and the stores' own errors become the API's (unknown
queue -> 404 ``queue_not_found``, a shrinking ``virtual_partitions`` -> 409
``virtual_partitions_shrink``, an invalid field -> 400 ``invalid_request`` with detail
``field``, a lost map compare-and-swap race -> 503 ``map_conflict``). Anything else
passes through unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from vpq.common.errors import BadRequest, Conflict, NotFound, Unavailable
from vpq.metadata.errors import MetadataUnavailable, QueueConfigError, QueueConflictError, QueueNotFoundError
from vpq.metadata.maps import MapConflictError

RETRY_AFTER_S = 1.0


@contextmanager
def metadata_errors() -> Iterator[None]:
    """See the module docstring."""
    try:
        yield
    except MetadataUnavailable as exc:
        raise Unavailable(
            "metadata_unavailable", f"the metadata store (Redis) is unavailable: {exc}", retry_after=RETRY_AFTER_S
        ) from exc
    except QueueNotFoundError as exc:
        raise NotFound("queue_not_found", f"queue {exc.queue!r} does not exist", queue=exc.queue) from exc
    except QueueConflictError as exc:
        raise Conflict("virtual_partitions_shrink", str(exc), field="virtual_partitions") from exc
    except QueueConfigError as exc:
        raise BadRequest("invalid_request", str(exc), field=exc.field) from exc
    except MapConflictError as exc:
        raise Unavailable("map_conflict", str(exc), retry_after=RETRY_AFTER_S) from exc
