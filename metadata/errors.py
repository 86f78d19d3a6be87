"""Errors raised by the metadata stores (the gateway maps them to HTTP statuses)."""

from __future__ import annotations


class MetadataError(Exception):
    """Base class of every metadata error."""


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
