"""The golden batch: its inputs live here, its bytes in golden_batch_v1.hex (never regenerate)."""

from __future__ import annotations

from pathlib import Path

from vpq.codec.batch_common import VALUE_JSON, VALUE_RAW
from vpq.codec.records import Record

GOLDEN_FILE = Path(__file__).with_name("golden_batch_v1.hex")
GOLDEN_BASE_OFFSET = 1234
GOLDEN_TIMESTAMP_MS = 1_700_000_000_100
GOLDEN_RECORDS = [
    Record(
        value=b'{"a":1}',
        queue_id=7,
        virtual_partition=3,
        key_hash=0xDEADBEEF,
        context_id=2,
        value_encoding=VALUE_JSON,
        key=b"order-42",
        headers=(("h", b"v"), ("trace", b"\x00\x01")),
        timestamp_ms=1_700_000_000_123,
    ),
    Record(value=b"\x00\xffraw", queue_id=7, value_encoding=VALUE_RAW),
    Record(
        value=b"",
        key=b"",
        queue_id=0xFFFFFFFF,
        virtual_partition=0xFFFFFFFF,
        key_hash=0xFFFFFFFF,
        context_id=0xFFFFFFFF,
        timestamp_ms=1_700_000_000_050,
    ),
]


def golden_bytes() -> bytes:
    return bytes.fromhex("".join(GOLDEN_FILE.read_text().split()))
