"""Errors raised by the metadata stores (``metadata.api_errors`` maps them to HTTP statuses).

Code outside ``metadata/`` sees only these: a failure of Redis itself (unreachable,
timed out, still loading, or a command it refused) reaches it as ``MetadataUnavailable``,
never as a redis-py exception (``metadata.connection`` translates them).
"""

from __future__ import annotations


class MetadataError(Exception):
    """Base class of every metadata error."""


class MetadataUnavailable(MetadataError):
    """Redis could not serve a metadata request: unreachable, timed out (after the
    client's retries), still loading its data, or it failed the command. Retryable;
    the API answers 503 ``metadata_unavailable``. The redis-py exception is the
    ``__cause__``."""


class QueueNotFoundError(MetadataError, LookupError):
    """The named (or numbered) queue does not exist (HTTP 404)."""

    def __init__(self, queue: str | int) -> None:
        self.queue = queue
        super().__init__(f"queue {queue!r} not found")


class QueueConflictError(MetadataError):
    """An update the stored state forbids, e.g. shrinking virtual_partitions (HTTP 409)."""

    def __init__(self, queue: str, message: str) -> None:
        self.queue = queue
        super().__init__(f"queue {queue!r}: {message}")


class QueueConfigError(MetadataError, ValueError):
    """An invalid queue configuration field (HTTP 400). ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


class AckStateTooLargeError(MetadataError, ValueError):
    """An ack state with more out-of-order offsets than the configured maximum.
    The read node must hold back deliveries instead (see ``metadata.acks``)."""

    def __init__(self, size: int, maximum: int) -> None:
        self.size = size
        self.maximum = maximum
        super().__init__(f"{size} acknowledged offsets above the watermark exceed the maximum of {maximum}")
