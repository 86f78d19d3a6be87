"""``LogEnds``: the end offset of every physical partition, asked of the write nodes
that own them (``GET /internal/v1/partitions``).

A new queue's records can only be appended after the map that places it is published,
so the end offsets read before that publish are where its lineage may start: a read
node starting a group on the new queue then tails each pp from there instead of
scanning everything other queues wrote before (a pp merges many queues). Best effort:
a pp whose owner does not answer is simply missing, and the caller starts it at 0
(correct, only slower).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from vpq.node_rpc.node_directory import WriteNodeDirectory
from vpq.node_rpc.write_node_client import WriteNodeClient

log = logging.getLogger(__name__)


def parse_ends(answer: Mapping[str, Any]) -> dict[int, int]:
    """``{pp: end_offset}`` from one ``partitions`` answer (malformed rows skipped)."""
    out: dict[int, int] = {}
    for row in answer.get("partitions") or []:
        try:
            pp, end = int(row["id"]), int(row["end_offset"])
        except (KeyError, TypeError, ValueError):
            continue
        if pp >= 0 and end >= 0 and row.get("online", True):
            out[pp] = end
    return out


class LogEnds:
    """Callable: ``await log_ends()`` -> ``{pp: end_offset}`` for the pps whose owners answered."""

    def __init__(self, writers: WriteNodeDirectory, client: WriteNodeClient) -> None:
        self._writers = writers
        self._client = client

    async def __call__(self) -> dict[int, int]:
        addresses = sorted({ref.address for ref in self._writers.owners().values() if ref is not None})
        answers = await asyncio.gather(*(self._client.partitions(a) for a in addresses), return_exceptions=True)
        out: dict[int, int] = {}
        for address, answer in zip(addresses, answers, strict=True):
            if isinstance(answer, BaseException):
                if isinstance(answer, asyncio.CancelledError):
                    raise answer
                log.info("end offsets of write node %s unavailable (%s): its pps start at 0", address, answer)
                continue
            out.update(parse_ends(answer))
        return out
