"""Retry pacing for retryable errors. Pure logic, no I/O.

A request that fails with a retryable error (429/502/503/504, connection failure,
timeout) is sent again after a delay: the server's ``Retry-After`` when it gave one
(capped at ``max_retry_after_s``), otherwise an exponential backoff with jitter.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry.

    ``attempts`` counts every try, the first included (1 = never retry).
    Backoff for retry n (n = 1 after the first failure) is
    ``min(max_backoff_s, initial_backoff_s * multiplier ** (n - 1))``, scaled by a random
    factor in ``[1 - jitter, 1]``.
    """

    attempts: int = 5
    initial_backoff_s: float = 0.05
    max_backoff_s: float = 2.0
    multiplier: float = 2.0
    jitter: float = 0.2
    max_retry_after_s: float = 30.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be >= 1")
        if self.initial_backoff_s < 0 or self.max_backoff_s < 0 or self.max_retry_after_s < 0:
            raise ValueError("delays must be >= 0")
        if self.multiplier < 1:
            raise ValueError("multiplier must be >= 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be within [0, 1]")

    def backoff(self, retry: int, rand: random.Random | None = None) -> float:
        """Delay before retry number ``retry`` (1-based) when the server gave no Retry-After."""
        base = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier ** max(0, retry - 1))
        r = (rand or random).random()
        return base * (1.0 - self.jitter * r)

    def delay(self, retry: int, retry_after: float | None, rand: random.Random | None = None) -> float:
        """Delay before retry number ``retry``: the server's Retry-After wins when present."""
        if retry_after is not None:
            return min(max(0.0, retry_after), self.max_retry_after_s)
        return self.backoff(retry, rand)


NO_RETRY = RetryPolicy(attempts=1)


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds (integer, or a decimal
    as some servers send) or an HTTP date. ``None`` when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if seconds == seconds else None  # NaN -> None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    current = now or datetime.now(timezone.utc)
    return max(0.0, (when - current).total_seconds())
