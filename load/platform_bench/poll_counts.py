"""How many messages a poll carried, from the gateway's Prometheus counters. Pure parsing
plus one ``GET /metrics``.

:func:`poll_counts` sums, over the gateway's ``/metrics`` text, the poll requests it
answered with 200 (``vpq_gateway_requests_total`` of the route ending in ``/poll``) and
the messages it delivered (``vpq_gateway_delivered_messages_total``, every queue and
group). Two samples around a run give the run's messages per poll (long polls that
came back empty count as polls too, and so do the SDK's keep-alive polls).
"""

from __future__ import annotations

from vpq.sdk.client import AsyncClient
from vpq.sdk.errors import VpqClientError

_REQUESTS = "vpq_gateway_requests_total{"
_DELIVERED = "vpq_gateway_delivered_messages_total{"


def parse_poll_counts(text: str) -> tuple[int, int]:
    """``(polls answered 200, messages delivered)`` in a gateway's metrics text."""
    polls = delivered = 0
    for line in text.splitlines():
        if line.startswith(_REQUESTS):
            labels, _, value = line.rpartition(" ")
            if '/poll"' in labels and 'status="200"' in labels:
                polls += int(float(value))
        elif line.startswith(_DELIVERED):
            delivered += int(float(line.rpartition(" ")[2]))
    return polls, delivered


async def poll_counts(client: AsyncClient) -> tuple[int, int] | None:
    """:func:`parse_poll_counts` of the gateway ``client`` talks to; ``None`` when its
    metrics cannot be read."""
    try:
        return parse_poll_counts(await client.metrics())
    except VpqClientError:
        return None


def messages_per_poll(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """Messages delivered per poll between two samples (``None`` when either is missing
    or no poll was answered)."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    return round((after[1] - before[1]) / (after[0] - before[0]), 1)
