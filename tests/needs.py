"""What a test needs from the machine, in one place.

Locally a missing requirement (no redis-server binary, a peer
server that does not answer) skips the test and says what is missing. With
``VPQ_TEST_STRICT=1``, which ``.ci/run`` sets, it fails instead: CI cannot pass with
tests quietly skipped.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

from vpq.common.redis_server import find_redis_server

STRICT = os.environ.get("VPQ_TEST_STRICT") == "1"


def missing(reason: str) -> NoReturn:
    """Skip the running test for ``reason``; fail it under ``VPQ_TEST_STRICT=1``."""
    if STRICT:
        pytest.fail(f"{reason} (VPQ_TEST_STRICT=1: a missing requirement is a failure)")
    pytest.skip(reason)


needs_redis_binary = pytest.mark.skipif(
    find_redis_server() is None and not STRICT, reason="needs the redis-server binary (apt-get install redis-server)"
)
"""Mark: skip locally without a redis-server binary; under ``VPQ_TEST_STRICT=1`` the test runs (and fails)."""
