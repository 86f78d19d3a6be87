"""Dead-lettering: producing a group's dead letters to ``{queue}.{group}.dlq``.

The dead-letter queue is an ordinary logical queue (it costs no physical
partition). It is created on first use with the default configuration through
the gateway's own put-queue path (``queue_admin.cluster_queues.QueueAdmin.put``:
registry, placement CAS, lineage), then written through the one produce path
(``produce_path.produce.Appender``). Each dead letter keeps the original key,
value (JSON stays JSON), the producer's own headers and isolation context (not the
platform's attributes: a dead letter is due at once, at priority 0, and a redriven
message's addressing to its group, ``:group``, is dropped so every group of the
dead-letter queue sees it), plus the header ``x-original-id`` = the original message id.

Names: ``{queue}.{group}.dlq`` when that fits the 128-character limit of queue
names; otherwise ``{queue[:40]}.{group[:40]}.{hash}.dlq`` with ``hash`` the
8-hex-digit MurmurHash3 of ``"{queue}/{group}"`` (so every node picks the same
name). A key that is not UTF-8 is written with U+FFFD replacements (the
produce path takes text keys).

``produce`` returns the ids that are safely handled: produced durably, or
whose record no longer exists (removed by retention: nothing left to move).
The caller confirms those with ``GroupDelivery.confirm_dead_letters`` and keeps
the others for a retry.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from vpq.codec.batch_common import VALUE_JSON
from vpq.codec.system_headers import user_headers
from vpq.produce_path.produce import Appender, PlainMessage
from vpq.queue_admin.cluster_queues import QueueAdmin, dead_letter_queue
from vpq.read_nodes.delivery_types import DeadLetter
from vpq.read_nodes.tailer import RecordSource

log = logging.getLogger(__name__)

ORIGINAL_ID_HEADER = "x-original-id"


def dlq_name(queue: str, group: str) -> str:
    """The dead-letter queue of ``group`` on ``queue`` (see the module docstring)."""
    return dead_letter_queue(queue, group)


class DeadLetterProducer:
    def __init__(self, appender: Appender, admin: QueueAdmin, source: RecordSource) -> None:
        self._appender = appender
        self._admin = admin
        self._source = source
        self._ensured: set[str] = set()
        self.produced = 0

    async def ensure_queue(self, name: str) -> None:
        """Create (or complete the placement of) the dead-letter queue, once per process."""
        if name in self._ensured:
            return
        await self._admin.put(name, {})
        self._ensured.add(name)

    async def produce(self, queue: str, group: str, letters: Sequence[DeadLetter]) -> list[str]:
        """Produce ``letters`` to the group's dead-letter queue; the ids handled (see the
        module docstring). Raises the produce path's ``VpqError`` when nothing could be
        written now."""
        if not letters:
            return []
        name = dlq_name(queue, group)
        await self.ensure_queue(name)
        handled: list[str] = []
        messages: list[PlainMessage] = []
        ids: list[str] = []
        for letter in letters:
            tailed = await self._source.get(letter.entry.pp, letter.entry.offset)
            if tailed is None:
                log.warning("dead letter %s of %s/%s no longer exists; dropped", letter.message_id, queue, group)
                handled.append(letter.message_id)
                continue
            r = tailed
            headers: dict[str, str | bytes] = dict(user_headers(r.headers))
            headers[ORIGINAL_ID_HEADER] = letter.message_id
            ctx = tailed.ctx
            messages.append(
                PlainMessage(
                    value=r.value,
                    value_is_json=r.value_encoding == VALUE_JSON,
                    key=r.key.decode("utf-8", "replace") if r.key is not None else None,
                    headers=headers,
                    context=(ctx.env, ctx.set, ctx.lane),
                )
            )
            ids.append(letter.message_id)
        if messages:
            await self._appender.append(name, messages)
            self.produced += len(messages)
            handled.extend(ids)
        return handled
