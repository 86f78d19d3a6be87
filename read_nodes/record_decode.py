"""Raw batches into ``TailedRecord`` tuples, a column at a time.

A read node decodes every record it tails. For a columnar batch (magic 2,
``codec.columnar``) the records are built from the batch's columns with one pass of
C-level iteration per field (slices of the key and value areas, the timestamps, the
contexts), then zipped into tuples: no Python code runs per record except for a
record that has headers. The records are exactly those of
``BatchView.records(drop_dedup=True)`` (a lone dedup id is left out: nothing a read
node does uses it), with their partition and isolation context. A magic-1 batch, and
a batch of fewer than ``COLUMNS_FROM`` records, is decoded by ``BatchView.records``
and converted. The usual columnar batch (no headers but a lone dedup id, known
contexts) is decoded by the C extension ``_fast_decode`` when it is built, to the same
records and sizes.

Errors are the codec's: ``CorruptBatchError`` for a record area or header block that
does not decode exactly (the CRC is the caller's: ``iter_batches(verify=True)``).

Pure logic: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from itertools import accumulate, repeat
from operator import add
from typing import Any

from vpq.codec.columnar import LONE_DEDUP, MAGIC_COLUMNAR, all_lone_dedup, read_headers
from vpq.codec.columnar import scan as scan_columns
from vpq.codec.records import BatchView
from vpq.isolation.context import IsolationContext
from vpq.read_nodes.messages import RECORD_OVERHEAD_BYTES, TailedRecord, record_size, tailed_record

try:
    from vpq.read_nodes._fast_decode import decode_columnar as _decode_columnar
except ImportError:  # built without a C compiler: the columns below do every batch
    _decode_columnar = None

COLUMNS_FROM = 8
"""Batches of fewer records are decoded record by record (``BatchView.records``): the
columns' fixed cost (about ten list and map set-ups) exceeds what they save there."""

_tuple_of = partial(tuple.__new__, TailedRecord)
_OVERHEAD_PLUS = RECORD_OVERHEAD_BYTES.__add__


class UnknownContexts(Exception):
    """The batch holds context ids the caller's mapping does not: resolve ``ids``, then
    decode again."""

    def __init__(self, ids: set[int]) -> None:
        super().__init__(f"unknown context ids {sorted(ids)}")
        self.ids = ids


def decode_tailed(
    view: BatchView, pp: int, contexts: Mapping[int, IsolationContext]
) -> tuple[list[TailedRecord], list[int]]:
    """Every record of ``view`` as a ``TailedRecord`` of ``pp`` (see the module
    docstring), and the size each declares to the record cache (``record_size``).
    ``UnknownContexts`` when ``contexts`` lacks a context id of the batch. A buffer that
    is not ``bytes`` is copied whole for each batch of it: give ``bytes`` (a read's body
    is)."""
    if view.magic != MAGIC_COLUMNAR or view.record_count < COLUMNS_FROM:
        records = view.records(drop_dedup=True)
        _require(contexts, {r.context_id for r in records})
        tailed = [tailed_record(pp, r, contexts[r.context_id]) for r in records]
        return tailed, list(map(record_size, tailed))
    buf: Any = view.buf
    if _decode_columnar is not None and type(buf) is bytes:
        got = _decode_columnar(buf, view.pos, view.size, view.record_count, view.base_offset, view.first_ts, pp,
                               contexts, TailedRecord, LONE_DEDUP, RECORD_OVERHEAD_BYTES)
        if got is not None:
            return got
    cols = scan_columns(view, check_headers=False)  # header blocks are checked as they are read below
    _require(contexts, set(cols.context_ids))
    if not isinstance(buf, bytes):  # slices must be bytes objects
        buf = bytes(buf)
    n = view.record_count
    cut = buf.__getitem__
    key_lengths = cols.key_lengths
    if min(key_lengths) >= 0:
        ends = list(accumulate(key_lengths, initial=cols.keys_at))
        keys: list[bytes | None] = list(map(cut, map(slice, ends, ends[1:])))
        key_bytes: Any = key_lengths
    else:  # null keys (length -1) take no bytes
        key_bytes = [kl if kl > 0 else 0 for kl in key_lengths]
        ends = list(accumulate(key_bytes, initial=cols.keys_at))
        keys = [None if kl < 0 else buf[a:b] for kl, a, b in zip(key_lengths, ends, ends[1:])]
    ends = list(accumulate(cols.value_lengths, initial=cols.values_at))
    values = list(map(cut, map(slice, ends, ends[1:])))
    sizes = list(map(_OVERHEAD_PLUS, map(add, cols.value_lengths, key_bytes)))
    header_lengths = cols.header_lengths
    headers: Any
    if not any(header_lengths):
        headers = repeat((), n)
    else:
        ends = list(accumulate(header_lengths, initial=cols.headers_at))
        if all_lone_dedup(buf, ends[:-1], header_lengths):
            headers = repeat((), n)
        else:
            headers = [
                read_headers(buf, at, size, i, True) if size else ()
                for i, (at, size) in enumerate(zip(ends, header_lengths))
            ]
    base = view.base_offset
    records = list(
        map(
            _tuple_of,
            zip(
                repeat(pp), map(contexts.__getitem__, cols.context_ids), range(base, base + n), keys, values,
                headers, map(view.first_ts.__add__, cols.ts_deltas), cols.encodings, cols.queue_ids,
                cols.context_ids, cols.key_hashes, cols.vps,
            ),  # fmt: skip
        )
    )
    if not isinstance(headers, repeat):
        for i, h in enumerate(headers):
            if h:
                sizes[i] = record_size(records[i])
    return records, sizes


def _require(contexts: Mapping[int, IsolationContext], ids: set[int]) -> None:
    missing = ids.difference(contexts.keys())
    if missing:
        raise UnknownContexts(missing)

