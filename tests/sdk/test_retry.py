from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.sdk.retry import RetryPolicy, parse_retry_after


def test_parse_retry_after_seconds_dates_and_junk() -> None:
    assert parse_retry_after(None) is None
    assert parse_retry_after("") is None
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("0.25") == 0.25
    assert parse_retry_after("-4") == 0.0
    assert parse_retry_after("soon") is None
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert parse_retry_after(format_datetime(now + timedelta(seconds=7), usegmt=True), now=now) == 7.0
    assert parse_retry_after(format_datetime(now - timedelta(seconds=7), usegmt=True), now=now) == 0.0


def test_retry_after_wins_over_backoff_and_is_capped() -> None:
    policy = RetryPolicy(max_retry_after_s=10.0)
    assert policy.delay(1, 1.5) == 1.5
    assert policy.delay(3, 600.0) == 10.0
    assert policy.delay(1, None) <= policy.initial_backoff_s


@settings(max_examples=100, deadline=None)
@given(
    retry=st.integers(min_value=1, max_value=40),
    initial=st.floats(min_value=0.0, max_value=5.0),
    cap=st.floats(min_value=0.0, max_value=10.0),
    jitter=st.floats(min_value=0.0, max_value=1.0),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_backoff_stays_within_bounds(retry: int, initial: float, cap: float, jitter: float, seed: int) -> None:
    policy = RetryPolicy(initial_backoff_s=initial, max_backoff_s=cap, jitter=jitter)
    base = min(cap, initial * 2.0 ** (retry - 1))
    d = policy.backoff(retry, random.Random(seed))
    assert base * (1 - jitter) - 1e-12 <= d <= base + 1e-12


def test_invalid_policies_are_refused() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError):
        RetryPolicy(jitter=1.5)
