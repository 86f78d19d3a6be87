"""A consumer poll's answer as the read node encoded it, passed through the gateway."""

from __future__ import annotations

from typing import NamedTuple


class PolledBody(NamedTuple):
    """``body`` is the JSON object ``{"messages": [...]}`` of the public API, ``count``
    how many messages it holds (-1 when the read node did not say), ``acked`` how many
    of the poll's ``ack`` ids were acknowledged."""

    body: bytes
    count: int
    acked: int = 0
