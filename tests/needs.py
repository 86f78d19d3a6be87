"""What a test needs from the machine, in one place.

Locally a missing requirement (no redis-server binary, a peer
server that does not answer) skips the test and says what is missing. With
``VPQ_TEST_STRICT=1``, which ``.ci/run`` sets, it fails instead: CI cannot pass with
tests quietly skipped.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path
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


def spark_home() -> Path:
    """The installed pyspark's directory, usable as SPARK_HOME (its ``bin/spark-class``
    starts a standalone master or worker); ``missing`` without java or pyspark."""
    if shutil.which("java") is None:
        missing("needs java on PATH (apt-get install openjdk-17-jre-headless)")
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        missing("needs pyspark (pip install 'vpq[spark]')")
    home = Path(spec.origin).parent
    if not (home / "bin" / "spark-class").is_file():
        missing(f"pyspark at {home} ships no bin/spark-class")
    return home
