"""Errors of the record codec.

:class:`CorruptBatchError` reports bytes that are not a valid record batch (pure
decoding; no I/O involved).
"""

from __future__ import annotations


class CorruptBatchError(ValueError):
    """Bytes that do not form a valid record batch (bad length, magic, CRC or record layout)."""
