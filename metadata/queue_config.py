"""Validation and defaults of a queue's configuration. Pure logic: no I/O.

A configuration is a flat JSON object with exactly these fields:

- ``virtual_partitions``: a power of two in ``[1, max_virtual_partitions]``;
  it may only grow (checked against the stored value by the registry);
- ``ordering``: ``"key"`` (per-key order) or ``"none"``;
- ``max_deliveries``: deliveries before the dead-letter queue, ``[1, 1000]``;
- ``visibility_timeout_ms``: ``[1, 12 h]``;
- ``retention_ms``: ``-1`` (no per-queue limit: the log's retention applies) or
  ``[1, 10 years]``;
- ``max_message_bytes``: ``[1, 64 MiB]``;
- ``dedup_window_ms``: ``[0, 1 h]``, how long a stored message's ``dedup_id`` keeps a
  producer's retry from being stored again (0: no deduplication). A record stored before
  the field existed reads as the default (``dedup_window_of``).

All values are small enough to survive Lua's cjson (exact below 1e14).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vpq.config.settings import QueueDefaults
from vpq.metadata.errors import QueueConfigError

FIELDS: tuple[str, ...] = (
    "virtual_partitions",
    "ordering",
    "max_deliveries",
    "visibility_timeout_ms",
    "retention_ms",
    "max_message_bytes",
    "dedup_window_ms",
)
ORDERINGS = ("key", "none")
MAX_VISIBILITY_TIMEOUT_MS = 12 * 3600 * 1000
MAX_RETENTION_MS = 10 * 365 * 24 * 3600 * 1000
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
MAX_DELIVERIES = 1000
DEFAULT_DEDUP_WINDOW_MS = 300_000
MAX_DEDUP_WINDOW_MS = 3600 * 1000


def _int(field: str, value: Any, lo: int, hi: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise QueueConfigError(field, f"must be an integer, got {value!r}")
    if not lo <= value <= hi:
        raise QueueConfigError(field, f"must be between {lo} and {hi}, got {value}")
    return value


def validate_partial(config: Mapping[str, Any], max_virtual_partitions: int = 4096) -> dict[str, Any]:
    """The given fields, validated. ``None`` values count as absent. Unknown fields
    and bad values raise ``QueueConfigError``."""
    if not isinstance(config, Mapping):
        raise QueueConfigError("config", "must be an object")
    unknown = sorted(set(config) - set(FIELDS))
    if unknown:
        raise QueueConfigError(unknown[0], f"unknown field (allowed: {', '.join(FIELDS)})")
    out: dict[str, Any] = {}
    for field in FIELDS:
        value = config.get(field)
        if value is None:
            continue
        if field == "virtual_partitions":
            v = _int(field, value, 1, max_virtual_partitions)
            if v & (v - 1):
                raise QueueConfigError(field, f"must be a power of two, got {v}")
            out[field] = v
        elif field == "ordering":
            if value not in ORDERINGS:
                raise QueueConfigError(field, f"must be one of {ORDERINGS}, got {value!r}")
            out[field] = value
        elif field == "max_deliveries":
            out[field] = _int(field, value, 1, MAX_DELIVERIES)
        elif field == "visibility_timeout_ms":
            out[field] = _int(field, value, 1, MAX_VISIBILITY_TIMEOUT_MS)
        elif field == "retention_ms":
            r = _int(field, value, -1, MAX_RETENTION_MS)
            if r == 0:
                raise QueueConfigError(field, "must be -1 (no limit) or positive")
            out[field] = r
        elif field == "dedup_window_ms":
            out[field] = _int(field, value, 0, MAX_DEDUP_WINDOW_MS)
        else:
            out[field] = _int(field, value, 1, MAX_MESSAGE_BYTES)
    return out


def default_config(defaults: QueueDefaults) -> dict[str, Any]:
    """The full configuration a new queue gets for every field not given."""
    return validate_partial(
        {
            "virtual_partitions": defaults.virtual_partitions,
            "ordering": defaults.ordering,
            "max_deliveries": defaults.max_deliveries,
            "visibility_timeout_ms": defaults.visibility_timeout_ms,
            "retention_ms": -1,
            "max_message_bytes": min(defaults.max_message_bytes, MAX_MESSAGE_BYTES),
            "dedup_window_ms": defaults.dedup_window_ms,
        },
        defaults.max_virtual_partitions,
    )


def dedup_window_of(config: Mapping[str, Any]) -> int:
    """The ``dedup_window_ms`` of a stored configuration (the default when it predates
    the field)."""
    value = config.get("dedup_window_ms")
    return DEFAULT_DEDUP_WINDOW_MS if value is None else int(value)
